"""The kernel side of a step: full resyncs and one virtual service at a time through the
reconciler, with the figures they leave (sync durations, the network-programming latency
from an EndpointSlice's trigger time) and the errors the kernel answered."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable

from director.core.model import ServiceKey
from director.core.owned import Ledger, Refused
from director.core.services import Table, VirtualService
from director.engine.ports import LoopMetrics
from director.engine.reconcile import Reconciler, SyncReport
from director.engine.view import LoopStatus
from director.logs import event

log = logging.getLogger("director.controller")
Observer = Callable[[str, SyncReport], None]


class Syncer:
    def __init__(
        self,
        reconciler: Reconciler,
        status: LoopStatus,
        *,
        recorder: LoopMetrics | None,
        observer: Observer | None,
        ledger: Ledger | None = None,
    ) -> None:
        self.reconciler, self.status = reconciler, status
        self.recorder, self.observer = recorder, observer
        self.ledger = ledger or Ledger()
        # service -> last trigger time observed (forgotten with the Service)
        self._triggers: dict[str, str] = {}

    def full(self, desired: Table, *, reread: bool = True) -> None:
        started = time.perf_counter()
        # Planned and sent a chunk at a time, kept by nobody: a first sync's operations
        # never all live at once.
        report = self.reconciler.full_sync(desired, reread=reread, keep_plan=False)
        if self.recorder is not None:
            self.recorder.observe_sync("full", report.seconds)
        self._after(report, "full-resync")
        self.status.last_sync = time.time()
        self.status.last_sync_seconds = time.perf_counter() - started
        ops = report.result.requested
        if reread:  # the first sync's operations are the table being built, not drift
            self.status.drift_ops += ops
        if ops:  # at start the table being built; later, drift repaired
            event(
                log,
                "resync.repaired" if reread else "sync.first",
                ops=ops,
                failed=len(report.result.errors),
            )
        if not report.result.errors:
            self.ledger.ok("ipvs", repaired=reread and ops > 0)

    def forget(self, ref: str) -> None:
        """The Service is gone: nothing is kept for it."""
        self._triggers.pop(ref, None)

    def one(self, key: ServiceKey, vs: VirtualService | None, ref: str) -> None:
        """Bring one virtual service to ``vs`` (None: remove it)."""
        self._after(self.reconciler.sync_service(key, vs), ref)

    def programmed(self, ref: str, seconds: float, triggers: Iterable[str | None]) -> None:
        """One Service programmed in ``seconds``; ``triggers``: its EndpointSlices' trigger
        times (the newest, once: the change's latency from the API server to the kernel)."""
        if self.recorder is None:
            return
        self.recorder.observe_sync("service", seconds)
        newest = max((t for t in triggers if t), default="")
        if newest and self._triggers.get(ref) != newest:
            self._triggers[ref] = newest
            self.recorder.observe_programming(newest, dt.datetime.now(dt.UTC))

    def _after(self, report: SyncReport, ref: str) -> None:
        if report.result.errors:
            self.status.failed_ops += len(report.result.errors)
            self.status.last_error = report.result.errors[0].describe()
            # Tried again by the next full resync (a refusal by the kernel, most often).
            self.ledger.failed(
                "ipvs",
                Refused(
                    f"the kernel refused {len(report.result.errors)} "
                    f"operations: {self.status.last_error}"
                ),
            )
        if self.observer is not None and (report.result.requested or report.plan.refused):
            self.observer(ref, report)
