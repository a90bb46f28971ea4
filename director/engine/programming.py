"""Bringing the kernel to what the Services ask for: the first sync (static services, then
every Service, oldest and addressed first), a sync of the Services an event touched (each
one guarded: one Service's fault is its own), and the periodic full resync. The loop
decides when; this part decides how."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable

from director.core.cluster import split_ref
from director.core.model import ServiceKey
from director.core.services import VirtualService
from director.core.snapshot import ALL
from director.dataplane.memory import give_back_free_memory
from director.engine.parts import Parts
from director.engine.translator import Translator
from director.engine.view import STATIC

Guard = Callable[..., bool]  # (where, action, *args): run one unit of work, survive its fault


class Programmer:
    def __init__(
        self, translator: Translator, parts: Parts, *, guarded: Guard, resync_seconds: float
    ) -> None:
        """The parts it programs with are the loop's own, the ones the translator shapes
        with (``Parts``)."""
        self.translator, self.parts = translator, parts
        self.guarded, self.resync_seconds = guarded, resync_seconds
        # Where the first sync's time went: (phase, seconds) for read, translate, program
        # and publish, in order (``startup.timing`` in the log).
        self.first_sync_phases: tuple[tuple[str, float], ...] = ()

    def first_sync(self) -> None:
        clock = time.perf_counter()
        phases: list[tuple[str, float]] = []

        def done(phase: str) -> None:
            nonlocal clock
            clock, before = time.perf_counter(), clock
            phases.append((phase, clock - before))

        self.parts.syncer.reconciler.observe()  # drains are computed against what the kernel holds
        done("read")
        for key, vs in self.translator.static().items():
            self.parts.table.put(key, vs, STATIC)
        for ref in self.translator.order(self.parts.intake.snapshot.services):
            self.guarded(f"service {ref}", self._adopt, ref)
        for key in self.parts.filter.enforce():
            self.parts.filter.hold_back(
                key, self.parts.table.desired.get(key), self.parts.table.owner.get(key, "")
            )
            self.parts.table.without(key)
        done("translate")
        self.full_resync(reread=False)
        done("program")
        self.parts.exports.vips.keys_changed()
        self.announce(ready=True)
        # The snapshot and tables are long-lived: keep the collector from walking them on
        # every full collection (a 10,000-Service table is ~1M objects; see gc.freeze).
        gc.collect()
        gc.freeze()
        give_back_free_memory()
        done("publish")
        self.first_sync_phases = tuple(phases)

    def announce(self, ready: bool) -> None:
        """The VIPs as the table now stands: announced where served (``ready``: the first
        sync is applied), withdrawn where every real server is down (and no sorry server
        serves in their place) or in maintenance."""
        self.parts.exports.vips.update(
            self.parts.table.desired,
            self.parts.syncer.reconciler.actual,
            ready,
            self.parts.gate.unserved,
            self.parts.store.current.maintenance,
        )

    def _adopt(self, ref: str) -> None:
        fresh = self.translator.service(ref)
        for key, vs in fresh.items():
            self.parts.table.put(key, vs, ref)
        self.parts.table.produce(ref, (*self.parts.table.produced.get(ref, ()), *fresh))

    def full_resync(self, reread: bool = True) -> None:
        self.parts.syncer.full(self.parts.table.desired, reread=reread)
        self.parts.exports.vips.touched(self.parts.table.desired)  # drift repaired, or found
        self.parts.pace.resynced(self.resync_seconds)
        self.parts.exports.state_due = self.parts.exports.due = True
        if reread:  # the kernel's table, read whole, is garbage now
            give_back_free_memory()

    def sync(self, dirty: set[str]) -> None:
        """Recompute and program the Services in ``dirty`` (ALL: every one)."""
        self.parts.exports.due = True
        table = self.parts.table
        services = self.parts.intake.snapshot.services
        refs = set(services) | set(table.produced) if ALL in dirty else dirty
        if STATIC in refs or ALL in dirty:
            self.sync_static()
        fresh: dict[str, tuple[dict[ServiceKey, VirtualService], float]] = {}

        def compute(ref: str) -> None:
            started = time.perf_counter()
            fresh[ref] = (self.translator.service(ref), time.perf_counter() - started)

        ordered = self.translator.order(refs - {STATIC})
        # Every Service (a start): in one order across clusters, those holding an address
        # first. Otherwise the allocator knows every holder already, and each cluster's
        # Services are done in turn, the cluster with the fewest first: one cluster's burst
        # does not keep another's one change out of the kernel while it is computed.
        for group in [ordered] if ALL in dirty else by_cluster(ordered):
            for ref in group:
                self.guarded(f"service {ref}", compute, ref)
            blocked = self.parts.filter.enforce()
            for ref, (computed, seconds) in fresh.items():
                self.guarded(f"service {ref}", self._program, ref, computed, blocked, seconds)
            fresh.clear()
        if ALL in dirty:  # every Service computed afresh: a first sync's worth of garbage
            del fresh
            give_back_free_memory()

    def sync_static(self, keys: Iterable[ServiceKey] | None = None) -> None:
        """Recompute and program the configuration's services (``keys``: these only). A
        full-NAT one whose SNAT rule is not in force is held back (out of the kernel)."""
        computed = self.translator.static(keys)
        blocked = self.parts.filter.enforce() & computed.keys()
        held = self.parts.filter.release(STATIC)
        for key in held - computed.keys():  # not recomputed: still held back
            self.parts.filter.hold_back(key, None, STATIC)
        for key, vs in computed.items():
            if key in blocked:
                self.parts.filter.hold_back(key, None if key in held else vs, STATIC)
                self.parts.table.desired.pop(key, None)
                self.parts.table.owner[key] = STATIC
                self.parts.table.changed[key] = None
                self.parts.syncer.one(key, None, STATIC)
            else:
                self.parts.table.put(key, vs, STATIC)
                self.parts.syncer.one(key, vs, STATIC)
            self.parts.exports.vips.touched((key,))
        self.parts.exports.state_due = True

    def _program(
        self,
        ref: str,
        fresh: dict[ServiceKey, VirtualService],
        blocked: set[ServiceKey],
        seconds: float = 0.0,
    ) -> None:
        """Bring the kernel to one Service's freshly computed virtual services."""
        started = time.perf_counter()
        before_held = self.parts.filter.release(ref)
        for key in blocked & fresh.keys():
            self.parts.filter.hold_back(key, None if key in before_held else fresh[key], ref)
            del fresh[key]
        before = frozenset(self.parts.table.produced.get(ref, ()))
        for key in before - fresh.keys():
            self.parts.table.drop(key)
            self.parts.gate.forget(key)
            self.parts.drains.forget(key)
            self.parts.syncer.one(key, None, ref)
        for key, vs in fresh.items():
            self.parts.table.put(key, vs, ref)
            self.parts.syncer.one(key, vs, ref)
        if fresh.keys() != before:
            self.parts.exports.vips.keys_changed()
        self.parts.exports.vips.touched(before | fresh.keys())
        self.parts.table.produce(ref, fresh)
        self.parts.exports.state_due = True
        triggers = (s.trigger_time for s in self.parts.intake.snapshot.slices_for(ref))
        self.parts.syncer.programmed(ref, seconds + time.perf_counter() - started, triggers)
        if not fresh and ref not in self.parts.intake.snapshot.services:
            self.parts.syncer.forget(ref)  # nothing kept for a Service that is gone


def by_cluster(refs: list[str]) -> list[list[str]]:
    """``refs`` split by cluster, each in its order, the cluster with the fewest first."""
    groups: dict[str, list[str]] = {}
    for ref in refs:
        groups.setdefault(split_ref(ref)[0], []).append(ref)
    return sorted(groups.values(), key=len)
