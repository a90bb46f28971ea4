"""What every route of the admin API shares: the loop (its view and its intents), the
kernel reader, the cluster writer, and what /metrics serves. One per app, kept in
``app.extensions``; ``api()`` returns the current request's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from flask import current_app

from director.core.announce import PeerState
from director.core.intents import Intent
from director.core.model import ServiceKey, shown
from director.core.options import PROTOCOLS, relevant
from director.core.services import KernelTable
from director.dataplane.interface import Ipvs
from director.engine.ports import LoopPort
from director.web.errors import Problem

INTENT_TIMEOUT = 10.0  # seconds an API write waits for the loop
KEY = "director"


class MetricsText(Protocol):
    """What ``/metrics`` serves (``director.adapters.metrics.Scrape``)."""

    content_type: str

    def gzipped(self) -> bytes: ...

    def plain(self) -> Iterator[bytes]: ...


class AnnotationWriter(Protocol):
    def patch_annotations(
        self, namespace: str, name: str, values: dict[str, str | None]
    ) -> None: ...


class ApiContext:
    def __init__(
        self,
        loop: LoopPort,
        ipvs: Ipvs,
        writer: AnnotationWriter | None,
        metrics: MetricsText | None,
        peers: Callable[[], Sequence[PeerState]] | None = None,
    ) -> None:
        self.loop, self.ipvs, self.writer, self.metrics = loop, ipvs, writer, metrics
        self.peers = peers or tuple  # the BGP sessions, as the routing daemon reports them
        self._recent: list[tuple[float, KernelTable]] = []  # one read serves 1 s of requests
        self._recent_lock = threading.Lock()

    # -- the kernel ---------------------------------------------------------------------
    def counters(self) -> KernelTable:
        """The whole table with its counters, read at most once a second."""
        with self._recent_lock:
            if self._recent and time.monotonic() - self._recent[0][0] < 1.0:
                return self._recent[0][1]
            table = self.ipvs.read(stats=True)
            self._recent[:] = [(time.monotonic(), table)]
            return table

    def read_some(self, keys: list[ServiceKey]) -> KernelTable:
        table = KernelTable()
        for key in keys:
            vs = self.ipvs.read_service(key)
            if vs is not None:
                table.services[key] = vs
                for dkey, state in self.ipvs.read_dest_states(key).items():
                    table.dest_state[(key, dkey)] = state
        return table

    # -- what the loop serves --------------------------------------------------------------
    def kube_service(self, namespace: str, name: str) -> tuple[list[ServiceKey], frozenset[Any]]:
        """The Service's virtual services and its ports' protocols; 404 if not served."""
        view = self.loop.view
        keys = sorted(view.produced.get(f"{namespace}/{name}", ()), key=str)
        svc = view.services.get(f"{namespace}/{name}")
        if svc is None or not relevant(svc, self.loop.policy):
            raise Problem(
                404, f"no Service {shown(namespace)}/{shown(name)} served by this director"
            )
        return keys, frozenset(PROTOCOLS.get(p.protocol) for p in svc.ports)

    def static_key(self, name: str) -> ServiceKey:
        for key, vs in self.loop.settings.services.items():
            if vs.origin == f"static/{name}":
                return key
        raise Problem(404, f"no static service named {shown(name)} in the configuration")

    # -- writes ----------------------------------------------------------------------------
    def intent(self, change: Intent) -> None:
        """Hand a change to the loop; return once it is stored and applied."""
        reply = self.loop.submit_intent(change, INTENT_TIMEOUT)
        if reply.ok:
            return
        if reply.status:
            raise Problem(reply.status, reply.detail)
        raise Problem(
            503,
            f"the control loop did not take the change within {INTENT_TIMEOUT:g} s; it may "
            "still apply it (see GET /api/v1/status)",
        )

    def annotate(self, namespace: str, name: str, values: dict[str, str | None]) -> None:
        """Store a choice on the Service itself (both directors of a pair see it)."""
        if self.loop.dry_run:
            raise Problem(409, "this director runs in shadow mode (--dry-run) and writes nothing")
        writer = self.writer
        if writer is None:
            raise Problem(409, "this director has no Kubernetes connection to store the choice")
        _passed_on(lambda: writer.patch_annotations(namespace, name, values))


def _passed_on(call: Callable[[], None]) -> None:
    try:
        call()
    except Exception as exc:  # the API server's answer, passed on
        raise Problem(503, f"the Kubernetes API did not accept the change: {exc}") from None


def api() -> ApiContext:
    context: ApiContext = current_app.extensions[KEY]
    return context
