"""Virtual services, and the scheduler of a Kubernetes Service (an annotation on it) or of
a static service (an intent the loop stores)."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify

from director.core.intents import SetScheduler
from director.core.translate import A_OVERRIDE
from director.logs import event
from director.web import views
from director.web.bodies import body, scheduler_choice
from director.web.context import api

log = logging.getLogger("director.api")
routes = Blueprint("services", __name__)


@routes.get("/api/v1/services")
def list_services() -> Response:
    return jsonify({"items": views.services(api())})


@routes.get("/api/v1/services/<namespace>/<name>")
def get_service(namespace: str, name: str) -> Response:
    ctx = api()
    keys, _protocols = ctx.kube_service(namespace, name)
    listing = views.services(ctx, keys)
    return jsonify({"service": f"{namespace}/{name}", "virtual_services": listing})


@routes.put("/api/v1/services/<namespace>/<name>/scheduler")
def set_kube_scheduler(namespace: str, name: str) -> Response:
    ctx = api()
    data = body({"scheduler", "flags"}, {"scheduler"})
    _keys, protocols = ctx.kube_service(namespace, name)
    choice = scheduler_choice(data, protocols, ctx.ipvs.schedulers())
    text = choice[0] + (":" + ",".join(sorted(choice[1])) if choice[1] else "")
    ctx.annotate(namespace, name, {A_OVERRIDE: text})
    event(log, "api.scheduler_set", service=f"{namespace}/{name}", scheduler=text)
    return jsonify(
        {
            "service": f"{namespace}/{name}",
            "scheduler": choice[0],
            "flags": sorted(choice[1]),
            "source": "api",
            "stored_in": f"annotation {A_OVERRIDE} on Service {namespace}/{name}",
        }
    )


@routes.delete("/api/v1/services/<namespace>/<name>/scheduler")
def unset_kube_scheduler(namespace: str, name: str) -> Response:
    ctx = api()
    ctx.kube_service(namespace, name)
    ctx.annotate(namespace, name, {A_OVERRIDE: None})
    event(log, "api.scheduler_unset", service=f"{namespace}/{name}")
    return jsonify({"service": f"{namespace}/{name}", "source": "annotation or default"})


@routes.get("/api/v1/static/<name>")
def get_static(name: str) -> Response:
    ctx = api()
    return jsonify(views.services(ctx, [ctx.static_key(name)])[0])


@routes.put("/api/v1/static/<name>/scheduler")
def set_static_scheduler(name: str) -> Response:
    ctx = api()
    data = body({"scheduler", "flags"}, {"scheduler"})
    choice = scheduler_choice(data, frozenset({ctx.static_key(name).protocol}),
                              ctx.ipvs.schedulers())  # fmt: skip
    ctx.intent(SetScheduler(name, choice))
    return jsonify(
        {
            "service": f"static/{name}",
            "scheduler": choice[0],
            "flags": sorted(choice[1]),
            "source": "api",
            "stored_in": "this director's intents file",
        }
    )


@routes.delete("/api/v1/static/<name>/scheduler")
def unset_static_scheduler(name: str) -> Response:
    ctx = api()
    ctx.static_key(name)
    ctx.intent(SetScheduler(name, None))
    return jsonify({"service": f"static/{name}", "source": "config"})
