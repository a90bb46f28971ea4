"""The clusters' parts of ``director run``: each served cluster's watchers and its Lease's
elector, started and stopped together, and changed in place when a reload adds or removes
clusters (the others' watches and Leases are not touched)."""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING, NamedTuple

from director.daemon import wiring
from director.engine.loop import Controller
from director.logs import event
from director.schema.config import Settings

if TYPE_CHECKING:
    from director.adapters.kube.client import Handler
    from director.adapters.kube.intake import Zygote
    from director.adapters.kube.lease import Elector
    from director.adapters.kube.watch import Watcher


log = logging.getLogger("director.runtime")
SWITCH_INTERVAL = 0.001  # seconds: see Served.start


class Served:
    def __init__(
        self,
        settings: Settings,
        made: list[wiring.Cluster],
        controller: Controller,
        dry_run: bool,
        watch_seconds: int,
        *,
        intakes: Intakes | None = None,
    ) -> None:
        """``made``: each cluster's client and writer; a shadow (``dry_run``) holds no
        Lease. ``intakes``: which clusters have their lists taken by list processes, and
        the zygote that forks those."""
        self.controller, self.dry_run, self.watch_seconds = controller, dry_run, watch_seconds
        self.clusters = list(made)  # each served cluster's client (a reload compares with it)
        self.intakes = intakes or Intakes(None, None)
        self.zygote = self.intakes.zygote
        processes = in_processes(settings, self.intakes.override)
        if self.zygote is None:
            for name in sorted(processes & {one.name for one in made}):
                # a cluster a reload adds to a director started with none in a process
                event(
                    log,
                    "cluster.intake_thread",
                    level=logging.WARNING,
                    cluster=name,
                    reason="no list process could be made at the start: this cluster's "
                    "lists are decoded in the director until a restart",
                )
        self.watchers: list[Watcher] = watchers(
            made, controller.submit, watch_seconds, self.zygote, processes
        )
        self.electors: list[Elector] = (
            [] if dry_run else wiring.electors(settings, made, controller)
        )

    def start(self) -> None:
        if self.watchers:
            # A relist parses thousands of objects on its watcher's thread. By default a
            # thread that wants the interpreter waits 5 ms before it asks the busy one to
            # let go, and one more such wait for every other busy thread: another
            # cluster's event, the loop and the API waited behind a relist. At 1 ms they
            # wait far less (``lab.bench_clusters`` measures it).
            sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        for elector in self.electors:
            elector.start()
        for watcher in self.watchers:
            watcher.start()

    def stop(self) -> None:
        for watcher in self.watchers:
            watcher.stop()
        for elector in self.electors:
            elector.stop()
        if self.zygote is not None:
            self.zygote.close()

    def threads(self) -> list[threading.Thread]:
        return [w._thread for w in self.watchers] + [e._thread for e in self.electors]

    def change(self, settings: Settings, made: list[wiring.Cluster], removed: list[str]) -> None:
        """The loop took a file whose clusters came or went: the removed ones' watches and
        Leases stopped (each Lease given up), the added ones' started."""
        leases = {f"lease/{name}" for name in removed}

        def gone(watcher: Watcher) -> bool:
            return watcher.cluster in removed

        for watcher in self.watchers:
            if gone(watcher):
                watcher.stop()
        for elector in self.electors:
            if elector.owned in leases:
                elector.stop()
        added = Served(
            settings,
            made,
            self.controller,
            dry_run=self.dry_run,
            watch_seconds=self.watch_seconds,
            intakes=self.intakes,
        )
        self.clusters = [*(c for c in self.clusters if c.name not in removed), *made]
        # one assignment each: the watchdog reads the lists from its own thread
        self.watchers = [*(w for w in self.watchers if not gone(w)), *added.watchers]
        self.electors = [*(e for e in self.electors if e.owned not in leases), *added.electors]
        added.start()


def in_processes(settings: Settings, override: bool | None = None) -> set[str]:
    """The clusters whose lists are taken by list processes: those whose ``intake`` is
    ``process`` (``override``: all of them, or none; ``kubernetes:`` never)."""
    named = settings.clusters
    if override is not None:
        return {kube.name for kube in named} if override else set()
    return {kube.name for kube in named if kube.intake == "process"}


class Intakes(NamedTuple):
    zygote: Zygote | None  # forks the list processes (None: no cluster has them)
    override: bool | None  # every cluster's lists in processes (True), none (False), or as
    # the file says


def intakes(settings: Settings, override: bool | None) -> Intakes:
    """Which clusters have their lists taken by list processes (see ``in_processes``), and
    the fork server of those, made now: before the director has a second thread."""
    if not in_processes(settings, override):
        return Intakes(None, override)
    from director.adapters.kube.intake import Zygote

    return Intakes(Zygote(), override)


def watchers(
    served: list[wiring.Cluster],
    submit: Handler,
    watch_seconds: int,
    zygote: Zygote | None = None,
    processes: set[str] | frozenset[str] = frozenset(),
) -> list[Watcher]:
    """What follows each cluster (none without a cluster): one watcher thread per resource;
    for the clusters in ``processes`` (with ``zygote``), their lists taken by list
    processes, so that no cluster's relist holds another's events back. A named cluster's
    resources are ``prod/services`` and the like, its objects carry its name."""
    if not served:  # a static box loads no Kubernetes client
        return []
    from director.adapters.kube.intake import cluster_watchers

    out: list[Watcher] = []
    for one in served:
        listing = zygote if one.name in processes else None
        out.extend(
            cluster_watchers(
                one.api, one.name, submit, watch_seconds, zygote=listing, kubeconfig=one.kubeconfig
            )
        )
    return out
