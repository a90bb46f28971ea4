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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from director.core.added import AddedService, OpChain, kinds_counted, parts_of
from director.core.model import ServiceKey
from director.core.ownership import Ownership
from director.core.plan import (
    Plan,
    apply_ops_to_table,
    as_applied,
    build_plan,
    outline,
    outlined_ops,
    plan_service,
)
from director.core.services import Op, OpKind, Table, VirtualService
from director.dataplane.interface import ApplyResult, Ipvs
from director.logs import event

log = logging.getLogger("director.reconcile")


# A full sync that keeps no plan sends this many operations at a time: a first sync of
# 10,000 Services (110,000 operations, ~26 MB as objects) holds ~1 MB of them at once, so
# it leaves no heap grown by what it has done.
CHUNK_OPS = 4096


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What a full sync planned and applied, and how long it took."""

    plan: Plan  # its ops are empty when a full sync kept none (``keep_plan``)
    result: ApplyResult  # ``requested``: how many operations were planned
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
        nothing it read, and (the read deciding as it reads each service) never holds a
        second copy of the table, even for a moment."""
        self.actual = self.ipvs.read(known=self.actual).services

    def full_sync(
        self, desired: Table, *, reread: bool = True, keep_plan: bool = True
    ) -> SyncReport:
        """Diff ``desired`` against the kernel (read afresh unless ``reread`` is False).

        ``keep_plan`` False (the daemon's syncs): the operations are planned and sent
        ``CHUNK_OPS`` at a time, services whole, and not kept; the report counts them."""
        started = time.perf_counter()
        if reread:
            self.observe()
        if not keep_plan:
            return self._full_in_chunks(desired, started)
        plan = build_plan(desired, self.actual, self.ownership)
        self._log_left_alone(plan.foreign, plan.refused)
        touched = list(dict.fromkeys(op.key for op in plan.ops))
        result = self._apply_chunk(desired, plan.ops, touched)  # the whole plan, one chunk
        return SyncReport(plan, result, time.perf_counter() - started)

    @staticmethod
    def _log_left_alone(
        foreign: tuple[ServiceKey, ...], refused: tuple[tuple[ServiceKey, str], ...]
    ) -> None:
        for key in foreign:
            event(log, "plan.foreign_service", level=logging.DEBUG, service=key)
        for key, reason in refused:
            event(log, "plan.refused", level=logging.WARNING, service=key, reason=reason)

    def _full_in_chunks(self, desired: Table, started: float) -> SyncReport:
        shape = outline(desired, self.actual, self.ownership)
        self._log_left_alone(shape.foreign, shape.refused)
        results: list[ApplyResult] = []
        ops = OpChain()  # each service's operations one part (an added one not made yet)
        keys: list[ServiceKey] = []
        for key, service_ops in outlined_ops(shape, desired, self.actual):
            ops.append(service_ops)
            keys.append(key)
            if len(ops) >= CHUNK_OPS:
                results.append(self._apply_chunk(desired, ops, keys))
                ops, keys = OpChain(), []
        results.append(self._apply_chunk(desired, ops, keys))
        plan = Plan(foreign=shape.foreign, refused=shape.refused)
        return SyncReport(plan, _merged(results), time.perf_counter() - started)

    def _apply_chunk(
        self, desired: Table, ops: Sequence[Op], keys: list[ServiceKey]
    ) -> ApplyResult:
        """Send whole services' operations (``keys``: those services; an ``OpChain`` holds
        one part each); the cache follows what the kernel accepted."""
        chunk = ops if isinstance(ops, OpChain) else tuple(ops)
        result = self._apply(chunk, update_cache=False, bulk=True)
        if self.dry_run or not chunk:
            return result
        if result.ok:  # these services now are as desired (or gone), in the kernel's order
            added = {
                part.key: part.applied
                for _at, part in parts_of(chunk)
                if isinstance(part, AddedService)
            }
            for key in keys:
                vs = desired.get(key)
                if vs is None:
                    self.actual.pop(key, None)
                elif key in added:  # its order worked out as it was planned
                    self.actual[key] = added[key]
                else:
                    self.actual[key] = as_applied(vs, self.actual.get(key))
        else:
            apply_ops_to_table(self.actual, chunk, set(result.failed))
        return result

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
        self, ops: Sequence[Op], update_cache: bool = True, bulk: bool = False
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
        kinds = kinds_counted(ops) if bulk else Counter[OpKind]()
        counts: dict[str, Any] = {
            kind.value.replace("-", "_"): n for kind, n in sorted(kinds.items(), key=_by_value)
        }
        event(
            log,
            "ipvs.applied",
            ops=len(ops),
            failed=len(result.errors),
            sends=result.sends,
            **counts,
        )
        return result


def _by_value(item: tuple[OpKind, int]) -> str:
    return item[0].value


def _merged(results: list[ApplyResult]) -> ApplyResult:
    """The chunks' results as one: a failure's position counts from the first chunk's
    first operation."""
    failed: set[int] = set()
    requested = 0
    for result in results:
        failed.update(requested + i for i in result.failed)
        requested += result.requested
    errors = tuple(error for result in results for error in result.errors)
    return ApplyResult(requested, errors, sum(r.sends for r in results), frozenset(failed))
