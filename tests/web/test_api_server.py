"""The admin API as operators run it: ``director run``'s wiring with the production WSGI
server, fuzzed with schemathesis, over TLS, driven by ``director ctl``, and the status page
rendered by headless Chromium."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.cli.runtime import Runtime
from director.core.services import Op, OpKind
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from lab.kubeapi import FakeApiServer, node, service
from lab.wait import eventually

TOKEN = "t0ken-for-the-admin-api"
REPO = Path(__file__).resolve().parents[2]


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
        runtime = Runtime(parse_config(config(tmp_path, api), "director.yaml"), ipvs)
        runtime.start()
        try:
            assert runtime.wait_ready(20)
            eventually(lambda: len(ipvs.read().services) == 3, what="static and Kubernetes")
            assert runtime.api is not None
            yield runtime, ipvs, f"http://127.0.0.1:{runtime.api.port}", api
        finally:
            runtime.stop()


def test_schemathesis_finds_no_server_error_and_no_schema_violation(running) -> None:  # type: ignore[no-untyped-def]
    _runtime, _ipvs, url, _api = running
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("schemathesis")),
            "run",
            f"{url}/api/v1/openapi.json",
            "--header",
            f"Authorization: Bearer {TOKEN}",
            "--checks",
            "all",
            "--max-examples",
            "30",
            "--no-color",
            "--seed",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    summary = [line for line in done.stdout.splitlines() if "generated" in line]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    print("schemathesis:", *summary)


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


def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, and its key."""
    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed to make the test certificate"
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
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
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


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


def test_tls_with_the_operators_certificate(tmp_path: Path) -> None:
    cert, key = certificate(tmp_path)
    with FakeApiServer() as api:
        text = config(tmp_path, api, f"  tls_cert: {cert}\n  tls_key: {key}\n")
        runtime = Runtime(parse_config(text, "director.yaml"), FakeIpvs()).start()
        try:
            assert runtime.wait_ready(20) and runtime.api is not None
            context = ssl.create_default_context(cafile=str(cert))
            url = f"https://127.0.0.1:{runtime.api.port}/api/v1/status"
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
            with urllib.request.urlopen(request, context=context, timeout=10) as reply:
                assert json.loads(reply.read())["ready"] is True
        finally:
            runtime.stop()


def test_the_status_page_renders_in_headless_chromium(running) -> None:  # type: ignore[no-untyped-def]
    """On a laptop and on a phone (emulated as Chrome's device toolbar does): every VIP with
    its health, drains, and its rates charted (the kernel's estimates, sampled by the page
    every 2 s); nothing wider than the screen."""
    _runtime, ipvs, url, _api = running
    from director.core.model import IpProtocol as Protocol, ServiceKey
    from director.core.services import Stats
    from lab.browser import Browser

    web = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    ipvs.set_connections(web, ("192.0.2.11", 8080), 7, 2)
    assert "draining 192.0.2.12:8080" in ctl(url, "drain", "192.0.2.12:8080")
    stop = threading.Event()

    def traffic() -> None:  # the kernel's estimates move: 30, 42, 54, 47, 38, 30, ... conn/s
        for step in itertools.cycle((30, 42, 54, 47, 38)):
            ipvs.set_stats(
                web,
                Stats(
                    connections=1234,
                    bytes_in=10**9,
                    bytes_out=4 * 10**9,
                    cps=step,
                    bps_in=250_000,
                    bps_out=3_100_000,
                ),
            )
            if stop.wait(1.0):
                return

    feeder = threading.Thread(target=traffic, daemon=True)
    feeder.start()
    try:
        with Browser() as browser:
            for width, height, mobile, name in (
                (1280, 800, False, "status-page.png"),
                (390, 844, True, "status-page-phone.png"),
            ):
                # For the README's pictures, a minute and a half of samples.
                settle = 90.0 if os.environ.get("DIRECTOR_UPDATE_SCREENSHOT") else 9.0
                page = browser.open(
                    f"{url}/", width=width, height=height, mobile=mobile, settle=3.0
                )
                if name == "status-page.png":  # the status is not public: the page asks
                    asked = page.evaluate("document.documentElement.outerHTML")
                    assert "the status needs the token" in asked and "static/web" not in asked
                    page.evaluate(f"$('token').value = {TOKEN!r}; $('login').requestSubmit(); 1")
                time.sleep(settle)  # the tab keeps the token: the phone's view has it too
                dom = page.evaluate("document.documentElement.outerHTML")
                shown = page.evaluate("[window.innerWidth, document.documentElement.dataset.fits]")
                if os.environ.get("DIRECTOR_UPDATE_SCREENSHOT"):
                    page.screenshot(REPO / "docs" / name)
                page.close()
                assert shown == [width, "true"], f"{shown}: the page is wider than {width} px"
                assert 'data-service="tcp 198.51.100.10:80"' in dom, dom[:2000]
                assert TOKEN not in dom, "the token is kept in session storage, not shown"
                assert "static/web · rr (config)" in dom
                assert "192.0.2.11:8080" in dom and ">7<" in dom  # its active connections
                assert 'data-service="tcp 198.51.100.64:80"' in dom  # the Kubernetes Service
                assert ">connected<" in dom and ">standalone<" in dom
                assert "2/3 active" in dom and "1 draining" in dom
                assert "1 real server draining" in dom
                assert re.search(r"conn/s <b>(30|42|54|47|38)</b>", dom)
                assert "bytes/s <b>3.4 MB</b>" in dom
                # One point per sample (a few in 9 s), at the heights the estimates gave.
                line = re.search(r'<polyline points="([^"]*)"', dom)
                assert line is not None
                heights = {point.split(",")[1] for point in line[1].split()}
                assert len(line[1].split()) >= 3 and len(heights) >= 2, line[1]
                assert (REPO / "docs" / name).exists(), "make it: DIRECTOR_UPDATE_SCREENSHOT=1"
    finally:
        stop.set()
        feeder.join(5)


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


def test_a_support_bundle_holds_what_a_bug_report_needs_and_no_secret(  # type: ignore[no-untyped-def]
    running, tmp_path: Path
) -> None:
    """director bundle against the running director: status and plan from its API, the
    configuration with the BGP passwords redacted (block and flow style; the token file's
    path kept, never the token), and each part it could not get named with the reason."""
    import tarfile

    _runtime, _ipvs, url, api = running
    frr = tmp_path / "frr.conf"  # as the director renders it: the passwords in it too
    frr.write_text("router bgp 64512\n neighbor 198.18.0.1 password s3cret-one\n")
    text = config(tmp_path, api) + (
        f"bgp:\n  asn: 64512\n  router_id: 198.18.0.11\n  config_file: {frr}\n  peers:\n"
        "    - {address: 198.18.0.1, asn: 64500, password: s3cret-one}\n"
        "    - address: 198.18.0.2\n      asn: 64500\n      password: s3cret-two\n"
    )
    path = tmp_path / "director.yaml"
    path.write_text(text)
    out = tmp_path / "bundle.tar.gz"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "director",
            "bundle",
            "--config",
            str(path),
            "--out",
            str(out),
            "--url",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with tarfile.open(out) as tar:
        files = {
            m.name.removeprefix("director-bundle/"): tar.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in tar.getmembers()
        }
    manifest = files["MANIFEST"]
    assert "ok      api/status.json" in manifest and "ok      api/plan.json" in manifest
    assert json.loads(files["api/status.json"])["ready"] is True
    assert "ok      the configuration is valid" in manifest
    redacted = files["config/director.yaml"]
    assert "s3cret" not in redacted and redacted.count("password: <redacted>") == 2
    assert str(tmp_path / "token") in redacted and TOKEN not in "".join(files.values())
    assert "neighbor 198.18.0.1 password <redacted>" in files["frr/frr.conf"]
    assert not any("s3cret" in content for content in files.values())
    assert len(redacted.splitlines()) == len(text.splitlines()), "line numbers still match"
    for name in ("kernel/ipvsadm-Ln.txt", "journal/director.log"):  # present or explained
        assert name in files or f"missing {name}: " in manifest, manifest
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_decommission_refuses_while_the_director_runs(running, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    runtime, ipvs, _url, api = running
    path = tmp_path / "director.yaml"
    path.write_text(
        config(tmp_path, api).replace(
            "listen: 127.0.0.1:0", f"listen: 127.0.0.1:{runtime.api.port}"
        )
    )
    before = ipvs.read().services
    done = subprocess.run(
        [sys.executable, "-m", "director", "decommission", "--config", str(path), "--yes"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the director is running" in done.stderr and "systemctl stop director" in done.stderr
    assert ipvs.read().services == before
