"""The admin API on its production server (Hypercorn, through a2wsgi and the director's guard)
against clients that misbehave or crowd it (issue 13, items 7, 10, 26; issue 34, items 12,
13; issue 71, section 1): bodies and headers too big, clients too slow, bodies a byte at a
time, clients that send nothing, too many scrapes, 50 clients writing at once, more
connections than the process has descriptors, chunk sizes that are not hex digits, clients
that pipeline and never read, and thousands of connections in their headers. Loopback only."""

from __future__ import annotations

import contextlib
import http.client
import json
import resource
import socket
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from director.adapters.http.server import HttpServer as ApiServer
from director.adapters.metrics.promtext import Collector, GaugeMetricFamily
from director.core.model import IpProtocol as Protocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from lab.wait import eventually

TOKEN = "t0ken-for-the-admin-api"
CLIENTS, WRITES = 50, 200
SCHEDULERS = ("rr", "wrr", "lc", "wlc", "sh", "sed", "nq", "mh")


def config(tmp_path: Path, services: int = 1) -> str:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    lines = "\n".join(
        f"  - {{name: s{i}, address: 198.51.100.{1 + i}, port: 80, real_servers: [192.0.2.1:80]}}"
        for i in range(services)
    )
    return (
        textwrap.dedent(f"""
        ownership: {{networks: [198.51.100.0/24]}}
        api: {{listen: 127.0.0.1:0, token_file: {token}, intents_file: {tmp_path}/i.json}}
        services:
    """)
        + lines
        + "\n"
    )


@pytest.fixture
def director(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Runtime]]:
    monkeypatch.setattr(ApiServer, "KEEP_ALIVE_SECONDS", 1.0)
    monkeypatch.setattr(ApiServer, "BODY_SECONDS", 2.0)
    runtime = Runtime(parse_config(config(tmp_path, CLIENTS), "director.yaml"), FakeIpvs())
    with runtime.start():
        assert runtime.wait_ready(20) and runtime.api is not None
        yield f"127.0.0.1:{runtime.api.port}", runtime


def request(
    where: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: bool | str = True,
    timeout: float = 30,
) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(where, timeout=timeout)
    try:
        bearer = token if isinstance(token, str) else TOKEN
        headers = {"Authorization": f"Bearer {bearer}"} if token else {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        reply = conn.getresponse()
        raw = reply.read()
        try:
            return reply.status, json.loads(raw or b"{}")
        except ValueError:
            return reply.status, raw
    finally:
        conn.close()


@contextlib.contextmanager
def trickling(socks: list[socket.socket], byte: bytes, every: float) -> Iterator[None]:
    """While the block runs, one more byte to each socket every `every` seconds."""
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(every):
            for sock in socks:
                with contextlib.suppress(OSError):
                    sock.sendall(byte)

    feeder = threading.Thread(target=trickle)
    feeder.start()
    try:
        yield
    finally:
        stop.set()
        feeder.join()


def test_a_chunked_body_over_the_limit_is_413(director: tuple[str, Runtime]) -> None:
    where, _ = director
    conn = http.client.HTTPConnection(where, timeout=30)
    body = json.dumps({"scheduler": "rr", "flags": ["x" * 70_000]}).encode()
    conn.putrequest("PUT", "/api/v1/static/s0/scheduler")
    conn.putheader("Authorization", f"Bearer {TOKEN}")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    # The server answers as soon as the limit is passed and closes the connection: the rest
    # of the body may then meet a closed socket, and the client reads the answer it was sent.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        for start in range(0, len(body), 8192):
            piece = body[start : start + 8192]
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.send(b"0\r\n\r\n")
    reply = conn.getresponse()
    assert reply.status == 413, reply.read()
    assert "larger than 65536 bytes" in json.loads(reply.read())["detail"]
    # A small chunked body is read in full.
    status, _ = request(where, "GET", "/api/v1/status")
    assert status == 200


def test_huge_headers_are_refused_without_being_buffered(director: tuple[str, Runtime]) -> None:
    where, _ = director
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    host, port = where.split(":")
    answers: list[bytes] = []

    def send_huge() -> None:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\nX-Junk: ")
            try:
                for _ in range(16 * 1024):  # up to 16 MiB, 1 KiB at a time
                    sock.sendall(b"a" * 1024)
            except OSError:
                pass  # the server stopped reading and closed: what we want
            try:
                answers.append(sock.recv(200))
            except OSError:
                answers.append(b"")

    threads = [threading.Thread(target=send_huge) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 32, f"the process grew by {grown_mib:.0f} MiB for 8 x 16 MiB of headers"
    assert all(a == b"" or a.startswith(b"HTTP/1.1 431") for a in answers), answers
    assert request(where, "GET", "/api/v1/status")[0] == 200


def test_slow_clients_are_cut_off_and_never_hold_the_api(director: tuple[str, Runtime]) -> None:
    where, _ = director
    host, port = where.split(":")
    slow = []
    for _ in range(20):  # more slow clients than the server has workers
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        slow.append(sock)
    try:
        with trickling(slow, b"X", every=0.2):  # a header byte now and then: slowloris
            started = time.monotonic()
            for _ in range(5):
                assert request(where, "GET", "/api/v1/status")[0] == 200
            assert time.monotonic() - started < 10, "the API waited on the slow clients"
            closed = 0
            for sock in slow:
                try:
                    data = sock.recv(4096)
                    closed += data == b"" or data.startswith(b"HTTP/1.1 408")
                except OSError:
                    closed += 1
            assert closed == 20, f"{20 - closed} slow clients still connected after the deadline"
    finally:
        for sock in slow:
            sock.close()


class Slow(Collector):
    """A scrape that takes as long as the test says."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.waiting = 0

    def collect(self):  # type: ignore[no-untyped-def]
        self.waiting += 1
        self.release.wait(30)
        yield GaugeMetricFamily("slow", "a slow metric", value=1)


def test_scrapes_never_take_every_worker_from_the_api(director: tuple[str, Runtime]) -> None:
    where, runtime = director
    slow = Slow()
    assert runtime.metrics is not None, "the API serves the metrics"
    runtime.metrics.registry.register(slow)
    results: list[int] = []

    def scrape() -> None:
        results.append(request(where, "GET", "/metrics", token=False)[0])

    scrapers = [threading.Thread(target=scrape) for _ in range(24)]
    for t in scrapers:
        t.start()
    try:
        eventually(lambda: slow.waiting >= 1, what="a scrape in progress")
        eventually(lambda: len(results) >= 24 - 4, timeout=10, what="the extra scrapes turned away")
        # Every scrape slot is taken and blocked: an operator's write still gets through.
        status, body = request(where, "PUT", "/api/v1/static/s1/scheduler", {"scheduler": "sh"})
        assert status == 200, body
    finally:
        slow.release.set()
        for t in scrapers:
            t.join(30)
    assert results.count(503) >= 24 - 4 and results.count(200) >= 1, results
    assert slow.waiting == 1, "concurrent scrapes share one collection"


def test_fifty_clients_writing_at_once_lose_nothing(director: tuple[str, Runtime]) -> None:
    """50 clients x 200 scheduler writes each, a new connection every time: no connection
    is reset, every write is answered, and each service ends as its last answered write."""
    where, runtime = director
    last: dict[int, str] = {}
    failures: list[str] = []

    def client(index: int) -> None:
        for n in range(WRITES):
            scheduler = SCHEDULERS[(index + n) % len(SCHEDULERS)]
            try:
                status, body = request(
                    where, "PUT", f"/api/v1/static/s{index}/scheduler", {"scheduler": scheduler}
                )
            except (OSError, http.client.HTTPException) as exc:
                failures.append(f"s{index} write {n}: {type(exc).__name__}: {exc}")
                continue
            if status != 200:
                failures.append(f"s{index} write {n}: HTTP {status} {body}")
                continue
            last[index] = scheduler

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    seconds = time.monotonic() - started
    print(
        f"\n{CLIENTS} clients x {WRITES} writes: {CLIENTS * WRITES} in {seconds:.1f} s "
        f"({CLIENTS * WRITES / seconds:.0f}/s), {len(failures)} failed"
    )
    assert failures == [], failures[:10]
    table = runtime.controller.parts.syncer.reconciler.ipvs.read().services
    for index in range(CLIENTS):
        key = ServiceKey.inet(Protocol.TCP, f"198.51.100.{1 + index}", 80)
        assert table[key].config.scheduler == last[index], f"s{index}"
    stored = json.loads(Path(runtime.controller.parts.store.path or "").read_text())["schedulers"]
    assert {name: v["scheduler"] for name, v in stored.items()} == {
        f"s{i}": last[i] for i in range(CLIENTS)
    }
    # urllib also sees no reset (the status page, open to all, under the same load).
    with urllib.request.urlopen(f"http://{where}/readyz", timeout=10) as reply:
        assert reply.status == 200


def dribbling(where: str, count: int, token: bool) -> list[socket.socket]:
    """``count`` connections that send a PUT's headers, declare a 1,000-byte body, and then
    send it a byte at a time (the caller dribbles)."""
    host, port = where.split(":")
    auth = f"Authorization: Bearer {TOKEN}\r\n" if token else ""
    socks = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(
            f"PUT /api/v1/static/s0/scheduler HTTP/1.1\r\nHost: x\r\n{auth}"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode()
        )
        socks.append(sock)
    return socks


def test_bodies_sent_a_byte_at_a_time_never_hold_the_api(director: tuple[str, Runtime]) -> None:
    """More slow-body clients than the server has workers. Without the token: answered 401
    at once, the body never read, the connection closed. With it: each holds a descriptor
    and no worker while its body arrives, and is cut off (408) once BODY_SECONDS have
    passed. /healthz, /readyz, /metrics and the API answer all along."""
    where, _ = director
    anonymous = dribbling(where, 20, token=False)
    for sock in anonymous:
        head = sock.recv(200)
        assert head.startswith(b"HTTP/1.1 401"), head
        assert b"connection: close" in (head + sock.recv(4096)).lower()
    slow = dribbling(where, 20, token=True)
    try:
        with trickling(slow, b" ", every=0.3):
            for path, token in (
                ("/healthz", False),
                ("/readyz", False),
                ("/metrics", False),
                ("/api/v1/status", True),
            ):
                assert request(where, "GET", path, token=token)[0] == 200, path
            for sock in slow:
                answer = sock.recv(200)
                assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer
    finally:
        for sock in anonymous + slow:
            sock.close()


def test_clients_that_send_nothing_hold_no_worker(director: tuple[str, Runtime]) -> None:
    """200 connections that never send a byte (16 workers): the API answers while every one
    of them is still open, and each is closed once IDLE_SECONDS pass."""
    where, _ = director
    host, port = where.split(":")
    idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(200)]
    try:
        for _ in range(5):
            assert request(where, "GET", "/api/v1/status")[0] == 200
        status, _ = request(where, "PUT", "/api/v1/static/s1/scheduler", {"scheduler": "rr"})
        assert status == 200
        idle[0].settimeout(0.01)
        with pytest.raises(TimeoutError):  # still open: nobody had to cut it to serve us
            idle[0].recv(1)
        idle[0].settimeout(30)
        assert idle[0].recv(1) == b"", "closed once idle too long"
    finally:
        for sock in idle:
            sock.close()


def test_more_connections_than_descriptors_leave_the_director_working(tmp_path: Path) -> None:
    """A director with 400 descriptors in all, and 1,100 connections to its API that send
    nothing: each is closed KEEP_ALIVE_SECONDS after it was taken, the rest wait in the
    backlog meanwhile, and a scheduler write sent behind them all (the intents file, the
    loop) is answered 200 and stored; asyncio's accept failures are one event, not a
    traceback a second."""
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    text = config(tmp_path, 2).replace("127.0.0.1:0", f"127.0.0.1:{port}")
    (tmp_path / "d.yaml").write_text(text)
    script = (
        "import resource, threading\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (400, 400))\n"
        "from director.daemon.runtime import Runtime\n"
        "from director.dataplane.fake import FakeIpvs\n"
        "from director.schema.config import load_config\n"
        f"Runtime(load_config({str(tmp_path / 'd.yaml')!r}), FakeIpvs()).start()\n"
        "threading.Event().wait()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    where = f"127.0.0.1:{port}"
    crowd: list[socket.socket] = []
    try:
        eventually(lambda: _answers(proc, where), timeout=60, what="the API up")
        for _ in range(1100):
            with contextlib.suppress(OSError):
                crowd.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        status, body = request(
            where, "PUT", "/api/v1/static/s1/scheduler", {"scheduler": "sh"}, timeout=90
        )
        assert status == 200, body
        assert request(where, "GET", "/readyz", token=False)[0] == 200
        stored = json.loads((tmp_path / "i.json").read_text())
        assert stored["schedulers"]["s1"]["scheduler"] == "sh"
    finally:
        for sock in crowd:
            sock.close()
        proc.terminate()
        output = proc.communicate(timeout=30)[0]
    assert "Traceback" not in output, output[-3000:]


def _answers(proc: Any, where: str) -> bool:
    if proc.poll() is not None:
        raise AssertionError(proc.stdout.read())
    try:
        return request(where, "GET", "/healthz", token=False)[0] == 200
    except OSError:
        return False


def test_what_the_application_writes_to_wsgi_errors_is_logged_as_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Flask and its extensions may write to ``wsgi.errors``: those lines arrive as log
    events, not as raw text between the logfmt lines on stderr."""
    import logging
    import urllib.request

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        environ["wsgi.errors"].write("first line\nsecond line\n")
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    server = ApiServer(app, "127.0.0.1", 0, body_bytes=1024)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/"
        with (
            caplog.at_level(logging.ERROR, logger="director.api"),
            urllib.request.urlopen(url, timeout=10) as reply,
        ):
            assert reply.read() == b"ok"
    finally:
        server.stop()
    said = [r.getMessage() for r in caplog.records if "api.app_error" in r.getMessage()]
    assert len(said) == 2 and 'text="first line"' in said[0] and 'text="second line"' in said[1]


@pytest.mark.parametrize("size", ["-6", "+6", "0x6", "6_0", " 6", "6 ;x"])
def test_a_chunk_size_that_is_not_hex_digits_is_refused_and_wedges_nothing(
    director: tuple[str, Runtime], size: str
) -> None:
    """Issue 71, 1 (severe): a chunk size of ``-6`` (or ``+6``, ``0x6``, ``6_0``), without
    a token, to a path outside /api/, wedged the hand-written server's loop for good. Now
    the request is refused with 400 and closed, and everything else is answered."""
    where, _ = director
    host, port = where.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /anything HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + size.encode()
            + b"\r\nabcdef\r\n0\r\n\r\n"
        )
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400"), answer
    for path, token in (("/healthz", False), ("/metrics", False), ("/api/v1/status", True)):
        assert request(where, "GET", path, token=token, timeout=5)[0] == 200, path


def test_clients_that_pipeline_and_never_read_hold_no_worker(director: tuple[str, Runtime]) -> None:
    """Issue 71, 1 (severe): 20 connections without a token that pipeline ``GET /`` (the
    status page, open to all) and never read pinned every worker of the hand-written server
    for up to 60 s each. Now each answer is handed to the event loop whole and the worker is
    free: the authenticated API answers at once while the server is still busy with them
    (the open routes' few slots may answer 503 "busy" meanwhile, by design), and once each
    of them has more answers waiting than it reads, /healthz answers 200 too."""
    where, _ = director
    host, port = where.split(":")
    greedy = []
    for _ in range(20):
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        greedy.append(sock)
    pipelined = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 2000
    try:
        for sock in greedy:
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.send(pipelined)
        healthy = 0
        deadline = time.monotonic() + 60
        while healthy < 5:  # until the server has written all it can to every one of them
            assert time.monotonic() < deadline, "the open routes never came back"
            started = time.monotonic()
            assert request(where, "GET", "/api/v1/status", timeout=5)[0] == 200
            assert time.monotonic() - started < 2.0, "the API waited on clients that never read"
            status = request(where, "GET", "/healthz", token=False, timeout=5)[0]
            assert status in (200, 503), status
            healthy = healthy + 1 if status == 200 else 0
    finally:
        for sock in greedy:
            sock.close()


def test_thousands_of_connections_in_their_headers_lock_nobody_out(
    director: tuple[str, Runtime],
) -> None:
    """Issue 71, 1: 17 client addresses x 256 connections, a byte of a request each, filled
    the hand-written server's 4,096 connections and every new one was reset. Now no count
    of connections turns a client away: each of these is closed once KEEP_ALIVE_SECONDS
    have passed without a whole request head, and a client with the token is answered
    while they are all open."""
    where, _ = director
    _, port = where.split(":")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 10_000:
        pytest.skip(f"needs 10,000 descriptors (the hard limit is {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 10_000), hard))
    crowd: list[socket.socket] = []
    try:
        for address in range(17):
            for _ in range(256):
                sock = socket.socket()
                sock.bind((f"127.0.0.{2 + address}", 0))
                sock.connect(("127.0.0.1", int(port)))
                sock.sendall(b"G")
                crowd.append(sock)
        for _ in range(3):
            assert request(where, "GET", "/api/v1/status", timeout=5)[0] == 200
        status, _ = request(where, "PUT", "/api/v1/static/s1/scheduler", {"scheduler": "lc"})
        assert status == 200
        crowd[0].settimeout(10)
        assert crowd[0].recv(1) == b"", "closed once its head did not come in time"
    finally:
        for sock in crowd:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_reload_rotates_the_admin_token(tmp_path: Path) -> None:
    """Issue 71, 1: a new token file and a reload left the old token valid and the new one
    refused until a restart. Now the reload reads the file again: the old token is refused
    (403), the new one answered, and a token file the reload cannot take changes nothing."""
    path = tmp_path / "director.yaml"
    path.write_text(config(tmp_path, 2))
    runtime = Runtime(parse_config(path.read_text(), str(path)), FakeIpvs())
    with runtime.start():
        assert runtime.wait_ready(20) and runtime.api is not None
        where = f"127.0.0.1:{runtime.api.port}"
        assert request(where, "GET", "/api/v1/status")[0] == 200
        new = "a-rotated-admin-token-0123"
        (tmp_path / "token").write_text(new + "\n")
        assert runtime.reload(str(path))[0] == "applied"
        assert request(where, "GET", "/api/v1/status")[0] == 403
        assert request(where, "GET", "/api/v1/status", token=new)[0] == 200
        (tmp_path / "token").write_text("short\n")
        result, detail = runtime.reload(str(path))
        assert result == "invalid" and "at least 16 characters" in detail, detail
        assert request(where, "GET", "/api/v1/status", token=new)[0] == 200
