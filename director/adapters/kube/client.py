"""The Kubernetes client (``KubeApi``: credentials read again when they change or on a 401,
lists and watches as raw JSON); ``kubernetes`` is imported by this package alone.

- ``Watcher`` (``watch``): list + watch of one resource, resuming from the last
  resourceVersion, relisting on 410 Gone, reconnecting with capped backoff; it hands plain
  JSON to a callback and never touches IPVS.
- ``KubeWriter`` (``write``): Service status, Events and the Lease, each a single small
  request.

Objects are read with ``_preload_content=False`` and decoded as JSON: the client's model
classes cost ~10x the memory of the JSON, and 10,000 Services must fit in 200 MB.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
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

# A list's pages: about this much JSON each (decoded in one call no other thread can
# interrupt), starting at FIRST_PAGE objects, never fewer than MIN_PAGE.
PAGE_BYTES = 512 * 1024
FIRST_PAGE, MIN_PAGE = 100, 20


def settle_page() -> None:
    """After each page of a list: collected, and what survives frozen (long-lived, never
    walked again; a frozen object is still freed when its last reference goes, as when the
    next relist's copy replaces it). Everything older was frozen at the last page or the
    first sync, so the collection walks what was made since: about one page. Left to the
    collector, a relist's hundreds of thousands of objects were walked by full collections
    as they piled up (or by one at the list's end), each holding every thread, so every
    cluster's events (``lab.bench_clusters`` measures it). It is a full collection,
    not a young one: objects the collector promoted while the page was parsed are old
    already, and a cycle among them would be frozen for good (a leak)."""
    gc.collect()
    gc.freeze()


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
    """A Kubernetes collection the director lists and watches, and its path."""

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
    _trim_tokens(configuration)
    api = client.ApiClient(configuration)
    api.user_agent = f"{FIELD_MANAGER}/{__version__}"
    return api


def _trim_tokens(configuration: client.Configuration) -> None:
    """A token file ends in a newline when a shell wrote it (``kubectl create token ... >
    file``): trimmed, as client-go and kubectl do, or every request fails before it is sent.
    The client sets the token again before each request (its refresh hook): trimmed there
    too."""

    def trim(conf: client.Configuration) -> None:
        for name, value in list((conf.api_key or {}).items()):
            if isinstance(value, str):
                conf.api_key[name] = value.strip()

    trim(configuration)
    hook = configuration.refresh_api_key_hook
    if hook is not None:

        def refresh(conf: client.Configuration) -> None:
            hook(conf)
            trim(conf)

        configuration.refresh_api_key_hook = refresh


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
        as JSON), and the resourceVersion to watch from.

        ``page``: objects a page, at most. A page's JSON is decoded in one call that no other
        thread can interrupt (the bigger the page, the longer every thread waits), so pages
        are sized to about ``PAGE_BYTES``: the first of ``FIRST_PAGE`` objects, each next one
        from the size of the last. Another cluster's events wait for one page's decoding at
        most."""
        out: list[Any] = []
        token = ""
        version = ""
        limit = min(page, FIRST_PAGE)
        while True:
            query: list[tuple[str, Any]] = [("limit", limit)]
            if token:
                query.append(("continue", token))
            raw = self.request("GET", resource.path, query=query, timeout=120, stream=True).data
            data = json.loads(raw or b"{}")
            limit = max(MIN_PAGE, min(page, limit * PAGE_BYTES // max(1, len(raw or b""))))
            del raw
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
            del items
            settle_page()
            if not token:
                return out, version

    def watch(self, resource: Resource, resource_version: str, timeout_seconds: int) -> WatchStream:
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
        return WatchStream(response)


class WatchStream:
    """A watch's events, as they arrive; ``shutdown()``, from any thread, ends it at once (a
    watch otherwise waits for its next event, bookmark or timeout to notice a stop)."""

    def __init__(self, response: Any) -> None:
        self._response = response
        self._lock = threading.Lock()
        self._released = False  # its connection went back to the pool: another's now
        self._events = _events(response, self._release)

    def __iter__(self) -> WatchStream:
        return self

    def __next__(self) -> tuple[str, Json]:
        return next(self._events)

    def _release(self) -> None:
        with self._lock:
            self._released = True
            self._response.release_conn()

    def shutdown(self) -> None:
        with self._lock:
            if self._released:  # never cut a pooled connection another request now uses
                return
            with contextlib.suppress(Exception):  # already closed
                self._response.shutdown()


def _events(response: Any, release: Callable[[], None]) -> Iterator[tuple[str, Json]]:
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
        release()


def text_field(meta: object, name: str) -> str:
    value = meta.get(name) if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else "?"


def short_reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
