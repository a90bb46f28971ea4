"""Virtual services, and the scheduler of a Kubernetes Service (an annotation on it) or of
a static service (an intent the loop stores)."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify, request

from director.core.annotations import A_OVERRIDE
from director.core.intents import SetScheduler
from director.logs import event
from director.schema import api as shapes, paths, replies
from director.web import views
from director.web.bodies import body, scheduler_choice
from director.web.context import api
from director.web.registry import Operation, documented

log = logging.getLogger("director.api")
routes = Blueprint("services", __name__)


@documented(
    routes,
    Operation(
        paths.SERVICES,
        "get",
        "Every virtual service, with real servers and live counters",
        replies.ServiceList,
    ),
)
def list_services() -> Response:
    return jsonify({"items": views.services(api())})


@documented(
    routes,
    Operation(
        paths.SERVICE,
        "get",
        "The virtual services of one Kubernetes Service",
        replies.KubernetesService,
        (404,),
    ),
)
def get_service(namespace: str, name: str) -> Response:
    ctx = api()
    ref, keys, _protocols = ctx.kube_service(namespace, name, request.args.get("cluster"))
    listing = views.services(ctx, keys)
    return jsonify({"service": ref, "virtual_services": listing})


@documented(
    routes,
    Operation(
        paths.SERVICE_SCHEDULER,
        "put",
        "Set the scheduler, stored on the Service (both directors follow)",
        replies.SchedulerResult,
        (400, 404, 409, 413, 415, 503),
        body=shapes.SchedulerChoice,
    ),
)
def set_kube_scheduler(namespace: str, name: str) -> Response:
    ctx = api()
    asked = body(shapes.SchedulerChoice)
    ref, _keys, protocols = ctx.kube_service(namespace, name, request.args.get("cluster"))
    choice = scheduler_choice(asked, protocols, ctx.ipvs.schedulers())
    text = choice[0] + (":" + ",".join(sorted(choice[1])) if choice[1] else "")
    ctx.annotate(ref, {A_OVERRIDE: text})
    event(log, "api.scheduler_set", service=ref, scheduler=text)
    return jsonify(
        {
            "service": ref,
            "scheduler": choice[0],
            "flags": sorted(choice[1]),
            "source": "api",
            "stored_in": f"annotation {A_OVERRIDE} on Service {ref}",
        }
    )


@documented(
    routes,
    Operation(
        paths.SERVICE_SCHEDULER,
        "delete",
        "Back to the annotation or the default",
        replies.SchedulerResult,
        (404, 409, 503),
    ),
)
def unset_kube_scheduler(namespace: str, name: str) -> Response:
    ctx = api()
    ref, _keys, _protocols = ctx.kube_service(namespace, name, request.args.get("cluster"))
    ctx.annotate(ref, {A_OVERRIDE: None})
    event(log, "api.scheduler_unset", service=ref)
    return jsonify({"service": ref, "source": "annotation or default"})


@documented(
    routes,
    Operation(
        paths.STATIC,
        "get",
        "One static service of the configuration",
        replies.VirtualService,
        (404,),
    ),
)
def get_static(name: str) -> Response:
    ctx = api()
    return jsonify(views.services(ctx, [ctx.static_key(name)])[0])


@documented(
    routes,
    Operation(
        paths.STATIC_SCHEDULER,
        "put",
        "Choose the scheduler of a static service (this director)",
        replies.SchedulerResult,
        (400, 404, 409, 413, 415, 503),
        body=shapes.SchedulerChoice,
    ),
)
def set_static_scheduler(name: str) -> Response:
    ctx = api()
    asked = body(shapes.SchedulerChoice)
    protocols = frozenset({ctx.static_key(name).protocol})
    choice = scheduler_choice(asked, protocols, ctx.ipvs.schedulers())
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


@documented(
    routes,
    Operation(
        paths.STATIC_SCHEDULER,
        "delete",
        "Back to the configuration's scheduler",
        replies.SchedulerResult,
        (404, 503),
    ),
)
def unset_static_scheduler(name: str) -> Response:
    ctx = api()
    ctx.static_key(name)
    ctx.intent(SetScheduler(name, None))
    return jsonify({"service": f"static/{name}", "source": "config"})
