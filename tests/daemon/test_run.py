"""``director run`` on the fake dataplane: what a static box loads, and where its start's
time went."""

from __future__ import annotations

import gzip
import json
import socket
import urllib.error
import urllib.request
from pathlib import Path

from tests.cli.test_main import API_ONLY, CLUSTER_ONLY, api_config, modules_loaded_by_run


def test_a_static_box_without_api_loads_neither_the_cluster_client_nor_the_web_server(
    tmp_path: Path,
) -> None:
    """Nor pydantic (the file's sections check themselves: pydantic is the admin API's), nor
    the metrics (only the API serves its figures)."""
    config = tmp_path / "director.yaml"
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services: [{name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.1:80]}]\n"
    )
    full = modules_loaded_by_run(config, whole=True)
    loaded = {name.split(".")[0] for name in full}
    assert {"director", "yaml"} <= loaded, "the import log was read"
    unused = CLUSTER_ONLY | API_ONLY | {"jinja2", "pydantic", "pydantic_core", "prometheus_client"}
    assert loaded.isdisjoint(unused), sorted(loaded & unused)
    assert not {"director.adapters.metrics.promtext", "ssl", "email"} & full, sorted(full)


def test_a_static_box_with_the_api_keeps_its_figures_but_loads_no_cluster_client(
    tmp_path: Path,
) -> None:
    full = modules_loaded_by_run(api_config(tmp_path), whole=True)
    assert "director.adapters.metrics.promtext" in full, sorted(full)
    loaded = {name.split(".")[0] for name in full}
    unused = CLUSTER_ONLY | {"prometheus_client"}
    assert loaded.isdisjoint(unused), sorted(loaded & unused)


def test_a_box_with_the_api_has_its_admin_app_before_it_accepts_a_request(tmp_path: Path) -> None:
    """Issue 71, 1: the admin app was made at the first request for it (30-88 s in the lab
    VM under load), past ``director ctl``'s 30 s, and a command reported as failed took
    effect later. Now the app is made before the server listens: health checks, scrapes
    and the API are answered by the same app from the first connection on."""
    port = free_port()
    config = api_config(tmp_path, listen=f"127.0.0.1:{port}")
    token = (tmp_path / "token").read_text().strip()
    base = f"http://127.0.0.1:{port}"

    def asked() -> None:
        for path in ("/healthz", "/readyz"):
            assert get(f"{base}{path}", token)[0] == 200
        status, body = get(f"{base}/metrics", token, gzip=True)
        assert status == 200 and b"director_" in gzip.decompress(body)
        status, body = get(f"{base}/api/v1/services", token)
        assert status == 200 and [i["origin"]["name"] for i in json.loads(body)["items"]] == ["web"]
        assert get(f"{base}/api/v1/services", "not-the-token")[0] == 403

    full = modules_loaded_by_run(config, then=asked, whole=True)
    loaded = {name.split(".")[0] for name in full}
    assert loaded >= API_ONLY, sorted(loaded)
    assert loaded.isdisjoint(CLUSTER_ONLY | {"prometheus_client"}), sorted(loaded & CLUSTER_ONLY)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str, token: str, gzip: bool = False) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"}
    if gzip:
        headers["Accept-Encoding"] = "gzip"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
