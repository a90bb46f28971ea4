"""Active health checks on the host: the state machine, the checker against real sockets on
loopback, and what a failure does to the desired table."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from director.adapters.prober import Checker
from director.core.checks import CheckSpec, Target, parse_check
from director.core.model import IpProtocol as Protocol, ServiceKey
from director.dataplane.fake import FakeIpvs
from director.engine.hooks import Hooks
from director.engine.loop import Controller
from director.schema.config import parse_config
from lab.wait import eventually
from tests.core.test_checks import FAST
from tests.serverlab import certificate


class Status(BaseHTTPRequestHandler):
    code = 200

    def do_GET(self) -> None:
        self.send_response(type(self).code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[tuple[ThreadingHTTPServer, type[Status]]]:
    handler = type("Handler", (Status,), {"code": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()


class Listener:
    """A TCP server that accepts and closes (a real server that is up)."""

    def __init__(self, port: int = 0) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tls_server(
    tmp_path: Path,
    handler: type[BaseHTTPRequestHandler],
    name: str = "localhost",
    on_sni: Callable[[str | None], None] | None = None,
) -> ThreadingHTTPServer:
    """An HTTPS server on loopback with a self-signed certificate for ``name``, serving;
    ``on_sni`` is told the name each client asks for (None: no SNI)."""
    cert, key = certificate(tmp_path, name)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if on_sni is not None:
        context.sni_callback = lambda _sock, asked, _ctx: on_sni(asked)  # type: ignore[assignment,func-returns-value]

    class Server(ThreadingHTTPServer):
        # The handshake happens in the request's own thread, with a deadline: done in
        # accept() (a wrapped listening socket) it would stop the whole server on one client
        # that connects and never speaks, and shutdown() would then wait for ever.
        def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
            sock, peer = self.socket.accept()
            sock.settimeout(10)
            return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), peer

    server = Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_checker_tcp_http_and_https(
    http_server: tuple[ThreadingHTTPServer, type[Status]], tmp_path: Path
) -> None:
    server, handler = http_server
    port = server.server_address[1]
    changes: list[tuple[str, bool]] = []
    checker = Checker(lambda t, h: changes.append((t.describe(), h.up)))
    tcp_up = Target("127.0.0.1", port, FAST)
    tcp_down = Target("127.0.0.1", free_port(), FAST)
    http = Target("127.0.0.1", port, CheckSpec("http", "/healthz", (200, 200), 0.1, 0.3, 2, 2))
    secure = tls_server(tmp_path, handler)
    https = Target(
        "127.0.0.1", secure.server_address[1], CheckSpec("https", "/", (200, 399), 0.1, 0.5, 2, 2)
    )
    checker.start()
    try:
        checker.update(add=[tcp_up, tcp_down, http, https])
        eventually(
            lambda: changes == [(tcp_down.describe(), False)],
            timeout=10,
            what="the closed port down",
        )
        eventually(lambda: all(checker.health(t).checks >= 3 for t in (tcp_up, http, https)))  # type: ignore[union-attr]
        assert checker.health(https).up and checker.health(https).last == "HTTP 200"  # type: ignore[union-attr]
        handler.code = 503  # the application starts failing
        eventually(lambda: (http.describe(), False) in changes, timeout=10, what="HTTP 503 down")
        assert checker.health(http).last == "HTTP 503"  # type: ignore[union-attr]
        assert checker.health(tcp_up).up, "TCP still connects"  # type: ignore[union-attr]
        handler.code = 200
        eventually(lambda: checker.health(http).up, timeout=10, what="back up")  # type: ignore[union-attr]
        assert changes.count((http.describe(), True)) == 1, changes
        checker.update(remove=[tcp_down])
        assert checker.health(tcp_down) is None
        assert sum(t.name == "health" for t in threading.enumerate()) == 1, "one thread"
    finally:
        checker.stop()
        secure.shutdown()


def test_a_virtual_host_check_names_the_host_in_sni_and_the_host_header(tmp_path: Path) -> None:
    """A backend that serves by name (an ingress controller, a virtual-hosted web server)
    answers its health path only for its name: the check sends it as SNI and as Host."""
    seen: dict[str, list[str | None]] = {"sni": [], "host": []}

    class Named(Status):
        def do_GET(self) -> None:
            seen["host"].append(self.headers.get("Host"))
            self.send_response(200 if self.headers.get("Host") == "shop.example.com" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = tls_server(tmp_path, Named, "shop.example.com", seen["sni"].append)
    port = server.server_address[1]
    base = CheckSpec("tcp", "/", (200, 399), 0.1, 0.5, 1, 1)
    named = parse_check("https://shop.example.com/healthz", base)
    plain = parse_check("https:/healthz", base)
    assert not isinstance(named, str) and not isinstance(plain, str)
    checker = Checker(lambda _t, _h: None)
    checker.start()
    try:
        checker.update(add=[Target("127.0.0.1", port, named)])
        eventually(lambda: checker.health(Target("127.0.0.1", port, named)).checks >= 2)  # type: ignore[union-attr]
        assert checker.health(Target("127.0.0.1", port, named)).last == "HTTP 200"  # type: ignore[union-attr]
        assert set(seen["sni"]) == {"shop.example.com"} and set(seen["host"]) == {
            "shop.example.com"
        }
        checker.update(add=[Target("127.0.0.1", port, plain)])
        eventually(lambda: checker.health(Target("127.0.0.1", port, plain)).checks >= 2)  # type: ignore[union-attr]
        assert checker.health(Target("127.0.0.1", port, plain)).last == "HTTP 404"  # type: ignore[union-attr]
        assert f"127.0.0.1:{port}" in seen["host"] and None in seen["sni"], "an address: no SNI"
    finally:
        checker.stop()
        server.shutdown()


def test_a_stopped_checker_leaves_no_check_half_open() -> None:
    """A check still under way when the checker stops (the director shutting down) is
    closed: the real server sees the connection end instead of waiting on it."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    port = listener.getsockname()[1]
    slow = CheckSpec("https", "/", (200, 399), interval=30, timeout=30, rise=1, fall=1)
    checker = Checker(lambda _t, _h: None)
    checker.start()
    try:
        checker.update(add=[Target("127.0.0.1", port, slow)])
        conn, _peer = listener.accept()
        conn.settimeout(10)
        hello = conn.recv(4096)  # the check's TLS hello: it now waits for ours
    finally:
        checker.stop()
    with conn, listener:
        assert hello[:1] == b"\x16", "a TLS handshake record"
        conn.settimeout(5)
        while conn.recv(4096):  # the rest of the hello, then the end of the connection
            pass


STATIC = """
ownership: {{networks: [198.51.100.0/24]}}
health: {{check: tcp, interval: 0.2, timeout: 0.2, rise: 2, fall: 2}}
services:
  - name: web
    address: 198.51.100.10
    port: 80
    real_servers: [127.0.0.1:{a}, 127.0.0.1:{b}]
"""


def run_static(text: str) -> tuple[Controller, FakeIpvs, Checker, threading.Event]:
    ipvs = FakeIpvs()
    hooks = Hooks()
    controller = Controller(ipvs, parse_config(text, "static.yaml"), hooks=hooks)
    checker = Checker(lambda t, h: controller.submit("health", "UP" if h.up else "DOWN", t))
    hooks.on_targets = checker.update
    stop = threading.Event()
    threading.Thread(target=controller.run, args=(stop, 0.05), daemon=True).start()
    checker.start()
    return controller, ipvs, checker, stop


def test_a_failing_real_server_is_quiesced_and_restored() -> None:
    alive = Listener()
    a, b = alive.port, free_port()
    _controller, ipvs, checker, stop = run_static(STATIC.format(a=a, b=b))
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    try:
        eventually(
            lambda: (
                (vs := ipvs.read().services.get(key))
                and vs.real_servers[("127.0.0.1", b)].weight == 0
            ),
            timeout=10,
            what="the dead real server at weight 0",
        )
        assert ipvs.read().services[key].real_servers[("127.0.0.1", a)].weight == 1
        revived = Listener(b)
        eventually(
            lambda: ipvs.read().services[key].real_servers[("127.0.0.1", b)].weight == 1,
            timeout=10,
            what="weight back after rise successes",
        )
        revived.close()
    finally:
        stop.set()
        checker.stop()
        alive.close()


def test_when_every_real_server_fails_they_are_kept_and_it_is_said_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    controller, ipvs, checker, stop = run_static(STATIC.format(a=free_port(), b=free_port()))
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    try:
        eventually(lambda: key in controller.parts.gate.all_down, timeout=10, what="all down")

        def weights() -> set[int]:
            return {rs.weight for rs in ipvs.read().services[key].real_servers.values()}

        # The first to fail may be quiesced before the second fails (a slow box probes them
        # apart): once both fail, both are back at their weight, serving something.
        eventually(lambda: weights() == {1}, timeout=10, what="every real server kept")
        assert key in controller.parts.gate.all_down
        # Said by the loop's thread just after the gate marks it (the test may look between).
        eventually(
            lambda: any("event=health.all_down" in r.getMessage() for r in caplog.records),
            what="the all_down event in the log",
        )
    finally:
        stop.set()
        checker.stop()


def test_a_sorry_server_serves_while_every_real_server_fails_and_leaves_when_one_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """keepalived's sorry_server: once both real servers fail their checks, the sorry server
    alone takes the virtual service (said in the log, and by the API as ``sorry``); when one
    real server passes again, it is back and the sorry server is gone."""
    a, b = free_port(), free_port()
    text = STATIC.format(a=a, b=b).replace(
        "    real_servers:", "    sorry_server: 127.0.0.2:8080\n    real_servers:"
    )
    controller, ipvs, checker, stop = run_static(text)
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)

    def dests() -> dict[tuple[str, int], int]:
        vs = ipvs.read().services.get(key)
        return {d: rs.weight for d, rs in vs.real_servers.items()} if vs else {}

    try:
        eventually(lambda: dests() == {("127.0.0.2", 8080): 1}, timeout=10, what="sorry")
        eventually(
            lambda: any(
                "event=health.all_down" in r.getMessage()
                and "served by its sorry server 127.0.0.2:8080" in r.getMessage()
                for r in caplog.records
            ),
            what="said",
        )
        from director.web.context import ApiContext
        from director.web.views import services

        ctx = ApiContext(controller.door(), ipvs, None, None)
        listed = eventually(lambda: services(ctx)[0]["real_servers"])
        assert [(rs["address"], rs["state"]) for rs in listed] == [("127.0.0.2", "sorry")]
        back = Listener(a)
        eventually(
            lambda: dests().get(("127.0.0.1", a)) == 1 and ("127.0.0.2", 8080) not in dests(),
            timeout=10,
            what="a real server back, the sorry server gone",
        )
        back.close()
    finally:
        stop.set()
        checker.stop()
