"""In the lab VM: active health checks from the director's namespace against real backends,
and externalTrafficPolicy: Local through the nodes' healthCheckNodePort."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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

VIP = "198.51.100.10"
POOL = "198.51.100.64/29"
INTERVAL, RISE, FALL = 0.5, 2, 2
NODE_PORT, HEALTH_PORT = 30080, 32000


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = build_lab(prefix="hc", vips=[VIP])
    try:
        lab.lvs.ip(f"route add local {POOL} dev lo")
        start_servers(lab, tcp_ports=(NAT_PORT, NODE_PORT), udp_ports=())
        yield lab
    finally:
        lab.close()


def spread(lab: Lab, address: str, count: int = 12) -> Counter[str]:
    sources = lab.client_sources4
    return Counter(ask_tcp(lab.client, address, 80, source=sources[i % 8]) for i in range(count))


def test_a_dead_backend_is_quiesced_within_fall_and_back_within_rise(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    backends = ", ".join(f"{be.ipv4}:{NAT_PORT}" for be in lab.backends)
    settings = parse_config(
        f"ownership: {{networks: [198.51.100.0/24]}}\n"
        f"health: {{check: tcp, interval: {INTERVAL}, timeout: {INTERVAL}, rise: {RISE},"
        f" fall: {FALL}}}\n"
        f"services:\n  - {{name: web, address: {VIP}, port: 80, scheduler: rr,"
        f" real_servers: [{backends}]}}\n",
        "director.yaml",
    )
    ipvs = KernelIpvs(netns=lab.lvs.name)
    runtime = Runtime(settings, ipvs, netns=lab.lvs.name).start()
    key = ServiceKey.inet(Protocol.TCP, VIP, 80)
    victim = lab.backends[1]
    try:
        assert runtime.wait_ready(60)
        eventually(lambda: len(spread(lab, VIP)) == 3, what="all three backends answering")
        assert lab.servers is not None
        lab.servers.stop_listening(victim, NAT_PORT)
        killed = time.monotonic()
        down = wait_for(
            lambda: ipvs.read_service(key).real_servers[(victim.ipv4, NAT_PORT)].weight == 0, 30
        )
        assert down is not None, "the dead backend kept its weight"
        assert victim.name not in spread(lab, VIP, 15), "no new connection reaches it"
        lab.servers.start_listening(victim, NAT_PORT)
        revived = time.monotonic()
        up = wait_for(
            lambda: ipvs.read_service(key).real_servers[(victim.ipv4, NAT_PORT)].weight == 1, 30
        )
        assert up is not None, "the backend never came back"
        assert victim.name in spread(lab, VIP, 15), "it receives traffic again"
        with capsys.disabled():
            print(
                f"\nhealth: backend killed -> weight 0 after {down:.2f}s (interval x fall = "
                f"{INTERVAL * FALL:.1f}s); back -> weight 1 after {up:.2f}s (interval x rise = "
                f"{INTERVAL * RISE:.1f}s)"
            )
        assert down < INTERVAL * FALL + 2 * INTERVAL + 1.0  # checks are spread; VM is slow
        assert up < INTERVAL * RISE + 2 * INTERVAL + 1.0
        del killed, revived
    finally:
        runtime.stop()
        Reconciler(ipvs, settings.ownership).full_sync({})
        ipvs.close()


class Healthz(BaseHTTPRequestHandler):
    code = 200

    def do_GET(self) -> None:
        body = b'{"localEndpoints": 1}' if type(self).code == 200 else b'{"localEndpoints": 0}'
        self.send_response(type(self).code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_local_traffic_policy_follows_the_health_check_node_port(lab: Lab, tmp_path: Path) -> None:
    """be1's kube-proxy says 200 (a local endpoint), be2's says 503: only be1 gets traffic."""
    servers = []
    for be, code in ((lab.backends[0], 200), (lab.backends[1], 503)):
        handler = type(f"Healthz{code}", (Healthz,), {"code": code})
        server = be.ns.call(lambda h=handler: ThreadingHTTPServer(("0.0.0.0", HEALTH_PORT), h))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    with FakeApiServer() as api:
        for index, be in enumerate(lab.backends[:2], 1):
            api.create("nodes", node(f"node{index}", be.ipv4))
        obj = service("web", [("http", "TCP", 80)], etp="Local")
        obj["spec"]["ports"][0]["nodePort"] = NODE_PORT
        obj["spec"]["healthCheckNodePort"] = HEALTH_PORT
        api.create("services", obj)
        # The EndpointSlices say both nodes host a ready endpoint; be2's kube-proxy disagrees.
        api.create(
            "endpointslices",
            endpoint_slice(
                "web",
                [("10.1.0.5", "node1", True, False), ("10.1.0.6", "node2", True, False)],
                [("http", "TCP", 8080)],
            ),
        )
        settings = parse_config(
            f"pools: [{{name: p, addresses: [{POOL}]}}]\n"
            f"health: {{check: none, interval: {INTERVAL}, timeout: {INTERVAL}}}\n"
            f"kubernetes: {{kubeconfig: {api.kubeconfig(tmp_path / 'kc')}, identity: a,"
            f" lease_seconds: 2}}\n",
            "director.yaml",
        )
        ipvs = KernelIpvs(netns=lab.lvs.name)
        runtime = Runtime(settings, ipvs, netns=lab.lvs.name, watch_seconds=30).start()
        try:
            assert runtime.wait_ready(60)
            ingress = eventually(
                lambda: api.get("services", "web")["status"]["loadBalancer"].get("ingress"),
                what="an address",
            )
            vip = ingress[0]["ip"]
            key = ServiceKey.inet(Protocol.TCP, vip, 80)
            eventually(
                lambda: (
                    (vs := ipvs.read_service(key)) is not None
                    and vs.real_servers[(lab.backends[1].ipv4, NODE_PORT)].weight == 0
                ),
                what="the node answering 503 at weight 0",
            )
            answers = spread(lab, vip, 15)
            assert set(answers) == {lab.backends[0].name}, answers
        finally:
            runtime.stop()
            Reconciler(ipvs, settings.ownership).full_sync({})
            ipvs.close()
            for server in servers:
                server.shutdown()
                server.server_close()
