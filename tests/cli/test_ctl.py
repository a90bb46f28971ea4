"""``director ctl`` and ``director status`` against a running API: what they drive, where
they read the address, token and certificate, and the exit statuses scripts rely on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from director.core.services import Op, OpKind
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from lab.wait import eventually
from tests.serverlab import certificate, ctl
from tests.weblab import TOKEN


def test_director_ctl_and_status_drive_the_api(running) -> None:  # type: ignore[no-untyped-def]
    _runtime, ipvs, url, _api = running
    table = ctl(url, "services")
    assert table.splitlines()[0].split() == [
        "SERVICE",
        "ORIGIN",
        "SCHEDULER",
        "FROM",
        "ACTIVE",
        "CONNS",
        "PROGRAMMED",
    ]
    assert "static/web" in table and "default/web:http" in table
    assert json.loads(ctl(url, "services", "--json"))[0]["service"]
    out = ctl(url, "scheduler", "set", "static/web", "sh", "--flag", "sh-port")
    assert out.strip() == "static/web: scheduler sh (this director's intents file)"
    web = next(k for k in ipvs.read().services if k.port == 80 and k.address == "198.51.100.10")
    eventually(lambda: ipvs.read().services[web].config.scheduler == "sh")
    assert "drain" in ctl(url, "drain", "192.0.2.12:8080")
    eventually(lambda: ipvs.read().services[web].real_servers[("192.0.2.12", 8080)].weight == 0)
    wide = ctl(url, "services", "-o", "wide").splitlines()  # a row per real server
    assert wide[0].split() == [
        "SERVICE",
        "ORIGIN",
        "SCHEDULER",
        "REAL-SERVER",
        "FWD",
        "WEIGHT",
        "STATE",
        "ACTIVECONN",
        "INACTCONN",
    ]
    drained = next(line.split() for line in wide if "192.0.2.12:8080" in line)
    assert drained[-5:] == ["nat", "0", "draining", "0", "0"], wide
    for address, port in ipvs.read().services[web].real_servers:
        assert any(f"{address}:{port} " in line for line in wide), (address, port, wide)
    assert "done" in ctl(url, "drains")
    assert ctl(url, "undrain", "192.0.2.12:8080").strip() == "undrained 192.0.2.12:8080"
    assert "No changes" in ctl(url, "plan")
    env = dict(os.environ, DIRECTOR_TOKEN=TOKEN)
    status = subprocess.run(
        [sys.executable, "-m", "director", "status", "--url", url],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    assert "ready:       yes" in status and "kubernetes:  connected" in status
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "director",
            "ctl",
            "--url",
            url,
            "scheduler",
            "set",
            "static/web",
            "x",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert bad.returncode == 1 and "HTTP 400: unknown scheduler 'x'; allowed:" in bad.stderr


def test_status_and_ctl_read_the_address_token_and_certificate_from_the_config(
    tmp_path: Path,
) -> None:
    """An operator on the box: `director status --config /etc/director/director.yaml` finds
    the API (its address, https with its certificate) and the token file on its own."""
    import socket

    cert, key = certificate(tmp_path)
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "token").write_text(TOKEN + "\n")
    file = tmp_path / "director.yaml"
    file.write_text(
        "ownership: {networks: [198.51.100.0/26]}\n"
        "services: [{name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.1:80]}]\n"
        f"api: {{listen: '127.0.0.1:{port}', token_file: {tmp_path / 'token'}, "
        f"intents_file: {tmp_path / 'intents.json'}, tls_cert: {cert}, tls_key: {key}}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIRECTOR_")}

    def director(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "director", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    runtime = Runtime(parse_config(file.read_text(), str(file)), FakeIpvs()).start()
    try:
        assert runtime.wait_ready(20)
        status = director("status", "--config", str(file))
        assert status.returncode == 0 and "ready:       yes" in status.stdout, status.stderr
        services = director("ctl", "--config", str(file), "services", "--json")
        assert json.loads(services.stdout)[0]["origin"]["name"] == "web", services.stderr
        # An option given wins over the file.
        elsewhere = director("status", "--config", str(file), "--url", "http://127.0.0.1:1")
        assert elsewhere.returncode == 5 and "127.0.0.1:1" in elsewhere.stderr
    finally:
        runtime.stop()
    bare = tmp_path / "static.yaml"
    bare.write_text("ownership: {networks: [198.51.100.0/26]}\n")
    said = director("status", "--config", str(bare))
    assert said.returncode == 1
    assert said.stderr.strip() == (
        f"director: {bare}: no api: section, so the director serves no admin API"
    )


def test_ctl_undrain_finds_a_drain_however_its_address_is_written(running) -> None:  # type: ignore[no-untyped-def]
    """Issue 13, item 28: the API keeps addresses canonical; so does ctl."""
    _runtime, _ipvs, url, _api = running
    assert "draining 2001:DB8::1" in ctl(url, "drain", "2001:DB8::1")
    assert ctl(url, "undrain", "2001:DB8:0::1").strip() == "undrained 2001:DB8:0::1"
    assert "2001:db8::1" not in ctl(url, "drains")
    assert "draining [2001:DB8::2]:8080" in ctl(url, "drain", "[2001:DB8::2]:8080")
    assert ctl(url, "undrain", "[2001:db8::2]:8080").strip() == "undrained [2001:db8::2]:8080"


def test_ctl_and_status_exit_statuses_tell_scripts_what_failed(running) -> None:  # type: ignore[no-untyped-def]
    """0 done; 1 refused (400, 404, 409); 2 changes pending (plan --exit-code); 5 no answer;
    6 no token, or a token refused; 7 the director could not do it now (5xx)."""
    _runtime, ipvs, url, _api = running

    def rc(*argv: str, token: str | None = TOKEN, at: str = url) -> int:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIRECTOR_TOKEN")}
        if token is not None:
            env["DIRECTOR_TOKEN"] = token
        return subprocess.run(
            [sys.executable, "-m", "director", *argv[:1], "--url", at, *argv[1:]],
            capture_output=True,
            env=env,
            timeout=60,
            check=False,
        ).returncode

    assert rc("status") == 0
    assert rc("ctl", "undrain", "192.0.2.99:8080") == 1  # nothing to undrain: refused
    assert rc("status", at="http://127.0.0.1:9") == 5  # nothing listens there
    assert rc("status", token=None) == 6
    assert rc("status", token="not-the-token") == 6
    assert rc("ctl", "plan", "--exit-code") == 0
    web = next(k for k in ipvs.read().services if k.address == "198.51.100.10")
    ipvs.apply([Op(OpKind.DEL_SERVICE, web)])  # drift: the director would add it back
    assert rc("ctl", "plan", "--exit-code") == 2
    assert rc("ctl", "plan") == 0
    version = subprocess.run(
        [sys.executable, "-m", "director", "--version"], capture_output=True, text=True, check=False
    )
    assert version.returncode == 0 and version.stdout.startswith("director ")


def test_a_service_of_one_of_several_clusters_is_named_with_its_cluster() -> None:
    """``director ctl scheduler set prod/shop/web sh``: the cluster travels as ?cluster=."""
    import pytest

    from director.cli.client import CtlError
    from director.cli.ctl import _scheduler_path

    assert _scheduler_path("prod/shop/web") == "/api/v1/services/shop/web/scheduler?cluster=prod"
    assert _scheduler_path("shop/web") == "/api/v1/services/shop/web/scheduler"
    assert _scheduler_path("static/web") == "/api/v1/static/web/scheduler"
    for bad in ("a/b/c/d", "shop/", "/web", "web", "prod//web"):
        with pytest.raises(CtlError, match="CLUSTER/NAMESPACE/NAME"):
            _scheduler_path(bad)
