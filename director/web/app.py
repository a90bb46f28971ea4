"""The admin API (Flask app factory), the status page, health and metrics endpoints.

A thin router: it validates input, reads the loop's published view (``LoopView``, never
the loop's lock) and the kernel through the thread-safe adapter, and records intent (an
annotation on the Service, or an intent handed to the control loop). It never programs IPVS
itself.

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

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException

from director.core.intents import AddDrain, Drain, Intent, RemoveDrain, SetScheduler
from director.core.model import (
    KernelTable,
    ServiceKey,
    Stats,
    UdpOnly,
    VirtualService,
    canonical_address,
    check_flags,
    shown,
)
from director.core.model import Protocol as IpProtocol
from director.core.plan import build_plan
from director.core.translate import A_OVERRIDE, PROTOCOLS, relevant
from director.dataplane.interface import Ipvs
from director.engine.ports import LoopPort
from director.engine.view import STATIC
from director.logs import event
from director.web.openapi import document
from director.web.statuspage import PAGE

MAX_BODY = 64 * 1024
MAX_DEPTH = 16  # JSON nesting: no request of this API needs more than 3
OPEN_SLOTS = 4  # workers the endpoints without a token may hold at once
PUBLIC_CHOICES = ("health", "metrics", "status_page")  # what api.public may open
INTENT_TIMEOUT = 10.0  # seconds an API write waits for the loop
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format
log = logging.getLogger("director.api")


class MetricsText(Protocol):
    """What ``/metrics`` serves (``director.adapters.metrics.Scrape``)."""

    content_type: str

    def text(self, gzipped: bool = False) -> bytes: ...


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
    return drain.ident


def _depth(value: Any, limit: int) -> bool:
    """Is ``value`` nested at most ``limit`` deep (iteratively: no recursion to exhaust)?"""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def _clean_text(value: Any) -> bool:
    """No control characters or lone surrogates in any string of ``value`` (keys too)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isprintable() and any(ord(c) < 32 or ord(c) == 127 for c in item):
                return False
            try:
                item.encode()
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def parse_body(raw: bytes) -> Any:
    """The request's JSON, or Problem(400) saying what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Problem(400, "the body is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise Problem(400, f"the body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise Problem(400, f"the body is not valid JSON ({str(exc).splitlines()[0]})") from None
    if not _depth(data, MAX_DEPTH):
        raise Problem(400, f"the body is nested deeper than {MAX_DEPTH} levels")
    if not _clean_text(data):
        raise Problem(400, "strings must be text without control characters or lone surrogates")
    return data


def create_app(
    loop: LoopPort,
    token: str,
    *,
    writer: AnnotationWriter | None = None,
    metrics: MetricsText | None = None,
    reader: Ipvs | None = None,
    public: Iterable[str] = PUBLIC_CHOICES,
) -> Flask:
    """``reader``: an IPVS adapter of its own for the API's reads (its own socket and lock),
    so that listing 10,000 services never delays the control loop's writes. ``metrics``: what
    /metrics serves (none: an empty page). ``public``: which of health, metrics and
    status_page answer without the token."""
    if not token:
        raise ValueError("the admin API needs a non-empty token")
    app = Flask("director")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.json.sort_keys = False  # type: ignore[attr-defined]
    ipvs = reader or loop.ipvs
    expected = token.encode()
    recent: list[tuple[float, KernelTable]] = []  # one counters read serves 1 s of requests
    recent_lock = threading.Lock()
    open_slots = threading.BoundedSemaphore(OPEN_SLOTS)
    opened = frozenset(public)
    unknown = sorted(opened - set(PUBLIC_CHOICES))
    if unknown:
        raise ValueError(f"api.public: unknown {', '.join(unknown)}")
    # path -> what opens it without the token (None: always open)
    open_paths: dict[str, str | None] = {
        "/healthz": "health", "/readyz": "health", "/metrics": "metrics",
        "/": "status_page", "/ui/status": "status_page",
    }  # fmt: skip

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
        opener = open_paths.get(request.path, "token")
        if opener != "token" and opener in opened:
            # Open to all: a few workers at most, the rest stay for the authenticated API.
            if not open_slots.acquire(blocking=False):
                response = problem(503, "busy: try again in a second")
                response.headers["Retry-After"] = "1"
                return response
            g.open_slot = True
            return None
        if request.path not in open_paths and not request.path.startswith("/api/"):
            return None  # a 404 (or 405) from the router
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            return problem(401, "this endpoint needs 'Authorization: Bearer <token>'")
        if not hmac.compare_digest(credentials.strip().encode(errors="replace"), expected):
            return problem(403, "the bearer token is not valid")
        return None

    @app.teardown_request
    def _release(_exc: BaseException | None) -> None:
        if g.pop("open_slot", False):
            open_slots.release()

    def body(allowed: set[str], required: set[str]) -> dict[str, Any]:
        kind = (request.mimetype or "").lower()
        if kind != "application/json":
            raise Problem(415, f"send application/json (got {shown_type(kind)})")
        length = request.content_length
        if length is not None and length > MAX_BODY:
            raise Problem(413, f"the request body is larger than {MAX_BODY} bytes")
        data = parse_body(read_body())
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

    def read_body() -> bytes:
        """The whole body, never more than MAX_BODY (a chunked body has no length)."""
        pieces: list[bytes] = []
        total = 0
        try:
            while total <= MAX_BODY:
                piece = request.stream.read(MAX_BODY + 1 - total)
                if not piece:
                    break
                pieces.append(piece)
                total += len(piece)
        except HTTPException as exc:  # werkzeug's own limit (MAX_CONTENT_LENGTH)
            if exc.code == 413:
                total = MAX_BODY + 1
            else:
                raise Problem(exc.code or 400, exc.description or "unreadable body") from None
        if total > MAX_BODY:
            raise Problem(413, f"the request body is larger than {MAX_BODY} bytes")
        return b"".join(pieces)

    def scheduler_choice(
        data: dict[str, Any], protocols: frozenset[IpProtocol | None]
    ) -> tuple[str, frozenset[str]]:
        """The body's scheduler and canonical flags, for services of ``protocols``."""
        name = data.get("scheduler")
        offered = sorted(ipvs.schedulers())
        if not isinstance(name, str) or name not in offered:
            raise Problem(400, f"unknown scheduler {shown(name)}; allowed: {', '.join(offered)}")
        flags = data.get("flags", [])
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise Problem(400, "flags must be a list of strings")
        udp_only = bool(protocols) and protocols <= {IpProtocol.UDP}
        try:
            return name, check_flags(name, flags, IpProtocol.UDP if udp_only else IpProtocol.TCP)
        except UdpOnly as exc:  # valid flags, but not for what this service is
            raise Problem(409, f"{exc}; this service is not UDP-only") from None
        except ValueError as exc:
            raise Problem(400, f"invalid flags: {exc}") from None

    def intent(change: Intent) -> None:
        """Hand a change to the loop; return once it is stored and applied."""
        reply = loop.submit_intent(change, INTENT_TIMEOUT)
        if reply.ok:
            return
        if reply.status:
            raise Problem(reply.status, reply.detail)
        raise Problem(
            503,
            f"the control loop did not take the change within {INTENT_TIMEOUT:g} s; it may "
            "still apply it (see GET /api/v1/status)",
        )

    # -- views -----------------------------------------------------------------------
    def views(keys: list[ServiceKey] | None = None) -> list[dict[str, Any]]:
        kernel = counters() if keys is None else _read_some(keys)
        view = loop.view
        desired = view.desired
        if keys is not None:
            desired = {k: desired[k] for k in keys if k in desired}
        owner, options, draining, sick = view.owner, view.options, view.draining, view.unhealthy
        static_overrides = view.intents.schedulers
        drains = tuple(view.intents.drains.values())
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
                    draining=draining.get(key, frozenset()),
                    drains=drains,
                    unhealthy=sick.get(key, frozenset()),
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
        draining: frozenset[tuple[str, int]],
        drains: tuple[Drain, ...],
        unhealthy: frozenset[tuple[str, int]],
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

    def kube_service(namespace: str, name: str) -> tuple[list[ServiceKey], frozenset[Any]]:
        """The Service's virtual services and its ports' protocols; 404 if not served."""
        view = loop.view
        keys = sorted(view.produced.get(f"{namespace}/{name}", ()), key=str)
        svc = view.services.get(f"{namespace}/{name}")
        managed = svc is not None and relevant(svc, loop.policy)
        if svc is None or not managed:
            raise Problem(404, f"no Service {shown(namespace)}/{shown(name)} served by this "
                          "director")  # fmt: skip
        return keys, frozenset(PROTOCOLS.get(p.protocol) for p in svc.ports)

    def kube_keys(namespace: str, name: str) -> list[ServiceKey]:
        return kube_service(namespace, name)[0]

    def static_key(name: str) -> ServiceKey:
        for key, vs in loop.settings.services.items():
            if vs.origin == f"static/{name}":
                return key
        raise Problem(404, f"no static service named {shown(name)} in the configuration")

    # -- health, metrics, page -------------------------------------------------------
    @app.get("/healthz")
    def healthz() -> Response:
        stalled = time.monotonic() - loop.last_step
        if stalled > 60:
            return problem(503, f"the control loop has not run for {stalled:.0f}s")
        return jsonify({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        if not loop.view.status.synced:
            return problem(503, "the first sync is not applied yet")
        stalled = time.monotonic() - loop.last_step
        if stalled > 10:
            return problem(503, f"the control loop has not run for {stalled:.0f}s")
        return jsonify({"status": "ready"})

    @app.get("/metrics")
    def scrape() -> Response:
        if metrics is None:
            return Response(b"", mimetype=TEXT_FORMAT)
        if "gzip" in request.headers.get("Accept-Encoding", ""):  # Prometheus asks for it
            response = Response(metrics.text(gzipped=True), mimetype=metrics.content_type)
            response.headers["Content-Encoding"] = "gzip"
            response.vary.add("Accept-Encoding")
            return response
        return Response(metrics.text(), mimetype=metrics.content_type)

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
        _keys, protocols = kube_service(namespace, name)
        choice = scheduler_choice(data, protocols)
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
        if loop.dry_run:
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
        choice = scheduler_choice(data, frozenset({static_key(name).protocol}))
        intent(SetScheduler(name, choice))
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
        intent(SetScheduler(name, None))
        return jsonify({"service": f"static/{name}", "source": "config"})

    @app.get("/api/v1/drains")
    def list_drains() -> Response:
        return jsonify({"items": drain_views()})

    def drain_views() -> list[dict[str, Any]]:
        """Each drain with where it applies and the connections left. One pass over the
        table (real servers indexed by address) and one counters read, outside the lock."""
        view = loop.view
        drains = list(view.intents.drains.values())
        desired = view.desired
        by_address: dict[str, list[tuple[ServiceKey, Any]]] = {}
        wanted = {d.address for d in drains}
        for key, vs in desired.items():
            for rs in vs.real_servers.values():
                if rs.address in wanted:
                    by_address.setdefault(rs.address, []).append((key, rs))
        places = {
            drain.id: [(k, r) for k, r in by_address.get(drain.address, ()) if drain.matches(k, r)]
            for drain in drains
        }
        keys = {key for rows in places.values() for key, _rs in rows}
        # A few services: their connection counts now. Many: one whole read (cached 1 s).
        kernel = _read_some(sorted(keys, key=str)) if len(keys) <= 64 else counters()
        out = []
        for drain in drains:
            rows = []
            for key, rs in places[drain.id]:
                state = kernel.dest_state.get((key, rs.key))
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
                    "id": drain.ident,
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
            if not any(str(k) == service for k in loop.view.desired):
                raise Problem(404, f"no virtual service {shown(service)}")
        drain = Drain(address, port, service)
        intent(AddDrain(drain))  # the loop decides: two identical drains, one 201
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

    @app.delete("/api/v1/drains/<ident>")
    def remove_drain(ident: str) -> Response:
        intent(RemoveDrain(ident))
        return jsonify({"id": ident, "undrained": True})

    def status_body() -> dict[str, Any]:
        view = loop.view
        h = view.status
        counts = {
            "virtual_services": len(view.desired),
            "real_servers": view.real_servers,
            "kubernetes_services": len(view.produced),
            "drains": len(view.intents.drains),
        }
        return {
            "role": view.vrrp_state or "standalone",
            "ready": h.synced,
            "dry_run": loop.dry_run,
            "kubernetes": {
                "configured": loop.settings.kubernetes is not None,
                "connected": h.kubernetes_connected,
                "disconnected_since": _iso(h.disconnected_since),
            },
            "leader": view.leader,
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
        result = build_plan(dict(loop.view.desired), kernel, loop.settings.ownership)
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


def shown_type(kind: str) -> str:
    return shown(kind) if kind else "no content type"


def _iso(stamp: float | None) -> str | None:
    if stamp is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))
