"""The clusters' parts of ``director run``: each served cluster's watchers and its Lease's
elector, started and stopped together, and changed in place when a reload adds or removes
clusters (the others' watches and Leases are not touched)."""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING, NamedTuple

from director.cli import wiring
from director.engine.loop import Controller
from director.logs import event
from director.schema.config import Settings

if TYPE_CHECKING:
    from director.adapters.kube import Handler
    from director.adapters.kube_intake import ClusterIntake, Zygote
    from director.adapters.kube_watch import Watcher
    from director.adapters.lease import Elector

    Intake = Watcher | ClusterIntake  # what follows a cluster, as Served starts and stops it


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
        Lease. ``intakes``: which clusters have an intake process, and their zygote."""
        self.controller, self.dry_run, self.watch_seconds = controller, dry_run, watch_seconds
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
                    reason="no intake process ran at the start: this cluster's watches run "
                    "in the director until a restart",
                )
        self.watchers: list[Intake] = watchers(
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
            # cluster's event, the loop and the API waited 10-30 ms behind a relist. At
            # 1 ms they wait a few ms (``lab.bench_clusters``: B's p99 while A relists
            # 19.4 ms against 11.4 ms).
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

        def gone(watcher: Intake) -> bool:
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
        # one assignment each: the watchdog reads the lists from its own thread
        self.watchers = [*(w for w in self.watchers if not gone(w)), *added.watchers]
        self.electors = [*(e for e in self.electors if e.owned not in leases), *added.electors]
        added.start()


def in_processes(settings: Settings, override: bool | None = None) -> set[str]:
    """The clusters followed by a process of their own: those whose ``intake`` is
    ``process`` (``override``: all of them, or none; ``kubernetes:`` never)."""
    named = settings.clusters
    if override is not None:
        return {kube.name for kube in named} if override else set()
    return {kube.name for kube in named if kube.intake == "process"}


class Intakes(NamedTuple):
    zygote: Zygote | None  # forks the intake processes (None: no cluster has one)
    override: bool | None  # every cluster in a process (True), none (False), or as it says


def intakes(settings: Settings, override: bool | None) -> Intakes:
    """Which clusters have an intake process (see ``in_processes``), and their fork server,
    made now: before the director has a second thread."""
    if not in_processes(settings, override):
        return Intakes(None, override)
    from director.adapters.kube_intake import Zygote

    return Intakes(Zygote(), override)


def watchers(
    served: list[wiring.Cluster],
    submit: Handler,
    watch_seconds: int,
    zygote: Zygote | None = None,
    processes: set[str] | frozenset[str] = frozenset(),
) -> list[Intake]:
    """What follows each cluster (none without a cluster): for those in ``processes`` (with
    ``zygote``), an intake process each, so that no cluster's lists and watches hold
    another's events back; for the others one watcher thread per resource. A named
    cluster's resources are ``prod/services`` and the like, its objects carry its name."""
    if not served:  # a static box loads no Kubernetes client
        return []
    from director.adapters.kube_intake import ClusterIntake, Spec, cluster_watchers

    out: list[Intake] = []
    for one in served:
        if zygote is not None and one.name in processes:
            out.append(ClusterIntake(zygote, Spec(one.name, one.kubeconfig, watch_seconds), submit))
        else:
            out.extend(cluster_watchers(one.api, one.name, submit, watch_seconds))
    return out
