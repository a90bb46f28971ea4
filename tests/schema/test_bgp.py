"""The bgp: section and the pools announced over it, refused with the line and reason, and
what a service announced over BGP gets (Maglev hashing and tun unless it names its own;
nat refused)."""

from __future__ import annotations

import pytest

from director.core.model import Forwarding
from director.core.translate import translate
from tests.bgplab import BASE, KEY, STATIC, VIP, config, refusal
from tests.core.test_translate import NODES, POLICY, svc


def test_the_bgp_section_and_pools_announced_over_it() -> None:
    settings = config()
    assert settings.bgp is not None and settings.bgp.asn == 64512
    assert [p.name for p in settings.bgp_pools] == ["edge"]
    edge = settings.bgp_pools[0].announce
    assert (edge.communities, edge.local_preference) == (("64512:10",), 200)
    assert edge.large_communities == ("64512:1:4294967295",)
    peer = settings.bgp.peers[0]
    assert (peer.keepalive, peer.hold, peer.bfd, peer.bfd_interval_ms) == (1, 3, True, 300)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            BASE.replace(
                "    - {address: 198.18.0.1, asn: 64500}\n",
                "    - {address: 198.18.0.1, asn: 64500, keepalive: 5, hold: 9}\n",
            ),
            "d.yaml:10: bgp.peers[0].hold: hold (9) must be at least 3 keepalives (15)",
        ),
        (
            BASE.replace("2001:db8::1", "198.18.0.1"),
            "d.yaml:11: bgp.peers[1].address: peer 198.18.0.1 is listed twice",
        ),
        (
            BASE.replace('"64512:10"', '"big"'),
            "d.yaml:3: pools[0].communities[0]: 'big' is not a community",
        ),
        (
            BASE.replace("64512:1:4294967295", "64512:1:4294967296"),
            "d.yaml:4: pools[0].large_communities[0]: '64512:1:4294967296' is not a large "
            "community (GLOBAL:LOCAL1:LOCAL2, each part 0 to 4294967295)",
        ),
        (
            BASE.replace('"64512:1:4294967295"', '"64512:10"'),
            "pools[0].large_communities[0]: '64512:10' is not a large community",
        ),
        (
            BASE.replace("s3cret", '"two words"'),
            "bgp.peers[1].password: 1 to 80 printable characters, without spaces",
        ),
        (
            BASE.replace("router_id: 198.18.0.11", 'router_id: "2001:db8::11"'),
            "d.yaml:8: bgp.router_id: a BGP router id is an IPv4 address",
        ),
        (
            BASE.replace(
                "{name: pair, addresses: [203.0.113.0/28]}",
                "{name: pair, addresses: [203.0.113.0/28], local_preference: 5}",
            ),
            "pools[1].local_preference: local_preference is for pools announced over BGP",
        ),
        (
            BASE.split("bgp:", maxsplit=1)[0],
            "d.yaml:3: pools[0].announce: pool 'edge' is announced over BGP: add a bgp: section",
        ),
        (
            BASE + STATIC.replace("    forwarding: tun\n", ""),
            "d.yaml:19: services[0].real_servers[0]: "
            "nat cannot serve an address announced over BGP",
        ),
    ],
)
def test_a_bad_bgp_setting_is_refused_with_its_line_and_reason(text: str, expected: str) -> None:
    assert expected in refusal(text)


# -- a Service announced over BGP ------------------------------------------------------------
def test_a_service_announced_over_bgp_gets_maglev_hashing_and_tun() -> None:
    out = translate(svc(), [VIP], [], NODES, POLICY, bgp=True)
    vs = out.services[KEY]
    # mh-fallback (issue 71, 5): a quiesced real server's slots go to the next one's
    assert (vs.config.scheduler, vs.config.flags) == ("mh", frozenset({"mh-port", "mh-fallback"}))
    assert {rs.forwarding for rs in vs.real_servers.values()} == {Forwarding.TUN}
    assert not out.problems
    plain = translate(svc(), [VIP], [], NODES, POLICY).services[KEY]
    assert plain.config.scheduler == "wlc"


def test_nat_is_refused_and_other_schedulers_warned_for_a_service_announced_over_bgp() -> None:
    nat = svc(annotations={"lvs-director.io/forwarding": "nat"})
    out = translate(nat, [VIP], [], NODES, POLICY, bgp=True)
    assert [(p.reason, p.annotation) for p in out.problems] == [
        ("ForwardingRefused", "lvs-director.io/forwarding")
    ]
    assert "replies would have to come back" in out.problems[0].message
    assert {rs.forwarding for rs in out.services[KEY].real_servers.values()} == {Forwarding.TUN}
    rr = svc(annotations={"lvs-director.io/scheduler": "rr"})
    out = translate(rr, [VIP], [], NODES, POLICY, bgp=True)
    assert out.services[KEY].config.scheduler == "rr"  # allowed, with a warning
    assert [p.reason for p in out.problems] == ["SchedulerNotHashing"]
    sh = svc(annotations={"lvs-director.io/scheduler": "sh:sh-port"})
    assert not translate(sh, [VIP], [], NODES, POLICY, bgp=True).problems


def test_a_static_service_announced_over_bgp_gets_maglev_hashing_unless_it_names_one() -> None:
    """As a Service does: a static service in a bgp pool with no scheduler of its own gets
    mh with mh-port and mh-fallback (the default scheduler, wlc, breaks connections on every
    ECMP change); one that names another scheduler keeps it, and check and run say what it costs."""
    from director.cli.preflight import preflight
    from director.schema.notes import bgp_notes

    text = (
        BASE
        + """
services:
  - {name: web, address: 198.51.100.10, port: 80, forwarding: tun, real_servers: ["192.0.2.11:80"]}
  - {name: rr, address: 198.51.100.11, port: 80, scheduler: rr, forwarding: tun,
     real_servers: ["192.0.2.11:80"]}
  - {name: pair, address: 203.0.113.5, port: 80, real_servers: ["192.0.2.11:80"]}
"""
    )
    settings = config(text)
    by_name = {vs.origin: vs.config for vs in settings.services.values()}
    assert (by_name["static/web"].scheduler, by_name["static/web"].flags) == (
        "mh",
        frozenset({"mh-port", "mh-fallback"}),
    )
    assert by_name["static/rr"].scheduler == "rr"
    assert by_name["static/pair"].scheduler == "wlc"  # vrrp: one director serves it
    notes = bgp_notes(settings)
    assert len(notes) == 1 and notes[0].startswith("static/rr: scheduler rr")
    assert notes[0] in preflight(settings, host=False)[1]
