"""The director's state, what it would change now, and the API's own description."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from director.core.plan import build_plan
from director.web import views
from director.web.context import api
from director.web.openapi import document

routes = Blueprint("status", __name__)


@routes.get("/api/v1/status")
def status() -> Response:
    return jsonify(views.status(api()))


@routes.get("/api/v1/plan")
def plan() -> Response:
    ctx = api()
    kernel = ctx.ipvs.read().services
    result = build_plan(dict(ctx.loop.view.desired), kernel, ctx.loop.settings.ownership)
    return jsonify(
        {
            "ops": [
                {"op": op.kind.value, "service": str(op.key), "detail": op.describe(),
                 "origin": op.origin}
                for op in result.ops
            ],
            "foreign": [str(k) for k in result.foreign],
            "refused": [{"service": str(k), "reason": r} for k, r in result.refused],
        }
    )  # fmt: skip


@routes.get("/api/v1/openapi.json")
def openapi() -> Response:
    return jsonify(document(api().ipvs.schedulers()))
