"""What a scraper and a load balancer's health check ask for, answered without Flask's router.

``/healthz``, ``/readyz`` and ``/metrics`` are asked for every few seconds on every box: the
front answers them itself and hands every other request to the admin API's Flask app, which
is made before the server accepts its first connection (a request is never answered by an
app still being loaded, and a client never times out on it). The token gate is the same for
both (``verdict``): a route ``api.public`` does not open needs the bearer token, and the
routes open to all share ``OPEN_SLOTS`` workers, wherever they are answered. The token is a
``Token``: a reload reads its file again and the next request is checked against the new one.
"""

from __future__ import annotations

import hmac
import http
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from director.core.errors import problem_document

if TYPE_CHECKING:
    from director.engine.ports import LoopPort

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
MAX_BODY = 64 * 1024  # bytes of a request body, at most
OPEN_SLOTS = 4  # workers the endpoints without a token may hold at once
PUBLIC_CHOICES = ("health", "metrics", "status_page")  # what api.public may open
# path -> what opens it to clients without the token ("always": open to all)
OPEN_PATHS = {
    "/healthz": "health",
    "/readyz": "health",
    "/metrics": "metrics",
    "/": "always",  # the page holds no data: its data (/ui/status) may need the token
    "/ui/status": "status_page",
}
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format
OPEN = (0, "open")  # the verdict on a route open to all
ALLOWED = "GET, HEAD, OPTIONS"  # the methods of the routes the front answers
NOT_FOUND = (  # werkzeug's words, as the admin app says them
    "The requested URL was not found on the server. If you entered the URL manually please "
    "check your spelling and try again."
)
Answer = tuple[int, list[tuple[str, str]], Iterable[bytes]]


class Token:
    """The admin token every gate compares with. ``set`` replaces it (a reload read its file
    again): one reference swapped, so each request is checked against one token, old or new."""

    def __init__(self, value: str) -> None:
        if not value:
            raise ValueError("the admin API needs a non-empty token")
        self.expected = value.encode()

    def set(self, value: str) -> bool:
        """Take ``value``; whether it differs from the token held until now."""
        if not value:
            raise ValueError("the admin API needs a non-empty token")
        new = value.encode()
        changed = not hmac.compare_digest(new, self.expected)
        self.expected = new
        return changed


def token_of(token: str | Token) -> Token:
    return token if isinstance(token, Token) else Token(token)


def verdict(
    path: str, authorization: str, expected: bytes, opened: frozenset[str]
) -> tuple[int, str] | None:
    """What the token gate says of a request for ``path``: OPEN (open to all), None (the
    token is right, or the router answers 404/405), or the refusal (401, 403)."""
    opener = OPEN_PATHS.get(path, "token")
    if opener == "always" or (opener != "token" and opener in opened):
        return OPEN
    if path not in OPEN_PATHS and not path.startswith("/api/"):
        return None  # a 404 (or 405) from the router
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return 401, "this endpoint needs 'Authorization: Bearer <token>'"
    if not hmac.compare_digest(credentials.strip().encode(errors="replace"), expected):
        return 403, "the bearer token is not valid"
    return None


def early_gate(
    token: str | Token, public: Iterable[str] = PUBLIC_CHOICES
) -> Callable[[str, str, dict[str, str]], tuple[int, str] | None]:
    """The gate the HTTP server applies before it reads a body: a request the token gate
    refuses is answered at once (its body never read, its connection closed), and the
    routes open to all take no body at all."""
    held, opened = token_of(token), frozenset(public)

    def gate(method: str, path: str, headers: dict[str, str]) -> tuple[int, str] | None:
        said = verdict(path, headers.get("authorization", ""), held.expected, opened)
        if said is OPEN:
            declared = headers.get("content-length", "0") not in ("", "0")
            if declared or "transfer-encoding" in headers:
                return 400, "this endpoint takes no request body"
            return None
        return said

    return gate


def opened_by(public: Iterable[str]) -> frozenset[str]:
    """``api.public`` checked: what it opens (a ValueError names what it cannot)."""
    opened = frozenset(public)
    unknown = sorted(opened - set(PUBLIC_CHOICES))
    if unknown:
        raise ValueError(f"api.public: unknown {', '.join(unknown)}")
    return opened


def json_answer(status: int, body: object, mimetype: str = "application/json") -> Answer:
    data = (json.dumps(body, separators=(",", ":")) + "\n").encode()
    headers = [("Content-Type", mimetype), ("Content-Length", str(len(data)))]
    if status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="director"'))
    return status, headers, [data]


def problem_answer(status: int, detail: str) -> Answer:
    return json_answer(status, problem_document(status, detail), "application/problem+json")


class MetricsText(Protocol):
    """What ``/metrics`` serves (``director.adapters.metrics.ipvs.Scrape``)."""

    content_type: str

    def gzipped(self) -> bytes: ...

    def plain(self) -> Iterator[bytes]: ...


class Front:
    """The admin API's WSGI application: ``/healthz``, ``/readyz`` and ``/metrics`` answered
    here, every other request by the admin app ``made`` (``slots``: the open routes' shared
    workers, the same the admin app's own open routes take)."""

    def __init__(
        self,
        loop: LoopPort,
        metrics: MetricsText | None,
        token: str | Token,
        public: Iterable[str],
        *,
        made: Wsgi,
        slots: threading.BoundedSemaphore | None = None,
    ) -> None:
        self.loop, self.metrics = loop, metrics
        self.token, self.opened = token_of(token), opened_by(public)
        self.slots = slots or threading.BoundedSemaphore(OPEN_SLOTS)
        self.admin = made
        self.routes: dict[str, Callable[[dict[str, Any]], Answer]] = {
            "/healthz": self.healthz,
            "/readyz": self.readyz,
            "/metrics": self.scrape,
        }

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        route = self.routes.get(path)
        if route is not None:
            status, headers, body = self.answer(route, path, environ)
        elif path in OPEN_PATHS or path.startswith("/api/"):
            return self.admin(environ, start_response)
        else:  # the admin app has no such route: not made for a scanner's guess
            status, headers, body = problem_answer(404, NOT_FOUND)
        start_response(f"{status} {http.HTTPStatus(status).phrase}", headers)
        return body

    def answer(
        self, route: Callable[[dict[str, Any]], Answer], path: str, environ: dict[str, Any]
    ) -> Answer:
        """The gate first (a refusal before a wrong method, as the admin app does), then
        the method, then the route in one of the open routes' workers."""
        method = environ.get("REQUEST_METHOD", "GET")
        said = verdict(
            path, environ.get("HTTP_AUTHORIZATION", ""), self.token.expected, self.opened
        )
        if said is not None and said is not OPEN:
            return problem_answer(*said)
        if method == "OPTIONS":
            return 200, [("Allow", ALLOWED), ("Content-Length", "0")], []
        if method not in ("GET", "HEAD"):
            status, headers, body = problem_answer(
                405, "The method is not allowed for the requested URL."
            )
            return status, [*headers, ("Allow", ALLOWED)], body
        if said is not OPEN:
            return route(environ)
        if not self.slots.acquire(blocking=False):  # the rest stay for the authenticated API
            status, headers, body = problem_answer(503, "busy: try again in a second")
            return status, [*headers, ("Retry-After", "1")], body
        try:
            return route(environ)
        finally:
            self.slots.release()

    # -- the routes -----------------------------------------------------------------------

    def _stalled(self, limit: float) -> Answer | None:
        """A 503 when the control loop has not stepped for ``limit`` seconds."""
        stalled = time.monotonic() - self.loop.last_step
        if stalled > limit:
            return problem_answer(503, f"the control loop has not run for {stalled:.0f}s")
        return None

    def healthz(self, _environ: dict[str, Any]) -> Answer:
        return self._stalled(60) or json_answer(200, {"status": "ok"})

    def readyz(self, _environ: dict[str, Any]) -> Answer:
        view = self.loop.view
        if not view.status.synced:
            return problem_answer(503, "the first sync is not applied yet")
        if view.lease_refused:  # no box of the pair can write Service status
            return problem_answer(503, view.lease_refused)
        out = view.status.owned.out_of_sync()
        if out:  # what the director writes does not read back as it should (being repaired)
            names = "; ".join(f"{o.resource}: {o.last_error}" for o in out)
            return problem_answer(503, f"owned state out of sync: {names}"[:1000])
        return self._stalled(10) or json_answer(200, {"status": "ready"})

    def scrape(self, environ: dict[str, Any]) -> Answer:
        metrics = self.metrics
        if metrics is None:
            return 200, [("Content-Type", TEXT_FORMAT), ("Content-Length", "0")], []
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):  # Prometheus asks for it
            body = metrics.gzipped()
            headers = [
                ("Content-Type", metrics.content_type),
                ("Content-Length", str(len(body))),
                ("Content-Encoding", "gzip"),
                ("Vary", "Accept-Encoding"),
            ]
            return 200, headers, [body]
        plain: Iterator[bytes] = metrics.plain()  # built now, in this worker; sent in pieces
        return 200, [("Content-Type", metrics.content_type)], plain
