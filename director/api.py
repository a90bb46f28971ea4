"""The admin API (Flask app factory), the status page, health and metrics endpoints.

A thin router: it validates input, reads the controller's state under its lock and the
kernel through the thread-safe adapter, and records intent (an annotation on the Service, or
an intent handed to the control loop). It never programs IPVS itself.

Every ``/api/v1`` request needs ``Authorization: Bearer <token>`` (401 without, 403 with a
wrong one; compared in constant time, never logged). Errors are ``application/problem+json``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from flask import Flask, Response, jsonify, request
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from werkzeug.exceptions import HTTPException

from director.controller import STATIC, Controller
from director.dataplane import Ipvs
from director.intents import Drain
from director.logs import event
from director.model import (
    KernelTable,
    ServiceKey,
    Stats,
    VirtualService,
    canonical_address,
    encode_flags,
    scheduler_flag_names,
)
from director.openapi import document
from director.plan import build_plan
from director.statuspage import PAGE
from director.translate import A_OVERRIDE, relevant

MAX_BODY = 64 * 1024
log = logging.getLogger("director.api")


class AnnotationWriter(Protocol):
    def patch_annotations(
        self, namespace: str, name: str, values: dict[str, str | None]
    ) -> None: ...


class Problem(Exception):
    def __init__(self, status: int, detail: str, title: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.title = status, detail, title


_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def problem(status: int, detail: str, title: str | None = None) -> Response:
    body = {
        "type": "about:blank",
        "title": title or _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    response = jsonify(body)
    response.status_code = status
    response.mimetype = "application/problem+json"
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="director"'
    return response


def _stats(stats: Stats | None) -> dict[str, int]:
    s = stats or Stats()
    return {
        "connections": s.connections,
        "packets_in": s.packets_in,
        "packets_out": s.packets_out,
        "bytes_in": s.bytes_in,
        "bytes_out": s.bytes_out,
        "cps": s.cps,
        "pps_in": s.pps_in,
        "pps_out": s.pps_out,
        "bps_in": s.bps_in,
        "bps_out": s.bps_out,
    }


def _origin(origin: str) -> dict[str, str]:
    if origin == STATIC or origin.startswith("static/"):
        return {"kind": "static", "name": origin.partition("/")[2]}
    ref, _, port = origin.partition(":")
    namespace, _, name = ref.partition("/")
    return {"kind": "kubernetes", "namespace": namespace, "name": name, "port_name": port}


def drain_id(drain: Drain) -> str:
    return hashlib.sha256(drain.id.encode()).hexdigest()[:12]


def create_app(
    controller: Controller,
    token: str,
    *,
    writer: AnnotationWriter | None = None,
    registry: CollectorRegistry | None = None,
    reader: Ipvs | None = None,
) -> Flask:
    """``reader``: an IPVS adapter of its own for the API's reads (its own socket and lock),
    so that listing 10,000 services never delays the control loop's writes."""
    if not token:
        raise ValueError("the admin API needs a non-empty token")
    app = Flask("director")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.json.sort_keys = False  # type: ignore[attr-defined]
    ipvs = reader or controller.ipvs
    expected = token.encode()
    recent: list[tuple[float, KernelTable]] = []  # one counters read serves 1 s of requests
    recent_lock = threading.Lock()

    def counters() -> KernelTable:
        with recent_lock:
            if recent and time.monotonic() - recent[0][0] < 1.0:
                return recent[0][1]
            table = ipvs.read(stats=True)
            recent[:] = [(time.monotonic(), table)]
            return table

    # -- plumbing --------------------------------------------------------------------
    @app.errorhandler(Problem)
    def _problem(exc: Problem) -> Response:
        return problem(exc.status, exc.detail, exc.title)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        status = exc.code or 500
        detail = exc.description or _TITLES.get(status, "error")
        if status == 413:
            detail = f"the request body is larger than {MAX_BODY} bytes"
        response = problem(status, detail)
        if status == 405 and exc.get_response().headers.get("Allow"):
            response.headers["Allow"] = exc.get_response().headers["Allow"]
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:  # pragma: no cover - a bug, reported as such
        event(log, "api.error", level=logging.ERROR, path=request.path, error=repr(exc)[:300])
        return problem(500, "internal error; see the director's log (event=api.error)")

    @app.before_request
    def _auth() -> Response | None:
        if not request.path.startswith("/api/"):
            return None
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return problem(401, "this endpoint needs 'Authorization: Bearer <token>'")
        if not hmac.compare_digest(header[len("Bearer ") :].strip().encode(), expected):
            return problem(403, "the bearer token is not valid")
        return None

    def body(allowed: set[str], required: set[str]) -> dict[str, Any]:
        kind = (request.mimetype or "").lower()
        if kind != "application/json":
            raise Problem(415, f"send application/json (got {kind or 'no content type'!r})")
        data = request.get_json(silent=True)
        if not isinstance(data, dict):
            raise Problem(400, "the body must be a JSON object")
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise Problem(
                400,
                f"unknown field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})",
            )
        missing = sorted(required - set(data))
        if missing:
            raise Problem(400, f"missing field(s) {', '.join(missing)}")
        return data

    def scheduler_choice(data: dict[str, Any]) -> tuple[str, frozenset[str]]:
        name = data.get("scheduler")
        offered = sorted(ipvs.schedulers())
        if not isinstance(name, str) or name not in offered:
            raise Problem(400, f"unknown scheduler {name!r}; allowed: {', '.join(offered)}")
        flags = data.get("flags", [])
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise Problem(400, "flags must be a list of strings")
        try:
            encode_flags(name, flags, False)
        except ValueError:
            allowed = ", ".join(scheduler_flag_names(name))
            raise Problem(400, f"invalid flags {flags} for {name} (allowed: {allowed})") from None
        return name, frozenset(flags)

    # -- views -----------------------------------------------------------------------
    def views(keys: list[ServiceKey] | None = None) -> list[dict[str, Any]]:
        kernel = counters() if keys is None else _read_some(keys)
        with controller.lock:
            desired = dict(controller.desired)
            if keys is not None:
                desired = {k: desired[k] for k in keys if k in desired}
            owner = dict(controller.owner)
            options = dict(controller.options)
            draining = {k: set(v) for k, v in controller.draining.items()}
            intents = controller.intents
            static_overrides = dict(intents.schedulers)
            drains = tuple(intents.drains.values())
            sick = {
                key: {d for d in dests if controller.unhealthy(key, d)}
                for key, dests in controller.checks.items()
            }
        out = []
        for key in sorted(desired, key=str):
            vs = desired[key]
            ref = owner.get(key, "")
            if ref == STATIC:
                name = vs.origin.partition("/")[2]
                source = "api" if name in static_overrides else "config"
            else:
                opts = options.get(ref)
                source = opts.scheduler_source if opts else "default"
            out.append(
                _view(
                    key,
                    vs,
                    kernel,
                    source=source,
                    draining=draining.get(key, set()),
                    drains=drains,
                    unhealthy=sick.get(key, set()),
                )
            )
        return out

    def _read_some(keys: list[ServiceKey]) -> KernelTable:
        table = KernelTable()
        for key in keys:
            vs = ipvs.read_service(key)
            if vs is not None:
                table.services[key] = vs
                for dkey, state in ipvs.read_dest_states(key).items():
                    table.dest_state[(key, dkey)] = state
        return table

    def _view(
        key: ServiceKey,
        vs: VirtualService,
        kernel: KernelTable,
        *,
        source: str,
        draining: set[tuple[str, int]],
        drains: tuple[Drain, ...],
        unhealthy: set[tuple[str, int]],
    ) -> dict[str, Any]:
        programmed = kernel.services.get(key)
        dests = []
        for dkey, rs in vs.real_servers.items():
            state = kernel.dest_state.get((key, dkey))
            admin = any(d.matches(key, rs) for d in drains)
            sick = dkey in unhealthy
            dests.append(
                {
                    "address": rs.address,
                    "port": rs.port,
                    "weight": rs.weight,
                    "forwarding": rs.forwarding.label,
                    "state": "unhealthy"
                    if sick
                    else ("draining" if (dkey in draining or admin) else "active"),
                    "active_connections": state.active_connections if state else 0,
                    "inactive_connections": state.inactive_connections if state else 0,
                    "counters": _stats(state.stats if state else None),
                }
            )
        return {
            "service": str(key),
            "family": key.family.label,
            "protocol": key.protocol.label if key.protocol else None,
            "address": key.address or None,
            "port": key.port or None,
            "fwmark": key.fwmark or None,
            "origin": _origin(vs.origin),
            "scheduler": vs.config.scheduler,
            "scheduler_source": source,
            "flags": sorted(vs.config.flags),
            "persistence": vs.config.persistence,
            "programmed": programmed is not None and programmed == vs,
            "counters": _stats(kernel.service_stats.get(key)),
            "real_servers": dests,
        }

    def kube_keys(namespace: str, name: str) -> list[ServiceKey]:
        with controller.lock:
            keys = sorted(controller.produced.get(f"{namespace}/{name}", ()), key=str)
            svc = controller.snapshot.services.get(f"{namespace}/{name}")
            managed = svc is not None and relevant(svc, controller.policy)
        if not managed:
            raise Problem(404, f"no Service {namespace}/{name} served by this director")
        return keys

    def static_key(name: str) -> ServiceKey:
        for key, vs in controller.settings.services.items():
            if vs.origin == f"static/{name}":
                return key
        raise Problem(404, f"no static service named {name!r} in the configuration")

    # -- health, metrics, page -------------------------------------------------------
    @app.get("/healthz")
    def healthz() -> Response:
        stalled = time.monotonic() - controller.last_step
        if stalled > 60:
            return problem(503, f"the control loop has not run for {stalled:.0f}s")
        return jsonify({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        if not controller.health.synced:
            return problem(503, "the first sync is not applied yet")
        return jsonify({"status": "ready"})

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(
            generate_latest(registry) if registry else b"", mimetype=CONTENT_TYPE_LATEST
        )

    @app.get("/")
    def page() -> Response:
        return Response(PAGE, mimetype="text/html")

    @app.get("/ui/status")
    def page_data() -> Response:
        return jsonify({"status": status_body(), "services": views()})

    # -- /api/v1 ---------------------------------------------------------------------
    @app.get("/api/v1/openapi.json")
    def openapi() -> Response:
        return jsonify(document(ipvs.schedulers()))

    @app.get("/api/v1/services")
    def list_services() -> Response:
        return jsonify({"items": views()})

    @app.get("/api/v1/services/<namespace>/<name>")
    def get_service(namespace: str, name: str) -> Response:
        keys = kube_keys(namespace, name)
        return jsonify({"service": f"{namespace}/{name}", "virtual_services": views(keys)})

    @app.put("/api/v1/services/<namespace>/<name>/scheduler")
    def set_kube_scheduler(namespace: str, name: str) -> Response:
        data = body({"scheduler", "flags"}, {"scheduler"})
        choice = scheduler_choice(data)
        kube_keys(namespace, name)
        store = _writer()
        text = choice[0] + (":" + ",".join(sorted(choice[1])) if choice[1] else "")
        _write(lambda: store.patch_annotations(namespace, name, {A_OVERRIDE: text}))
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

    @app.delete("/api/v1/services/<namespace>/<name>/scheduler")
    def unset_kube_scheduler(namespace: str, name: str) -> Response:
        kube_keys(namespace, name)
        store = _writer()
        _write(lambda: store.patch_annotations(namespace, name, {A_OVERRIDE: None}))
        event(log, "api.scheduler_unset", service=f"{namespace}/{name}")
        return jsonify({"service": f"{namespace}/{name}", "source": "annotation or default"})

    def _writer() -> AnnotationWriter:
        if controller.dry_run:
            raise Problem(409, "this director runs in shadow mode (--dry-run) and writes nothing")
        if writer is None:
            raise Problem(409, "this director has no Kubernetes connection to store the choice")
        return writer

    def _write(call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:  # the API server's answer, passed on
            raise Problem(503, f"the Kubernetes API did not accept the change: {exc}") from None

    @app.get("/api/v1/static/<name>")
    def get_static(name: str) -> Response:
        key = static_key(name)
        return jsonify(views([key])[0])

    @app.put("/api/v1/static/<name>/scheduler")
    def set_static_scheduler(name: str) -> Response:
        data = body({"scheduler", "flags"}, {"scheduler"})
        choice = scheduler_choice(data)
        static_key(name)
        controller.submit("api", "STATIC_SCHEDULER", (name, choice))
        return jsonify(
            {
                "service": f"static/{name}",
                "scheduler": choice[0],
                "flags": sorted(choice[1]),
                "source": "api",
                "stored_in": "this director's intents file",
            }
        )

    @app.delete("/api/v1/static/<name>/scheduler")
    def unset_static_scheduler(name: str) -> Response:
        static_key(name)
        controller.submit("api", "STATIC_SCHEDULER", (name, None))
        return jsonify({"service": f"static/{name}", "source": "config"})

    @app.get("/api/v1/drains")
    def list_drains() -> Response:
        return jsonify({"items": drain_views()})

    def drain_views() -> list[dict[str, Any]]:
        with controller.lock:
            drains = list(controller.intents.drains.values())
            where = [
                (drain, [(k, rs) for k, vs in controller.desired.items()
                         for rs in vs.real_servers.values() if drain.matches(k, rs)])
                for drain in drains
            ]  # fmt: skip
        out = []
        for drain, places in where:
            rows = []
            for key, rs in places:
                state = ipvs.read_dest_states(key).get(rs.key)
                rows.append(
                    {
                        "service": str(key),
                        "weight": rs.weight,
                        "active_connections": state.active_connections if state else 0,
                        "inactive_connections": state.inactive_connections if state else 0,
                    }
                )
            out.append(
                {
                    "id": drain_id(drain),
                    "address": drain.address,
                    "port": drain.port,
                    "service": drain.service,
                    "real_servers": rows,
                    "done": all(r["active_connections"] == 0 for r in rows),
                }
            )
        return out

    @app.post("/api/v1/drains")
    def add_drain() -> Response:
        data = body({"address", "port", "service"}, {"address"})
        address = data["address"]
        if not isinstance(address, str):
            raise Problem(400, "address must be a string")
        try:
            address = canonical_address(address)
        except ValueError as exc:
            raise Problem(400, str(exc)) from None
        port = data.get("port")
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
        ):
            raise Problem(400, "port must be an integer between 1 and 65535")
        service = data.get("service")
        if service is not None:
            if not isinstance(service, str):
                raise Problem(400, "service must be a string like 'tcp 198.51.100.1:80'")
            with controller.lock:
                known = {str(k) for k in controller.desired}
            if service not in known:
                raise Problem(404, f"no virtual service {service!r}")
        drain = Drain(address, port, service)
        with controller.lock:
            exists = drain.id in controller.intents.drains
        if exists:
            raise Problem(409, f"{drain.id} is already drained (id {drain_id(drain)})")
        controller.submit("api", "DRAIN", drain)
        response = jsonify(
            {
                "id": drain_id(drain),
                "address": drain.address,
                "port": drain.port,
                "service": drain.service,
                "id_text": drain.id,
            }
        )
        response.status_code = 201
        return response

    @app.delete("/api/v1/drains/<ident>")
    def remove_drain(ident: str) -> Response:
        with controller.lock:
            found = next(
                (d for d in controller.intents.drains.values() if drain_id(d) == ident), None
            )
        if found is None:
            raise Problem(404, f"no drain with id {ident!r}")
        controller.submit("api", "UNDRAIN", found.id)
        return jsonify({"id": ident, "undrained": True})

    def status_body() -> dict[str, Any]:
        with controller.lock:
            h = controller.health
            counts = {
                "virtual_services": len(controller.desired),
                "real_servers": sum(len(v.real_servers) for v in controller.desired.values()),
                "kubernetes_services": len(controller.produced),
                "drains": len(controller.intents.drains),
            }
            return {
                "role": controller.vrrp_state or "standalone",
                "ready": h.synced,
                "dry_run": controller.dry_run,
                "kubernetes": {
                    "configured": controller.settings.kubernetes is not None,
                    "connected": h.kubernetes_connected,
                    "disconnected_since": _iso(h.disconnected_since),
                },
                "leader": controller.leader,
                "last_sync": _iso(h.last_sync),
                "last_sync_seconds": round(h.last_sync_seconds, 4),
                "last_error": h.last_error,
                "failed_operations": h.failed_ops,
                "counts": counts,
            }

    @app.get("/api/v1/status")
    def status() -> Response:
        return jsonify(status_body())

    @app.get("/api/v1/plan")
    def plan() -> Response:
        kernel = ipvs.read().services
        with controller.lock:
            desired = dict(controller.desired)
        result = build_plan(desired, kernel, controller.settings.ownership)
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

    return app


def _iso(stamp: float | None) -> str | None:
    if stamp is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))
