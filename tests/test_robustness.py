"""Nothing a tenant or a fault can do stops the control loop (issue 13, items 1-3, 11, 27):
the whole director (``Runtime``) against the API stand-in through the official client, with
the fake IPVS. Each test names the item it shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from director.cli.runtime import Runtime
from director.core.model import IpProtocol as Protocol, ServiceKey
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from lab.kubeapi import FakeApiServer, endpoint_slice, node, service
from lab.wait import eventually
from tests.kubelab import settings

PORTS = [("http", "TCP", 80)]
POD = {"lvs-director.io/backends": "pod"}
TOKEN = "t0ken-for-the-admin-api"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.create("nodes", node("n1", "192.0.2.11"))
        yield server


def start(api: FakeApiServer, tmp_path: Path, ipvs: FakeIpvs, **kw: Any) -> Runtime:
    runtime = Runtime(settings(api.kubeconfig(tmp_path / "kc"), **kw), ipvs)
    runtime.start()
    assert runtime.wait_ready(20), "the director never finished its first sync"
    return runtime


def vs(ipvs: FakeIpvs, address: str, port: int = 80):  # type: ignore[no-untyped-def]
    return ipvs.read().services.get(ServiceKey.inet(Protocol.TCP, address, port))


def ingress(api: FakeApiServer, name: str) -> list[str]:
    status = api.get("services", name).get("status") or {}
    return [i.get("ip") for i in (status.get("loadBalancer") or {}).get("ingress", [])]


def warnings(api: FakeApiServer, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in api.events_for(name) if e["type"] == "Warning"]


# -- item 1: a scoped IPv6 address in an annotation, and in status ------------------------
def test_a_scoped_address_is_refused_and_every_other_service_is_served(
    api: FakeApiServer, tmp_path: Path
) -> None:
    scoped = {"lvs-director.io/load-balancer-ips": "2001:db8::5%eth0"}
    evil = service("evil", PORTS, families=("IPv6",), annotations=scoped)
    api.create("services", evil)
    # What an earlier director (or a sloppy API server) left in status: read back, it must
    # not become the Service's allocation.
    api.patch(
        "services",
        "evil",
        {"status": {"loadBalancer": {"ingress": [{"ip": "2001:db8::5%eth0"}]}}},
        subresource="status",
    )
    api.create("services", service("good", PORTS))
    ipvs = FakeIpvs()
    with start(api, tmp_path, ipvs) as runtime:  # present at start: the worst case
        eventually(lambda: vs(ipvs, "198.51.100.0"), what="the good Service served")
        refusal = eventually(lambda: warnings(api, "evil"), what="a Warning on the evil Service")
        assert (
            "AddressRefused",
            "lvs-director.io/load-balancer-ips: '2001:db8::5%eth0' is not an IP address",
        ) in refusal
        eventually(lambda: ingress(api, "evil") == [], what="the poisoned status cleared")
        # The loop goes on: a new Service after the bad one is programmed too.
        api.create("services", service("later", PORTS))
        eventually(lambda: vs(ipvs, "198.51.100.1"), what="a later Service")
        assert runtime.controller.health.loop_errors == 0, "refused, not crashed"


# -- item 2: the API server's sloppy forms of addresses -----------------------------------
def test_sloppy_addresses_are_read_as_kube_proxy_reads_them_and_bad_ones_refused(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.create("nodes", node("n2", "192.168.001.005"))  # a leading-zero InternalIP
    api.create("services", service("nodes", PORTS))
    api.create("services", service("pods", PORTS, annotations=POD))
    api.create(
        "endpointslices",
        endpoint_slice(
            "pods",
            [
                ("10.0.0.01", "n1", True, False),
                ("10.0.0.256", "n1", True, False),
                ("10.0.0.7", "n1", True, False),
            ],
            [("http", "TCP", 8080)],
        ),
    )
    ipvs = FakeIpvs()
    with start(api, tmp_path, ipvs) as runtime:
        on_nodes = eventually(lambda: vs(ipvs, "198.51.100.0"), what="the nodeport Service")
        assert {address for address, _port in on_nodes.real_servers} == {
            "192.0.2.11",
            "192.168.1.5",
        }
        on_pods = eventually(lambda: vs(ipvs, "198.51.100.1"), what="the pod Service")
        assert sorted(on_pods.real_servers) == [("10.0.0.1", 8080), ("10.0.0.7", 8080)]
        refused = eventually(lambda: warnings(api, "pods"), what="a Warning for 10.0.0.256")
        assert refused == [
            (
                "InvalidEndpoint",
                "EndpointSlice pods-abcde: endpoints[1]: "
                "'10.0.0.256' is not an IPv4 address; ignored",
            )
        ]
        assert runtime.controller.health.refused == {"endpointslices": 1}
        assert runtime.controller.health.loop_errors == 0


# -- item 3: a step that raises is survived, and seen ---------------------------------------
def test_an_error_in_one_service_is_logged_counted_shown_and_the_rest_carries_on(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import director.engine.translator as controller_module

    real = controller_module.translate

    def translate(svc, *args, **kw):  # type: ignore[no-untyped-def]
        if svc.name == "cursed":
            raise RuntimeError("a bug that only this Service triggers")
        return real(svc, *args, **kw)

    monkeypatch.setattr(controller_module, "translate", translate)
    api.create("services", service("cursed", PORTS))
    ipvs = FakeIpvs()
    with start(api, tmp_path, ipvs) as runtime:
        health = runtime.controller.health
        assert health.synced and health.loop_errors >= 1  # once more when it becomes leader
        assert health.last_error == (
            "service default/cursed: RuntimeError: a bug that only this Service triggers"
        )
        api.create("services", service("fine", PORTS))
        eventually(lambda: len(ipvs.read().services) == 1, what="the next Service served")
        before = health.loop_errors
        api.patch("services", "cursed", {"metadata": {"labels": {"touched": "yes"}}})
        eventually(lambda: health.loop_errors == before + 1, what="the next failure counted")
        assert runtime.failed is None and runtime._thread.is_alive()


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
        assert runtime.controller.store.current.schedulers == {}
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


def test_a_dead_loop_thread_ends_the_process_with_a_nonzero_status(tmp_path: Path) -> None:
    config = tmp_path / "director.yaml"
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services: [{name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.1:80]}]\n"
    )
    # The loop thread dies of something no guard catches (a BaseException), a while after
    # the director started: the process must exit non-zero so that systemd restarts it.
    script = textwrap.dedent(f"""
        import sys, time
        import director.engine.loop as c
        import director.cli.main as cli
        from director.dataplane.fake import FakeIpvs
        import director.cli.run; director.cli.run.open_ipvs = lambda netns: FakeIpvs()
        steps = []
        real = c.Controller.step
        def step(self, wait=0.5):
            steps.append(1)
            if len(steps) > 3:
                raise SystemExit("the loop thread is killed")
            return real(self, 0.05)
        c.Controller.step = step
        sys.exit(cli.main(["run", "--config", {str(config)!r}]))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)),
    )
    assert done.returncode == 4, done.stderr[-3000:]
    assert "event=director.fatal" in done.stderr and "thread controller ended" in done.stderr
    assert "director: stopped: thread controller ended" in done.stderr


def test_the_runtime_reports_any_essential_thread_that_dies(
    api: FakeApiServer, tmp_path: Path
) -> None:
    reasons: list[str] = []
    runtime = Runtime(
        settings(api.kubeconfig(tmp_path / "kc")), FakeIpvs(), on_fatal=reasons.append
    )
    with runtime.start():
        assert runtime.wait_ready(20)
        watcher = runtime.watchers[0]
        watcher._stop.set()  # the services watch ends as if its thread had crashed
        api.create("services", service("wake", [("http", "TCP", 80)]))  # at its next event
        eventually(lambda: reasons, what="the death to be noticed")
        assert reasons == ["thread watch-services ended"]
        assert runtime.failed == "thread watch-services ended"


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
    assert len(runtime.controller.store.current.drains) == 1
    ident = call(url, "GET", "/api/v1/drains")[1]["items"][0]["id"]
    undrain = f"/api/v1/drains/{ident}"
    assert at_once(50, lambda: call(url, "DELETE", undrain)[0]) == [200] + [404] * 49


def test_a_drain_is_readable_and_undrainable_right_after_its_201(
    served: tuple[str, Runtime],
) -> None:
    url, runtime = served
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    ipvs = runtime.controller.syncer.reconciler.ipvs
    for _ in range(200):
        status, drain = call(url, "POST", "/api/v1/drains", {"address": "192.0.2.12"})
        assert status == 201, drain
        # Acknowledged means applied: the kernel already holds weight 0.
        assert ipvs.read().services[key].real_servers[("192.0.2.12", 8080)].weight == 0
        status, body = call(url, "DELETE", f"/api/v1/drains/{drain['id']}")
        assert status == 200, body
        assert ipvs.read().services[key].real_servers[("192.0.2.12", 8080)].weight == 1
    assert runtime.controller.store.current.drains == {}


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
