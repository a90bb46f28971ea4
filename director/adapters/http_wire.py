"""HTTP/1.1 on the wire for the admin API's server: a connection and the request read on it,
the WSGI environ made from that request, the application's answer written back (chunked
when it gives no length, within a deadline), and the answers the server sends itself."""

from __future__ import annotations

import io
import json
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

from director.core.errors import TITLES, problem_document
from director.logs import event

log = logging.getLogger("director.api")
Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass
class Request:
    """The request being read (or run) on a connection."""

    method: str = ""
    target: str = ""
    version: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    length: int = 0  # body bytes declared (Content-Length)
    chunked: bool = False
    body: bytearray = field(default_factory=bytearray)


@dataclass(eq=False)
class Conn:
    """One client connection of the admin API's server: its socket, peer and deadline."""

    sock: socket.socket
    fd: int
    client: str
    port: int
    tls: bool
    deadline: float  # when the current phase (handshake, idle, headers, body) ends
    buffer: bytearray = field(default_factory=bytearray)
    phase: str = "idle"  # handshake, idle, headers, body, busy, linger
    req: Request = field(default_factory=Request)
    want_write: bool = False  # the TLS handshake waits to write
    keep: bool = False  # after a worker's answer: read the next request


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(when: float | None = None) -> str:
    """An HTTP date (RFC 9110's IMF-fixdate), in English whatever the locale: what
    ``email.utils.formatdate(usegmt=True)`` writes, without loading the email package."""
    t = time.gmtime(when)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year}"
        f" {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    )


def respond(app: Wsgi, conn: Conn, host: str, port: int, write_seconds: float) -> bool:
    """Run the application for the request; whether the connection stays open."""
    started: list[Any] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], None]:
        started[:] = [status, headers]
        return _no_write

    result = app(environ(conn, host, port), start_response)
    deadline = time.monotonic() + write_seconds
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
            headers.append(("Date", http_date()))
        head = f"{conn.req.version} {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
        send(conn, head.encode("latin-1") + b"\r\n", deadline)
        if not bodiless:
            for piece in _chained(first, iterator):
                if piece:
                    send(
                        conn, b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece, deadline
                    )
            if chunked:
                send(conn, b"0\r\n\r\n", deadline)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return not wants_close


def send(conn: Conn, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the client did not read the answer in time")
        conn.sock.settimeout(left)
        sent = conn.sock.send(view)
        view = view[sent:]


def environ(conn: Conn, host: str, port: int) -> dict[str, Any]:
    path, _, query = conn.req.target.partition("?")
    if path.startswith(("http://", "https://")):  # an absolute form
        path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
    environ: dict[str, Any] = {
        "REQUEST_METHOD": conn.req.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "QUERY_STRING": query,
        "SERVER_NAME": host,
        "SERVER_PORT": str(port),
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


def _no_write(data: bytes) -> None:
    raise NotImplementedError("write() of WSGI 1.0: return the body instead")


def _chained(first: bytes, rest: Iterable[bytes]) -> Iterable[bytes]:
    yield first
    yield from rest


def answer(status: int, detail: str, *, close: bool) -> bytes:
    """A problem+json answer the loop sends itself (before any worker is involved)."""
    body = json.dumps(problem_document(status, detail)).encode()
    extra = 'WWW-Authenticate: Bearer realm="director"\r\n' if status == 401 else ""
    head = (
        f"HTTP/1.1 {status} {TITLES.get(status, 'Error')}\r\n"
        f"Content-Type: application/problem+json\r\nContent-Length: {len(body)}\r\n{extra}"
        f"Date: {http_date()}\r\n"
        f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class Refuse(Exception):  # the server answers status and detail itself, then closes
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def parse_head(head: bytes, body_bytes: int) -> Request:
    """A request's line and headers, and how its body comes (at most ``body_bytes``).
    Raises Refuse with the status and reason to answer."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise Refuse(400, "the request head is not text") from None
    line, *lines = text.split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1]:
        raise Refuse(400, "a malformed request line")
    req = Request(parts[0], parts[1], parts[2])
    if req.version not in ("HTTP/1.1", "HTTP/1.0"):
        raise Refuse(505, "HTTP/1.0 and HTTP/1.1 only")
    headers: dict[str, str] = {}
    for raw in lines:
        name, colon, value = raw.partition(":")
        if not colon or not name or name != name.strip() or not name.isascii():
            raise Refuse(400, "a malformed header line")
        name, value = name.lower(), value.strip()
        if name in headers:
            if name in ("content-length", "transfer-encoding", "host"):
                raise Refuse(400, f"{name} given twice")
            headers[name] += ", " + value
        else:
            headers[name] = value
    req.headers = headers
    _framing(req, headers, body_bytes)
    return req


def _framing(req: Request, headers: dict[str, str], body_bytes: int) -> None:
    """How the body is sent: its length, or chunks."""
    req.chunked, req.length = False, 0
    encoding = headers.get("transfer-encoding", "").lower()
    if encoding:
        if encoding != "chunked":
            raise Refuse(501, f"transfer-encoding {encoding!r} is not supported")
        if "content-length" in headers:
            raise Refuse(400, "both content-length and transfer-encoding")
        req.chunked = True
    elif "content-length" in headers:
        given = headers["content-length"]
        if not given.isascii() or not given.isdigit():
            raise Refuse(400, "content-length is not a number")
        req.length = int(given)
    if req.length > body_bytes:
        raise Refuse(413, f"the request body is larger than {body_bytes} bytes")


def take_body(req: Request, buffer: bytearray, body_bytes: int, header_bytes: int) -> bool:
    """Whether the whole body is here (moved from ``buffer`` into ``req.body``). Raises Refuse
    for a body over ``body_bytes`` or malformed chunks."""
    if not req.chunked:
        need = req.length - len(req.body)
        req.body += buffer[:need]
        del buffer[:need]
        return len(req.body) == req.length
    while True:
        end = buffer.find(b"\r\n")
        if end < 0:
            if len(buffer) > 1024:
                raise Refuse(400, "a malformed chunk")
            return False
        size_text = bytes(buffer[:end]).split(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise Refuse(400, "a malformed chunk size") from None
        if len(req.body) + size > body_bytes:
            raise Refuse(413, f"the request body is larger than {body_bytes} bytes")
        if size == 0:  # the last chunk, then trailer lines (ignored) and an empty line
            stop = buffer.find(b"\r\n\r\n", end)
            if stop < 0:
                if len(buffer) - end > header_bytes:
                    raise Refuse(413, "the chunked body's trailer is too large")
                return False
            del buffer[: stop + 4]
            return True
        if len(buffer) < end + 2 + size + 2:
            return False
        req.body += buffer[end + 2 : end + 2 + size]
        del buffer[: end + 2 + size + 2]
