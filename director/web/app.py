"""The admin API: the Flask app factory, its token gate, and its blueprints.

A thin router: it validates input, reads the loop's published view (``LoopView``, never
the loop's lock) and the kernel through the thread-safe adapter, and records intent (an
annotation on the Service, or an intent handed to the control loop). It never programs IPVS
itself. One blueprint per resource (``health``, ``services``, ``drains``, ``status``); errors
are mapped in ``errors``, bodies checked in ``bodies``.

Every ``/api/v1`` request needs ``Authorization: Bearer <token>`` (401 without, 403 with a
wrong one; compared in constant time, never logged), and so do ``/metrics`` and the status
page unless ``api.public`` opens them. Errors are ``application/problem+json``.

Hostile input gets a 4xx with a reason and never reaches the loop: bodies are bounded (also
when chunked), nested at most 16 deep, and their strings hold no control characters. Writes
are answered once the control loop has stored them (and programmed what they change): a 2xx
means done, a 5xx means not done. The open endpoints share a few workers (``OPEN_SLOTS``), so
scrapes and page loads can never take every worker from the authenticated API.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from flask import Flask, Response, g, request

from director.core.announce import PeerState
from director.dataplane.interface import Ipvs
from director.engine.ports import LoopPort
from director.logs import event
from director.web import bgp, drains, errors, health, services, status
from director.web.context import KEY, AnnotationWriter, ApiContext
from director.web.errors import problem
from director.web.front import (
    MAX_BODY,
    OPEN,
    OPEN_SLOTS,
    PUBLIC_CHOICES,
    Front,
    MetricsText,
    Token,
    opened_by,
    token_of,
    verdict,
)

log = logging.getLogger("director.api")


def create_app(
    loop: LoopPort,
    token: str | Token,
    *,
    writer: AnnotationWriter | Mapping[str, AnnotationWriter] | None = None,
    metrics: MetricsText | None = None,
    reader: Ipvs | None = None,
    public: Iterable[str] = PUBLIC_CHOICES,
    peers: Callable[[], Sequence[PeerState]] | None = None,
    slots: threading.BoundedSemaphore | None = None,
    front: bool = True,
) -> Flask:
    """The admin API's Flask app. ``front``: with its front (``director.web.front``)
    answering ``/healthz``, ``/readyz`` and ``/metrics`` (what the daemon serves); without,
    the Flask app alone. ``token``: the bearer token, or the ``Token`` a reload replaces.
    ``reader``: an IPVS adapter of its own for the API's reads (its own socket and lock), so
    that listing 10,000 services never delays the control loop's writes. ``metrics``: what
    /metrics serves (none: an empty page). ``public``: which of health, metrics and
    status_page answer without the token. ``peers``: the BGP sessions (none: no BGP)."""
    held, opened = token_of(token), opened_by(public)
    slots = slots or threading.BoundedSemaphore(OPEN_SLOTS)
    app = Flask("director")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions[KEY] = ApiContext(loop, reader or loop.ipvs, writer, metrics, peers)
    errors.register(app, MAX_BODY)
    _gate(app, held, opened, slots)
    for blueprint in (health.routes, services.routes, drains.routes, bgp.routes, status.routes):
        app.register_blueprint(blueprint)
    if front:
        app.wsgi_app = Front(  # type: ignore[method-assign]
            loop, metrics, held, public, made=app.wsgi_app, slots=slots
        )
    return app


def _gate(
    app: Flask, token: Token, opened: frozenset[str], open_slots: threading.BoundedSemaphore
) -> None:
    """The bearer token, on everything but what ``opened`` opens (a few workers at most)."""

    @app.before_request
    def _auth() -> Response | None:
        said = verdict(
            request.path, request.headers.get("Authorization", ""), token.expected, opened
        )
        if said is OPEN:
            # Open to all: a few workers at most, the rest stay for the authenticated API.
            if not open_slots.acquire(blocking=False):
                response = problem(503, "busy: try again in a second")
                response.headers["Retry-After"] = "1"
                return response
            g.open_slot = True
            return None
        return None if said is None else problem(*said)

    @app.after_request
    def _audit(response: Response) -> Response:
        """Every change asked of the API, by whom (the client's address) and its answer."""
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            event(
                log,
                "api.audit",
                method=request.method,
                path=request.path,
                status=response.status_code,
                client=request.remote_addr or "-",
            )
        return response

    @app.teardown_request
    def _release(_exc: BaseException | None) -> None:
        if g.pop("open_slot", False):
            open_slots.release()
