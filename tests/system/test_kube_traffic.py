"""End to end in the lab VM: the API stand-in plays the cluster, ``director.runtime.Runtime``
(the wiring of ``director run``) programs the real kernel, and a client namespace sends real
traffic to the address IPAM allocated."""

from __future__ import annotations

import ipaddress
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.core.model import IpProtocol as Protocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.kernel import KernelIpvs
from director.engine.reconcile import Reconciler
from lab.kubeapi import FakeApiServer, endpoint_slice, node, service
from lab.netns import NAT_PORT, Connection, Lab, ask_tcp, build_lab, start_servers
from lab.wait import eventually
from tests.kubelab import settings

pytestmark = pytest.mark.kernel

POOL = "198.51.100.0/29"
NODEPORT_VIP = "198.51.100.100"
NODE_PORT = 30080
OUTAGE_SECONDS = float(os.environ.get("DIRECTOR_OUTAGE_SECONDS", "60"))


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = build_lab(prefix="k8")
    try:
        # The pool and the NodePort VIP are local to the director (keepalived adds them in
        # a pair; a lone director gets a local route), so IPVS sees their traffic.
        lab.lvs.ip(f"route add local {POOL} dev lo", f"route add local {NODEPORT_VIP}/32 dev lo")
        start_servers(lab, tcp_ports=(NAT_PORT, NODE_PORT), udp_ports=())
        yield lab
    finally:
        lab.close()


@pytest.fixture
def api(lab: Lab) -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        for index, be in enumerate(lab.backends, 1):
            server.create("nodes", node(f"node{index}", be.ipv4))
        yield server


@pytest.fixture
def director(lab: Lab, api: FakeApiServer, tmp_path: Path) -> Iterator[tuple[Runtime, KernelIpvs]]:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    config = settings(kubeconfig, pool=POOL, kube_extra=f"  nodeport_vip: {NODEPORT_VIP}")
    ipvs = KernelIpvs(netns=lab.lvs.name)
    runtime = Runtime(config, ipvs, watch_seconds=30)
    runtime.start()
    try:
        assert runtime.wait_ready(60)
        yield runtime, ipvs
    finally:
        runtime.stop()
        Reconciler(ipvs, config.ownership).full_sync({})  # only what the test created
        ipvs.close()


def spread(lab: Lab, address: str, port: int, count: int = 12) -> Counter[str]:
    sources = lab.client_sources4
    return Counter(
        ask_tcp(lab.client, address, port, source=sources[i % len(sources)]) for i in range(count)
    )


def ingress(api: FakeApiServer, name: str) -> list[str]:
    return [i["ip"] for i in api.get("services", name)["status"]["loadBalancer"].get("ingress", [])]


def test_load_balancer_service_end_to_end(
    lab: Lab, api: FakeApiServer, director: tuple[Runtime, KernelIpvs]
) -> None:
    _runtime, ipvs = director
    be = {b.name: b.ipv4 for b in lab.backends}
    names = sorted(be)
    ports = [("http", "TCP", NAT_PORT)]

    def endpoints(*rows: tuple[str, bool, bool]) -> dict[str, object]:
        return endpoint_slice("web", [(be[n], None, ready, term) for n, ready, term in rows], ports)

    obj = service("web", [("http", "TCP", 80)], annotations={"lvs-director.io/backends": "pod"})
    obj["spec"]["ports"][0]["targetPort"] = NAT_PORT
    api.create("services", obj)
    api.create("endpointslices", endpoints((names[0], True, False), (names[1], True, False)))
    (vip,) = eventually(lambda: ingress(api, "web"), what="an address in status")
    assert ipaddress.ip_address(vip) in ipaddress.ip_network(POOL)
    key = ServiceKey.inet(Protocol.TCP, vip, 80)
    eventually(lambda: (vs := ipvs.read_service(key)) and len(vs.real_servers) == 2)
    assert set(spread(lab, vip, 80)) == set(names[:2])

    # Scale up: traffic follows.
    api.patch("endpointslices", "web-abcde", endpoints(*((n, True, False) for n in names)))
    eventually(lambda: set(spread(lab, vip, 80)) == set(names), what="the third backend")

    # One endpoint terminates while a connection to it is open: it finishes, new ones avoid it.
    conn = Connection(lab.client, vip, 80)
    victim = conn.ask()
    rows = [(n, True, n == victim) for n in names]
    api.patch("endpointslices", "web-abcde", endpoints(*rows))
    eventually(
        lambda: ipvs.read_service(key).real_servers[(be[victim], NAT_PORT)].weight == 0,
        what="weight 0 on the terminating endpoint",
    )
    assert victim not in spread(lab, vip, 80, count=15)
    assert conn.ask() == victim, "the open connection still reaches its backend"
    conn.close()
    eventually(
        lambda: (be[victim], NAT_PORT) not in ipvs.read_service(key).real_servers,
        timeout=15,
        what="removal once its connections are gone",
    )

    # Deleting the Service removes the kernel entry.
    api.delete("services", "web")
    eventually(lambda: ipvs.read_service(key) is None, what="the virtual service to go")


def test_nodeport_service_through_the_nodeport_vip(
    lab: Lab, api: FakeApiServer, director: tuple[Runtime, KernelIpvs]
) -> None:
    _runtime, ipvs = director
    obj = service("np", [("http", "TCP", 80)], type="NodePort")
    obj["spec"]["ports"][0]["nodePort"] = NODE_PORT
    api.create("services", obj)
    key = ServiceKey.inet(Protocol.TCP, NODEPORT_VIP, NODE_PORT)
    eventually(lambda: ipvs.read_service(key), what="the NodePort virtual service")
    assert set(spread(lab, NODEPORT_VIP, NODE_PORT)) == {b.name for b in lab.backends}
    api.delete("services", "np")
    eventually(lambda: ipvs.read_service(key) is None)


def test_api_outage_keeps_traffic_flowing_and_resyncs_on_return(
    lab: Lab,
    api: FakeApiServer,
    director: tuple[Runtime, KernelIpvs],
    capsys: pytest.CaptureFixture[str],
) -> None:
    runtime, ipvs = director
    obj = service("web", [("http", "TCP", 80)])  # nodeport backends, nat
    obj["spec"]["ports"][0]["nodePort"] = NODE_PORT
    api.create("services", obj)
    (vip,) = eventually(lambda: ingress(api, "web"))
    key = ServiceKey.inet(Protocol.TCP, vip, 80)
    eventually(lambda: (vs := ipvs.read_service(key)) and len(vs.real_servers) == 3)
    before = ipvs.read_service(key)
    answered = failed = 0
    with api.outage():
        deadline = time.monotonic() + OUTAGE_SECONDS
        while time.monotonic() < deadline:
            try:
                ask_tcp(lab.client, vip, 80, timeout=2)
                answered += 1
            except OSError:
                failed += 1
            time.sleep(0.5)
        assert not runtime.controller.health.kubernetes_connected
        assert ipvs.read_service(key) == before, "nothing removed or changed during the outage"
        # The cluster changes while the director cannot see it.
        api.store.patch(
            "nodes",
            "",
            "node1",
            {
                "metadata": {
                    "labels": {"node.kubernetes.io/exclude-from-external-load-balancers": "true"}
                }
            },
        )
    with capsys.disabled():
        print(f"\nAPI outage {OUTAGE_SECONDS:.0f}s: {answered} requests answered, {failed} failed")
    assert failed == 0 and answered > 0
    eventually(lambda: runtime.controller.health.kubernetes_connected, timeout=40)
    eventually(
        lambda: len(ipvs.read_service(key).real_servers) == len(lab.backends) - 1,
        what="the change made during the outage",
    )
