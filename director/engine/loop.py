"""The control loop: cluster events in, IPVS changes (and Service status) out.

One thread owns all state. Events are queued, drained in a burst (coalesced), folded into
the snapshot, and only the Services they touch are recomputed and synced against the
reconciler's cached copy of the kernel table, so an EndpointSlice change costs what that
Service costs whatever the size of the table. A periodic full resync repairs drift.

The loop holds named parts, one job each (Seesaw's engine and its managers): intake, intent
store, translator, addresses, health gate, draining, source filter, programmed table, syncer,
reporter (status, Events), exports (view, state file, VIPs) and pace. Nothing here ever
flushes: an API outage stops the events, and the kernel keeps what it has.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from director.core.firewall import Firewall
from director.core.intents import Intent
from director.core.ipam import Allocator
from director.core.snapshot import ALL
from director.dataplane.interface import Ipvs
from director.engine import events, reload
from director.engine.addresses import Addresses, reserved_addresses
from director.engine.door import Door
from director.engine.draining import Draining
from director.engine.exports import Exports, Step
from director.engine.health_gate import HealthGate
from director.engine.hooks import Hooks
from director.engine.intake import RESOURCES, Intake, required_resources, served_clusters
from director.engine.intent_store import Answer, IntentStore
from director.engine.pace import Pace
from director.engine.parts import Parts
from director.engine.ports import ClusterWriter, LoopMetrics
from director.engine.programming import Programmer
from director.engine.reconcile import Reconciler, SyncReport
from director.engine.reporter import Reporter, outboxes
from director.engine.source_filter import SourceFilter
from director.engine.syncer import Syncer
from director.engine.table import Programmed
from director.engine.translator import Translator, build_policy
from director.engine.view import LoopStatus, PoolUse
from director.logs import event
from director.schema.config import KubeSettings, Settings

log = logging.getLogger("director.controller")
COMPONENT = "lvs-director"
TAKEN_WAIT = 15.0  # seconds an intent the loop took is waited for past the API's timeout
__all__ = ["COMPONENT", "RESOURCES", "Controller", "build_policy", "reserved_addresses"]


class Controller:
    def __init__(
        self,
        ipvs: Ipvs,
        settings: Settings,
        *,
        writer: ClusterWriter | Mapping[str, ClusterWriter] | None = None,
        dry_run: bool = False,
        state_file: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        observer: Callable[[str, SyncReport], None] | None = None,
        intents_file: Path | None = None,
        recorder: LoopMetrics | None = None,
        firewall: Firewall | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        """``writer``: the cluster's, or one per cluster by name (``clusters:``). ``hooks``:
        every call out of the loop (the caller keeps it and sets who listens)."""
        # Without a cluster the loop serves the static services (and the API).
        served, kube = settings.served, KubeSettings()
        self.settings = settings
        self.lock = threading.RLock()  # the loop holds it while it changes state
        self.health = LoopStatus()
        owned = self.health.owned  # each owned resource's state, as its keeper finds it
        hooks = hooks or Hooks()
        pace = Pace(hooks, clock)
        intake = Intake(self.health, required_resources(settings), served_clusters(settings))
        reconciler = Reconciler(ipvs, settings.ownership, dry_run=dry_run)
        boxes = {} if dry_run else outboxes(writer, self.post)
        clusters = [kube.cluster for kube in served] or [""]
        reporter = Reporter(boxes, self.health, dry_run=dry_run, clusters=clusters)
        allocator = Allocator(settings.pools, reserved_addresses(settings))
        self.parts = Parts(
            intake=intake,
            store=IntentStore(intents_file, self.health, dry_run=dry_run, ledger=owned),
            syncer=Syncer(
                reconciler, self.health, recorder=recorder, observer=observer, ledger=owned
            ),
            reporter=reporter,
            addresses=Addresses(allocator, reporter),
            gate=HealthGate(settings.health, hooks),
            drains=Draining(ipvs, clock, max(k.drain_timeout_seconds for k in served or [kube])),
            filter=SourceFilter(firewall, self.health, clock, dry_run=dry_run, ledger=owned),
            table=Programmed(settings.services),
            exports=Exports(state_file, hooks, settings.bgp_pools, ledger=owned, clock=clock),
            pace=pace,
        )
        translator = Translator(settings, build_policy(settings, ipvs.schedulers()), self.parts)
        self.programmer = Programmer(
            translator,
            self.parts,
            guarded=self._guarded,
            resync_seconds=min(k.resync_seconds for k in served or [kube]),
        )

    @property
    def kube(self) -> KubeSettings:
        return self.settings.kubernetes or KubeSettings()

    def door(self) -> Door:
        """The loop as the web and the metrics see it (``LoopPort``)."""
        return Door(
            lambda: self.settings,
            translator=self.programmer.translator,
            reconciler=self.parts.syncer.reconciler,
            pace=self.parts.pace,
            source_filter=self.parts.filter,
            exports=self.parts.exports,
            submit=self.submit_intent,
        )

    # -- input -----------------------------------------------------------------------
    def post(self, ev: events.Event) -> None:
        """Hand the loop an event (from any thread)."""
        self.parts.intake.queue.put(ev)

    def submit(self, resource: str, kind: str, payload: Any) -> None:
        """Watchers call this from their threads with ``(resource, kind, payload)``."""
        self.post(events.from_watch(resource, kind, payload))

    def set_leader(self, leader: bool, cluster: str = "") -> None:
        self.post(events.LeaderChanged(leader, cluster))

    def submit_intent(self, intent: Intent, timeout: float = 10.0) -> events.Reply:
        """Hand an admin-API intent to the loop and wait until it is stored and applied (or
        refused). An unresolved reply after ``timeout`` means the loop did not get to it, and
        never will (abandoned); one the loop took meanwhile is waited for a while longer."""
        reply = events.Reply()
        self.post(events.IntentPosted(intent, reply))
        if not reply.wait(timeout) and not reply.abandon():
            reply.wait(TAKEN_WAIT)
        return reply

    # -- the loop --------------------------------------------------------------------
    def run(self, stop: threading.Event, tick: float = 0.5) -> None:
        while not stop.is_set():
            self.step(tick)
        for outbox in self.parts.reporter.outboxes.values():
            outbox.close()

    def step(self, wait: float = 0.5) -> None:
        """Take a burst of queued events, then sync what they touched. Never raises: an
        unexpected error is logged with its traceback, counted, shown as ``last_error``,
        and the loop goes on (after a short pause when it keeps failing)."""
        # A first sync with nothing left to list (static) waits for nothing:
        self.parts.pace.pause()
        busy = self.parts.intake.snapshot.relisting  # a list is being taken in: on at once
        batch = self.parts.intake.take(
            0.0
            if busy or (not self.health.first_sync_done and self.parts.intake.listed())
            else wait
        )
        replies: list[Answer] = []
        with self.lock:
            try:
                self._step(batch, replies)
                self.parts.pace.stepped(ok=True)
            except Exception as exc:
                self.parts.pace.stepped(ok=False)
                self.loop_error("step", exc)
            finally:
                # Publishing is a unit of work (a failure is tried again next step). Ready
                # only once the view says so: /readyz never lags the flag.
                due = batch or self.parts.exports.due
                if due and self._guarded("publish", self._publish):
                    self.health.synced = self.health.first_sync_done
                # Answered once the view shows the step: a change in force as far as it could
                # be (200), or not stored and not made (503, the status shows why).
                for reply, status, detail in replies:
                    reply.resolve(status, detail)
                self.parts.pace.beat()
        if self.parts.exports.settle_due:
            self._guarded("settle", self.parts.exports.settle)
        self.parts.pace.after_step()

    def _publish(self) -> None:
        """The step's record (each part's state as the step ends) to the view."""
        allocator, health = self.parts.addresses.allocator, self.health
        step = Step(
            status=health.copy(synced=health.first_sync_done),
            draining=MappingProxyType(
                {k: frozenset(v) for k, v in self.parts.drains.waiting.items()}
            ),
            intents=self.parts.store.current,
            pools=tuple(
                PoolUse(p.name, p.size(), allocator.in_use_in(p)) for p in self.settings.pools
            ),
            filtered=frozenset(self.parts.filter.enforced),
            limits=MappingProxyType(dict(self.parts.filter.limits.enforced)),
            lease_refused=self.parts.reporter.lease_refused,
        )
        self.parts.exports.publish(
            step, self.parts.table, self.parts.gate, self.parts.intake.snapshot
        )

    def loop_error(self, where: str, exc: BaseException) -> None:
        self.parts.exports.due = True
        self.health.loop_errors += 1
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        self.health.last_error = f"{where}: {reason}"
        event(log, "loop.error", level=logging.ERROR, where=where, error=reason, exc_info=exc)

    def _guarded(self, where: str, action: Callable[..., object], *args: Any) -> bool:
        """Run one unit of work (one Service's sync); an exception is that unit's alone."""
        try:
            action(*args)
            return True
        except Exception as exc:
            self.loop_error(where, exc)
            return False

    def _step(self, batch: list[events.Event], replies: list[Answer]) -> None:
        dirty: set[str] = set()
        intents: list[events.IntentPosted] = []
        for ev in batch:
            if isinstance(ev, events.IntentPosted):
                intents.append(ev)
                continue
            try:
                dirty |= self._absorb(ev)
            except Exception as exc:  # one event, not the batch
                self.loop_error(f"absorb {type(ev).__name__}", exc)
        dirty |= self.parts.intake.advance()
        if intents:
            dirty |= self.parts.store.take(intents, replies)
        now = self.parts.pace.clock()
        if not self.health.first_sync_done:
            if self.parts.intake.listed():
                self._first_sync()
            return
        dirty |= self._timed(now)
        if dirty:
            self.programmer.sync(dirty)
        if self.parts.pace.resync_due(now):
            self.programmer.full_resync()
        self._guarded(
            "state file", self.parts.exports.write_state, self.parts.table, self.parts.addresses
        )
        self._guarded("announce", self.programmer.announce, self.health.first_sync_done)

    def _timed(self, now: float) -> set[str]:
        """What timers make due: drains to check, a held-back filter to try again, owned
        files and the packet filter to read back."""
        self.parts.store.verify(now)
        dirty, changed = self.parts.filter.timed(now)
        if self.parts.drains.waiting and self.parts.pace.drain_check_due(now):
            changed = True
            dirty |= self.parts.table.refs(self.parts.drains.waiting)
        self.parts.exports.due |= changed
        return dirty

    def _absorb(self, ev: events.Event) -> set[str]:
        """Fold one event into the loop's state; return the Services it touches."""
        match ev:
            case events.TargetChecked(target, up):
                return self.parts.table.refs(self.parts.gate.observe(target, up))
            case events.VrrpChanged(state):
                if state != self.health.vrrp_state:
                    event(log, "vrrp.role", state=state, previous=self.health.vrrp_state or "-")
                self.health.vrrp_state = state
            case events.LeaderChanged(leader, cluster):
                return self._lead(leader, cluster)
            case events.Leaving(reason):
                self.parts.exports.vips.leaving = reason
            case events.Reloaded(settings, reply, writers):
                reply.resolve(*reload.apply(self, settings, writers))
            case events.BoxAddresses(addresses):
                return self._box(dict(addresses))
            case events.WriteFailed() | events.LeaseRefused():
                self.parts.reporter.absorb(ev)
            case events.WatchState() | events.Listed() | events.ObjectChanged():
                return self.parts.intake.absorb(ev)
        return set()

    def _box(self, box: dict[str, str]) -> set[str]:
        """This box's own addresses changed: none is given to a Service, none is an
        endpoint; every Service is looked at again (one the box's address was given to
        gets another, one that asked for it is refused with an Event)."""
        if not self.programmer.translator.box_changed(box):
            return set()
        self.parts.addresses.allocator.reserved = reserved_addresses(self.settings, box)
        event(log, "box.addresses", addresses=",".join(sorted(box)) or "-")
        return {ALL}

    def _lead(self, leader: bool, cluster: str = "") -> set[str]:
        if leader == self.parts.reporter.leads(cluster) or self.parts.syncer.reconciler.dry_run:
            return set()
        kube = next((k for k in self.settings.served if k.cluster == cluster), self.kube)
        event(log, "lease.changed", leader=leader, cluster=cluster or "-", identity=kube.identity)
        self.parts.reporter.lead(leader, cluster)
        return self.parts.intake.snapshot.every(cluster)

    def _first_sync(self) -> None:
        self.programmer.first_sync()
        self.health.first_sync_done = True
        desired = len(self.parts.table.desired)
        event(
            log,
            "controller.ready",
            services=len(self.parts.table.produced),
            virtual_services=desired,
        )
        self.parts.exports.ready(f"{desired} virtual services programmed")
