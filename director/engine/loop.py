"""The control loop: cluster events in, IPVS changes (and Service status) out.

One thread owns all state. Events are queued, drained in a burst (coalesced), folded into
the snapshot, and only the Services they touch are recomputed and synced against the
reconciler's cached copy of the kernel table, so an EndpointSlice change costs what that
Service costs whatever the size of the table. A periodic full resync repairs drift.

The loop holds named parts, one job each (Seesaw's engine and its managers): the reporter
(status and Events), address keeping, the health gate, draining, source filtering. After
each step that changed something it publishes a frozen ``LoopView`` for the API and the
metrics. Nothing here ever flushes: an API outage stops the events, and the kernel keeps
what it has.
"""

from __future__ import annotations

import gc
import ipaddress
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from director.core.checks import Target
from director.core.firewall import Firewall
from director.core.intents import Intent, Intents
from director.core.ipam import Address, Allocator
from director.core.model import DestKey, ServiceKey, Table, VirtualService
from director.core.snapshot import ALL, Snapshot
from director.core.translate import Options, Policy, relevant, translate
from director.dataplane.interface import Ipvs
from director.engine.addresses import Addresses
from director.engine.announcer import Announce, VipAnnouncer
from director.engine.draining import Draining, Terminating
from director.engine.events import (
    Event,
    IntentPosted,
    LeaderChanged,
    Listed,
    ObjectChanged,
    Reply,
    TargetChecked,
    VrrpChanged,
    WatchState,
    from_watch,
)
from director.engine.health_gate import HealthGate
from director.engine.intake import Intake
from director.engine.intent_store import IntentStore
from director.engine.outbox import Outbox
from director.engine.ports import ClusterWriter, LoopMetrics
from director.engine.reconcile import Reconciler, SyncReport
from director.engine.reporter import Reporter
from director.engine.source_filter import SourceFilter
from director.engine.state_file import write_state
from director.engine.syncer import Syncer
from director.engine.view import STATIC, LoopStatus, LoopView, PoolUse
from director.logs import event
from director.schema.config import KubeSettings, Settings

log = logging.getLogger("director.controller")
RESOURCES = ("services", "endpointslices", "nodes")
COMPONENT = "lvs-director"
K = TypeVar("K")
V = TypeVar("V")


def build_policy(settings: Settings, schedulers: frozenset[str]) -> Policy:
    """What the settings say about Services in general."""
    kube = settings.kubernetes or KubeSettings()
    health = settings.health
    return Policy(
        load_balancer_class=kube.load_balancer_class,
        default_class=kube.default_class,
        nodeport_vips=kube.nodeport_vips,
        backends=kube.backends,
        scheduler=settings.defaults.scheduler,
        forwarding=settings.defaults.forwarding,
        weight=settings.defaults.weight or 1,
        schedulers=schedulers,
        check=health.spec if health is not None and health.enabled else None,
        checking=health is not None,
    )


class Controller:
    def __init__(
        self,
        ipvs: Ipvs,
        settings: Settings,
        *,
        writer: ClusterWriter | None = None,
        dry_run: bool = False,
        state_file: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        observer: Callable[[str, SyncReport], None] | None = None,
        intents_file: Path | None = None,
        recorder: LoopMetrics | None = None,
        firewall: Firewall | None = None,
    ) -> None:
        # Without a kubernetes section the loop serves the static services (and the API).
        kube = settings.kubernetes or KubeSettings()
        self.settings, self.kube, self.ipvs = settings, kube, ipvs
        # The loop holds this while it changes state.
        self.lock = threading.RLock()
        self.dry_run, self.clock, self.state_file = dry_run, clock, state_file
        self.policy = build_policy(settings, ipvs.schedulers())
        self.health = LoopStatus()
        self.outbox = Outbox(writer) if writer is not None and not dry_run else None
        # The parts.
        self.intake = Intake(self.health, set(RESOURCES) if settings.kubernetes else set())
        self.store = IntentStore(intents_file, self.health, dry_run=dry_run)
        self.reconciler = Reconciler(ipvs, settings.ownership, dry_run=dry_run)
        self.syncer = Syncer(self.reconciler, self.health, recorder=recorder, observer=observer)
        self.reporter = Reporter(self.outbox, self.health, dry_run=dry_run)
        self.addresses = Addresses(
            Allocator(settings.pools, reserved_addresses(settings)), self.reporter
        )
        self.gate = HealthGate(settings.health)
        self.drains = Draining(ipvs, clock, kube.drain_timeout_seconds)
        self.filter = SourceFilter(firewall, self.health, clock, dry_run=dry_run)
        # What is programmed, and for whom.
        self.desired: Table = {}  # static services too
        self.produced: dict[str, frozenset[ServiceKey]] = {}
        self.owner: dict[ServiceKey, str] = {k: STATIC for k in settings.services}
        self.options: dict[str, Options] = {}
        self.vrrp_state: str | None = None  # MASTER / BACKUP / FAULT once keepalived reports
        self.vips = VipAnnouncer()  # the VIP set, to keepalived whenever it changes
        self.on_step: Callable[[], None] | None = None  # after every step (systemd's watchdog)
        self.on_ready: Callable[[str], None] | None = None  # once: the first sync is applied
        self.last_step = time.monotonic()  # /healthz: the loop is alive
        self._state_dirty = False
        self._publish = True  # the view is behind: publish it at the end of this step
        # What changed since the view was published besides the desired table: only that
        # is copied again (an EndpointSlice change copies one table, not five).
        self._stale = {"keys", "options", "services", "checks"}
        self._seen = (-1, -1)  # the snapshot's and the gate's versions last published
        self._next_resync = 0.0
        self._next_drain_check = 0.0
        self._failures = 0  # steps in a row that raised
        self._synced = False  # the first sync is applied: shown once the view says so
        self.view = LoopView()  # the read model, published after each step that changed it

    # -- the parts, as the runtime and the tests know them -----------------------------
    @property
    def snapshot(self) -> Snapshot:
        return self.intake.snapshot

    @property
    def queue(self) -> queue.Queue[Event]:
        return self.intake.queue

    @property
    def intents(self) -> Intents:
        return self.store.current

    @property
    def intents_file(self) -> Path | None:
        return self.store.path

    @property
    def on_vips(self) -> Announce | None:
        """Called with the set of VIP addresses whenever it changes (keepalived)."""
        return self.vips.announce

    @on_vips.setter
    def on_vips(self, announce: Announce | None) -> None:
        self.vips.announce = announce

    @property
    def leader(self) -> bool:
        return self.reporter.leader

    @property
    def firewall(self) -> Firewall | None:
        return self.filter.firewall

    @property
    def all_down(self) -> set[ServiceKey]:
        return self.gate.all_down

    @property
    def draining(self) -> dict[ServiceKey, dict[DestKey, float]]:
        return self.drains.waiting

    @property
    def on_targets(self) -> Callable[[set[Target], set[Target]], None] | None:
        return self.gate.on_targets

    @on_targets.setter
    def on_targets(self, callback: Callable[[set[Target], set[Target]], None] | None) -> None:
        self.gate.on_targets = callback

    # -- input -----------------------------------------------------------------------
    def post(self, ev: Event) -> None:
        """Hand the loop an event (from any thread)."""
        self.queue.put(ev)

    def submit(self, resource: str, kind: str, payload: Any) -> None:
        """Watchers call this from their threads with ``(resource, kind, payload)``."""
        self.queue.put(from_watch(resource, kind, payload))

    def set_leader(self, leader: bool) -> None:
        self.queue.put(LeaderChanged(leader))

    def submit_intent(self, intent: Intent, timeout: float = 10.0) -> Reply:
        """Hand an admin-API intent to the loop and wait until it is stored and applied (or
        refused). An unresolved reply after ``timeout`` means the loop did not get to it."""
        reply = Reply()
        self.queue.put(IntentPosted(intent, reply))
        reply.wait(timeout)
        return reply

    # -- the loop --------------------------------------------------------------------
    def run(self, stop: threading.Event, tick: float = 0.5) -> None:
        while not stop.is_set():
            self.step(tick)
        if self.outbox is not None:
            self.outbox.close()

    def step(self, wait: float = 0.5) -> None:
        """Take a burst of queued events, then sync what they touched. Never raises: an
        unexpected error is logged with its traceback, counted, shown as ``last_error``,
        and the loop goes on (after a short pause when it keeps failing)."""
        if self._failures:
            time.sleep(min(0.1 * 2**self._failures, 5.0))
        batch = self.intake.take(wait)
        replies: list[Reply] = []
        with self.lock:
            try:
                self._step(batch, replies)
                self._failures = 0
            except Exception as exc:
                self._failures = min(self._failures + 1, 6)
                self.loop_error("step", exc)
            finally:
                # Publishing is a unit of work like any other: should it fail, the loop goes
                # on and tries again next step. Ready only once the view says so: /readyz
                # never lags the flag.
                if (batch or self._publish) and self._guarded("publish", self._publish_view):
                    self.health.synced = self._synced
                for reply in replies:  # stored: the change is in force as far as it could be
                    reply.resolve(200)
                self.last_step = time.monotonic()
        if self.on_step is not None:
            self.on_step()

    def loop_error(self, where: str, exc: BaseException) -> None:
        self._publish = True
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

    def _step(self, batch: list[Event], replies: list[Reply]) -> None:
        dirty: set[str] = set()
        intents: list[IntentPosted] = []
        for ev in batch:
            if isinstance(ev, IntentPosted):
                intents.append(ev)
                continue
            try:
                dirty |= self._absorb(ev)
            except Exception as exc:  # one event, not the batch
                self.loop_error(f"absorb {type(ev).__name__}", exc)
        if intents:
            dirty |= self.store.take(intents, replies)
        now = self.clock()
        if not self._synced:
            if self.intake.listed():
                self._first_sync()
            return
        dirty |= self._timed(now)
        if dirty:
            self._sync(dirty)
        if now >= self._next_resync:
            self.full_resync()
        self._write_state()
        self.vips.update(self.desired)

    def _timed(self, now: float) -> set[str]:
        """What timers make due: drains to check, a held-back filter to try again."""
        dirty: set[str] = set()
        if self.drains.waiting and now >= self._next_drain_check:
            self._next_drain_check = now + 1.0
            self._publish = True
            dirty |= {self.owner.get(key, "") for key in self.drains.waiting} - {""}
        if self.filter.held_back and now >= self.filter.next_retry:
            dirty |= set(self.filter.held_back.values()) - {""}  # recomputed and programmed
        elif not self.filter.synced:
            self._publish = True
            self.filter.enforce()
        return dirty

    def _absorb(self, ev: Event) -> set[str]:
        """Fold one event into the loop's state; return the Services it touches."""
        match ev:
            case TargetChecked(target, up):
                return {self.owner.get(key, "") for key in self.gate.observe(target, up)} - {""}
            case VrrpChanged(state):
                if state != self.vrrp_state:
                    event(log, "vrrp.role", state=state, previous=self.vrrp_state or "-")
                self.vrrp_state = state
            case LeaderChanged(leader):
                return self._lead(leader)
            case WatchState() | Listed() | ObjectChanged():
                return self.intake.absorb(ev)
        return set()

    def _lead(self, leader: bool) -> set[str]:
        if leader == self.leader or self.dry_run:
            return set()
        self.health.leader = leader
        event(log, "lease.changed", leader=leader, identity=self.kube.identity)
        self.reporter.lead(leader)
        return {ALL}

    # -- computing -------------------------------------------------------------------
    def _order(self, refs: Iterable[str]) -> list[str]:
        """Services already holding an address first (restart safety), oldest first."""

        def rank(ref: str) -> tuple[int, str, str]:
            svc = self.snapshot.services.get(ref)
            if svc is None:
                return (2, "", ref)
            return (0 if svc.status_ips else 1, svc.created, ref)

        return sorted(refs, key=rank)

    def _compute(self, ref: str) -> dict[ServiceKey, VirtualService]:
        svc = self.snapshot.services.get(ref)
        if svc is None or not relevant(svc, self.policy):
            self.addresses.release(ref)
            if self.options.pop(ref, None) is not None:
                self._stale.add("options")
            self.reporter.forget(ref)
            self.filter.want(ref, {})
            return {}
        result = translate(
            svc,
            self.addresses.keep(svc, self.policy),
            self.snapshot.slices_for(ref),
            self.snapshot.nodes,
            self.policy,
            previous=self.options.get(ref),
        )
        if result.options is not None and self.options.get(ref) != result.options:
            self.options[ref] = result.options
            self._stale.add("options")
        self.reporter.report_problems(svc, result.problems)
        self.filter.want(ref, result.restrictions)
        out: dict[ServiceKey, VirtualService] = {}
        for key, vs in result.services.items():
            holder = self.owner.get(key)
            if holder is not None and holder != ref:
                self.reporter.report(svc, "Warning", "VirtualServiceTaken",
                                     f"{key} is already programmed for {holder}",
                                     f"taken:{key}")  # fmt: skip
                continue
            self.gate.set_checks(key, result.checks.get(key, {}))
            out[key] = self._finish(key, vs, ref, result.draining)
        return out

    def _finish(
        self, key: ServiceKey, vs: VirtualService, ref: str, terminating: Terminating
    ) -> VirtualService:
        """A virtual service as programmed: the API's intents, health, then drains."""
        checked, alarm = self.gate.apply(key, self.intents.apply(key, vs))
        if alarm:
            event(log, "health.all_down", level=logging.ERROR, service=key, origin=vs.origin,
                  action="kept: serving something beats serving nothing")  # fmt: skip
            svc = self.snapshot.services.get(ref)
            if svc is not None:
                self.reporter.report(svc, "Warning", "AllBackendsDown",
                                     f"every real server of {key} fails its health check; kept",
                                     f"all-down:{key}")  # fmt: skip
        return self.drains.apply(key, checked, self.reconciler.actual.get(key), terminating)

    # -- syncing ---------------------------------------------------------------------
    def _first_sync(self) -> None:
        self.reconciler.observe()  # drains are computed against what the kernel holds
        for key, vs in self._static().items():
            self.desired[key] = vs
            self.owner[key] = STATIC
        for ref in self._order(self.snapshot.services):
            self._guarded(f"service {ref}", self._adopt, ref)
        for key in self.filter.enforce():
            self.filter.hold_back(key, self.desired.pop(key, None), self.owner.pop(key, ""))
            self.produced = {ref: keys - {key} for ref, keys in self.produced.items()}
        self._stale.add("keys")
        self.full_resync(reread=False)
        self._synced = True
        self.vips.keys_changed()
        self.vips.update(self.desired)
        # The snapshot and tables are long-lived: keep the collector from walking them on
        # every full collection (a 10,000-Service table is ~1M objects; see gc.freeze).
        gc.collect()
        gc.freeze()
        event(
            log, "controller.ready", services=len(self.produced), virtual_services=len(self.desired)
        )
        if self.on_ready is not None:
            self.on_ready(f"{len(self.desired)} virtual services programmed")

    def _adopt(self, ref: str) -> None:
        for key, vs in self._compute(ref).items():
            self.desired[key] = vs
            self.owner[key] = ref
            self.produced[ref] = self.produced.get(ref, frozenset()) | {key}
            self._stale.add("keys")

    def full_resync(self, reread: bool = True) -> None:
        self.syncer.full(self.desired, reread=reread)
        self._next_resync = self.clock() + self.kube.resync_seconds
        self._state_dirty = True
        self._publish = True

    def _sync(self, dirty: set[str]) -> None:
        self._publish = True
        refs = set(self.snapshot.services) | set(self.produced) if ALL in dirty else dirty
        if STATIC in refs or ALL in dirty:
            for key, vs in self._static().items():
                self.desired[key] = vs
                self.syncer.one(key, vs, STATIC)
        fresh: dict[str, tuple[dict[ServiceKey, VirtualService], float]] = {}

        def compute(ref: str) -> None:
            started = time.perf_counter()
            fresh[ref] = (self._compute(ref), time.perf_counter() - started)

        for ref in self._order(refs - {STATIC}):
            self._guarded(f"service {ref}", compute, ref)
        blocked = self.filter.enforce()
        for ref, (services, seconds) in fresh.items():
            self._guarded(f"service {ref}", self._program, ref, services, blocked, seconds)

    def _static(self) -> Table:
        """The configuration's services, with the API's overrides, drains and health."""
        out: Table = {}
        for key, vs in self.settings.services.items():
            spec = self.settings.static_checks.get(key, self.policy.check)  # None: unchecked
            self.gate.set_checks(
                key,
                {d: (Target(rs.address, rs.port, spec),) for d, rs in vs.real_servers.items()}
                if spec is not None and self.settings.health is not None
                else {},
            )
            out[key] = self._finish(key, vs, STATIC, frozenset())
        return out

    def _program(
        self,
        ref: str,
        fresh: dict[ServiceKey, VirtualService],
        blocked: set[ServiceKey],
        seconds: float = 0.0,
    ) -> None:
        """Bring the kernel to one Service's freshly computed virtual services."""
        started = time.perf_counter()
        before_held = self.filter.release(ref)
        for key in blocked & fresh.keys():
            self.filter.hold_back(key, None if key in before_held else fresh[key], ref)
            del fresh[key]
        before = self.produced.get(ref, frozenset())
        for key in before - fresh.keys():
            self.desired.pop(key, None)
            self.owner.pop(key, None)
            self.gate.forget(key)
            self.drains.forget(key)
            self.syncer.one(key, None, ref)
        for key, vs in fresh.items():
            self.desired[key] = vs
            self.owner[key] = ref
            self.syncer.one(key, vs, ref)
        if fresh.keys() != before:
            self.vips.keys_changed()
            self._stale.add("keys")
        if fresh:
            self.produced[ref] = frozenset(fresh)
        else:
            self.produced.pop(ref, None)
        self._state_dirty = True
        triggers = (s.trigger_time for s in self.snapshot.slices_for(ref))
        self.syncer.programmed(ref, seconds + time.perf_counter() - started, triggers)

    # -- the read model and the state file ------------------------------------------------
    def _publish_view(self) -> None:
        """Publish what the loop holds now as a frozen ``LoopView`` (under the loop's lock).
        The desired table is copied every time; the rest only when it changed."""
        self._publish = False
        prev, stale, allocator = self.view, self._stale, self.addresses.allocator
        seen = (self.snapshot.services_version, self.gate.version)
        if seen[0] != self._seen[0]:
            stale.add("services")
        if seen[1] != self._seen[1]:
            stale.add("checks")
        self._seen = seen
        self.view = LoopView(
            version=prev.version + 1,
            status=self.health.copy(synced=self._synced),
            desired=_frozen(self.desired),
            owner=_frozen(self.owner) if "keys" in stale else prev.owner,
            options=_frozen(self.options) if "options" in stale else prev.options,
            produced=_frozen(self.produced) if "keys" in stale else prev.produced,
            services=_frozen(self.snapshot.services) if "services" in stale else prev.services,
            draining=_frozen({k: frozenset(v) for k, v in self.drains.waiting.items()}),
            checks=_frozen(self.gate.checks) if "checks" in stale else prev.checks,
            unhealthy=_frozen(self.gate.failing()),
            intents=self.intents,
            leader=self.leader,
            vrrp_state=self.vrrp_state,
            pools=tuple(
                PoolUse(p.name, p.size(), allocator.in_use_in(p)) for p in self.settings.pools
            ),
            all_down=len(self.gate.all_down),
            filtered=frozenset(self.filter.enforced),
        )
        stale.clear()

    def _write_state(self) -> None:
        if self.state_file is None or not self._state_dirty:
            return
        self._state_dirty = False
        write_state(self.state_file, self.desired, self.addresses_by_service())

    def addresses_by_service(self) -> dict[str, list[str]]:
        return {ref: self.addresses.held(ref) for ref in sorted(self.produced)}


def _frozen(table: Mapping[K, V]) -> Mapping[K, V]:
    """A read-only copy, for the view."""
    return MappingProxyType(dict(table))


def reserved_addresses(settings: Settings) -> dict[Address, str]:
    """Addresses the director serves otherwise, which IPAM must never hand to a Service."""
    out: dict[Address, str] = {}
    for key, vs in settings.services.items():
        if not key.fwmark:
            out.setdefault(ipaddress.ip_address(key.address), f"static service {vs.origin}")
    for vip in settings.kubernetes.nodeport_vips if settings.kubernetes else ():
        out[ipaddress.ip_address(vip)] = "the NodePort VIP"
    return out
