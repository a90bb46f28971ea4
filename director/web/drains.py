"""Drains: a real server held at weight 0 (everywhere, or in one virtual service) until
undrained; the loop stores them and decides (two identical drains: one 201)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from director.core.intents import AddDrain, Drain, RemoveDrain
from director.core.model import shown
from director.schema import api as shapes, paths, replies
from director.web import views
from director.web.bodies import body
from director.web.context import api
from director.web.errors import Problem
from director.web.registry import Operation, documented

routes = Blueprint("drains", __name__)


@documented(
    routes,
    Operation(
        paths.DRAINS, "get", "Drains and their progress (connections left)", replies.DrainList
    ),
)
def list_drains() -> Response:
    return jsonify({"items": views.drains(api())})


@documented(
    routes,
    Operation(
        paths.DRAINS,
        "post",
        "Drain a real server: weight 0 everywhere (or in one service)",
        replies.Drain,
        (400, 404, 409, 413, 415, 503),
        body=shapes.DrainRequest,
        status="201",
        status_text="Created",
    ),
)
def add_drain() -> Response:
    ctx = api()
    asked = body(shapes.DrainRequest)
    service = asked.service
    if service is not None and not any(str(k) == service for k in ctx.loop.view.desired):
        raise Problem(404, f"no virtual service {shown(service)}")
    drain = Drain(asked.address, asked.port, service)
    ctx.intent(AddDrain(drain))  # the loop decides: two identical drains, one 201
    response = jsonify(
        {
            "id": drain.ident,
            "address": drain.address,
            "port": drain.port,
            "service": drain.service,
            "id_text": drain.id,
        }
    )
    response.status_code = 201
    return response


@documented(
    routes,
    Operation(
        paths.DRAIN,
        "delete",
        "Undrain: weights return to their desired values",
        replies.Undrained,
        (404, 503),
    ),
)
def remove_drain(**path: str) -> Response:
    ident = path["id"]  # the path names it id; a parameter may not shadow the builtin
    api().intent(RemoveDrain(ident))
    return jsonify({"id": ident, "undrained": True})
