"""The SYN guard (``guard.syn``): which boxes and services it covers, the switch per Service
(annotation) and per static service, the nftables ruleset it renders (and that nft itself
takes it, in a namespace on the host), and the loop keeping it like the rest of its table.
Spoofed floods against it on a real kernel are ``tests/system/test_syn_guard.py``'s."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from director.core.firewall import GUARD_OBJECTS, FakeFirewall, SynGuard, guarded_keys, render_nft
from director.core.model import Family, IpProtocol as Protocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import ConfigError, parse_config
from lab.kubeapi import FakeApiServer, service
from lab.netns import Netns
from lab.wait import eventually
from tests.kubelab import settings

WEB = ServiceKey.inet(Protocol.TCP, "198.51.100.1", 80)
WEB6 = ServiceKey.inet(Protocol.TCP, "2001:db8:100::1", 443)
DNS = ServiceKey.inet(Protocol.UDP, "198.51.100.1", 53)
MARK = ServiceKey.mark(Family.INET, 7)
SNAT_TO = {Family.INET: ("192.0.2.1",)}


def test_the_guard_answers_syns_of_tcp_services_and_nothing_else() -> None:
    assert guarded_keys({WEB, WEB6, DNS, MARK}) == {WEB, WEB6}
    text = render_nft({}, guard=frozenset({WEB, WEB6, DNS}), syn_guard=SynGuard(1400, 9))
    lines = text.splitlines()
    assert "add element inet director guard4 { 198.51.100.1 . tcp . 80 }" in lines
    assert "add element inet director guard6 { 2001:db8:100::1 . tcp . 443 }" in lines
    assert not any(". udp ." in line for line in lines if "guard" in line)
    # a SYN is left untracked before conntrack sees it, then answered by synproxy at input,
    # before IPVS (priority 98) and after the source filter (-10)
    assert any("priority raw" in line and "guard_raw" in line for line in lines)
    assert any("hook input priority -5" in line and "guard_in" in line for line in lines)
    raw = next(line for line in lines if "guard_raw" in line and "@guard4" in line)
    assert raw.endswith("tcp flags & (fin | syn | rst | ack) == syn notrack")
    assert any("@guard4 ct state invalid,untracked synproxy mss 1400 wscale 9" in x for x in lines)
    assert any("@guard6 ct state invalid,untracked synproxy mss 1380 wscale 9" in x for x in lines)
    # no guard options (the box guards nothing): no guard objects, whatever is asked
    assert "guard" not in render_nft({}, guard=frozenset({WEB}))


def test_a_guarded_full_nat_service_lets_the_cookie_through_and_leaves_from_the_snat_address() -> (
    None
):
    """The ACK that returns a cookie has no conntrack entry ("invalid"): full NAT's own drop of
    such packets must spare it, and the connection synproxy opens from the box is marked at
    output, so that it leaves from the SNAT address like the client's own would."""
    text = render_nft(
        {}, snat=frozenset({WEB}), snat_to=SNAT_TO, guard=frozenset({WEB}), syn_guard=SynGuard()
    )
    lines = text.splitlines()
    assert (
        "add rule inet director fullnat_mark meta nfproto ipv4 ip daddr . meta l4proto . th "
        "dport @fullnat4 ip daddr . meta l4proto . th dport != @guard4 ct state invalid drop"
    ) in lines
    assert any("hook output" in line and "fullnat_out" in line for line in lines)
    assert any(" fullnat_out " in x and "@fullnat4 meta mark set" in x for x in lines)
    # the guard's sets are made before full NAT's chains name them
    first_use = next(i for i, line in enumerate(lines) if "!= @guard4" in line)
    assert lines.index("add set inet director guard4 { type ipv4_addr . inet_proto . "
                       "inet_service ; }") < first_use  # fmt: skip


def test_a_guard_no_longer_wanted_is_deleted_chains_before_sets() -> None:
    gone = render_nft(
        {}, existing=[*GUARD_OBJECTS, "guard_dropped"], syn_guard=SynGuard(), guard=frozenset()
    )
    assert gone.splitlines()[-5:] == [
        "delete chain inet director guard_raw",
        "delete chain inet director guard_in",
        "delete set inet director guard4",
        "delete set inet director guard6",
        "delete counter inet director guard_dropped",
    ]


@pytest.fixture
def netns() -> Netns:  # type: ignore[misc]
    ns = Netns(f"guard{os.getpid()}")
    try:
        yield ns
    finally:
        ns.close()


def test_nft_takes_the_guard_adds_and_removes_it_beside_full_nat(netns: Netns) -> None:
    """nftables itself (in a namespace on the host): the guard with full NAT, the guard
    alone, then nothing, each one transaction from the last."""

    def apply(script: str) -> None:
        done = subprocess.run(
            ["ip", "netns", "exec", netns.name, "nft", "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    both = frozenset({WEB, WEB6})
    apply(render_nft({}, snat=both, snat_to=SNAT_TO, guard=both, syn_guard=SynGuard()))
    held = netns.exec(["nft", "list", "table", "inet", "director"])
    assert "synproxy mss 1460 wscale 7 timestamp sack-perm" in held
    existing = [*GUARD_OBJECTS, "guard_dropped", "fullnat_mark", "fullnat_out", "fullnat_snat"]
    existing += ["fullnat4", "fullnat6"]
    apply(render_nft({}, existing, guard=both, syn_guard=SynGuard()))
    held = netns.exec(["nft", "list", "table", "inet", "director"])
    assert "fullnat" not in held and "synproxy" in held
    apply(render_nft({}, [*GUARD_OBJECTS, "guard_dropped"]))
    assert "guard" not in netns.exec(["nft", "list", "table", "inet", "director"])


STATIC = """
ownership: {networks: [198.51.100.0/24]}
services:
  - {name: web, address: 198.51.100.1, port: 80, real_servers: [192.0.2.11:8080]}
  - {name: open, address: 198.51.100.2, port: 80, syn_guard: false,
     real_servers: [192.0.2.11:8080]}
  - {name: dns, address: 198.51.100.3, port: 53, protocol: udp, real_servers: [192.0.2.11:53]}
  - {name: direct, address: 198.51.100.4, port: 80, forwarding: dr,
     real_servers: [192.0.2.11:80]}
"""
KEY = {
    name: ServiceKey.inet(proto, f"198.51.100.{i}", port)
    for i, (name, proto, port) in enumerate(
        [("web", Protocol.TCP, 80), ("open", Protocol.TCP, 80), ("dns", Protocol.UDP, 53)], 1
    )
}
PAIR = """
ha:
  interface: front
  router_id: d1
  priority: 150
  unicast_source: 203.0.113.11
  peers: [203.0.113.12]
"""


def test_a_box_on_its_own_guards_its_tcp_nat_services_unless_one_opts_out() -> None:
    alone = parse_config(STATIC, "alone.yaml")
    assert alone.syn_guard == (True, "")
    assert alone.static_guard == {KEY["web"]}  # not the opted out, the UDP or the dr one
    # in a pair, auto guards nothing (a takeover would break the guarded connections)
    pair = parse_config(STATIC + PAIR, "pair.yaml")
    assert not pair.syn_guard[0] and "pair" in pair.syn_guard[1] and not pair.static_guard
    # on: the operator accepts that
    forced = parse_config(STATIC + PAIR + "guard: {syn: on, mss: 1400}\n", "forced.yaml")
    assert forced.syn_guard == (True, "") and forced.static_guard == {KEY["web"]}
    assert forced.guard.mss == 1400
    # YAML's bare off is a boolean: taken as the word
    off = parse_config(STATIC + "guard:\n  syn: off\n", "off.yaml")
    assert off.syn_guard == (False, "guard.syn is off") and not off.static_guard


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("{name: dns, address: 198.51.100.3, port: 53, protocol: udp, syn_guard: true, "
         "real_servers: [192.0.2.11:53]}", "only a TCP service forwarded by nat or fullnat"),
        ("{name: d, address: 198.51.100.4, port: 80, forwarding: dr, syn_guard: true, "
         "real_servers: [192.0.2.11:80]}", "only a TCP service forwarded by nat or fullnat"),
    ],
)  # fmt: skip
def test_syn_guard_true_where_nothing_can_guard_it_is_refused_with_its_line(
    entry: str, reason: str
) -> None:
    text = "ownership: {networks: [198.51.100.0/24]}\nservices:\n  - " + entry + "\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "bad.yaml")
    assert str(caught.value).startswith("bad.yaml:3: services[0].syn_guard: " + reason)
    web = (
        "{name: web, address: 198.51.100.1, port: 80, syn_guard: true, "
        "real_servers: [192.0.2.11:8080]}"
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(
            "ownership: {networks: [198.51.100.0/24]}\nservices:\n  - " + web + "\n" + PAIR,
            "p.yaml",
        )
    said = str(caught.value)
    assert (
        said.startswith("p.yaml:3: services[0].syn_guard: nothing is guarded here")
        and "pair" in said
    )


def test_services_are_guarded_unless_annotated_off_and_a_flush_puts_the_guard_back(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """A Service on a box on its own is guarded; ``syn-guard: off`` takes it out, ``on`` on
    a dr Service is refused with a reason; the API shows which are guarded; a flushed ruleset
    brings the guard back (the loop keeps it like the rest of its table)."""
    firewall = FakeFirewall()
    ipvs = FakeIpvs()
    runtime = Runtime(settings(api.kubeconfig(tmp_path / "kc")), ipvs, firewall=firewall)
    with runtime.start():
        assert runtime.wait_ready(20)
        api.create("services", service("web", [("http", "TCP", 80), ("dns", "UDP", 53)]))
        tcp = ServiceKey.inet(Protocol.TCP, "198.51.100.0", 80)
        eventually(lambda: firewall.guard == {tcp}, what="the guard on the TCP port")
        api.create(
            "services",
            service("direct", [("http", "TCP", 80)], annotations={
                "lvs-director.io/forwarding": "dr", "lvs-director.io/syn-guard": "on"}),
        )  # fmt: skip
        events = eventually(
            lambda: [e for e in api.events_for("direct") if e["reason"] == "GuardRefused"],
            what="the refusal said",
        )
        assert "dr cannot be SYN-guarded" in events[0]["message"]
        assert firewall.guard == {tcp}
        from director.web.app import create_app

        client = create_app(runtime.controller.door(), "t").test_client()
        shown = {
            s["service"]: s["syn_guard"]
            for s in client.get(
                "/api/v1/services", headers={"Authorization": "Bearer t"}
            ).get_json()["items"]
        }
        assert shown["tcp 198.51.100.0:80"] is True and shown["udp 198.51.100.0:53"] is False
        firewall.flush()
        eventually(lambda: firewall.guard == {tcp}, timeout=15, what="the guard put back")
        api.patch(
            "services", "web", {"metadata": {"annotations": {"lvs-director.io/syn-guard": "off"}}}
        )
        eventually(lambda: firewall.guard == frozenset(), what="the opt-out")


def test_a_kernel_that_refuses_the_guard_keeps_the_filters_and_full_nat(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """nft refusing synproxy (a kernel built without it) must not take the source filters
    and full NAT down with the guard: the table goes in without it, the services are served
    unguarded, and the guard is tried again when the guarded services change."""
    from tests.kubelab import restricted

    firewall = FakeFirewall()
    firewall.refuse_guard = "Error: Could not process rule: No such file or directory (synproxy)"
    ipvs = FakeIpvs()
    runtime = Runtime(settings(api.kubeconfig(tmp_path / "kc")), ipvs, firewall=firewall)
    with runtime.start():
        assert runtime.wait_ready(20)
        api.create("services", restricted("web", ["203.0.113.2/32"]))
        key = ServiceKey.inet(Protocol.TCP, "198.51.100.0", 80)
        eventually(lambda: key in ipvs.read().services, what="served, filtered")
        assert firewall.rules == {key: ("203.0.113.2/32",)} and firewall.guard == frozenset()
        assert runtime.controller.parts.filter.guard.refused == {key}
        firewall.refuse_guard = None
        api.create("services", service("more", [("http", "TCP", 80)]))
        eventually(lambda: len(firewall.guard) == 2, timeout=15, what="the guard tried again")


def test_a_pools_syn_guard_true_where_it_cannot_be_is_refused_with_its_line() -> None:
    pool = "pools:\n  - {name: p, addresses: [198.51.100.0/28], syn_guard: true%s}\n"
    kube = "kubernetes: {kubeconfig: /nonexistent}\n"
    assert parse_config(pool % "" + kube, "ok.yaml").pools[0].syn_guard is True
    with pytest.raises(ConfigError) as caught:
        parse_config(pool % "" + kube + PAIR, "pair.yaml")
    assert str(caught.value).startswith("pair.yaml:2: pools[0].syn_guard: nothing is guarded here")
    with pytest.raises(ConfigError) as caught:
        parse_config(pool % ", forwarding: dr" + kube, "dr.yaml")
    assert "pools[0].syn_guard: dr cannot be SYN-guarded" in str(caught.value)
