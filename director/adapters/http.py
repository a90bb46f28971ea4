"""The admin API's HTTP server: an event loop that owns every connection until its request is
whole, and a few workers that only ever run the application.

One thread accepts, does the TLS handshake, and reads request headers and bodies, all without
blocking, for every connection at once (as event-driven servers do). A worker gets a request
only once its headers and its whole body have arrived; it runs the WSGI application and
writes the answer (with a deadline), then hands a keep-alive connection back to the loop.
So a client that sends nothing, or sends its headers or body a byte at a time, holds a file
descriptor for a few seconds and never a worker: the API keeps answering everyone else.

Bounded everywhere: connections per client address and in all (below the descriptor limit,
with a reserve kept for the control loop's own work: netlink sockets, nft, keepalived -t,
vtysh); header bytes and seconds; body bytes and seconds (from the end of the headers); idle
seconds; the seconds a worker may spend writing an answer. ``gate`` answers a request
before its body is read (a missing token, a body where none belongs): the answer goes out at
once and the connection is closed, the body never read.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import io
import json
import logging
import resource
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote_to_bytes

from director.core.errors import DirectorError
from director.logs import event

log = logging.getLogger("director.api")

# (status, detail) to answer before the body is read, or None to go on.
Gate = Callable[[str, str, dict[str, str]], tuple[int, str] | None]
Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    408: "Request Timeout",
    413: "Content Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


class ApiError(DirectorError, ValueError):
    """The admin API cannot start (its address, its certificate): a configuration error."""


def raise_descriptor_limit() -> int:
    """The soft limit on open files raised to the hard one (systemd's default soft limit is
    1,024; the unit sets LimitNOFILE): the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


@dataclass
class _Request:
    """The request being read (or run) on a connection."""

    method: str = ""
    target: str = ""
    version: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    length: int = 0  # body bytes declared (Content-Length)
    chunked: bool = False
    body: bytearray = field(default_factory=bytearray)


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    fd: int
    client: str
    port: int
    tls: bool
    deadline: float  # when the current phase (handshake, idle, headers, body) ends
    buffer: bytearray = field(default_factory=bytearray)
    phase: str = "idle"  # handshake, idle, headers, body, busy, linger
    req: _Request = field(default_factory=_Request)
    want_write: bool = False  # the TLS handshake waits to write
    keep: bool = False  # after a worker's answer: read the next request


class _Slots:
    """The connections open, per client address and in all, and the refusals."""

    def __init__(self, limit: int) -> None:
        self.conns: dict[int, _Conn] = {}
        self.per_client: collections.Counter[str] = collections.Counter()
        self.limit = limit
        self.refused = 0  # connections refused for a cap (a figure)
        self._said = 0.0  # when a refusal was last logged

    def add(self, conn: _Conn) -> None:
        self.conns[conn.fd] = conn
        self.per_client[conn.client] += 1

    def remove(self, conn: _Conn) -> bool:
        """Forget ``conn``; False when it was not (or no longer) open."""
        if self.conns.get(conn.fd) is not conn:
            return False
        del self.conns[conn.fd]
        self.per_client[conn.client] -= 1
        if self.per_client[conn.client] <= 0:
            del self.per_client[conn.client]
        return True

    def say(self, name: str, reason: str, client: str = "-") -> None:
        """Log a refusal at most once a second (a flood is one line a second, not a flood)."""
        now = time.monotonic()
        if now - self._said >= 1.0:
            self._said = now
            event(
                log, name, level=logging.WARNING, refused=self.refused, client=client, reason=reason
            )


class _Mailbox:
    """Connections the workers hand back to the loop, and the loop's doorbell."""

    def __init__(self) -> None:
        self.reader, self._writer = socket.socketpair()
        self.reader.setblocking(False)
        self._items: collections.deque[_Conn] = collections.deque()

    def put(self, conn: _Conn) -> None:
        self._items.append(conn)
        self.ring()

    def ring(self) -> None:
        with contextlib.suppress(OSError):
            self._writer.send(b"\0")

    def take(self) -> list[_Conn]:
        with contextlib.suppress(OSError):
            self.reader.recv(4096)
        out = []
        while self._items:
            out.append(self._items.popleft())
        return out


class _Refuse(Exception):  # a control-flow signal, never seen outside
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class HttpServer:
    THREADS = 16  # workers running the application
    HEADER_BYTES = 32 * 1024
    HEADER_SECONDS = 10.0  # from a request's first byte to the end of its headers
    BODY_SECONDS = 10.0  # from the end of the headers to the end of the body
    IDLE_SECONDS = 10.0  # a connection that sends nothing (new, or between requests)
    WRITE_SECONDS = 60.0  # a worker writing one answer, at most
    LINGER_SECONDS = 2.0  # after an early answer: what the client still sends is dropped
    PER_CLIENT = 256  # connections one address may hold at once
    MAX_CONNECTIONS = 4096  # connections in all, at most (and half the descriptors left)
    RESERVE = 256  # descriptors kept for the rest of the director
    BACKLOG = 1024

    def __init__(
        self,
        app: Wsgi,
        host: str,
        port: int,
        *,
        body_bytes: int,
        gate: Gate | None = None,
        cert: str | None = None,
        key: str | None = None,
    ) -> None:
        self.app, self.host, self.body_bytes, self.gate = app, host, body_bytes, gate
        self._bind = (host, port)
        self._tls: ssl.SSLContext | None = None
        if cert and key:
            try:
                context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                context.load_cert_chain(cert, key)
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                raise ApiError(f"api.tls_cert/tls_key: cannot load {cert}, {key}: {exc}") from None
            self._tls = context
        self._listener: socket.socket | None = None
        self._selector = selectors.DefaultSelector()
        self.slots = _Slots(self.MAX_CONNECTIONS)
        self._mailbox = _Mailbox()
        self._stop = False
        self._paused_until = 0.0  # accepting paused (no descriptor left)
        self._workers = ThreadPoolExecutor(self.THREADS, thread_name_prefix="api-worker")
        self._thread = threading.Thread(target=self._run, name="api", daemon=True)

    # -- life -----------------------------------------------------------------------------
    def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(self._bind)
            listener.listen(self.BACKLOG)
        except OSError as exc:
            listener.close()
            where = f"{self.host}:{self._bind[1]}"
            raise ApiError(f"api.listen {where}: {exc.strerror or exc}") from None
        listener.setblocking(False)
        self._listener = listener
        files = raise_descriptor_limit()
        self.slots.limit = max(16, min(self.MAX_CONNECTIONS, (files - self.RESERVE) // 2))
        self._selector.register(listener, selectors.EVENT_READ, None)
        self._selector.register(self._mailbox.reader, selectors.EVENT_READ, "wake")
        self._thread.start()

    @property
    def port(self) -> int:
        assert self._listener is not None
        return int(self._listener.getsockname()[1])

    def stop(self) -> None:
        if self._thread.ident is None:
            if self._listener is not None:
                self._listener.close()
            return
        self._stop = True
        self._mailbox.ring()
        self._thread.join(timeout=10)
        self._workers.shutdown(wait=False, cancel_futures=True)

    # -- the loop -------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop:
                for key, mask in self._selector.select(self._timeout(time.monotonic())):
                    if key.data is None:
                        self._accept()
                    elif key.data == "wake":
                        self._take_back(time.monotonic())
                    else:
                        self._guard(key.data, mask)
                self._expire(time.monotonic())
        finally:
            for conn in list(self.slots.conns.values()):
                self._close(conn)
            if self._listener is not None:
                self._listener.close()
            self._selector.close()

    def _timeout(self, now: float) -> float:
        soonest = min(
            (c.deadline for c in self.slots.conns.values() if c.phase != "busy"), default=now + 1.0
        )
        if self._paused_until:
            soonest = min(soonest, self._paused_until)
        return max(0.01, min(soonest - now, 1.0))

    def _accept(self) -> None:
        assert self._listener is not None
        for _ in range(64):  # a burst at a time; the rest at the next turn
            try:
                sock, address = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # No descriptor to take it with: stop looking for a moment (the listen
                    # socket stays readable, and would spin the loop).
                    self._selector.unregister(self._listener)
                    self._paused_until = time.monotonic() + 0.2
                    self.slots.say("api.accept_paused", reason=exc.strerror or str(exc))
                return
            client = str(address[0])
            if not self._room(client):
                self.slots.refused += 1
                sock.close()
                self.slots.say(
                    "api.connection_refused",
                    client=client,
                    reason="too many connections (from this address, or in all)",
                )
                continue
            self._admit(sock, client, int(address[1]))

    def _room(self, client: str) -> bool:
        """Whether a new connection from ``client`` fits: under the caps, or once the
        oldest connection that sends nothing (of that client, or of anyone for the total
        cap) is closed to make room. An idle keep-alive connection may be closed at any
        time; one in the middle of a request never is."""
        slots = self.slots
        for mine, full in (
            (True, slots.per_client[client] >= self.PER_CLIENT),
            (False, len(slots.conns) >= slots.limit),
        ):
            if not full:
                continue
            idle = [
                c
                for c in slots.conns.values()
                if c.phase == "idle" and (c.client == client or not mine)
            ]
            for conn in sorted(idle, key=lambda c: c.deadline):
                if _quiet(conn.sock):
                    self._close(conn)
                    break
            else:
                return False
        return True

    def _admit(self, sock: socket.socket, client: str, port: int) -> None:
        sock.setblocking(False)
        now = time.monotonic()
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except (OSError, ValueError):
                sock.close()
                return
        conn = _Conn(
            sock, sock.fileno(), client, port, self._tls is not None, now + self.IDLE_SECONDS
        )
        conn.phase = "handshake" if conn.tls else "idle"
        self.slots.add(conn)
        self._selector.register(sock, selectors.EVENT_READ, conn)

    def _expire(self, now: float) -> None:
        if self._paused_until and now >= self._paused_until and self._listener is not None:
            self._paused_until = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, None)
        late = [c for c in self.slots.conns.values() if c.phase != "busy" and c.deadline <= now]
        for conn in late:
            if conn.phase in ("headers", "body"):
                with contextlib.suppress(OSError):
                    conn.sock.send(_answer(408, "the request did not arrive in time", close=True))
                event(log, "api.client_too_slow", client=conn.client, phase=conn.phase)
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        if not self.slots.remove(conn):
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _take_back(self, now: float) -> None:
        """Connections the workers are done with: closed, or (keep-alive) their next request
        read."""
        for conn in self._mailbox.take():
            if not conn.keep or self._stop:
                self._close(conn)
                continue
            conn.sock.setblocking(False)
            conn.phase, conn.deadline = "idle", now + self.IDLE_SECONDS
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
            if conn.buffer:  # pipelined: the next request is here already
                self._guard(conn, selectors.EVENT_READ, read=False)

    def _guard(self, conn: _Conn, mask: int, read: bool = True) -> None:
        try:
            self._serve(conn, mask, read)
        except _Refuse as exc:
            self._refuse(conn, exc.status, exc.detail)
        except (OSError, ssl.SSLError, ValueError):
            self._close(conn)

    def _refuse(self, conn: _Conn, status: int, detail: str) -> None:
        """Answer now and close: the answer goes out, the write side is shut, and what the
        client still sends is read and dropped for a moment (closing on unread data resets
        the connection, and the client would lose the answer)."""
        try:
            conn.sock.send(_answer(status, detail, close=True))
            if isinstance(conn.sock, ssl.SSLSocket):
                raise OSError("TLS: no half-close")
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.phase, conn.deadline = "linger", time.monotonic() + self.LINGER_SECONDS
        conn.buffer.clear()

    # -- reading a request ----------------------------------------------------------------
    def _serve(self, conn: _Conn, mask: int, read: bool) -> None:
        if conn.phase == "handshake":
            self._handshake(conn)
            return
        if conn.phase == "linger":
            if not conn.sock.recv(65536):
                self._close(conn)
            return
        if read:
            data = self._receive(conn)
            if data is None:
                return
            if not data:  # the client closed
                self._close(conn)
                return
            conn.buffer += data
        now = time.monotonic()
        if conn.phase == "idle" and conn.buffer:
            conn.phase, conn.deadline = "headers", now + self.HEADER_SECONDS
        if conn.phase == "headers":
            end = conn.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(conn.buffer) > self.HEADER_BYTES:
                    raise _Refuse(
                        413, f"the request headers are larger than {self.HEADER_BYTES} bytes"
                    )
                return
            if end > self.HEADER_BYTES:
                raise _Refuse(413, f"the request headers are larger than {self.HEADER_BYTES} bytes")
            head, conn.buffer = bytes(conn.buffer[:end]), conn.buffer[end + 4 :]
            self._head(conn, head)
            conn.phase, conn.deadline = "body", now + self.BODY_SECONDS
        if conn.phase == "body" and self._body(conn):
            self._dispatch(conn)

    def _handshake(self, conn: _Conn) -> None:
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._want(conn, write=False)
            return
        except ssl.SSLWantWriteError:
            self._want(conn, write=True)
            return
        self._want(conn, write=False)
        conn.phase, conn.deadline = "idle", time.monotonic() + self.IDLE_SECONDS

    def _want(self, conn: _Conn, *, write: bool) -> None:
        if write != conn.want_write:
            conn.want_write = write
            events = selectors.EVENT_WRITE if write else selectors.EVENT_READ
            self._selector.modify(conn.sock, events, conn)

    def _receive(self, conn: _Conn) -> bytes | None:
        """What the socket holds now (b"": closed), or None: nothing yet."""
        try:
            data = conn.sock.recv(65536)
            if isinstance(conn.sock, ssl.SSLSocket):
                while conn.sock.pending():
                    data += conn.sock.recv(conn.sock.pending())
            return data
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return None

    def _head(self, conn: _Conn, head: bytes) -> None:
        try:
            text = head.decode("latin-1")
        except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
            raise _Refuse(400, "the request head is not text") from None
        line, *lines = text.split("\r\n")
        parts = line.split(" ")
        if len(parts) != 3 or not parts[0].isalpha() or not parts[1]:
            raise _Refuse(400, "a malformed request line")
        req = conn.req = _Request(parts[0], parts[1], parts[2])
        if req.version not in ("HTTP/1.1", "HTTP/1.0"):
            raise _Refuse(505, "HTTP/1.0 and HTTP/1.1 only")
        headers: dict[str, str] = {}
        for raw in lines:
            name, colon, value = raw.partition(":")
            if not colon or not name or name != name.strip() or not name.isascii():
                raise _Refuse(400, "a malformed header line")
            name, value = name.lower(), value.strip()
            if name in headers:
                if name in ("content-length", "transfer-encoding", "host"):
                    raise _Refuse(400, f"{name} given twice")
                headers[name] += ", " + value
            else:
                headers[name] = value
        req.headers = headers
        self._framing(conn, headers)
        path = req.target.partition("?")[0]
        early = self.gate(req.method, path, headers) if self.gate is not None else None
        if early is not None:
            raise _Refuse(*early)  # answered now; the body is never read
        if headers.get("expect", "").lower() == "100-continue" and (req.chunked or req.length):
            conn.sock.send(f"{req.version} 100 Continue\r\n\r\n".encode())

    def _framing(self, conn: _Conn, headers: dict[str, str]) -> None:
        """How the body is sent: its length, or chunks."""
        conn.req.chunked, conn.req.length = False, 0
        encoding = headers.get("transfer-encoding", "").lower()
        if encoding:
            if encoding != "chunked":
                raise _Refuse(501, f"transfer-encoding {encoding!r} is not supported")
            if "content-length" in headers:
                raise _Refuse(400, "both content-length and transfer-encoding")
            conn.req.chunked = True
        elif "content-length" in headers:
            given = headers["content-length"]
            if not given.isascii() or not given.isdigit():
                raise _Refuse(400, "content-length is not a number")
            conn.req.length = int(given)
        if conn.req.length > self.body_bytes:
            raise _Refuse(413, f"the request body is larger than {self.body_bytes} bytes")

    def _body(self, conn: _Conn) -> bool:
        """Whether the whole body is here (moved from the buffer into ``conn.req.body``)."""
        if not conn.req.chunked:
            need = conn.req.length - len(conn.req.body)
            conn.req.body += conn.buffer[:need]
            del conn.buffer[:need]
            return len(conn.req.body) == conn.req.length
        while True:
            end = conn.buffer.find(b"\r\n")
            if end < 0:
                if len(conn.buffer) > 1024:
                    raise _Refuse(400, "a malformed chunk")
                return False
            size_text = bytes(conn.buffer[:end]).split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _Refuse(400, "a malformed chunk size") from None
            if len(conn.req.body) + size > self.body_bytes:
                raise _Refuse(413, f"the request body is larger than {self.body_bytes} bytes")
            if size == 0:  # the last chunk, then trailer lines (ignored) and an empty line
                stop = conn.buffer.find(b"\r\n\r\n", end)
                if stop < 0:
                    if len(conn.buffer) - end > self.HEADER_BYTES:
                        raise _Refuse(413, "the chunked body's trailer is too large")
                    return False
                del conn.buffer[: stop + 4]
                return True
            if len(conn.buffer) < end + 2 + size + 2:
                return False
            conn.req.body += conn.buffer[end + 2 : end + 2 + size]
            del conn.buffer[: end + 2 + size + 2]

    # -- running the application ----------------------------------------------------------
    def _dispatch(self, conn: _Conn) -> None:
        self._selector.unregister(conn.sock)
        conn.phase = "busy"
        conn.sock.setblocking(True)
        try:
            self._workers.submit(self._work, conn)
        except RuntimeError:  # shutting down
            self._close(conn)

    def _work(self, conn: _Conn) -> None:
        conn.keep = False
        try:
            conn.keep = self._respond(conn)
        except (OSError, TimeoutError) as exc:  # the client went, or did not read in time
            event(log, "api.client_gone", client=conn.client, reason=str(exc)[:200])
        except Exception as exc:  # the application's own errors are Flask's; this is ours
            event(log, "api.error", level=logging.ERROR, error=repr(exc)[:300], exc_info=exc)
        self._mailbox.put(conn)  # the loop closes it, or reads its next request

    def _respond(self, conn: _Conn) -> bool:
        """Run the application for the request; whether the connection stays open."""
        started: list[Any] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            started[:] = [status, headers]
            return _no_write

        result = self.app(self._environ(conn), start_response)
        deadline = time.monotonic() + self.WRITE_SECONDS
        try:
            iterator = iter(result)
            first = next(iterator, b"")
            status, headers = started[0], list(started[1])
            names = {name.lower() for name, _ in headers}
            wants_close = conn.req.headers.get("connection", "").lower() == "close" or (
                conn.req.version == "HTTP/1.0"
                and conn.req.headers.get("connection", "").lower() != "keep-alive"
            )
            bodiless = conn.req.method == "HEAD" or status[:3] in ("204", "304")
            chunked = "content-length" not in names and not bodiless
            if chunked and conn.req.version == "HTTP/1.0":
                chunked, wants_close = False, True
            if chunked:
                headers.append(("Transfer-Encoding", "chunked"))
            headers.append(("Connection", "close" if wants_close else "keep-alive"))
            if "date" not in names:
                headers.append(("Date", formatdate(usegmt=True)))
            head = f"{conn.req.version} {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
            self._send(conn, head.encode("latin-1") + b"\r\n", deadline)
            if not bodiless:
                for piece in _chained(first, iterator):
                    if piece:
                        self._send(
                            conn,
                            b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece,
                            deadline,
                        )
                if chunked:
                    self._send(conn, b"0\r\n\r\n", deadline)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        return not wants_close

    def _send(self, conn: _Conn, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the client did not read the answer in time")
            conn.sock.settimeout(left)
            sent = conn.sock.send(view)
            view = view[sent:]

    def _environ(self, conn: _Conn) -> dict[str, Any]:
        path, _, query = conn.req.target.partition("?")
        if path.startswith(("http://", "https://")):  # an absolute form
            path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
        environ: dict[str, Any] = {
            "REQUEST_METHOD": conn.req.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
            "QUERY_STRING": query,
            "SERVER_NAME": self.host,
            "SERVER_PORT": str(self.port),
            "SERVER_PROTOCOL": conn.req.version,
            "REMOTE_ADDR": conn.client,
            "REMOTE_PORT": str(conn.port),
            "CONTENT_LENGTH": str(len(conn.req.body)) if conn.req.body else "",
            "CONTENT_TYPE": conn.req.headers.get("content-type", ""),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "https" if conn.tls else "http",
            "wsgi.input": io.BytesIO(bytes(conn.req.body)),
            "wsgi.errors": _ERRORS,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for name, value in conn.req.headers.items():
            if name in ("content-type", "content-length", "transfer-encoding"):
                continue
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        conn.req.body = bytearray()
        return environ


class _ErrorStream:
    """``wsgi.errors``: what the application writes there becomes log events (one per line,
    ``event=api.app_error``), never raw text between the logfmt lines on stderr."""

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                event(log, "api.app_error", level=logging.ERROR, text=line[:2000])
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass


_ERRORS = _ErrorStream()


def _quiet(sock: socket.socket) -> bool:
    """Whether the client has sent nothing the server has not read (or has closed): such a
    connection can be closed without losing a request."""
    try:
        return not socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    except OSError:
        return True  # broken: nothing to lose


def _no_write(data: bytes) -> None:
    raise NotImplementedError("write() of WSGI 1.0: return the body instead")


def _chained(first: bytes, rest: Iterable[bytes]) -> Iterable[bytes]:
    yield first
    yield from rest


def _answer(status: int, detail: str, *, close: bool) -> bytes:
    """A problem+json answer the loop sends itself (before any worker is involved)."""
    body = json.dumps(
        {
            "type": "about:blank",
            "title": REASONS.get(status, "Error"),
            "status": status,
            "detail": detail,
        }
    ).encode()
    extra = 'WWW-Authenticate: Bearer realm="director"\r\n' if status == 401 else ""
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
        f"Content-Type: application/problem+json\r\nContent-Length: {len(body)}\r\n{extra}"
        f"Date: {formatdate(usegmt=True)}\r\n"
        f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n"
    )
    return head.encode("latin-1") + body
