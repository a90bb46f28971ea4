"""BGP: each VIP's announcement and why, each session, and maintenance (every route
withdrawn, IPVS kept, so connections drain through the other directors)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from director.core.intents import SetMaintenance
from director.schema import api as shapes, paths, replies
from director.web import views
from director.web.bodies import body
from director.web.context import api
from director.web.registry import Operation, documented

routes = Blueprint("bgp", __name__)


@documented(
    routes,
    Operation(paths.BGP, "get", "Each VIP's announcement (and why), each BGP session", replies.Bgp),
)
def bgp() -> Response:
    return jsonify(views.bgp(api()))


@documented(
    routes,
    Operation(
        paths.MAINTENANCE,
        "put",
        "Maintenance: withdraw every BGP route, keep IPVS (kept across restarts)",
        replies.Bgp,
        (400, 413, 415, 503),
        body=shapes.MaintenanceRequest,
    ),
)
def enter_maintenance() -> Response:
    ctx = api()
    ctx.intent(SetMaintenance(body(shapes.MaintenanceRequest).reason))
    return jsonify(views.bgp(ctx))


@documented(
    routes,
    Operation(
        paths.MAINTENANCE, "delete", "Back from maintenance: announce again", replies.Bgp, (503,)
    ),
)
def leave_maintenance() -> Response:
    ctx = api()
    ctx.intent(SetMaintenance(None))
    return jsonify(views.bgp(ctx))
