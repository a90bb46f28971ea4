"""The Kubernetes adapter: the only module that imports the ``kubernetes`` client.

- ``Watcher``: list + watch of one resource, resuming from the last resourceVersion (bookmarks
  keep it fresh), relisting on 410 Gone, reconnecting with capped exponential backoff (and
  at once when a server that stopped answering answers ``/readyz`` again). It
  hands plain JSON to a callback; it never touches IPVS, so an API outage changes nothing in
  the kernel.
- ``KubeWriter``: Service status, Events and the Lease, each a single small request.

Objects are read with ``_preload_content=False`` and decoded as JSON: the client's model
classes cost ~10x the memory of the JSON, and 10,000 Services must fit in 200 MB.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines

from director import __version__
from director.core.errors import DirectorError
from director.logs import event

log = logging.getLogger("director.kube")

Json = Mapping[str, Any]
Handler = Callable[[str, str, Any], None]  # (resource, event type, payload)


class Gone(DirectorError):
    """The watch's resourceVersion is too old (410): relist."""


class KubeError(DirectorError):
    """The API server answered with an error status (``status``: its answer, passed on)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message

    @classmethod
    def from_response(cls, status: int, data: bytes | None) -> KubeError:
        try:
            body = json.loads(data or b"{}")
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        return cls(status, str(body.get("reason") or ""), str(body.get("message") or ""))


@dataclass(frozen=True, slots=True)
class Resource:
    name: str  # services | endpointslices | nodes
    path: str  # collection path for all namespaces


SERVICES = Resource("services", "/api/v1/services")
ENDPOINTSLICES = Resource("endpointslices", "/apis/discovery.k8s.io/v1/endpointslices")
NODES = Resource("nodes", "/api/v1/nodes")
RESOURCES = (SERVICES, ENDPOINTSLICES, NODES)
FIELD_MANAGER = "lvs-director"  # who wrote, in each object's metadata.managedFields


def api_client(kubeconfig: str | None) -> client.ApiClient:
    """An ApiClient from a kubeconfig file, or the in-cluster service account."""
    if kubeconfig:
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
    else:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        configuration = client.Configuration.get_default_copy()
    api = client.ApiClient(configuration)
    api.user_agent = f"{FIELD_MANAGER}/{__version__}"
    return api


def _stamp(path: str | None) -> tuple[int, int] | None:
    """The kubeconfig file's modification time and size (None: no file, or unreadable)."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class KubeApi:
    """Raw JSON requests through the official client (auth, TLS, kubeconfig handling).

    Made with ``reload`` (``KubeApi.connect``), it reads the credentials again when the
    kubeconfig file changes and when the server answers 401 (a bound ServiceAccount token
    expires and is rotated under a running director), then sends the request once more."""

    STAT_EVERY = 1.0  # seconds between looks at the kubeconfig file's modification time

    def __init__(
        self,
        api: client.ApiClient,
        reload: Callable[[], client.ApiClient] | None = None,
        kubeconfig: str | None = None,
    ) -> None:
        self.api = api
        self._reload, self._kubeconfig = reload, kubeconfig
        self._stamp = _stamp(kubeconfig)
        self._looked = time.monotonic()
        self._lock = threading.Lock()
        self.reloads = 0

    @classmethod
    def connect(cls, kubeconfig: str | None) -> KubeApi:
        """A client of the cluster ``kubeconfig`` names (None: the pod's service account)
        that follows its credentials as they change."""
        return cls(api_client(kubeconfig), lambda: api_client(kubeconfig), kubeconfig)

    def reload(self, reason: str) -> bool:
        """Read the credentials again; False when that fails (the old ones stay)."""
        if self._reload is None:
            return False
        with self._lock:
            try:
                fresh = self._reload()
            except Exception as exc:  # a half-written file: keep what works, try again later
                event(
                    log,
                    "kube.credentials_unreadable",
                    level=logging.WARNING,
                    reason=reason,
                    error=str(exc)[:200],
                )
                return False
            fresh.configuration.retries = self.api.configuration.retries
            self.api, self.reloads = fresh, self.reloads + 1
            self._stamp = _stamp(self._kubeconfig)
        event(log, "kube.credentials_reloaded", reason=reason)
        return True

    def _look(self) -> None:
        """Reload when the kubeconfig file changed (looked at once a second at most)."""
        if self._kubeconfig is None or self._reload is None:
            return
        now = time.monotonic()
        if now - self._looked < self.STAT_EVERY:
            return
        self._looked = now
        if _stamp(self._kubeconfig) != self._stamp:
            self.reload("kubeconfig changed")

    def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        stream: bool = False,
        timeout: float | tuple[float, float] | None = 30,
    ) -> Any:
        """One request; the decoded JSON (or, with ``stream``, the open urllib3 response).

        Raises KubeError for an answer other than 2xx."""
        if method in ("POST", "PUT", "PATCH"):  # managedFields name the director as the writer
            query = [*(query or []), ("fieldManager", FIELD_MANAGER)]
        self._look()

        def send() -> Any:
            return self._send(method, path, query, body, content_type=content_type, timeout=timeout)

        response = send()
        if response.status == 401 and self.reload("401 Unauthorized"):
            response = send()
        if not 200 <= response.status < 300:
            raise KubeError.from_response(response.status, response.data)
        if stream:
            return response
        return json.loads(response.data or b"{}")

    def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, Any]] | None,
        body: Any,
        *,
        content_type: str,
        timeout: float | tuple[float, float] | None,
    ) -> Any:
        api = self.api
        headers = {"Accept": "application/json", "Content-Type": content_type}
        method, url, headers, body, _post = api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return api.call_api(
            method, url, header_params=headers, body=body, _request_timeout=timeout
        ).response

    def answers(self, timeout: float = 1.0) -> bool:
        """Does the API server answer at all (``GET /readyz``, the cheapest request it
        serves)? An answer that is not an overload (429, 5xx) counts: the server is back."""
        try:
            response = self._send(
                "GET", "/readyz", None, None, content_type="text/plain", timeout=timeout
            )
        except Exception:  # refused, reset, timed out: not back yet
            return False
        return bool(response.status < 500 and response.status != 429)

    def list(
        self, resource: Resource, parse: Callable[[Json], Any], page: int = 500
    ) -> tuple[list[Any], str]:
        """Every object, parsed page by page (so a 10,000-object list never sits in memory
        as JSON), and the resourceVersion to watch from."""
        out: list[Any] = []
        token = ""
        version = ""
        while True:
            query: list[tuple[str, Any]] = [("limit", page)]
            if token:
                query.append(("continue", token))
            data = self.request("GET", resource.path, query=query, timeout=120)
            meta = data.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            token = str(meta.get("continue") or "")
            items = data.get("items")
            items = items if isinstance(items, list) else []
            del data  # not held while the next page is read and parsed
            # Each object's JSON is let go once parsed: what is kept of it then sits beside
            # the next one's, not among a whole page's freed strings (at 10,000 Services
            # those were ~5 MB of holes that stayed).
            for at, item in enumerate(items):
                items[at] = None
                kept = parse(item)
                if kept is not None:
                    out.append(kept)
            if not token:
                return out, version

    def watch(
        self, resource: Resource, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, Json]]:
        """A watch, started: the request is answered (KubeError, OSError otherwise) before
        this returns; the events then arrive as they are iterated."""
        response = self.request(
            "GET",
            resource.path,
            query=[
                ("watch", "true"),
                ("resourceVersion", resource_version),
                ("allowWatchBookmarks", "true"),
                ("timeoutSeconds", timeout_seconds),
            ],
            stream=True,
            timeout=(10, timeout_seconds + 30),
        )
        return _events(response)


def _events(response: Any) -> Iterator[tuple[str, Json]]:
    try:
        for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
            if not line.strip():
                continue
            item = json.loads(line)
            kind, obj = str(item.get("type")), item.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise Gone(str(obj.get("message")))
                raise RuntimeError(f"watch error: {obj.get('message')}")
            yield kind, obj
    finally:
        response.release_conn()


PROBE_EVERY = 1.0  # seconds between looks at a server that stopped answering (jittered)
BACKOFF_BASE = 0.5  # seconds before the first retry; doubled per failure up to backoff_max


class Watcher:
    """List + watch of one resource on a thread of its own; ``parse`` turns each object's
    JSON into what the handler keeps."""

    def __init__(
        self,
        kube: KubeApi,
        resource: Resource,
        handler: Handler,
        parse: Callable[[Json], Any],
        *,
        watch_seconds: int = 300,
        backoff_max: float = 30.0,
    ) -> None:
        self.kube, self.resource, self.handler = kube, resource, handler
        self._parse = parse
        self.watch_seconds, self.backoff_max = watch_seconds, backoff_max
        self.resource_version: str | None = None
        self.connected = False
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._random = random.Random()
        self._thread = threading.Thread(
            target=self._run, name=f"watch-{resource.name}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def parse(self, obj: Json) -> Any:
        """The object's value, or None (logged) should the parser ever fail on it: one
        object the director cannot read never stops the list or the watch."""
        try:
            return self._parse(obj)
        except Exception as exc:
            meta = obj.get("metadata") if isinstance(obj, Mapping) else None
            name = f"{_field(meta, 'namespace')}/{_field(meta, 'name')}"
            event(
                log,
                "kube.object_refused",
                level=logging.ERROR,
                resource=self.resource.name,
                object=name,
                error=_reason(exc),
                exc_info=exc,
            )
            return None

    def _set_connected(self, up: bool, error: str | None = None) -> None:
        if up != self.connected:
            self.connected = up
            self.handler(self.resource.name, "CONNECTED" if up else "DISCONNECTED", error)
        if error:
            self.last_error = error

    def _run(self) -> None:
        delay = BACKOFF_BASE
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    items, rv = self.kube.list(self.resource, self.parse)
                    self.resource_version = rv
                    self._set_connected(True)
                    delay = BACKOFF_BASE  # the server answers: the next failure starts afresh
                    self.handler(self.resource.name, "RELIST", items)
                    event(log, "kube.listed", resource=self.resource.name, items=len(items), rv=rv)
                events = self.kube.watch(self.resource, self.resource_version, self.watch_seconds)
                self._set_connected(True)
                delay = BACKOFF_BASE  # started; a quiet resource may see no event for minutes
                for kind, obj in events:
                    seen = (obj.get("metadata") or {}).get("resourceVersion")
                    if seen:
                        self.resource_version = str(seen)
                    if kind != "BOOKMARK":
                        # Parsed here, off the controller's thread.
                        info = self.parse(obj)
                        if info is not None:
                            self.handler(self.resource.name, kind, info)
                    if self._stop.is_set():
                        return
            except Gone as exc:
                event(log, "kube.watch_gone", resource=self.resource.name, reason=str(exc))
                self.resource_version = None  # relist; the kernel is not touched
            except Exception as exc:
                if self._stop.is_set():  # its connection closed because the director stops
                    return
                if isinstance(exc, KubeError) and exc.status == 410:
                    # The watch itself answered 410 (not an ERROR event): the version is
                    # gone for good; retrying it would fail forever. Relist.
                    event(log, "kube.watch_gone", resource=self.resource.name, reason=_reason(exc))
                    self.resource_version = None
                    continue
                reason = _reason(exc)
                self._set_connected(False, reason)
                # Jittered (half to all of the delay): the two boxes of a pair, and their
                # watchers, do not come back to a recovering API server in lock-step.
                wait = self._random.uniform(delay / 2, delay)
                event(
                    log,
                    "kube.watch_failed",
                    level=logging.WARNING,
                    resource=self.resource.name,
                    reason=reason,
                    retry_in=f"{wait:.2f}s",
                )
                if isinstance(exc, KubeError):  # it answered: back off, do not press it
                    self._stop.wait(wait)
                else:  # no answer at all: an outage, whose end is not waited out
                    self._wait_or_answer(wait)
                delay = min(delay * 2, self.backoff_max)

    def _wait_or_answer(self, wait: float) -> None:
        """Wait ``wait`` seconds, but come back as soon as the API server answers again
        (``GET /readyz`` about once a second): after an outage the watches resume within a
        second of the server, not at the end of a backoff grown during the outage."""
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            step = self._random.uniform(0.75, 1.25) * PROBE_EVERY
            if left <= step:
                self._stop.wait(max(0.0, left))
                return
            if self._stop.wait(step):
                return
            if self.kube.answers(timeout=PROBE_EVERY):
                event(
                    log,
                    "kube.server_back",
                    resource=self.resource.name,
                    backoff_left=f"{deadline - time.monotonic():.2f}s",
                )
                return


def _field(meta: object, name: str) -> str:
    value = meta.get(name) if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else "?"


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeWriter:
    """Service status, Events and the Lease: the director's only writes to the cluster."""

    def __init__(
        self,
        kube: KubeApi,
        component: str,
        identity: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube, self.component, self.identity = kube, component, identity
        self.clock = clock
        # Lease -> (the holder's record as last seen, when it was seen to change): expiry is
        # judged by this observer's own clock, never by comparing another box's timestamps
        # with ours (client-go's rule), so clock skew between the boxes changes nothing.
        self._observed: dict[tuple[str, str], tuple[tuple[object, ...], float]] = {}

    def patch_status(self, namespace: str, name: str, ips: tuple[str, ...]) -> None:
        body = {
            "status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"} for ip in ips]}}
        }
        self.kube.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/services/{name}/status",
            body=body,
            content_type="application/merge-patch+json",
        )

    def patch_annotations(self, namespace: str, name: str, values: dict[str, str | None]) -> None:
        """Set (or, with None, remove) annotations on a Service: a JSON merge patch."""
        self.kube.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/services/{name}",
            body={"metadata": {"annotations": values}},
            content_type="application/merge-patch+json",
        )

    def event(
        self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str
    ) -> None:
        """An Event on the Service. As client-go's recorder aggregates, the same one again
        (same Service, type, reason and message: after a restart, a leader change, from the
        other box) raises the count and lastTimestamp of the first instead of adding one:
        its name is made from what it says."""
        now = _now()[:19] + "Z"
        message = message[:1024]
        digest = hashlib.sha256(f"{uid}\0{kind}\0{reason}\0{message}".encode()).hexdigest()
        event_name = f"{name}.{digest[:16]}"
        path = f"/api/v1/namespaces/{namespace}/events"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Service",
                "name": name,
                "namespace": namespace,
                "uid": uid,
            },
            "type": kind,
            "reason": reason,
            "message": message,
            "source": {"component": self.component, "host": self.identity},
            "reportingComponent": self.component,
            "reportingInstance": self.identity,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.kube.request("POST", path, body=body)
            return
        except KubeError as exc:
            if exc.status != 409:  # 409: told before; counted below
                raise
        current = self.kube.request("GET", f"{path}/{event_name}")
        version = (current.get("metadata") or {}).get("resourceVersion")
        patch = {
            "count": int(current.get("count") or 1) + 1,
            "lastTimestamp": now,
            "metadata": {"resourceVersion": version},
        }
        self.kube.request(
            "PATCH", f"{path}/{event_name}", body=patch, content_type="application/merge-patch+json"
        )

    def _expired(self, lease: tuple[str, str], spec: Json) -> bool:
        """Has the holder stopped renewing? True once its record has not changed for a
        lease duration on this observer's clock, or when nobody holds it."""
        if not spec.get("holderIdentity"):
            return True
        record = tuple(
            str(spec.get(k))
            for k in (
                "holderIdentity",
                "renewTime",
                "acquireTime",
                "leaseTransitions",
                "leaseDurationSeconds",
            )
        )
        now = self.clock()
        seen = self._observed.get(lease)
        if seen is None or seen[0] != record:
            self._observed[lease] = (record, now)
            return False
        try:
            duration = max(1.0, float(spec.get("leaseDurationSeconds") or 15))
        except (TypeError, ValueError):
            duration = 15.0
        return now - seen[1] > duration

    def lease_refusal(self, namespace: str, name: str, timeout: float = 5) -> str | None:
        """Why the API server would refuse this director the Lease (a dry-run create:
        nothing is written), or None when it would not."""
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
        }
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        try:
            self.kube.request("POST", path, query=[("dryRun", "All")], body=body, timeout=timeout)
        except KubeError as exc:
            if exc.status != 409:  # 409: it exists already, which is fine
                return str(exc)
        return None

    def release_lease(self, namespace: str, name: str, timeout: float = 5) -> bool:
        """Give the Lease up (a clean stop): no holder, a duration of one second, so the
        other box takes it at its next attempt instead of a whole duration later (what
        client-go's ReleaseOnCancel does). True when this director held it and let it go."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        lease = self.kube.request("GET", path, timeout=timeout)
        spec = dict(lease.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return False
        now = _now()
        spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=now, renewTime=now)
        try:  # resourceVersion guards it: taken meanwhile, it is no longer ours to release
            self.kube.request("PUT", path, body=dict(lease, spec=spec), timeout=timeout)
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def acquire_lease(self, namespace: str, name: str, seconds: int) -> bool:
        """Take or renew the Lease; True when this director holds it afterwards."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        now = _now()
        try:
            lease = self.kube.request("GET", f"{path}/{name}")
        except KubeError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": seconds,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            }
            try:
                self.kube.request("POST", path, body=body)
            except KubeError as exc2:
                if exc2.status == 409:
                    return False  # someone else created it first
                raise
            return True
        spec = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity")
        if holder != self.identity and not self._expired((namespace, name), spec):
            return False
        if holder != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=seconds, renewTime=now)
        lease = dict(lease, spec=spec)
        try:
            self.kube.request("PUT", f"{path}/{name}", body=lease)  # resourceVersion guards it
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True
