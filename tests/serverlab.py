"""What the tests of the admin API as operators run it share: ``director run``'s wiring
(static services, a Kubernetes API stand-in, the API on a free port, its token in a file) as
the ``running`` fixture, registered for every test by ``tests/conftest.py``; ``director ctl``
run as a process; a self-signed certificate."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.core.firewall import FakeFirewall
from director.core.model import IpProtocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from lab.kubeapi import FakeApiServer, node, service
from lab.wait import eventually
from tests.weblab import TOKEN

REPO = Path(__file__).resolve().parents[1]
WEB = ServiceKey.inet(IpProtocol.TCP, "198.51.100.10", 80)


def config(tmp_path: Path, api: FakeApiServer, extra_api: str = "") -> str:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    return f"""
ownership: {{networks: [198.51.100.0/26]}}
pools: [{{name: default, addresses: [198.51.100.64-198.51.100.79]}}]
services:
  - name: web
    address: 198.51.100.10
    port: 80
    scheduler: rr
    client_rate: 20
    real_servers: [192.0.2.11:8080, 192.0.2.12:8080, 192.0.2.13:8080]
  - name: dns
    address: 198.51.100.53
    port: 53
    protocol: udp
    real_servers: [192.0.2.11:53, 192.0.2.12:53]
kubernetes: {{kubeconfig: {api.kubeconfig(tmp_path / "kc")}, identity: a, lease_seconds: 2}}
api:
  listen: 127.0.0.1:0
  token_file: {token}
  intents_file: {tmp_path / "intents.json"}
{extra_api}
"""


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Runtime, FakeIpvs, str, FakeApiServer]]:
    with FakeApiServer() as api:
        api.create("nodes", node("n1", "192.0.2.11"))
        api.create("services", service("web", [("http", "TCP", 80)]))
        ipvs = FakeIpvs()
        firewall = FakeFirewall()  # the limits in force (a box on its own: the guard too)
        firewall.over = {WEB: (3, 0)}
        settings = parse_config(config(tmp_path, api), "director.yaml")
        runtime = Runtime(settings, ipvs, firewall=firewall)
        runtime.start()
        try:
            assert runtime.wait_ready(20)
            eventually(lambda: len(ipvs.read().services) == 3, what="static and Kubernetes")
            assert runtime.api is not None
            yield runtime, ipvs, f"http://127.0.0.1:{runtime.api.port}", api
        finally:
            runtime.stop()


def ctl(url: str, *argv: str) -> str:
    env = dict(os.environ, DIRECTOR_TOKEN=TOKEN)
    done = subprocess.run(
        [sys.executable, "-m", "director", "ctl", "--url", url, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def certificate(tmp_path: Path, name: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` (an address or a DNS name, as its subject and
    its subjectAltName), and its key."""
    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed to make the test certificate"
    cert, key = tmp_path / f"{name}.cert.pem", tmp_path / f"{name}.key.pem"
    kind = "IP" if name.replace(".", "").isdigit() or ":" in name else "DNS"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName={kind}:{name}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
