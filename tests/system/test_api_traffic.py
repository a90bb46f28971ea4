"""In the lab VM: the admin API changes a scheduler rr -> sh -> lc under 20 open TCP
connections; none breaks, and the kernel (and ipvsadm) report each new scheduler."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.core.model import IpProtocol as Protocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.kernel import KernelIpvs
from director.engine.reconcile import Reconciler
from director.schema.config import parse_config
from lab.netns import NAT_PORT, Connection, Lab, build_lab, start_servers
from lab.wait import eventually

pytestmark = pytest.mark.kernel

VIP = "198.51.100.10"
TOKEN = "t0ken-for-the-admin-api"


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = build_lab(prefix="ap", vips=[VIP])
    try:
        start_servers(lab, tcp_ports=(NAT_PORT,), udp_ports=())
        yield lab
    finally:
        lab.close()


def test_scheduler_changes_through_the_api_keep_every_connection(lab: Lab, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    backends = ", ".join(f"{be.ipv4}:{NAT_PORT}" for be in lab.backends)
    settings = parse_config(
        f"ownership: {{networks: [198.51.100.0/24]}}\n"
        f"services:\n  - {{name: web, address: {VIP}, port: 80, scheduler: rr,"
        f" real_servers: [{backends}]}}\n"
        f"api: {{listen: '127.0.0.1:0', token_file: {token},"
        f" intents_file: {tmp_path / 'i.json'}}}\n",
        "director.yaml",
    )
    ipvs = KernelIpvs(netns=lab.lvs.name)
    runtime = Runtime(settings, ipvs).start()
    key = ServiceKey.inet(Protocol.TCP, VIP, 80)
    conns: list[Connection] = []
    try:
        assert runtime.wait_ready(60) and runtime.api is not None
        url = f"http://127.0.0.1:{runtime.api.port}/api/v1/static/web/scheduler"
        conns = [
            Connection(lab.client, VIP, 80, source=lab.client_sources4[i % 8]) for i in range(20)
        ]
        first = [c.ask() for c in conns]
        assert len(set(first)) == 3, "rr spread the 20 connections over the 3 backends"
        for scheduler in ("sh", "lc"):
            request = urllib.request.Request(
                url,
                data=json.dumps({"scheduler": scheduler}).encode(),
                method="PUT",
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=30) as reply:
                assert json.loads(reply.read())["scheduler"] == scheduler
            eventually(lambda s=scheduler: ipvs.read_service(key).config.scheduler == s)  # type: ignore[misc]
            listing = lab.lvs.exec(["ipvsadm", "-Ln", "-t", f"{VIP}:80"])
            assert f"TCP  {VIP}:80 {scheduler}" in listing, listing
            answers = [c.ask() for c in conns]  # raises if any connection broke
            assert answers == first, f"after {scheduler}: every connection still on its backend"
        print("\n20 connections kept across rr -> sh -> lc through the API")
    finally:
        for conn in conns:
            conn.close()
        runtime.stop()
        Reconciler(ipvs, settings.ownership).full_sync({})
        ipvs.close()
