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

import contextlib
import errno
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, cast

from director.adapters.http_conns import Mailbox, Slots, raise_descriptor_limit
from director.adapters.http_wire import Conn, Refuse, Wsgi, answer, parse_head, respond, take_body
from director.core.errors import DirectorError
from director.logs import event

if TYPE_CHECKING:  # ssl is loaded only by a server with a certificate (1.3 MB)
    import ssl

log = logging.getLogger("director.api")

# (status, detail) to answer before the body is read, or None to go on.
Gate = Callable[[str, str, dict[str, str]], tuple[int, str] | None]


class ApiError(DirectorError, ValueError):
    """The admin API cannot start (its address, its certificate): a configuration error."""


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
        # what a read that would block raises (TLS: also a record not whole yet)
        self._would_block: tuple[type[OSError], ...] = (BlockingIOError,)
        if cert and key:
            import ssl

            self._would_block = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
            try:
                context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                context.load_cert_chain(cert, key)
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                raise ApiError(f"api.tls_cert/tls_key: cannot load {cert}, {key}: {exc}") from None
            self._tls = context
        self._listener: socket.socket | None = None
        self._selector = selectors.DefaultSelector()
        self.slots = Slots(self.MAX_CONNECTIONS)
        self._mailbox = Mailbox()
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
        conn = Conn(
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
                    conn.sock.send(answer(408, "the request did not arrive in time", close=True))
                event(log, "api.client_too_slow", client=conn.client, phase=conn.phase)
            self._close(conn)

    def _close(self, conn: Conn) -> None:
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

    def _guard(self, conn: Conn, mask: int, read: bool = True) -> None:
        try:
            self._serve(conn, mask, read)
        except Refuse as exc:
            self._refuse(conn, exc.status, exc.detail)
        except (OSError, ValueError):  # ssl.SSLError is an OSError
            self._close(conn)

    def _refuse(self, conn: Conn, status: int, detail: str) -> None:
        """Answer now and close: the answer goes out, the write side is shut, and what the
        client still sends is read and dropped for a moment (closing on unread data resets
        the connection, and the client would lose the answer)."""
        try:
            conn.sock.send(answer(status, detail, close=True))
            if conn.tls:
                raise OSError("TLS: no half-close")
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.phase, conn.deadline = "linger", time.monotonic() + self.LINGER_SECONDS
        conn.buffer.clear()

    # -- reading a request ----------------------------------------------------------------
    def _serve(self, conn: Conn, mask: int, read: bool) -> None:
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
                    raise Refuse(
                        413, f"the request headers are larger than {self.HEADER_BYTES} bytes"
                    )
                return
            if end > self.HEADER_BYTES:
                raise Refuse(413, f"the request headers are larger than {self.HEADER_BYTES} bytes")
            head, conn.buffer = bytes(conn.buffer[:end]), conn.buffer[end + 4 :]
            self._head(conn, head)
            conn.phase, conn.deadline = "body", now + self.BODY_SECONDS
        if conn.phase == "body" and self._body(conn):
            self._dispatch(conn)

    def _handshake(self, conn: Conn) -> None:
        import ssl  # loaded already: the server has a certificate

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

    def _want(self, conn: Conn, *, write: bool) -> None:
        if write != conn.want_write:
            conn.want_write = write
            events = selectors.EVENT_WRITE if write else selectors.EVENT_READ
            self._selector.modify(conn.sock, events, conn)

    def _receive(self, conn: Conn) -> bytes | None:
        """What the socket holds now (b"": closed), or None: nothing yet."""
        try:
            data = conn.sock.recv(65536)
            if conn.tls:  # what TLS has decrypted already is not in the socket any more
                tls = cast("ssl.SSLSocket", conn.sock)
                while tls.pending():
                    data += tls.recv(tls.pending())
            return data
        except self._would_block:
            return None

    def _head(self, conn: Conn, head: bytes) -> None:
        req = conn.req = parse_head(head, self.body_bytes)
        path = req.target.partition("?")[0]
        early = self.gate(req.method, path, req.headers) if self.gate is not None else None
        if early is not None:
            raise Refuse(*early)  # answered now; the body is never read
        if req.headers.get("expect", "").lower() == "100-continue" and (req.chunked or req.length):
            conn.sock.send(f"{req.version} 100 Continue\r\n\r\n".encode())

    def _body(self, conn: Conn) -> bool:
        """Whether the whole body is here (moved from the buffer into ``conn.req.body``)."""
        return take_body(conn.req, conn.buffer, self.body_bytes, self.HEADER_BYTES)

    # -- running the application ----------------------------------------------------------
    def _dispatch(self, conn: Conn) -> None:
        self._selector.unregister(conn.sock)
        conn.phase = "busy"
        conn.sock.setblocking(True)
        try:
            self._workers.submit(self._work, conn)
        except RuntimeError:  # shutting down
            self._close(conn)

    def _work(self, conn: Conn) -> None:
        conn.keep = False
        try:
            conn.keep = respond(self.app, conn, self.host, self.port, self.WRITE_SECONDS)
        except (OSError, TimeoutError) as exc:  # the client went, or did not read in time
            event(log, "api.client_gone", client=conn.client, reason=str(exc)[:200])
        except Exception as exc:  # the application's own errors are Flask's; this is ours
            event(log, "api.error", level=logging.ERROR, error=repr(exc)[:300], exc_info=exc)
        self._mailbox.put(conn)  # the loop closes it, or reads its next request


def _quiet(sock: socket.socket) -> bool:
    """Whether the client has sent nothing the server has not read (or has closed): such a
    connection can be closed without losing a request."""
    try:
        return not socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    except OSError:
        return True  # broken: nothing to lose
