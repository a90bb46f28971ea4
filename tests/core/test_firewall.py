"""Source filtering (issue 13, item 18): ``spec.loadBalancerSourceRanges`` enforced on the
director for every forwarding mode. The ruleset (pure), the controller's use of it with the
fake filter on the host, and nftables itself in a user namespace; real traffic through it is
``tests/system/test_firewall_traffic.py``'s."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from director.adapters.metrics.promtext import generate_latest
from director.core.annotations import Problem
from director.core.firewall import FakeFirewall, render_nft
from director.core.model import Family, Forwarding, IpProtocol as Protocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import load_config, parse_config
from director.web.app import create_app
from lab.kubeapi import FakeApiServer, node, service
from lab.wait import eventually
from tests.kubelab import restricted, settings

WEB = ServiceKey.inet(Protocol.TCP, "198.51.100.1", 80)


DNS6 = ServiceKey.inet(Protocol.UDP, "2001:db8:100::53", 53)


def test_the_ruleset_names_each_service_and_only_the_directors_table() -> None:
    gone = ["svc4_tcp_198_51_100_9_80", "drop4_tcp_198_51_100_9_80"]
    text = render_nft({WEB: ("10.0.0.0/8", "192.168.1.0/24"), DNS6: ()}, existing=gone)
    lines = text.splitlines()
    assert all(" inet director" in line for line in lines), "no other table is named"
    sets = [line.split()[4] for line in lines if line.startswith("add set ")]
    assert len(sets) == 1 and sets[0].startswith("src4_")
    assert f"add element inet director {sets[0]} {{ 10.0.0.0/8, 192.168.1.0/24 }}" in lines
    # A source outside the ranges counted and dropped, the rest accepted.
    assert [line for line in lines if "rule inet director svc4_tcp_198_51_100_1_80 " in line] == [
        f"add rule inet director svc4_tcp_198_51_100_1_80 ip saddr != @{sets[0]} counter name "
        '"drop4_tcp_198_51_100_1_80" drop',
        "add rule inet director svc4_tcp_198_51_100_1_80 accept",
    ]
    assert (
        "add element inet director services4 { 198.51.100.1 . tcp . 80 : goto "
        "svc4_tcp_198_51_100_1_80 }" in lines
    )
    # Open to none: only the drop.
    assert [
        line for line in lines if "svc6_udp_2001_db8_100__53_53 " in line and "rule" in line
    ] == [
        "add rule inet director svc6_udp_2001_db8_100__53_53 counter name "
        '"drop6_udp_2001_db8_100__53_53" drop'
    ]
    # What a removed Service left is deleted in the same transaction.
    assert lines[-2:] == [
        "delete chain inet director svc4_tcp_198_51_100_9_80",
        "delete counter inet director drop4_tcp_198_51_100_9_80",
    ]


def test_services_allowing_the_same_sources_share_one_set_and_overlaps_merge() -> None:
    other = ServiceKey.inet(Protocol.TCP, "198.51.100.1", 443)
    ranges = ("10.0.0.0/8", "10.1.0.0/16", "192.168.1.0/25", "192.168.1.128/25")
    text = render_nft({WEB: ranges, other: ranges[::-1]})
    sets = [line for line in text.splitlines() if line.startswith("add element inet director src")]
    assert sets == [
        f"add element inet director {sets[0].split()[4]} {{ 10.0.0.0/8, 192.168.1.0/24 }}"
    ]
    assert text.count(f"!= @{sets[0].split()[4]} counter") == 2
    # Dropping one of them deletes its chain; the set goes with the last user.
    names = [
        line.split()[4]
        for line in text.splitlines()
        if line.startswith("add ") and line.split()[1] in ("set", "chain", "counter")
    ]
    alone = render_nft({WEB: ranges}, existing=names)
    assert "delete set" not in alone
    assert "delete chain inet director svc4_tcp_198_51_100_1_443" in alone
    none = render_nft({}, existing=names)
    assert f"delete set inet director {sets[0].split()[4]}" in none
    assert none.index("delete chain") < none.index("delete set")  # rules first, then their set


def test_nothing_but_canonical_networks_of_the_services_family_reaches_nft() -> None:
    text = render_nft({WEB: ("10.0.0.0/8", "2001:db8::/32", "10.0.0.1/8", "x; flush ruleset")})
    assert "{ 10.0.0.0/8 }" in text and "2001:db8::/32" not in text
    assert "flush ruleset" not in text


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.create("nodes", node("n1", "192.0.2.11"))
        yield server


def test_a_services_source_ranges_are_enforced_and_its_drops_counted(
    api: FakeApiServer, tmp_path: Path
) -> None:
    firewall = FakeFirewall()
    ipvs = FakeIpvs()
    runtime = Runtime(
        settings(api.kubeconfig(tmp_path / "kc")), ipvs, firewall=firewall, metrics=True
    )
    with runtime.start():
        assert runtime.wait_ready(20)
        api.create("services", restricted("web", ["203.0.113.2/32", "bogus"]))
        key = ServiceKey.inet(Protocol.TCP, "198.51.100.0", 80)
        eventually(lambda: key in ipvs.read().services, what="the virtual service")
        assert firewall.rules == {key: ("203.0.113.2/32",)}
        assert firewall.admits(key, "203.0.113.2") and not firewall.admits(key, "203.0.113.3")
        warning = eventually(lambda: [e for e in api.events_for("web") if e["type"] == "Warning"])
        assert warning[0]["reason"] == "InvalidServiceField"
        assert "'bogus' is not a CIDR" in warning[0]["message"]
        assert runtime.metrics is not None
        scrape = generate_latest(runtime.metrics.registry).decode()
        dropped = {
            tuple(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(scrape)
            if family.name == "director_source_filter_dropped_packets"
            for s in family.samples
        }
        assert list(dropped.values()) == [1.0]
        assert dict(next(iter(dropped)))["service"] == "web"
        # Opening the Service up removes its filter.
        api.patch("services", "web", {"spec": {"loadBalancerSourceRanges": None}})
        eventually(lambda: firewall.rules == {}, what="the filter removed")


def test_a_filter_nft_refuses_holds_the_restricted_service_back_and_nothing_else(
    api: FakeApiServer, tmp_path: Path
) -> None:
    firewall = FakeFirewall()
    firewall.fail = "Error: Could not process rule: No such file or directory"
    ipvs = FakeIpvs()
    runtime = Runtime(settings(api.kubeconfig(tmp_path / "kc")), ipvs, firewall=firewall)
    with runtime.start():
        assert runtime.wait_ready(20)
        api.create("services", restricted("private", ["203.0.113.0/24"]))
        api.create("services", service("public", [("http", "TCP", 80)]))
        eventually(lambda: len(ipvs.read().services) == 1, what="the open Service served")
        eventually(lambda: getattr(runtime.controller.health.owned.get("nftables"), "failures", 0))
        (served,) = ipvs.read().services
        assert runtime.controller.parts.table.owner[served] == "default/public"
        assert "Could not process rule" in (runtime.controller.health.last_error or "")
        firewall.fail = None  # nft works again: the held-back Service follows, filtered
        eventually(lambda: len(ipvs.read().services) == 2, timeout=15, what="the retry")
        assert list(firewall.rules.values()) == [("203.0.113.0/24",)]


def test_a_full_nat_service_waits_for_its_snat_rule_and_the_others_do_not(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """Without its SNAT rule a full-NAT service would send real servers connections they
    answer elsewhere: it is held back until the rule is in force, alone."""
    firewall = FakeFirewall()
    firewall.fail = "Error: Could not process rule: No such file or directory"
    ipvs = FakeIpvs()
    config = settings(api.kubeconfig(tmp_path / "kc"), extra="snat: {addresses: 192.0.2.250}")
    runtime = Runtime(config, ipvs, firewall=firewall)
    with runtime.start():
        assert runtime.wait_ready(20)
        api.create(
            "services",
            service(
                "untouched-nodes",
                [("http", "TCP", 80)],
                annotations={"lvs-director.io/forwarding": "fullnat"},
            ),
        )
        api.create("services", service("public", [("http", "TCP", 80)]))
        eventually(lambda: len(ipvs.read().services) == 1, what="the other Service served")
        (served,) = ipvs.read().services
        assert runtime.controller.parts.table.owner[served] == "default/public"
        firewall.fail = None
        eventually(lambda: len(ipvs.read().services) == 2, timeout=15, what="the retry")
        (fullnat,) = firewall.snat
        assert runtime.controller.parts.table.owner[fullnat] == "default/untouched-nodes"
        dests = ipvs.read().services[fullnat].real_servers.values()
        assert {d.forwarding for d in dests} == {Forwarding.NAT}


def test_a_pool_given_fullnat_makes_its_services_full_nat(
    api: FakeApiServer, tmp_path: Path
) -> None:

    firewall, ipvs = FakeFirewall(), FakeIpvs()
    text = f"""
pools:
  - {{name: untouched, addresses: [198.51.100.0-198.51.100.7], forwarding: fullnat}}
snat: {{addresses: 192.0.2.250}}
kubernetes: {{kubeconfig: {api.kubeconfig(tmp_path / "kc")}, identity: a, lease_seconds: 2}}
"""
    runtime = Runtime(parse_config(text, "pool.yaml"), ipvs, firewall=firewall)
    with runtime.start():
        assert runtime.wait_ready(20)
        api.create("services", service("web", [("http", "TCP", 80)]))
        eventually(lambda: firewall.snat, what="the SNAT rule for the pool's Service")
        (key,) = firewall.snat
        assert key.address == "198.51.100.0" and key in ipvs.read().services
        # The kernel reads its real servers back as nat: the API says what they are.
        listed = (
            create_app(runtime.controller.door(), "t")
            .test_client()
            .get("/api/v1/services", headers={"Authorization": "Bearer t"})
        )
        (item,) = listed.get_json()["items"]
        assert {rs["forwarding"] for rs in item["real_servers"]} == {"fullnat"}


STATIC_FULLNAT = """
ownership: {{networks: [198.51.100.0/24, 10.0.0.0/8]}}
snat: {{addresses: 10.0.0.254}}
services:
  - name: web
    address: 198.51.100.9
    port: 80
    forwarding: {forwarding}
    real_servers: [10.0.0.1:80, 10.0.0.2:80]
"""


def test_a_full_nat_static_service_waits_for_its_rule_and_follows_a_reload(tmp_path: Path) -> None:

    firewall = FakeFirewall()
    firewall.fail = "Error: Could not process rule: No such file or directory"
    ipvs = FakeIpvs()
    path = tmp_path / "director.yaml"
    path.write_text(STATIC_FULLNAT.format(forwarding="fullnat"))
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.9", 80)
    runtime = Runtime(load_config(path), ipvs, firewall=firewall)
    with runtime.start():
        assert runtime.wait_ready(20)
        assert key not in ipvs.read().services, "no SNAT rule in force: not served"
        firewall.fail = None
        eventually(lambda: key in ipvs.read().services, timeout=15, what="the retry")
        assert firewall.snat == {key}
        dests = ipvs.read().services[key].real_servers.values()
        assert {d.forwarding for d in dests} == {Forwarding.NAT}
        client = create_app(runtime.controller.door(), "t").test_client()

        def shown() -> set[str]:
            listed = client.get("/api/v1/services", headers={"Authorization": "Bearer t"})
            return {rs["forwarding"] for rs in listed.get_json()["items"][0]["real_servers"]}

        assert runtime.controller.parts.exports.view.owner.get(key) == "static", (
            "the view's owner, back"
        )
        assert shown() == {"fullnat"}, "the API says full NAT, not the kernel's nat"
        path.write_text(STATIC_FULLNAT.format(forwarding="nat"))
        assert runtime.reload(str(path))[0] == "applied"
        eventually(lambda: firewall.snat == frozenset(), what="the rule gone with fullnat")
        assert key in ipvs.read().services and shown() == {"nat"}
        path.write_text(STATIC_FULLNAT.format(forwarding="fullnat"))
        assert runtime.reload(str(path))[0] == "applied"
        eventually(lambda: firewall.snat == {key}, what="the rule back")


# -- hostile lists of ranges ----------------------------------------------------------------
def test_a_service_listing_more_ranges_than_the_cap_is_closed_with_one_warning() -> None:
    """20,000 ranges (0.35 MB, well under the API's object limit): refused as a whole
    before any is read, in one problem; the Service's addresses then refuse every source
    (closed, not open), and the ruleset stays one set of nothing."""
    from director.core.cluster_parse import MAX_SOURCE_RANGES, service_from_json

    obj = restricted("huge", [f"10.{i // 256 % 256}.{i % 256}.0/24" for i in range(20_000)])
    info = service_from_json(obj)
    assert info.source_ranges == ()
    assert len(info.problems) == 1 and f"more than the {MAX_SOURCE_RANGES}" in info.problems[0]
    text = render_nft({WEB: info.source_ranges})
    assert "@src" not in text and "counter name" in text  # drop everything


def test_thousands_of_bad_ranges_are_three_problems_and_a_count() -> None:
    from director.core.cluster_parse import service_from_json

    obj = restricted("bad", [f"bogus-{i}" for i in range(900)] + ["203.0.113.0/24"])
    info = service_from_json(obj)
    assert info.source_ranges == ("203.0.113.0/24",)
    assert len(info.problems) == 4 and info.problems[-1].startswith("897 more entries")


def test_a_service_with_thousands_of_problems_is_one_event() -> None:
    """8,000 distinct problems on one Service (bad endpoints, say): one Warning Event that
    counts them, one count each in the metric, linear work; fixed, they are forgotten."""
    from director.core.cluster_parse import service_from_json
    from director.engine.reporter import Reporter
    from director.engine.view import LoopStatus

    said: list[str] = []

    class Recorder:
        def event(self, *_args: object, message: str, **_kw: object) -> None:
            said.append(message)

    class Box:
        writer = Recorder()

        def __init__(self) -> None:
            self.puts: list[tuple[str, ...]] = []

        def put(self, target: tuple[str, ...], write: Callable[[], None]) -> None:
            self.puts.append(target)
            write()

    box, status = Box(), LoopStatus()
    reporter = Reporter(box, status, dry_run=False)  # type: ignore[arg-type]
    reporter.lead(True)
    svc = service_from_json(service("web", [("http", "TCP", 80)]))
    many = [
        Problem("endpointslice", f"10.0.{i // 256}.{i % 256}: bad", "InvalidEndpoint")
        for i in range(8000)
    ]
    reporter.report_problems(svc, many)
    assert len(box.puts) == 1 and "8000 problems" in said[0]
    assert status.refused == {"endpointslices": 8000}
    reporter.report_problems(svc, many)  # the same: nothing new
    assert len(box.puts) == 1
    reporter.report_problems(svc, many[:2])  # most fixed; two remain, already said
    assert len(box.puts) == 1
    reporter.report_problems(svc, [])
    assert reporter.topics(svc.ref) == []


def test_a_flushed_ruleset_is_found_and_written_again_and_closed_while_it_cannot_be(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """``systemctl reload nftables`` runs ``flush ruleset``: the director's table is gone and
    a restricted VIP is open to everyone. The loop reads the table back, finds it gone and
    writes it again (a repair, counted); while nft refuses to write it again, the restricted
    virtual service leaves IPVS (closed, not open), /readyz names the filter, and it comes
    back filtered once nft takes it. nft that cannot be run (mid-upgrade) with the table in
    place changes nothing in IPVS, and is shown until nft runs again."""
    firewall = FakeFirewall()
    ipvs = FakeIpvs()
    runtime = Runtime(settings(api.kubeconfig(tmp_path / "kc")), ipvs, firewall=firewall)
    with runtime.start():
        assert runtime.wait_ready(20)
        api.create("services", restricted("web", ["203.0.113.2/32"]))
        key = ServiceKey.inet(Protocol.TCP, "198.51.100.0", 80)
        eventually(lambda: key in ipvs.read().services, what="the virtual service")
        owned = runtime.controller.health.owned
        flush_ruleset(firewall)
        assert firewall.admits(key, "203.0.113.3"), "open to everyone now"
        eventually(
            lambda: firewall.rules == {key: ("203.0.113.2/32",)},
            timeout=10,
            what="the filter written again",
        )
        state = eventually(lambda: (s := owned.get("nftables")) and s.in_sync and s.repairs and s)
        assert state.repairs == 1 and key in runtime.controller.parts.exports.view.filtered
        assert not firewall.admits(key, "203.0.113.3")
        # Flushed again, and nft now refuses the table: closed until it takes it.
        firewall.fail = "Error: Could not process rule: Operation not supported"
        flush_ruleset(firewall)
        eventually(lambda: key not in ipvs.read().services, timeout=10, what="held back")
        client = create_app(runtime.controller.door(), "t").test_client()
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "nftables" in ready.get_json()["detail"]
        assert key not in runtime.controller.parts.exports.view.filtered
        firewall.fail = None
        eventually(lambda: key in ipvs.read().services, timeout=15, what="served, filtered")
        assert firewall.rules == {key: ("203.0.113.2/32",)}
        eventually(lambda: client.get("/readyz").status_code == 200, what="ready again")
        # nft cannot be run at all; the table is intact: served, and shown as unverified.
        firewall.unrunnable = "No such file or directory: 'nft'"
        eventually(lambda: client.get("/readyz").status_code == 503, what="shown")
        assert key in ipvs.read().services and owned.get("nftables").kind == "transient"  # type: ignore[union-attr]
        firewall.unrunnable = None
        eventually(lambda: client.get("/readyz").status_code == 200, what="verified again")


SNAT_TO = {Family.INET: ("192.0.2.1",), Family.INET6: ("2001:db8::1",)}


def test_full_nat_marks_its_services_and_leaves_from_the_snat_address() -> None:
    text = render_nft({WEB: ("10.0.0.0/8",)}, snat=frozenset({WEB, DNS6}), snat_to=SNAT_TO)
    lines = text.splitlines()
    assert "add element inet director fullnat4 { 198.51.100.1 . tcp . 80 }" in lines
    assert "add element inet director fullnat6 { 2001:db8:100::53 . udp . 53 }" in lines
    assert any("hook prerouting" in line and "fullnat_mark" in line for line in lines)
    assert any(line.endswith("snat ip to 192.0.2.1") for line in lines)
    assert any(line.endswith("snat ip6 to 2001:db8::1") for line in lines)
    # What conntrack cannot place (a taken-over connection the new master holds no entry for) is
    # dropped, before it is marked: never forwarded without its SNAT, never reset here.
    mark = [line for line in lines if " fullnat_mark " in line and "add rule" in line]
    assert mark.index(
        "add rule inet director fullnat_mark meta nfproto ipv4 ip daddr 192.0.2.1 "
        "ct state invalid drop"
    ) < next(i for i, line in enumerate(mark) if "@fullnat4 meta mark set" in line)
    assert any("@fullnat4 ct state invalid drop" in line for line in mark)
    # snat.ports: a port range, which nft takes after a transport protocol is matched.
    ranged = render_nft({}, snat=frozenset({WEB, DNS6}), snat_to=SNAT_TO, snat_ports=(40000, 50000))
    assert "meta l4proto { tcp, udp, sctp } snat ip to 192.0.2.1:40000-50000" in ranged
    assert "meta l4proto { tcp, udp, sctp } snat ip6 to [2001:db8::1]:40000-50000" in ranged
    only4 = render_nft({}, snat=frozenset({WEB, DNS6}), snat_to={Family.INET: ("192.0.2.1",)})
    assert "fullnat6 {" not in only4.split("add element")[-1] and "snat ip6" not in only4
    gone = render_nft(
        {},
        existing=["fullnat_mark", "fullnat_snat", "fullnat4", "fullnat6"],
        snat=frozenset(),
        snat_to=SNAT_TO,
    )
    assert gone.splitlines()[-4:] == [
        "delete chain inet director fullnat_mark",
        "delete chain inet director fullnat_snat",
        "delete set inet director fullnat4",
        "delete set inet director fullnat6",
    ]


def test_several_snat_addresses_of_a_family_are_taken_in_turn() -> None:
    """Two SNAT addresses of a family: each new connection takes the next (nft's numgen,
    kept by conntrack for the connection's life), with the port range after the choice; a
    taken-over connection bound to either is dropped until its entry is known."""
    two = {Family.INET: ("192.0.2.1", "192.0.2.2"), Family.INET6: ("2001:db8::1", "2001:db8::2")}
    text = render_nft({}, snat=frozenset({WEB, DNS6}), snat_to=two, snat_ports=(40000, 50000))
    assert "snat ip to numgen inc mod 2 map { 0 : 192.0.2.1, 1 : 192.0.2.2 } : 40000-50000" in text
    assert (
        "snat ip6 to numgen inc mod 2 map { 0 : 2001:db8::1, 1 : 2001:db8::2 } : 40000-50000"
        in text
    )
    assert "ip daddr { 192.0.2.1, 192.0.2.2 } ct state invalid drop" in text
    assert "ip6 daddr { 2001:db8::1, 2001:db8::2 } ct state invalid drop" in text
    unranged = render_nft({}, snat=frozenset({WEB}), snat_to=two)
    assert "snat ip to numgen inc mod 2 map { 0 : 192.0.2.1, 1 : 192.0.2.2 }\n" in unranged


def test_a_zone_never_reaches_the_nft_renderer() -> None:
    """ipaddress takes any text after an IPv6 zone's %, braces and newlines included: the
    renderer's own guard refuses it, whatever the callers checked."""
    from director.core.firewall import clean_ranges, render_nft

    key = ServiceKey.inet(Protocol.TCP, "2001:db8::1", 80)
    hostile = "fe80::1%x } accept\nflush ruleset"
    assert clean_ranges(key, [hostile, "2001:db8::/32"]) == ["2001:db8::/32"]
    assert "flush ruleset" not in render_nft({key: (hostile,)})


def flush_ruleset(firewall: object) -> None:
    """``nft flush ruleset``, as ``systemctl reload nftables`` runs it."""
    if isinstance(firewall, FakeFirewall):
        firewall.flush()
        return
    subprocess.run(
        ["ip", "netns", "exec", firewall.netns, "nft", "flush", "ruleset"],  # type: ignore[attr-defined]
        check=True,
    )
