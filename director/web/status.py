"""The director's state, what it would change now, and the API's own description."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from director.core.plan import build_plan
from director.schema import paths, replies
from director.web import views
from director.web.context import api
from director.web.openapi import document
from director.web.registry import Operation, documented

routes = Blueprint("status", __name__)


@documented(
    routes,
    Operation(
        paths.STATUS,
        "get",
        "Role, Kubernetes connection, leader, last sync, last error",
        replies.Status,
    ),
)
def status() -> Response:
    return jsonify(views.status(api()))


@documented(
    routes,
    Operation(
        paths.PLAN,
        "get",
        "What the director would change right now (empty when healthy)",
        replies.Plan,
    ),
)
def plan() -> Response:
    ctx = api()
    kernel = ctx.ipvs.read().services
    result = build_plan(dict(ctx.loop.view.desired), kernel, ctx.loop.settings.ownership)
    return jsonify(
        {
            "ops": [
                {
                    "op": op.kind.value,
                    "service": str(op.key),
                    "detail": op.describe(),
                    "origin": op.origin,
                }
                for op in result.ops
            ],
            "foreign": [str(k) for k in result.foreign],
            "refused": [{"service": str(k), "reason": r} for k, r in result.refused],
        }
    )


@routes.get(paths.OPENAPI)
def openapi() -> Response:
    return jsonify(document(api().ipvs.schedulers()))
