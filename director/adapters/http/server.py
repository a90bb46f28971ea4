"""The admin API's HTTP server: Hypercorn (HTTP/1.1 and TLS on asyncio, h11's parser) serving
the WSGI application through a2wsgi, with a guard of ours in between.

Why these: every connection is a coroutine on one event loop, so a client that is slow to
send or slow to read holds a descriptor and a little memory, never a thread; the parser is
h11 (strict framing: a chunk size is hex digits and nothing else); TLS is asyncio's. Hypercorn
closes a connection that has not sent a whole request head within ``KEEP_ALIVE_SECONDS`` of
connecting or of its last answer, whatever it trickles meanwhile (its idle timer stops only
when a request's head is complete), and refuses a head over ``HEADER_BYTES`` with 431.
Hypercorn's own WSGI wrapper is not used: its worker thread waits for each piece of the
answer to be written, so clients that never read would hold every worker.

The guard (``Guard``, an ASGI middleware) keeps the workers for the application alone:
- ``gate`` answers before the body is read (a missing token, a body where none belongs); the
  body is never read and the connection is closed;
- the body is read on the event loop, at most ``body_bytes`` and ``BODY_SECONDS`` (413, 408),
  before a worker is asked for;
- a2wsgi's queue from the worker to the loop is unbounded, so the worker hands the whole
  answer over and is free; the loop writes it, and a client that has not taken it within
  ``WRITE_SECONDS`` is disconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import resource
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from director.core.errors import DirectorError, problem_document
from director.logs import event

log = logging.getLogger("director.api")

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# (status, detail) to answer before the body is read, or None to go on.
Gate = Callable[[str, str, dict[str, str]], tuple[int, str] | None]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Message, Receive, Send], Awaitable[None]]


class ApiError(DirectorError, ValueError):
    """The admin API cannot start (its address, its certificate): a configuration error."""


class TooLarge(Exception):
    pass


class Guard:
    """What runs between Hypercorn and the WSGI bridge: the early gate, the body read on the
    loop with its bounds, and a deadline on writing the answer (the module's docstring)."""

    def __init__(
        self,
        app: Asgi,
        *,
        body_bytes: int,
        body_seconds: float,
        write_seconds: float,
        gate: Gate | None = None,
    ) -> None:
        self.app, self.gate, self.body_bytes = app, gate, body_bytes
        self.body_seconds, self.write_seconds = body_seconds, write_seconds

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: the bridge answers it
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("-", 0))[0]
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", ())
        }
        if self.gate is not None:
            early = self.gate(scope["method"], scope["path"], headers)
            if early is not None:  # answered now; the body is never read
                await _problem(send, *early)
                return
        try:
            body = await asyncio.wait_for(self._body(receive), self.body_seconds)
        except TooLarge:
            await _problem(send, 413, f"the request body is larger than {self.body_bytes} bytes")
            return
        except TimeoutError:
            event(log, "api.client_too_slow", client=client, phase="body")
            await _problem(send, 408, "the request body did not arrive in time")
            return
        if body is None:  # the client went before its body was whole
            return
        try:
            await self.app(scope, _replay(body, receive), _bounded(send, self.write_seconds))
        except TimeoutError:  # the client has not read its answer: its connection is closed
            event(log, "api.client_too_slow", client=client, phase="answer")

    async def _body(self, receive: Receive) -> bytes | None:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            if len(body) > self.body_bytes:
                raise TooLarge
            if not message.get("more_body", False):
                return bytes(body)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body read already, handed to the application as one message; then what the
    server says next (a disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _bounded(send: Send, seconds: float) -> Send:
    """``send`` with one deadline for the whole answer, from its first piece."""
    loop = asyncio.get_running_loop()
    deadline: float | None = None

    async def bounded(message: Message) -> None:
        nonlocal deadline
        if deadline is None:
            deadline = loop.time() + seconds
        await asyncio.wait_for(send(message), max(0.0, deadline - loop.time()))

    return bounded


async def _problem(send: Send, status: int, detail: str) -> None:
    """An answer of the server's own (problem+json), and the connection closed after it."""
    body = json.dumps(problem_document(status, detail)).encode()
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="director"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


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


def _with_errors(app: Wsgi) -> Wsgi:
    errors = _ErrorStream()

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ["wsgi.errors"] = errors
        return app(environ, start_response)

    return wsgi


class _AsyncioNoise(logging.Filter):
    """What asyncio says of the API's clients, kept out of the log or said as an event:
    an accept that found no descriptor (a traceback each second while a crowd holds every
    descriptor) becomes ``api.accept_paused`` every ten seconds at most; writes to a client
    that has gone, and connections cancelled at a stop, are nothing to act on."""

    def __init__(self) -> None:
        super().__init__()
        self._said = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        error = record.exc_info[1] if record.exc_info else None
        if text.startswith("socket.send() raised exception") or isinstance(
            error, asyncio.CancelledError
        ):
            return False
        if not text.startswith("socket.accept() out of system resource"):
            return True
        now = time.monotonic()
        if now - self._said >= 10.0:
            self._said = now
            event(
                log,
                "api.accept_paused",
                level=logging.WARNING,
                reason=getattr(error, "strerror", None) or "no descriptor left",
                effect="new connections wait in the backlog for a second",
            )
        return False


_ASYNCIO_NOISE = _AsyncioNoise()


def raise_descriptor_limit() -> int:
    """The soft limit on open files raised to the hard one (systemd's default soft limit is
    1,024; the unit sets LimitNOFILE): the limit now. Every connection is a descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


class HttpServer:
    """The admin API on its own thread and event loop (``start``, ``port``, ``stop``)."""

    THREADS = 16  # workers running the application
    HEADER_BYTES = 32 * 1024  # a request's head, at most (431 beyond)
    KEEP_ALIVE_SECONDS = 5.0  # a connection without a whole request head (new, or between two)
    BODY_SECONDS = 10.0  # from the end of the head to the end of the body
    WRITE_SECONDS = 60.0  # from an answer's first byte to its last, taken by the client
    HANDSHAKE_SECONDS = 10.0  # TLS
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
        self.cert: str | None = cert if cert and key else None
        self.key: str | None = key if cert and key else None
        if self.cert and self.key:
            import ssl  # loaded only by a server with a certificate

            try:  # said now, with the file names, not by the server's thread later
                ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                    self.cert, self.key
                )
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                raise ApiError(
                    f"api.tls_cert/tls_key: cannot load {self.cert}, {self.key}: {exc}"
                ) from None
        self._listener: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="api", daemon=True)

    def start(self) -> None:
        """Bind (an ApiError names the address that cannot be had) and serve."""
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
        raise_descriptor_limit()
        if _ASYNCIO_NOISE not in logging.getLogger("asyncio").filters:
            logging.getLogger("asyncio").addFilter(_ASYNCIO_NOISE)
        started = threading.Event()
        self._started = started
        self._thread.start()
        if not started.wait(30):
            raise ApiError("api: the HTTP server did not start within 30 s")

    @property
    def port(self) -> int:
        assert self._listener is not None
        return int(self._listener.getsockname()[1])

    def stop(self) -> None:
        loop, stopping = self._loop, self._stopping
        if self._thread.ident is None or loop is None or stopping is None:
            if self._listener is not None:
                self._listener.close()
            return
        with contextlib.suppress(RuntimeError):  # the loop has ended already
            loop.call_soon_threadsafe(stopping.set)
        self._thread.join(timeout=10)

    def _config(self) -> Any:
        from hypercorn.config import Config

        assert self._listener is not None
        config = Config()
        # a copy of the listener's descriptor: Hypercorn closes its own at the end
        config.bind = [f"fd://{os.dup(self._listener.fileno())}"]
        config.certfile, config.keyfile = self.cert, self.key
        config.keep_alive_timeout = self.KEEP_ALIVE_SECONDS
        config.h11_max_incomplete_size = self.HEADER_BYTES
        config.ssl_handshake_timeout = self.HANDSHAKE_SECONDS
        config.backlog = self.BACKLOG
        config.include_server_header = False
        config.accesslog = None  # the application logs what changes (api.audit)
        config.errorlog = logging.getLogger("director.api.server")
        config.graceful_timeout = 2.0
        config.wsgi_max_body_size = self.body_bytes
        return config

    def _asgi(self) -> Asgi:
        from a2wsgi import WSGIMiddleware

        # send_queue_size 0: unbounded, so a worker never waits on a client (module docstring)
        bridge = WSGIMiddleware(_with_errors(self.app), self.THREADS, send_queue_size=0)  # type: ignore[arg-type]
        return Guard(
            bridge,  # type: ignore[arg-type]
            body_bytes=self.body_bytes,
            body_seconds=self.BODY_SECONDS,
            write_seconds=self.WRITE_SECONDS,
            gate=self.gate,
        )

    def _run(self) -> None:
        from hypercorn.asyncio import serve

        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._stopping = asyncio.Event()
        loop.call_soon(self._started.set)
        try:
            served = serve(
                self._asgi(),  # type: ignore[arg-type]
                self._config(),
                shutdown_trigger=self._stopping.wait,
                mode="asgi",
            )
            loop.run_until_complete(served)
        except Exception as exc:  # the server's own failure: said, and the rest goes on
            event(log, "api.server_failed", level=logging.ERROR, error=repr(exc)[:300])
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            if self._listener is not None:
                self._listener.close()
