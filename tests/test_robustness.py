"""Nothing a tenant or a fault can do stops the control loop (issue 13, items 1-3, 11, 27):
the whole director (``Runtime``) against the API stand-in through the official client, with
the fake IPVS. Each test names the item it shows."""

from __future__ import annotations

import json
import subprocess
import textwrap
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from director.core.model import IpProtocol as Protocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config

TOKEN = "t0ken-for-the-admin-api"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 KiB file system (tmpfs) that a test can fill: a real 'No space left'."""
    where = tmp_path / "state"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_an_api_write_that_cannot_be_stored_is_a_503_and_changes_nothing(
    tmp_path: Path, small_disk: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    config = parse_config(
        textwrap.dedent(f"""
        ownership: {{networks: [198.51.100.0/24]}}
        services:
          - {{name: web, address: 198.51.100.10, port: 80, scheduler: rr,
              real_servers: [192.0.2.11:8080]}}
        api: {{listen: 127.0.0.1:0, token_file: {token},
               intents_file: {small_disk}/intents.json}}
    """),
        "director.yaml",
    )
    ipvs = FakeIpvs()
    with Runtime(config, ipvs).start() as runtime:
        assert runtime.wait_ready(20) and runtime.api is not None
        url = f"http://127.0.0.1:{runtime.api.port}"
        filler = small_disk / "filler"
        with filler.open("wb") as handle, pytest.raises(OSError):  # the disk fills up
            handle.write(b"\0" * 64 * 1024)
            handle.flush()
        status, body = call(url, "PUT", "/api/v1/static/web/scheduler", {"scheduler": "sh"})
        assert status == 503, body
        assert body["detail"].startswith("the change could not be stored")
        assert "No space left on device" in body["detail"]
        key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
        assert ipvs.read().services[key].config.scheduler == "rr", "nothing changed"
        assert runtime.controller.parts.store.current.schedulers == {}
        status, body = call(url, "GET", "/api/v1/status")
        assert status == 200 and body["last_error"].startswith("intents not stored")
        # The loop goes on: with room again, the same write is stored, and applied when
        # it is answered.
        filler.unlink()
        assert call(url, "PUT", "/api/v1/static/web/scheduler", {"scheduler": "sh"})[0] == 200
        assert ipvs.read().services[key].config.scheduler == "sh"
        assert json.loads((small_disk / "intents.json").read_text())["schedulers"] == {
            "web": {"scheduler": "sh", "flags": []}
        }


# -- items 11 and 27: concurrent writes, and reading what was acknowledged -------------
def call(url: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {TOKEN}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Runtime]]:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    config = parse_config(
        textwrap.dedent(f"""
        ownership: {{networks: [198.51.100.0/24]}}
        services:
          - {{name: web, address: 198.51.100.10, port: 80,
              real_servers: [192.0.2.11:8080, 192.0.2.12:8080]}}
        api: {{listen: 127.0.0.1:0, token_file: {token}, intents_file: {tmp_path}/i.json}}
    """),
        "director.yaml",
    )
    with Runtime(config, FakeIpvs()).start() as runtime:
        assert runtime.wait_ready(20) and runtime.api is not None
        yield f"http://127.0.0.1:{runtime.api.port}", runtime


def at_once(count: int, request: Any) -> list[int]:
    """``count`` threads send ``request()`` at the same moment: the statuses, sorted."""
    answers: list[int] = []
    lock = threading.Lock()
    go = threading.Barrier(count)

    def send() -> None:
        go.wait()
        status = request()
        with lock:
            answers.append(status)

    threads = [threading.Thread(target=send) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return sorted(answers)


def test_fifty_identical_drains_at_once_make_one_drain(served: tuple[str, Runtime]) -> None:
    url, runtime = served
    drain = {"address": "192.0.2.11"}
    assert at_once(50, lambda: call(url, "POST", "/api/v1/drains", drain)[0]) == (
        [201] + [409] * 49
    )
    assert len(runtime.controller.parts.store.current.drains) == 1
    ident = call(url, "GET", "/api/v1/drains")[1]["items"][0]["id"]
    undrain = f"/api/v1/drains/{ident}"
    assert at_once(50, lambda: call(url, "DELETE", undrain)[0]) == [200] + [404] * 49


def test_a_drain_is_readable_and_undrainable_right_after_its_201(
    served: tuple[str, Runtime],
) -> None:
    url, runtime = served
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    ipvs = runtime.controller.parts.syncer.reconciler.ipvs
    for _ in range(200):
        status, drain = call(url, "POST", "/api/v1/drains", {"address": "192.0.2.12"})
        assert status == 201, drain
        # Acknowledged means applied: the kernel already holds weight 0.
        assert ipvs.read().services[key].real_servers[("192.0.2.12", 8080)].weight == 0
        status, body = call(url, "DELETE", f"/api/v1/drains/{drain['id']}")
        assert status == 200, body
        assert ipvs.read().services[key].real_servers[("192.0.2.12", 8080)].weight == 1
    assert runtime.controller.parts.store.current.drains == {}


def test_drains_are_bounded(served: tuple[str, Runtime]) -> None:
    from director.core.intents import MAX_DRAINS, AddDrain, Drain

    url, runtime = served
    for i in range(MAX_DRAINS):  # straight to the loop: 1,000 HTTP round trips are not the point
        reply = runtime.controller.submit_intent(AddDrain(Drain(f"10.{i // 250}.{i % 250}.1")))
        assert reply.ok
    status, body = call(url, "POST", "/api/v1/drains", {"address": "192.0.2.11"})
    assert status == 409 and f"at most {MAX_DRAINS}" in body["detail"]
    status, listing = call(url, "GET", "/api/v1/drains")
    assert status == 200 and len(listing["items"]) == MAX_DRAINS
