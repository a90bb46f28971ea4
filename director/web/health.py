"""Liveness, readiness, metrics and the status page (what ``api.public`` may open)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from flask import Blueprint, Response, jsonify, request

from director.web import views
from director.web.context import api
from director.web.errors import problem
from director.web.statuspage import PAGE

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format
routes = Blueprint("health", __name__)
# The routes ``api.public`` may open to all, each with the name that opens it (health,
# metrics, status_page); everything else needs the token. Filled by ``public`` below.
OPEN_PATHS: dict[str, str] = {}
F = TypeVar("F", bound=Callable[..., Response])


def public(rule: str, opener: str) -> Callable[[F], F]:
    """A GET route that ``api.public: [opener]`` opens to clients without the token."""

    def register(view: F) -> F:
        OPEN_PATHS[rule] = opener
        routes.add_url_rule(rule, view_func=view, methods=["GET"])
        return view

    return register


def _stalled(limit: float) -> Response | None:
    """A 503 when the control loop has not stepped for ``limit`` seconds."""
    stalled = time.monotonic() - api().loop.last_step
    if stalled > limit:
        return problem(503, f"the control loop has not run for {stalled:.0f}s")
    return None


@public("/healthz", "health")
def healthz() -> Response:
    return _stalled(60) or jsonify({"status": "ok"})


@public("/readyz", "health")
def readyz() -> Response:
    view = api().loop.view
    if not view.status.synced:
        return problem(503, "the first sync is not applied yet")
    if view.lease_refused:  # no box of the pair can write Service status
        return problem(503, view.lease_refused)
    out = api().loop.view.status.owned.out_of_sync()
    if out:  # what the director writes does not read back as it should (being repaired)
        names = "; ".join(f"{o.resource}: {o.last_error}" for o in out)
        return problem(503, f"owned state out of sync: {names}"[:1000])
    return _stalled(10) or jsonify({"status": "ready"})


@public("/metrics", "metrics")
def scrape() -> Response:
    metrics = api().metrics
    if metrics is None:
        return Response(b"", mimetype=TEXT_FORMAT)
    if "gzip" in request.headers.get("Accept-Encoding", ""):  # Prometheus asks for it
        response = Response(metrics.gzipped(), mimetype=metrics.content_type)
        response.headers["Content-Encoding"] = "gzip"
        response.vary.add("Accept-Encoding")
        return response
    return Response(metrics.plain(), mimetype=metrics.content_type)


@public("/", "always")  # the page holds no data: its data (/ui/status) may need the token
def page() -> Response:
    return Response(PAGE, mimetype="text/html")


@public("/ui/status", "status_page")
def page_data() -> Response:
    ctx = api()
    return jsonify({"status": views.status(ctx), "services": views.services(ctx)})
