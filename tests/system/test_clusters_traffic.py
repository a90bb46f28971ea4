"""Two clusters, one director, real IPVS (issue 37): each cluster an API stand-in, one
``Runtime`` with ``clusters:`` programming the kernel of the lab's director namespace, a
client sending real traffic. Cluster A's API is away for a minute while cluster B scales:
B's changes reach the kernel as fast as with A up, and A's Service keeps answering."""

from __future__ import annotations

import ipaddress
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.core.model import IpProtocol as Protocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.kernel import KernelIpvs
from director.engine.reconcile import Reconciler
from director.schema.config import parse_config
from lab.kubeapi import FakeApiServer, endpoint_slice, node, service
from lab.netns import NAT_PORT, Lab, ask_tcp, build_lab, start_servers
from lab.wait import eventually, wait_for

pytestmark = pytest.mark.kernel

POOL = "198.51.100.0/29"  # a: .0-.3, b: .4-.7
OUTAGE_SECONDS = float(os.environ.get("DIRECTOR_OUTAGE_SECONDS", "60"))
PORTS = [("http", "TCP", NAT_PORT)]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = build_lab(prefix="mc")
    try:
        lab.lvs.ip(f"route add local {POOL} dev lo")
        start_servers(lab, tcp_ports=(NAT_PORT,), udp_ports=())
        yield lab
    finally:
        lab.close()


def _settings(a: Path, b: Path) -> str:
    return f"""
ownership: {{networks: [{POOL}]}}
pools:
  - {{name: a, addresses: [198.51.100.0-198.51.100.3]}}
  - {{name: b, addresses: [198.51.100.4-198.51.100.7]}}
clusters:
  - {{name: a, kubeconfig: {a}, identity: edge, lease_seconds: 2, pools: [a]}}
  - {{name: b, kubeconfig: {b}, identity: edge, lease_seconds: 2, pools: [b]}}
"""


def _web(name: str) -> dict[str, object]:
    obj = service(name, [("http", "TCP", 80)], annotations={"lvs-director.io/backends": "pod"})
    obj["spec"]["ports"][0]["targetPort"] = NAT_PORT  # type: ignore[index]
    return obj


def _ingress(api: FakeApiServer, name: str) -> list[str]:
    status = api.get("services", name)["status"]["loadBalancer"]
    return [i["ip"] for i in status.get("ingress", [])]


def test_one_clusters_outage_leaves_its_traffic_and_the_other_clusters_changes(
    lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backends = [b.ipv4 for b in lab.backends]
    with FakeApiServer() as a, FakeApiServer() as b:
        for api in (a, b):
            for index, address in enumerate(backends, 1):
                api.create("nodes", node(f"node{index}", address))
        text = _settings(a.kubeconfig(tmp_path / "a"), b.kubeconfig(tmp_path / "b"))
        config = parse_config(text, "clusters.yaml")
        ipvs = KernelIpvs(netns=lab.lvs.name)
        runtime = Runtime(config, ipvs, watch_seconds=30)
        runtime.start()
        try:
            assert runtime.wait_ready(60)
            a.create("services", _web("web"))
            a.create(
                "endpointslices", endpoint_slice("web", [(backends[0], None, True, False)], PORTS)
            )
            b.create("services", _web("api"))
            b.create(
                "endpointslices", endpoint_slice("api", [(backends[0], None, True, False)], PORTS)
            )
            (vip_a,) = eventually(lambda: _ingress(a, "web"), what="a's address")
            (vip_b,) = eventually(lambda: _ingress(b, "api"), what="b's address")
            assert (
                ipaddress.ip_address(vip_a)
                < ipaddress.ip_address("198.51.100.4")
                <= (ipaddress.ip_address(vip_b))
            )
            key_b = ServiceKey.inet(Protocol.TCP, vip_b, 80)
            # Each cluster's real server in the kernel, not its virtual service alone: the
            # Service may be programmed before its EndpointSlice is seen, and a virtual
            # service with no real server answers a client with "port unreachable".
            for vip, name in ((vip_a, "a's"), (vip_b, "b's")):
                key = ServiceKey.inet(Protocol.TCP, vip, 80)
                eventually(
                    lambda key=key: (
                        (vs := ipvs.read_service(key)) is not None and len(vs.real_servers) == 1
                    ),
                    what=f"{name} virtual service and its real server",
                )
            assert ask_tcp(lab.client, vip_a, 80) == lab.backends[0].name
            assert ask_tcp(lab.client, vip_b, 80) == lab.backends[0].name

            def scale(count: int) -> float:
                """B's endpoints set to the first ``count`` backends: seconds until the
                kernel has them."""
                rows = [(address, None, True, False) for address in backends[:count]]
                started = time.monotonic()
                b.patch("endpointslices", "api-abcde", endpoint_slice("api", rows, PORTS))
                took = wait_for(
                    lambda: len(ipvs.read_service(key_b).real_servers) == count,  # type: ignore[union-attr]
                    timeout=10,
                )
                assert took is not None, f"b's change to {count} endpoints never reached the kernel"
                return time.monotonic() - started

            with_a = [scale(n) for n in (2, 3, 1, 2, 3, 1)]
            answered = failed = 0
            without_a: list[float] = []
            with a.outage():
                eventually(lambda: not runtime.controller.health.kubernetes_connected)
                deadline = time.monotonic() + OUTAGE_SECONDS
                turn = 0
                while time.monotonic() < deadline:
                    try:
                        ask_tcp(lab.client, vip_a, 80, timeout=2)
                        answered += 1
                    except OSError:
                        failed += 1
                    if turn % 4 == 0:  # b scales meanwhile: 1, 2, 3 endpoints in turn
                        without_a.append(scale(turn // 4 % 3 + 1))
                    turn += 1
                    time.sleep(0.25)
                health = runtime.controller.health
                assert health.connected["b/services"] and not health.connected["a/services"]
            with capsys.disabled():
                print(
                    f"\ncluster a's API away {OUTAGE_SECONDS:.0f}s: a's Service {answered} "
                    f"requests answered, {failed} failed; b's changes to the kernel: median "
                    f"{statistics.median(with_a) * 1000:.0f} ms with a up, "
                    f"{statistics.median(without_a) * 1000:.0f} ms with a away "
                    f"({len(without_a)} changes)"
                )
            assert failed == 0 and answered > 0
            # "as fast as with a up": within the noise of a VM's scheduling
            assert statistics.median(without_a) <= 2 * statistics.median(with_a) + 0.1
            eventually(lambda: runtime.controller.health.kubernetes_connected, timeout=40)
            assert ask_tcp(lab.client, vip_a, 80) == lab.backends[0].name
        finally:
            runtime.stop()
            Reconciler(ipvs, config.ownership).full_sync({})  # only what the test created
            ipvs.close()
