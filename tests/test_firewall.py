"""Source filtering (issue 13, item 18): ``spec.loadBalancerSourceRanges`` enforced on the
director for every forwarding mode. The ruleset (pure), the controller's use of it with the
fake filter on the host, and real nftables with real traffic in the lab VM."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from director.cli.runtime import Runtime
from director.core.firewall import FakeFirewall, render_nft
from director.core.model import IpProtocol as Protocol, ServiceKey
from director.dataplane.fake import FakeIpvs
from lab.kubeapi import FakeApiServer, endpoint_slice, node, service
from lab.wait import eventually
from tests.kubelab import settings

WEB = ServiceKey.inet(Protocol.TCP, "198.51.100.1", 80)
DNS6 = ServiceKey.inet(Protocol.UDP, "2001:db8:100::53", 53)


def test_the_ruleset_names_each_service_and_only_the_directors_table() -> None:
    gone = ["svc4_tcp_198_51_100_9_80", "drop4_tcp_198_51_100_9_80"]
    text = render_nft({WEB: ("10.0.0.0/8", "192.168.1.0/24"), DNS6: ()}, existing=gone)
    lines = text.splitlines()
    assert all(" inet director" in line for line in lines), "no other table is named"
    assert "add rule inet director svc4_tcp_198_51_100_1_80 ip saddr { 10.0.0.0/8, " \
        "192.168.1.0/24 } accept" in lines  # fmt: skip
    assert 'add rule inet director svc4_tcp_198_51_100_1_80 counter name ' \
        '"drop4_tcp_198_51_100_1_80" drop' in lines  # fmt: skip
    assert "add element inet director services4 { 198.51.100.1 . tcp . 80 : goto " \
        "svc4_tcp_198_51_100_1_80 }" in lines  # fmt: skip
    # Open to none: only the drop.
    assert [line for line in lines if "svc6_udp_2001_db8_100__53_53 " in line and "rule" in line] \
        == ['add rule inet director svc6_udp_2001_db8_100__53_53 counter name '
            '"drop6_udp_2001_db8_100__53_53" drop']  # fmt: skip
    # What a removed Service left is deleted in the same transaction.
    assert lines[-2:] == ["delete chain inet director svc4_tcp_198_51_100_9_80",
                          "delete counter inet director drop4_tcp_198_51_100_9_80"]  # fmt: skip


def test_nothing_but_canonical_networks_of_the_services_family_reaches_nft() -> None:
    text = render_nft({WEB: ("10.0.0.0/8", "2001:db8::/32", "10.0.0.1/8", "x; flush ruleset")})
    assert "{ 10.0.0.0/8 }" in text and "2001:db8::/32" not in text
    assert "flush ruleset" not in text


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.create("nodes", node("n1", "192.0.2.11"))
        yield server


def restricted(name: str, ranges: list[str]) -> dict[str, object]:
    obj = service(name, [("http", "TCP", 80)])
    obj["spec"]["loadBalancerSourceRanges"] = ranges  # type: ignore[index]
    return obj


def test_a_services_source_ranges_are_enforced_and_its_drops_counted(
    api: FakeApiServer, tmp_path: Path
) -> None:
    firewall = FakeFirewall()
    ipvs = FakeIpvs()
    runtime = Runtime(settings(api.kubeconfig(tmp_path / "kc")), ipvs, firewall=firewall)
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
        scrape = generate_latest(runtime.registry).decode()
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
        eventually(lambda: runtime.controller.health.firewall_errors >= 1)
        (served,) = ipvs.read().services
        assert runtime.controller.owner[served] == "default/public"
        assert "Could not process rule" in (runtime.controller.health.last_error or "")
        firewall.fail = None  # nft works again: the held-back Service follows, filtered
        eventually(lambda: len(ipvs.read().services) == 2, timeout=15, what="the retry")
        assert list(firewall.rules.values()) == [("203.0.113.0/24",)]


# -- the kernel ----------------------------------------------------------------------------
@pytest.mark.kernel
def test_nftables_refuses_an_excluded_client_and_serves_an_allowed_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from director.dataplane.kernel import KernelIpvs
    from director.engine.reconcile import Reconciler
    from lab.netns import NAT_PORT, ask_tcp, build_lab, start_servers

    lab = build_lab(prefix="fw")
    try:
        pool = "198.51.100.0/29"
        lab.lvs.ip(f"route add local {pool} dev lo")
        start_servers(lab, tcp_ports=(NAT_PORT,), udp_ports=())  # closed with the lab
        # Someone else's table in the same namespace: never touched.
        lab.lvs.exec(["nft", "add table inet someone; add chain inet someone c; "
                      "add rule inet someone c counter accept"])  # fmt: skip
        before_other = lab.lvs.exec(["nft", "list", "table", "inet", "someone"])
        allowed, excluded = lab.client_sources4[0], lab.client_sources4[1]
        with FakeApiServer() as api:
            for index, be in enumerate(lab.backends, 1):
                api.create("nodes", node(f"node{index}", be.ipv4))
            ipvs = KernelIpvs(netns=lab.lvs.name)
            config = settings(api.kubeconfig(tmp_path / "kc"), pool=pool)
            runtime = Runtime(config, ipvs)
            runtime.start()
            try:
                assert runtime.wait_ready(60)
                obj = restricted("web", [f"{allowed}/32"])
                obj["spec"]["ports"][0]["targetPort"] = NAT_PORT  # type: ignore[index]
                obj["metadata"]["annotations"] = {"lvs-director.io/backends": "pod"}  # type: ignore[index]
                api.create("services", obj)
                api.create("endpointslices", endpoint_slice(
                    "web", [(b.ipv4, None, True, False) for b in lab.backends],
                    [("http", "TCP", NAT_PORT)]))  # fmt: skip
                vip = eventually(lambda: api.get("services", "web")["status"]["loadBalancer"]
                                 .get("ingress", [{}])[0].get("ip"), what="an address")  # fmt: skip
                key = ServiceKey.inet(Protocol.TCP, vip, 80)
                eventually(lambda: (vs := ipvs.read_service(key)) and vs.real_servers,
                           timeout=60, what="the virtual service")  # fmt: skip
                answered = ask_tcp(lab.client, vip, 80, source=allowed)
                assert answered in {b.name for b in lab.backends}
                with pytest.raises(OSError):  # dropped: the connection times out
                    ask_tcp(lab.client, vip, 80, source=excluded, timeout=2)
                dropped = eventually(lambda: runtime.firewall.dropped().get(key), what="drops")
                assert dropped >= 1
                ruleset = json.loads(lab.lvs.exec(["nft", "-j", "list", "ruleset"]))["nftables"]
                tables = sorted(i["table"]["name"] for i in ruleset if "table" in i)
                assert tables == ["director", "someone"]
                assert lab.lvs.exec(["nft", "list", "table", "inet", "someone"]) == before_other
                with capsys.disabled():
                    print(f"\nsource ranges: {allowed} served by {answered}; {excluded} refused "
                          f"({dropped} packets dropped, counted by nft)")  # fmt: skip
                # The Service opened up: the filter goes, the excluded client gets in.
                api.patch("services", "web", {"spec": {"loadBalancerSourceRanges": None}})
                eventually(lambda: not runtime.firewall.dropped(), what="the filter removed")
                assert ask_tcp(lab.client, vip, 80, source=excluded)
                chains = lab.lvs.exec(["nft", "list", "table", "inet", "director"])
                assert "svc4_" not in chains
            finally:
                runtime.stop()
                Reconciler(ipvs, config.ownership).full_sync({})
                ipvs.close()
    finally:
        lab.close()


@pytest.fixture(params=["fake", pytest.param("kernel", marks=pytest.mark.kernel)])
def firewall(request: pytest.FixtureRequest) -> Iterator[object]:
    """The conformance subject: the fake on the host, nftables in a namespace in the VM."""
    if request.param == "fake":
        yield FakeFirewall()
        return
    from director.dataplane.nft import NftFirewall

    yield NftFirewall(request.getfixturevalue("netns"))


def test_the_filter_holds_exactly_what_it_was_given(firewall) -> None:  # type: ignore[no-untyped-def]
    """Both subjects answer alike: what is filtered, drop counts from zero, nothing left
    behind when a service's filter goes, nothing in use once all are gone."""
    assert firewall.in_use() is False
    firewall.apply({WEB: ("10.0.0.0/8",), DNS6: ()})
    assert firewall.in_use() is True
    assert firewall.dropped() == {WEB: 0, DNS6: 0}
    firewall.apply({WEB: ("10.0.0.0/8", "192.168.0.0/16")})
    assert firewall.dropped() == {WEB: 0}
    firewall.apply({})
    assert firewall.in_use() is False and firewall.dropped() == {}
