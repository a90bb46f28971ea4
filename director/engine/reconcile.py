"""Observe, compute, diff, apply only the difference.

The reconciler keeps an exact cached copy of the owned part of the kernel table: a full
sync reads the kernel and replaces it; every apply updates it with the operations the
kernel accepted. A change to one virtual service is therefore planned against the cache
and costs what the change costs, not what the table costs.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from director.core.model import Dests, Op, ServiceKey, Table, VirtualService
from director.core.plan import (
    Ownership,
    Plan,
    apply_ops_to_table,
    as_applied,
    build_plan,
    plan_service,
)
from director.dataplane.interface import ApplyResult, Ipvs
from director.logs import event

log = logging.getLogger("director.reconcile")


@dataclass(frozen=True, slots=True)
class SyncReport:
    plan: Plan
    result: ApplyResult
    seconds: float


class Reconciler:
    def __init__(self, ipvs: Ipvs, ownership: Ownership, *, dry_run: bool = False) -> None:
        self.ipvs = ipvs
        self.ownership = ownership
        self.dry_run = dry_run
        self.actual: Table = {}

    def observe(self) -> None:
        """Read the whole kernel table into the cache. A virtual service the kernel holds
        just as the cache had it (real servers in the same order) keeps the cache's object,
        which is most often the desired table's own: a resync that finds no drift keeps
        nothing it read, so no second copy of the table lives on until the next one."""
        had = self.actual
        actual: Table = {}
        for key, vs in self.ipvs.read().services.items():
            cached = had.get(key)
            if (
                cached is not None
                and cached.config == vs.config
                and Dests.of(cached.real_servers).same_order(vs.real_servers)
            ):
                actual[cached.key] = cached  # its key too: nothing read is kept
            else:
                actual[key] = vs
        self.actual = actual

    def full_sync(self, desired: Table, *, reread: bool = True) -> SyncReport:
        """Diff ``desired`` against the kernel (read afresh unless ``reread`` is False)."""
        started = time.perf_counter()
        if reread:
            self.observe()
        plan = build_plan(desired, self.actual, self.ownership)
        for key in plan.foreign:
            event(log, "plan.foreign_service", level=logging.DEBUG, service=key)
        for key, reason in plan.refused:
            event(log, "plan.refused", level=logging.WARNING, service=key, reason=reason)
        result = self._apply(plan.ops, update_cache=False, bulk=True)
        if result.ok and plan.ops and not self.dry_run:
            # Everything applied: the owned part of the kernel now is the desired table.
            refused = {key for key, _ in plan.refused}
            touched = {op.key for op in plan.ops}
            before, foreign = self.actual, set(plan.foreign)
            self.actual = {k: v for k, v in before.items() if k in foreign}
            for key, vs in desired.items():
                if key in touched:
                    self.actual[key] = as_applied(vs, before.get(key))
                elif key not in refused:
                    self.actual[key] = before.get(key, vs)  # equal, in the kernel's order
        elif not self.dry_run:
            apply_ops_to_table(self.actual, plan.ops, set(result.failed))
        return SyncReport(plan, result, time.perf_counter() - started)

    def sync_service(self, key: ServiceKey, desired: VirtualService | None) -> SyncReport:
        """Bring one virtual service to ``desired`` (None: remove it), using the cache."""
        started = time.perf_counter()
        if not self.ownership.owns(key):
            reason = f"outside the owned ranges ({self.ownership.describe()})"
            return SyncReport(
                Plan(refused=((key, reason),)), ApplyResult(), time.perf_counter() - started
            )
        plan = Plan(tuple(plan_service(key, desired, self.actual.get(key))))
        result = self._apply(plan.ops)
        return SyncReport(plan, result, time.perf_counter() - started)

    def _apply(
        self, ops: tuple[Op, ...], update_cache: bool = True, bulk: bool = False
    ) -> ApplyResult:
        """Send ``ops``. Each is logged (at INFO; a full sync's at DEBUG, with one summary
        line at INFO: 55,000 lines for a big first sync would flood the journal and cost
        minutes); in shadow mode each is logged at INFO, since that is what it is for."""
        if not ops:
            return ApplyResult()
        level = logging.DEBUG if bulk and not self.dry_run else logging.INFO
        if log.isEnabledFor(level):  # describe() only when shown
            name = "ipvs.would_change" if self.dry_run else "ipvs.change"
            for op in ops:
                event(log, name, level, op=op.describe(), origin=op.origin or "-")
        if self.dry_run:
            return ApplyResult(requested=len(ops))
        result = self.ipvs.apply(ops)
        if update_cache:
            apply_ops_to_table(self.actual, ops, set(result.failed))
        kinds = Counter(op.kind.value for op in ops) if bulk else Counter[str]()
        counts: dict[str, Any] = {k.replace("-", "_"): n for k, n in sorted(kinds.items())}
        event(log, "ipvs.applied", ops=len(ops), failed=len(result.errors), sends=result.sends,
              **counts)  # fmt: skip
        return result
