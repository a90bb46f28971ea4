"""The status page and its data (``/`` and ``/ui/status``). ``/healthz``, ``/readyz`` and
``/metrics`` are answered before Flask, by the front (``director.web.front``)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from director.web import views
from director.web.context import api
from director.web.statuspage import PAGE

routes = Blueprint("health", __name__)


@routes.get("/")  # the page holds no data: its data (/ui/status) may need the token
def page() -> Response:
    return Response(PAGE, mimetype="text/html")


@routes.get("/ui/status")
def page_data() -> Response:
    ctx = api()
    return jsonify({"status": views.status(ctx), "services": views.services(ctx)})
