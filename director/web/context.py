"""What every route of the admin API shares: the loop (its view and its intents), the
kernel reader, the cluster writer, and what /metrics serves. One per app, kept in
``app.extensions``; ``api()`` returns the current request's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from flask import current_app

from director.core.annotations import PROTOCOLS
from director.core.announce import PeerState
from director.core.cluster import service_ref, split_ref
from director.core.intents import Intent
from director.core.model import ServiceKey, shown
from director.core.policy import relevant
from director.core.services import KernelTable
from director.dataplane.interface import Ipvs
from director.engine.ports import LoopPort
from director.web.errors import Problem
from director.web.front import MetricsText

INTENT_TIMEOUT = 10.0  # seconds an API write waits for the loop
KEY = "director"


class AnnotationWriter(Protocol):
    def patch_annotations(
        self, namespace: str, name: str, values: dict[str, str | None]
    ) -> None: ...


class ApiContext:
    def __init__(
        self,
        loop: LoopPort,
        ipvs: Ipvs,
        writer: AnnotationWriter | Mapping[str, AnnotationWriter] | None,
        metrics: MetricsText | None,
        peers: Callable[[], Sequence[PeerState]] | None = None,
    ) -> None:
        """``writer``: the cluster's, or one per cluster by name (``clusters:``)."""
        self.loop, self.ipvs, self.metrics = loop, ipvs, metrics
        self.writers: Mapping[str, AnnotationWriter] = (
            {} if writer is None else writer if isinstance(writer, Mapping) else {"": writer}
        )
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
    def kube_service(
        self, namespace: str, name: str, cluster: str | None = None
    ) -> tuple[str, list[ServiceKey], frozenset[Any]]:
        """The Service's reference, its virtual services and its ports' protocols; 404 if
        not served. ``cluster``: its cluster's name (``?cluster=``); where the director
        serves several, it may be left out when one cluster only has the Service."""
        view = self.loop.view
        ref = self.service_ref(namespace, name, cluster)
        keys = sorted(view.produced.get(ref, ()), key=str)
        svc = view.services.get(ref)
        if svc is None or not relevant(svc, self.loop.policy_of(svc)):
            raise Problem(404, f"no Service {shown(ref)} served by this director")
        return ref, keys, frozenset(PROTOCOLS.get(p.protocol) for p in svc.ports)

    def service_ref(self, namespace: str, name: str, cluster: str | None) -> str:
        named = [k.cluster for k in self.loop.settings.served if k.cluster]
        if not named:
            if cluster:
                raise Problem(404, "this director serves one cluster: ?cluster= names none")
            return service_ref("", namespace, name)
        if cluster:
            if cluster not in named:
                raise Problem(404, f"no cluster {shown(cluster)} (clusters: {', '.join(named)})")
            return service_ref(cluster, namespace, name)
        services = self.loop.view.services
        having = [c for c in named if service_ref(c, namespace, name) in services]
        if len(having) == 1:
            return service_ref(having[0], namespace, name)
        where = f"clusters {', '.join(having)} each have" if having else "no cluster has"
        raise Problem(
            404 if not having else 409,
            f"{where} a Service {shown(namespace)}/{shown(name)}: name the cluster (?cluster=)",
        )

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
            f"the control loop did not take the change within {INTENT_TIMEOUT:g} s; nothing "
            "was changed (it will not be applied later): try again",
        )

    def annotate(self, ref: str, values: dict[str, str | None]) -> None:
        """Store a choice on the Service itself (both directors of a pair see it)."""
        if self.loop.dry_run:
            raise Problem(409, "this director runs in shadow mode (--dry-run) and writes nothing")
        cluster, namespace, name = split_ref(ref)
        writer = self.writers.get(cluster)
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
