"""Events in: the queue every thread posts to, and the cluster as observed (the snapshot,
the watches' state, Nodes with fields refused)."""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from director.core.cluster import resource_name, split_resource
from director.core.snapshot import RELIST_STEP, Snapshot
from director.engine.events import Event, Listed, ObjectChanged, WatchState
from director.engine.view import LoopStatus
from director.logs import event
from director.schema.config import Settings

log = logging.getLogger("director.controller")
ClusterEvent = WatchState | Listed | ObjectChanged
CLUSTER_EVENTS = (WatchState, Listed, ObjectChanged)
# Watch events of one cluster taken in a step, at most. Another cluster's event that comes
# during a step waits for its end: the fewer a step takes, the less it waits, and a backlog
# drains as fast at 8 as at 64 (a step costs little besides its events; lab.bench_clusters).
EVENTS_STEP = 8
RESOURCES = ("services", "endpointslices", "nodes")


def served_clusters(settings: Settings) -> set[str] | None:
    """The names of the clusters served ("" for kubernetes:); None without a cluster."""
    return {kube.cluster for kube in settings.served} if settings.in_cluster else None


def required_resources(settings: Settings) -> set[str]:
    """What must be listed before the first sync: each resource of each cluster
    (``services``, or ``prod/services`` for a named cluster)."""
    return {resource_name(kube.cluster, kind) for kube in settings.served for kind in RESOURCES}


class Intake:
    def __init__(
        self, status: LoopStatus, required: set[str], clusters: set[str] | None = None
    ) -> None:
        """``required``: what must be listed before the first sync; ``clusters``: the
        clusters served, by name (None: any), a removed one's late events dropped."""
        self.status, self.required, self.clusters = status, required, clusters
        self.queue: queue.Queue[Event] = queue.Queue()
        self.snapshot = Snapshot()
        self._node_problems: dict[str, tuple[str, ...]] = {}
        self._held: dict[str, deque[ClusterEvent]] = {}  # cluster -> its events held back

    def take(self, wait: float) -> list[Event]:
        """A burst of events: the first within ``wait`` seconds (at once while some are held
        back), and all that came with it, but at most ``EVENTS_STEP`` of each cluster's
        watch events: the rest are held back for the next steps, each cluster's in its
        order, so that one cluster's burst (thousands of EndpointSlices churned) does not
        make another's events wait behind all of it. (Taking a lone cluster's burst whole
        was tried: an event of another cluster then waited behind the whole of it.)"""
        arrived: list[Event] = []
        try:
            arrived.append(self.queue.get(timeout=0.0 if self._held else wait))
            while True:
                arrived.append(self.queue.get_nowait())
        except queue.Empty:
            pass
        batch: list[Event] = []
        for ev in arrived:
            if isinstance(ev, CLUSTER_EVENTS):
                self._held.setdefault(split_resource(ev.resource)[0], deque()).append(ev)
            else:
                batch.append(ev)
        for cluster, lane in list(self._held.items()):
            batch.extend(lane.popleft() for _ in range(min(EVENTS_STEP, len(lane))))
            if not lane:
                del self._held[cluster]
        return batch

    @property
    def holding(self) -> bool:
        """Some cluster's watch events are held back for the next step."""
        return bool(self._held)

    def advance(self) -> set[str]:
        """Take in the next part of each list under way (each cluster's in turn, at most
        ``RELIST_STEP`` objects of each a step); the Services whose inputs changed."""
        return self.snapshot.advance(RELIST_STEP) if self.snapshot.relisting else set()

    def listed(self) -> bool:
        """Every resource the loop needs has been listed once."""
        return self.required <= self.snapshot.listed

    def absorb(self, ev: ClusterEvent) -> set[str]:
        """Fold one cluster event in; return the Services it touches."""
        cluster, kind = split_resource(ev.resource)
        if self.clusters is not None and cluster not in self.clusters:
            return set()  # a cluster no longer served (its watcher's last words)
        match ev:
            case WatchState(resource, connected, reason):
                self._watch_state(resource, connected, reason)
            case Listed(resource, objs):
                if kind == "nodes":
                    self._check_nodes(objs, False)
                self.snapshot.begin(resource, objs)  # taken in by advance(), a part a step
            case ObjectChanged(resource, change, obj):
                if kind == "nodes":
                    self._check_nodes([obj], change == "DELETED")
                return self.snapshot.apply(change, obj)
        return set()

    def _watch_state(self, resource: str, connected: bool, reason: str) -> None:
        self.status.connected[resource] = connected
        if not connected:
            self.status.last_error = f"{resource}: {reason}"
            if self.status.disconnected_since is None:
                self.status.disconnected_since = time.time()
        elif self.status.kubernetes_connected:
            self.status.disconnected_since = None

    def _check_nodes(self, nodes: Iterable[Any], deleted: bool) -> None:
        """Nodes with fields refused (a sloppy InternalIP): logged and counted once each."""
        for info in nodes:
            name, problems = getattr(info, "name", ""), getattr(info, "problems", ())
            cluster = getattr(info, "cluster", "")
            name = f"{cluster}/{name}" if cluster else name
            if deleted or not problems:
                self._node_problems.pop(name, None)
            elif self._node_problems.get(name) != problems:
                self._node_problems[name] = problems
                self.status.refused["nodes"] = self.status.refused.get("nodes", 0) + 1
                event(
                    log,
                    "kube.node_refused_fields",
                    level=logging.WARNING,
                    node=name,
                    problems="; ".join(problems),
                )
