"""Source filtering and full NAT on a real kernel (the lab VM): nftables drops what a
Service's source ranges exclude, and full NAT serves backends whose routes never lead back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from director.adapters.metrics.promtext import generate_latest
from director.core.model import IpProtocol as Protocol, ServiceKey
from director.daemon import wiring
from director.daemon.runtime import Runtime
from lab.kubeapi import FakeApiServer, endpoint_slice, node, service
from lab.wait import eventually
from tests.kubelab import restricted, settings

WEB = ServiceKey.inet(Protocol.TCP, "198.51.100.1", 80)
DNS6 = ServiceKey.inet(Protocol.UDP, "2001:db8:100::53", 53)


@pytest.mark.kernel
def test_full_nat_serves_backends_whose_routes_never_lead_back_to_the_director(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nodes left as they are: their default route is not the director (here a gateway
    that does not exist). nat sends them the client's address, their replies go elsewhere
    and the client gets nothing; fullnat sends them the director's SNAT address, which they
    reach on their own network, and the client is answered."""
    from director.dataplane.kernel import KernelIpvs
    from director.engine.reconcile import Reconciler
    from lab.netns import BACKEND_NET4, NAT_PORT, ask_tcp, build_lab, start_servers

    lab = build_lab(prefix="fn")
    try:
        pool, snat = "198.51.100.0/29", f"{BACKEND_NET4}.1"  # the director's own, on br0
        lab.lvs.ip(f"route add local {pool} dev lo")
        servers = start_servers(lab, tcp_ports=(NAT_PORT,), udp_ports=())
        for be in lab.backends:  # the nodes' own default route, not through the director
            be.ns.ip(f"route replace default via {BACKEND_NET4}.254")
        with FakeApiServer() as api:
            ipvs = KernelIpvs(netns=lab.lvs.name)
            config = settings(
                api.kubeconfig(tmp_path / "kc"), pool=pool, extra=f"snat: {{addresses: [{snat}]}}"
            )
            runtime = Runtime(config, ipvs)
            runtime.start()
            try:
                assert runtime.wait_ready(60)
                for name, forwarding in (("nat", "nat"), ("full", "fullnat")):
                    obj = service(
                        name,
                        [("http", "TCP", 80)],
                        annotations={
                            "lvs-director.io/backends": "pod",
                            "lvs-director.io/forwarding": forwarding,
                        },
                    )
                    obj["spec"]["ports"][0]["targetPort"] = NAT_PORT
                    api.create("services", obj)
                    api.create(
                        "endpointslices",
                        endpoint_slice(
                            name,
                            [(b.ipv4, None, True, False) for b in lab.backends],
                            [("http", "TCP", NAT_PORT)],
                        ),
                    )

                def address(name: str) -> str | None:
                    status = api.get("services", name)["status"]
                    return status["loadBalancer"].get("ingress", [{}])[0].get("ip")  # type: ignore[no-any-return]

                vips = {
                    n: eventually(lambda n=n: address(n), what="an address")
                    for n in ("nat", "full")
                }
                for vip in vips.values():
                    key = ServiceKey.inet(Protocol.TCP, vip, 80)
                    eventually(
                        lambda k=key: (vs := ipvs.read_service(k)) and vs.real_servers,
                        timeout=60,
                        what="the virtual service",
                    )
                assert lab.lvs.exec(["sysctl", "-n", "net.ipv4.vs.conntrack"]).strip() == "1"
                answers = [ask_tcp(lab.client, vips["full"], 80, timeout=10) for _ in range(6)]
                assert set(answers) <= {b.name for b in lab.backends} and len(set(answers)) > 1
                seen = {address for _name, address in servers.peers}
                assert seen == {snat}, f"the backends saw {seen}, not the SNAT address"
                with pytest.raises(OSError):  # nat: the reply goes to the nodes' own gateway
                    ask_tcp(lab.client, vips["nat"], 80, timeout=3)
                with capsys.disabled():
                    print(
                        f"\nfull NAT: {len(answers)}/{len(answers)} answered by "
                        f"{', '.join(sorted(set(answers)))}, each seeing {snat}; nat: no "
                        "answer (the nodes route elsewhere)"
                    )
            finally:
                runtime.stop()
                Reconciler(ipvs, config.ownership).full_sync({})
                ipvs.close()
    finally:
        lab.close()


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
        lab.lvs.exec(
            [
                "nft",
                "add table inet someone; add chain inet someone c; "
                "add rule inet someone c counter accept",
            ]
        )
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
                api.create(
                    "endpointslices",
                    endpoint_slice(
                        "web",
                        [(b.ipv4, None, True, False) for b in lab.backends],
                        [("http", "TCP", NAT_PORT)],
                    ),
                )
                vip = eventually(
                    lambda: (
                        api.get("services", "web")["status"]["loadBalancer"]
                        .get("ingress", [{}])[0]
                        .get("ip")
                    ),
                    what="an address",
                )
                key = ServiceKey.inet(Protocol.TCP, vip, 80)
                eventually(
                    lambda: (vs := ipvs.read_service(key)) and vs.real_servers,
                    timeout=60,
                    what="the virtual service",
                )
                answered = ask_tcp(lab.client, vip, 80, source=allowed)
                assert answered in {b.name for b in lab.backends}
                with pytest.raises(OSError):  # dropped: the connection times out
                    ask_tcp(lab.client, vip, 80, source=excluded, timeout=2)
                dropped = eventually(
                    lambda: runtime.controller.parts.filter.firewall.dropped().get(key),
                    what="drops",
                )
                assert dropped >= 1
                ruleset = json.loads(lab.lvs.exec(["nft", "-j", "list", "ruleset"]))["nftables"]
                tables = sorted(i["table"]["name"] for i in ruleset if "table" in i)
                assert tables == ["director", "someone"]
                assert lab.lvs.exec(["nft", "list", "table", "inet", "someone"]) == before_other
                with capsys.disabled():
                    print(
                        f"\nsource ranges: {allowed} served by {answered}; {excluded} refused "
                        f"({dropped} packets dropped, counted by nft)"
                    )
                # The Service opened up: the filter goes, the excluded client gets in.
                api.patch("services", "web", {"spec": {"loadBalancerSourceRanges": None}})
                eventually(
                    lambda: not runtime.controller.parts.filter.firewall.dropped(),
                    what="the filter removed",
                )
                assert ask_tcp(lab.client, vip, 80, source=excluded)
                chains = lab.lvs.exec(["nft", "list", "table", "inet", "director"])
                assert "svc4_" not in chains
            finally:
                runtime.stop()
                Reconciler(ipvs, config.ownership).full_sync({})
                ipvs.close()
    finally:
        lab.close()


@pytest.mark.kernel
@pytest.mark.parametrize("addresses", [1, 2], ids=["one-address", "two-addresses"])
@pytest.mark.parametrize("family", [4, 6], ids=["ipv4", "ipv6"])
def test_full_nat_out_of_snat_ports_drops_the_new_connection_and_counts_it(
    family: int, addresses: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """snat.ports 40000-40001 and one real server: two connections at once per SNAT
    address, each leaving from one of the two ports and seen by the real server as from an
    SNAT address (with two addresses, both are used, in turn); the next finds no port free,
    is never answered, and is counted (director_conntrack_insert_failed, the alert
    DirectorSnatPortsExhausted's). IPv4 and IPv6."""
    from director.dataplane.kernel import KernelIpvs
    from director.engine.reconcile import Reconciler
    from director.schema.config import parse_config
    from lab.netns import (
        BACKEND_NET4,
        BACKEND_NET6,
        CLIENT_NET6,
        NAT_PORT,
        Connection,
        build_lab,
        start_servers,
    )

    v6 = family == 6
    vip = "2001:db8:100::20" if v6 else "198.51.100.20"
    lab = build_lab(prefix="fp", vips=[vip])
    try:
        servers = start_servers(lab, tcp_ports=(NAT_PORT,), udp_ports=())
        be = lab.backends[0]
        real = f"[{be.ipv6}]:{NAT_PORT}" if v6 else f"{be.ipv4}:{NAT_PORT}"
        # The director's address on the real servers' network, and another beside it.
        snats = (
            [f"{BACKEND_NET6}1", f"{BACKEND_NET6}fa"]
            if v6
            else [f"{BACKEND_NET4}.1", f"{BACKEND_NET4}.250"]
        )
        snats = snats[:addresses]
        if addresses > 1:
            lab.lvs.ip(f"addr add {snats[1]}/{64 if v6 else 24} dev br0" + (" nodad" if v6 else ""))
        config = parse_config(
            f"""
ownership: {{networks: [198.51.100.0/24, "2001:db8:100::/64"]}}
services:
  - {{name: web, address: "{vip}", port: 80, forwarding: fullnat, real_servers: ["{real}"]}}
snat: {{addresses: {json.dumps(snats)}, ports: 40000-40001}}
""",
            "fp.yaml",
        )
        ipvs = KernelIpvs(netns=lab.lvs.name)
        runtime = Runtime(config, ipvs, metrics=True).start()
        opened: list[Connection] = []
        capacity = 2 * addresses  # two source ports per address towards the one real server
        try:
            assert runtime.wait_ready(60)
            key = next(iter(config.services))
            eventually(lambda: ipvs.read_service(key), timeout=60, what="the service")
            pool = [f"{CLIENT_NET6}2"] if v6 else lab.client_sources4
            sources = [pool[i % len(pool)] for i in range(capacity + 1)]
            for source in sources[:capacity]:
                opened.append(Connection(lab.client, vip, 80, source, timeout=10))
                assert opened[-1].ask() == be.name
            seen = [address for _name, address in servers.peers]
            assert set(seen) == set(snats), f"full NAT from every snat address: {seen}"
            # No port left towards this real server: never answered. Behind the SYN guard (a
            # box on its own) the box itself completes the handshake, so the client's connect
            # succeeds and its first request is the one left unanswered.
            with pytest.raises(OSError):
                extra = Connection(lab.client, vip, 80, sources[capacity], timeout=3)
                try:
                    extra.ask()
                finally:
                    extra.close()
            failed = eventually(
                lambda: (wiring.conntrack(runtime.daemons) or {}).get("insert_failed", 0),
                what="counted",
            )
            assert runtime.metrics is not None
            scrape = generate_latest(runtime.metrics.registry).decode()
            exported = {
                sample.name: sample.value
                for family_ in text_string_to_metric_families(scrape)
                for sample in family_.samples
            }
            assert exported["director_conntrack_insert_failed_total"] >= 1
            assert all(c.ask() == be.name for c in opened), "those served go on"
            with capsys.disabled():
                print(
                    f"\nfull NAT (IPv{family}) with snat.ports 40000-40001 and {addresses} "
                    f"address(es): {capacity} connections served from {', '.join(snats)}, "
                    f"the next dropped; conntrack insert_failed {failed}"
                )
        finally:
            for c in opened:
                c.close()
            runtime.stop()
            Reconciler(ipvs, config.ownership).full_sync({})
            ipvs.close()
    finally:
        lab.close()


# -- full NAT: the same table, the same read-back ------------------------------------------
