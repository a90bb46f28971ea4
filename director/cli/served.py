"""The clusters' parts of ``director run``: each served cluster's watchers and its Lease's
elector, started and stopped together, and changed in place when a reload adds or removes
clusters (the others' watches and Leases are not touched)."""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

from director.cli import wiring
from director.core.cluster import split_resource
from director.engine.loop import Controller
from director.schema.config import Settings

if TYPE_CHECKING:
    from director.adapters.kube_watch import Watcher
    from director.adapters.lease import Elector


SWITCH_INTERVAL = 0.001  # seconds: see Served.start


class Served:
    def __init__(
        self,
        settings: Settings,
        made: list[wiring.Cluster],
        controller: Controller,
        dry_run: bool,
        watch_seconds: int,
    ) -> None:
        """``made``: each cluster's client and writer; a shadow (``dry_run``) holds no
        Lease."""
        self.controller, self.dry_run, self.watch_seconds = controller, dry_run, watch_seconds
        self.watchers: list[Watcher] = wiring.watchers(made, controller.submit, watch_seconds)
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

    def threads(self) -> list[threading.Thread]:
        return [w._thread for w in self.watchers] + [e._thread for e in self.electors]

    def change(self, settings: Settings, made: list[wiring.Cluster], removed: list[str]) -> None:
        """The loop took a file whose clusters came or went: the removed ones' watches and
        Leases stopped (each Lease given up), the added ones' started."""
        leases = {f"lease/{name}" for name in removed}

        def gone(watcher: Watcher) -> bool:
            return split_resource(watcher.resource.name)[0] in removed

        for watcher in self.watchers:
            if gone(watcher):
                watcher.stop()
        for elector in self.electors:
            if elector.owned in leases:
                elector.stop()
        added = Served(
            settings, made, self.controller, dry_run=self.dry_run, watch_seconds=self.watch_seconds
        )
        # one assignment each: the watchdog reads the lists from its own thread
        self.watchers = [*(w for w in self.watchers if not gone(w)), *added.watchers]
        self.electors = [*(e for e in self.electors if e.owned not in leases), *added.electors]
        added.start()
