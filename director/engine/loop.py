"""The control loop: cluster events in, IPVS changes (and Service status) out.

One thread owns all state. Watch events are queued, drained in a burst (coalesced), folded
into the snapshot, and only the Services they touch are recomputed and synced against the
reconciler's cached copy of the kernel table, so an EndpointSlice change costs what that
Service costs whatever the size of the table. A periodic full resync repairs drift.

Removed and terminating real servers drain: weight 0 until their active connections reach 0
or ``drain_timeout_seconds`` passes (UDP ones go at once). Nothing here ever flushes: an API
outage stops the events, and the kernel keeps what it has.
"""

from __future__ import annotations

import datetime as dt
import gc
import ipaddress
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from director.core.checks import Target
from director.core.cluster import ServiceInfo
from director.core.firewall import Firewall, FirewallError
from director.core.intents import Intent, IntentRefused, Intents, SetScheduler
from director.core.ipam import Address, Allocator
from director.core.model import DestKey, RealServer, ServiceKey, Table, VirtualService
from director.core.model import Protocol as IpProtocol
from director.core.snapshot import ALL, Snapshot
from director.core.translate import (
    Options,
    Policy,
    Problem,
    ipam_request,
    relevant,
    translate,
    wants_address,
)
from director.dataplane.interface import Ipvs
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
from director.engine.outbox import Outbox
from director.engine.ports import ClusterWriter, LoopMetrics
from director.engine.reconcile import Reconciler, SyncReport
from director.engine.state_file import write_state
from director.engine.view import STATIC, LoopStatus, LoopView, PoolUse
from director.logs import event
from director.schema.config import KubeSettings, Settings

log = logging.getLogger("director.controller")
RESOURCES = ("services", "endpointslices", "nodes")
COMPONENT = "lvs-director"


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
        self.settings, self.kube = settings, kube
        self.required = set(RESOURCES) if settings.kubernetes is not None else set()
        self.intents_file = intents_file
        self.intents = Intents.load(intents_file) if intents_file else Intents()
        # The loop holds this while it changes state; the API holds it to read.
        self.lock = threading.RLock()
        self.dry_run = dry_run
        self.clock = clock
        self.observer = observer
        self.state_file = state_file
        self.policy = Policy(
            load_balancer_class=kube.load_balancer_class,
            default_class=kube.default_class,
            nodeport_vips=kube.nodeport_vips,
            backends=kube.backends,
            scheduler=settings.defaults.scheduler,
            forwarding=settings.defaults.forwarding,
            weight=settings.defaults.weight or 1,
            schedulers=ipvs.schedulers(),
            check=(
                settings.health.spec
                if settings.health is not None and settings.health.enabled
                else None
            ),
            checking=settings.health is not None,
        )
        self.ipvs = ipvs
        self.reconciler = Reconciler(ipvs, settings.ownership, dry_run=dry_run)
        self.allocator = Allocator(settings.pools, reserved_addresses(settings))
        self.snapshot = Snapshot()
        self.health = LoopStatus()
        self.queue: queue.Queue[Event] = queue.Queue()
        self.outbox = Outbox(writer) if writer is not None and not dry_run else None
        self.desired: Table = {}  # static services too
        self.produced: dict[str, frozenset[ServiceKey]] = {}
        self.owner: dict[ServiceKey, str] = {k: STATIC for k in settings.services}
        self.options: dict[str, Options] = {}
        self.reported: dict[str, dict[str, str]] = {}  # service -> topic -> last message
        # Events a follower saw the reason for: written should it become the leader.
        self.unsent: dict[str, dict[str, tuple[ServiceInfo, str, str, str]]] = {}
        # Real servers at weight 0 waiting for their connections: key -> dest -> deadline.
        self.draining: dict[ServiceKey, dict[DestKey, float]] = {}
        self.leader = dry_run  # a shadow allocates as if it led, and writes nothing
        self.vrrp_state: str | None = None  # MASTER / BACKUP / FAULT once keepalived reports
        # Called with the set of VIP addresses whenever it changes (keepalived renders them).
        self.on_vips: Callable[[frozenset[str]], None] | None = None
        self._vips: frozenset[str] | None = None
        self._keys_changed = True
        self.recorder = recorder
        self._triggers: dict[str, str] = {}  # service -> last trigger time observed
        # Active health checks: what each real server is checked with, who uses a target,
        # which targets are down. ``on_targets(add, remove)`` tells the checker.
        self.checks: dict[ServiceKey, dict[DestKey, tuple[Target, ...]]] = {}
        self.target_users: dict[Target, set[ServiceKey]] = {}
        self.down: set[Target] = set()
        self.all_down: set[ServiceKey] = set()  # every real server failing: kept, loudly
        self.on_targets: Callable[[set[Target], set[Target]], None] | None = None
        self._next_resync = 0.0
        self._next_drain_check = 0.0
        self.last_step = time.monotonic()  # /healthz: the loop is alive
        self._state_dirty = False
        self._failures = 0  # steps in a row that raised
        self.on_step: Callable[[], None] | None = None  # after every step (systemd's watchdog)
        self.on_ready: Callable[[str], None] | None = None  # once: the first sync is applied
        # Source filtering: what each Service asks for, and what the firewall holds.
        self.firewall = firewall
        self.restrictions: dict[str, dict[ServiceKey, tuple[str, ...]]] = {}
        self.enforced: dict[ServiceKey, tuple[str, ...]] = {}  # in force, as far as known
        self._filter_synced = False  # the firewall holds exactly ``enforced``
        self._attempted: dict[ServiceKey, tuple[str, ...]] | None = None
        self._next_filter_retry = 0.0
        self.held_back: dict[ServiceKey, str] = {}  # restricted, filter not in force -> Service
        self._node_problems: dict[str, tuple[str, ...]] = {}
        # The read model: published after each step that may have changed something.
        self.view = LoopView()
        self._publish = True
        self._synced = False  # the first sync is applied: shown once the view says so

    # -- input -----------------------------------------------------------------------
    def post(self, event: Event) -> None:
        """Hand the loop an event (from any thread)."""
        self.queue.put(event)

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
        batch: list[Event] = []
        try:
            batch.append(self.queue.get(timeout=wait))
            while True:
                batch.append(self.queue.get_nowait())
        except queue.Empty:
            pass
        replies: list[Reply] = []
        with self.lock:
            try:
                self._step(batch, replies)
                self._failures = 0
            except Exception as exc:
                self._failures = min(self._failures + 1, 6)
                self.loop_error("step", exc)
            finally:
                if batch or self._publish:
                    self._publish_view()
                    # Ready only once the view says so: /readyz never lags the flag.
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
            dirty |= self._take_intents(intents, replies)
        now = self.clock()
        if not self._synced:
            if self.required <= self.snapshot.listed:
                self._first_sync()
            return
        if self.draining and now >= self._next_drain_check:
            self._next_drain_check = now + 1.0
            self._publish = True
            dirty |= {self.owner.get(key, "") for key in self.draining} - {""}
        if self.held_back and now >= self._next_filter_retry:
            dirty |= set(self.held_back.values()) - {""}  # recomputed, filtered, programmed
        elif not self._filter_synced:
            self._enforce()
        if dirty:
            self._sync(dirty)
        if now >= self._next_resync:
            self.full_resync()
            self._publish = True
        self._write_state()
        self._announce_vips()

    def _announce_vips(self) -> None:
        if not self._keys_changed or self.on_vips is None:
            return
        self._keys_changed = False
        vips = frozenset(key.address for key in self.desired if not key.fwmark)
        if vips != self._vips:
            self._vips = vips
            self.on_vips(vips)

    def _absorb(self, ev: Event) -> set[str]:
        """Fold one event into the loop's state; return the Services it touches."""
        match ev:
            case TargetChecked(target, up):
                (self.down.discard if up else self.down.add)(target)
                return {self.owner.get(key, "") for key in self.target_users.get(target, ())} - {
                    ""
                }
            case VrrpChanged(state):
                if state != self.vrrp_state:
                    event(log, "vrrp.role", state=state, previous=self.vrrp_state or "-")
                self.vrrp_state = state
            case LeaderChanged(leader):
                return self._lead(leader)
            case WatchState(resource, connected, reason):
                self._watch_state(resource, connected, reason)
            case Listed(resource, objs):
                if resource == "nodes":
                    self._check_nodes(objs, False)
                return self.snapshot.replace(resource, objs)
            case ObjectChanged(resource, kind, obj):
                if resource == "nodes":
                    self._check_nodes([obj], kind == "DELETED")
                return self.snapshot.apply(kind, obj)
        return set()

    def _lead(self, leader: bool) -> set[str]:
        if leader == self.leader or self.dry_run:
            return set()
        self.leader = self.health.leader = leader
        event(log, "lease.changed", leader=leader, identity=self.kube.identity)
        unsent, self.unsent = self.unsent, {}
        for ref, topics in unsent.items() if leader else ():
            for topic, (svc, severity, reason, message) in topics.items():
                if self.reported.get(ref, {}).get(topic) == message:  # still true
                    self._send_event(svc, severity, reason, message)
        return {ALL}

    def _watch_state(self, resource: str, connected: bool, reason: str) -> None:
        self.health.connected[resource] = connected
        if not connected:
            self.health.last_error = f"{resource}: {reason}"
            if self.health.disconnected_since is None:
                self.health.disconnected_since = time.time()
        elif self.health.kubernetes_connected:
            self.health.disconnected_since = None

    def _check_nodes(self, nodes: Iterable[Any], deleted: bool) -> None:
        """Nodes with fields refused (a sloppy InternalIP): logged and counted once each."""
        for info in nodes:
            name, problems = getattr(info, "name", ""), getattr(info, "problems", ())
            if deleted or not problems:
                self._node_problems.pop(name, None)
            elif self._node_problems.get(name) != problems:
                self._node_problems[name] = problems
                self.health.refused["nodes"] = self.health.refused.get("nodes", 0) + 1
                event(log, "kube.node_refused_fields", level=logging.WARNING, node=name,
                      problems="; ".join(problems))  # fmt: skip

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
            self.allocator.release(ref)
            self.options.pop(ref, None)
            self.reported.pop(ref, None)
            self.unsent.pop(ref, None)
            self.restrictions.pop(ref, None)
            return {}
        addresses = self._addresses(svc)
        result = translate(
            svc,
            addresses,
            self.snapshot.slices_for(ref),
            self.snapshot.nodes,
            self.policy,
            previous=self.options.get(ref),
        )
        if result.options is not None:
            self.options[ref] = result.options
        self._report_problems(svc, result.problems)
        if result.restrictions:  # only restricted Services: _enforce walks this on every sync
            self.restrictions[ref] = result.restrictions
        else:
            self.restrictions.pop(ref, None)
        out: dict[ServiceKey, VirtualService] = {}
        for key, vs in result.services.items():
            holder = self.owner.get(key)
            if holder is not None and holder != ref:
                self._report(
                    svc,
                    "Warning",
                    "VirtualServiceTaken",
                    f"{key} is already programmed for {holder}",
                    f"taken:{key}",
                )
                continue
            self._set_checks(key, result.checks.get(key, {}))
            checked = self._with_health(key, self.intents.apply(key, vs), ref)
            out[key] = self._with_drains(key, checked, result.draining)
        return out

    def _addresses(self, svc: ServiceInfo) -> tuple[str, ...]:
        ref = svc.ref
        if not wants_address(svc, self.policy):
            self.allocator.release(ref)
            return ()
        keep = [ipaddress.ip_address(text) for text in svc.status_ips]  # canonical already
        request, problems = ipam_request(svc)
        if request is None:
            self.allocator.release(ref)
            problem = problems[0]
            self._report(
                svc,
                "Warning",
                "AddressRefused",
                f"{problem.annotation}: {problem.message}",
                "address",
            )
            if self.leader and (svc.status_ips or svc.stale_status):
                self._write_status(svc, ())  # no address: status must not name one
            return ()
        if not self.leader:
            # The follower programs what the leader wrote to status, and tracks it so that
            # it allocates consistently should it become the leader.
            if not keep:
                self.allocator.release(ref)
                return ()
            self.allocator.assign(request, keep)
            return tuple(svc.status_ips)
        outcome = self.allocator.assign(request, keep)
        if not outcome.ok:
            self._report(svc, "Warning", "AddressRefused", str(outcome.error), "address")
            if svc.status_ips or svc.stale_status:
                self._write_status(svc, ())
            return ()
        ips = tuple(str(a) for a in outcome.addresses)
        message = f"assigned {', '.join(ips)} from pool {outcome.pool}"
        if ips != svc.status_ips or svc.stale_status:
            self._write_status(svc, ips)
            self._report(svc, "Normal", "AddressAssigned", message, "address")
        else:
            # Already in status (a restart, the other director): nothing to announce.
            self.reported.setdefault(ref, {})["address"] = message
        return ips

    def _with_drains(
        self,
        key: ServiceKey,
        vs: VirtualService,
        terminating: frozenset[tuple[ServiceKey, DestKey]],
    ) -> VirtualService:
        """Keep removed and terminating real servers at weight 0 while connections finish."""
        actual = self.reconciler.actual.get(key)
        dests = dict(vs.real_servers)
        candidates: dict[DestKey, RealServer] = {}
        if actual is not None and key.protocol is not IpProtocol.UDP:
            for dkey, rs in actual.real_servers.items():
                if dkey not in dests:
                    candidates[dkey] = RealServer(
                        rs.address,
                        rs.port,
                        0,
                        rs.forwarding,
                        rs.upper_threshold,
                        rs.lower_threshold,
                    )
        for tkey, dkey in terminating:
            if tkey == key and dkey in dests:
                if key.protocol is IpProtocol.UDP:
                    del dests[dkey]
                else:
                    candidates[dkey] = dests[dkey]
        waiting = self.draining.pop(key, {})
        for dkey in [d for d in waiting if d not in candidates]:
            del waiting[dkey]  # back in service, or gone for good
        if candidates:
            now = self.clock()
            active = self._active_connections(key)
            for dkey, rs in candidates.items():
                deadline = waiting.setdefault(dkey, now + self.kube.drain_timeout_seconds)
                if now >= deadline or active.get(dkey, 0) == 0:
                    dests.pop(dkey, None)
                    del waiting[dkey]
                    why = "timeout" if now >= deadline else "no active connections"
                    event(log, "drain.done", service=key, real_server=f"{dkey[0]}:{dkey[1]}",
                          reason=why)  # fmt: skip
                else:
                    dests[dkey] = rs
        if waiting:
            self.draining[key] = waiting
        if dests == vs.real_servers:
            return vs
        return VirtualService(key, vs.config, dests, vs.origin)

    def _active_connections(self, key: ServiceKey) -> dict[DestKey, int]:
        try:
            states = self.ipvs.read_dest_states(key)
        except OSError as exc:
            event(log, "drain.read_failed", level=logging.WARNING, service=key, reason=str(exc))
            return {}
        return {dkey: state.active_connections for dkey, state in states.items()}

    # -- cluster writes --------------------------------------------------------------
    def _write_status(self, svc: ServiceInfo, ips: tuple[str, ...]) -> None:
        if self.dry_run:
            event(log, "kube.would_write_status", service=svc.ref, ingress=",".join(ips) or "-")
            return
        if self.outbox is None:
            return
        writer = self.outbox.writer
        self.outbox.put(
            ("status", svc.ref), lambda: writer.patch_status(svc.namespace, svc.name, ips)
        )

    def _report(self, svc: ServiceInfo, kind: str, reason: str, message: str, topic: str) -> None:
        """An Event on the Service when what it says changes (not on every sync)."""
        topics = self.reported.setdefault(svc.ref, {})
        if topics.get(topic) == message:
            return
        topics[topic] = message
        level = logging.WARNING if kind == "Warning" else logging.INFO
        event(log, "service." + reason, level=level, service=svc.ref, message=message)
        if self.outbox is None:
            return
        if not self.leader:  # the leader writes Events; kept for when this box leads
            self.unsent.setdefault(svc.ref, {})[topic] = (svc, kind, reason, message)
            return
        self._send_event(svc, kind, reason, message)

    def _send_event(self, svc: ServiceInfo, kind: str, reason: str, message: str) -> None:
        assert self.outbox is not None
        writer = self.outbox.writer
        self.outbox.put(
            ("event", svc.ref, reason, message),
            lambda: writer.event(
                svc.namespace, svc.name, svc.uid, kind=kind, reason=reason, message=message
            ),
        )

    def _report_problems(self, svc: ServiceInfo, problems: Iterable[Problem]) -> None:
        """Refused parts of the Service (annotations, fields, endpoints): a Warning Event, a
        log line and a count each, once per distinct problem while it lasts."""
        topics = self.reported.setdefault(svc.ref, {})
        current: set[str] = set()
        for problem in problems:
            topic = f"problem:{problem.annotation}:{problem.message}"
            current.add(topic)
            if topic not in topics:
                resource = "endpointslices" if problem.reason == "InvalidEndpoint" else "services"
                self.health.refused[resource] = self.health.refused.get(resource, 0) + 1
            text = (
                f"{problem.annotation}: {problem.message}"
                if problem.reason == "InvalidAnnotation"
                else problem.message
            )
            self._report(svc, "Warning", problem.reason, text, topic)
        for topic in [t for t in topics if t.startswith("problem:") and t not in current]:
            del topics[topic]  # fixed: the same problem again is reported again

    # -- source filtering ----------------------------------------------------------------
    def _enforce(self) -> set[ServiceKey]:
        """Bring the firewall to the Services' source ranges; return the restricted virtual
        services whose filter is not in force (held back: closed, not open). A refused
        ruleset is tried again every 5 s, or at once when the wanted rules change."""
        wanted: dict[ServiceKey, tuple[str, ...]] = {}
        for by_key in self.restrictions.values():
            wanted.update(by_key)
        now = self.clock()
        due = wanted != self._attempted or now >= self._next_filter_retry
        if due and (wanted != self.enforced or not self._filter_synced):
            self._attempted = dict(wanted)
            if not (wanted or self.enforced or self._filter_in_use()):
                self._filter_synced = True  # nothing wanted, nothing of ours in force
            else:
                self._apply_filter(wanted)
        return {key for key in wanted if key not in self.enforced}

    def _filter_in_use(self) -> bool:
        return not self.dry_run and self.firewall is not None and self.firewall.in_use()

    def _apply_filter(self, wanted: dict[ServiceKey, tuple[str, ...]]) -> None:
        self._publish = True
        if self.dry_run:
            event(log, "firewall.would_apply", services=len(wanted))
        else:
            try:
                if self.firewall is None:
                    raise FirewallError("no packet filter is configured on this director")
                self.firewall.apply(wanted)
            except FirewallError as exc:
                self.health.firewall_errors += 1
                self.health.last_error = f"firewall: {exc}"[:300]
                self._filter_synced = False
                self._next_filter_retry = self.clock() + 5.0
                event(log, "firewall.rejected", level=logging.ERROR, services=len(wanted),
                      nft=str(exc)[:500], action="old rules kept, new ones held back")  # fmt: skip
                return
            event(log, "firewall.applied", services=len(wanted))
        self.enforced = dict(wanted)
        self._filter_synced = True

    # -- syncing ---------------------------------------------------------------------
    def _first_sync(self) -> None:
        self.reconciler.observe()  # drains are computed against what the kernel holds
        for key, vs in self._static().items():
            self.desired[key] = vs
            self.owner[key] = STATIC
        for ref in self._order(self.snapshot.services):
            self._guarded(f"service {ref}", self._adopt, ref)
        for key in self._enforce():
            self._hold_back(key, self.desired.pop(key, None), self.owner.pop(key, ""))
            self.produced = {ref: keys - {key} for ref, keys in self.produced.items()}
        self.full_resync(reread=False)
        self._synced = True
        self._keys_changed = True
        self._announce_vips()
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

    def _hold_back(self, key: ServiceKey, vs: VirtualService | None, ref: str) -> None:
        """A restricted virtual service whose filter is not in force: not programmed (and
        tried again with its Service until the filter is in force). ``vs``: say so (None:
        it was said before)."""
        if vs is not None:
            event(log, "firewall.held_back", level=logging.WARNING, service=key,
                  origin=vs.origin, reason="its source filter is not in force")  # fmt: skip
        self.held_back[key] = ref

    def full_resync(self, reread: bool = True) -> None:
        started = time.perf_counter()
        report = self.reconciler.full_sync(self.desired, reread=reread)
        if self.recorder is not None:
            self.recorder.observe_sync("full", report.seconds)
        self._after(report, "full-resync")
        self.health.last_sync = time.time()
        self.health.last_sync_seconds = time.perf_counter() - started
        self.health.syncs += 1
        self._next_resync = self.clock() + self.kube.resync_seconds
        self._state_dirty = True
        if report.plan.ops:
            event(
                log, "resync.repaired", ops=len(report.plan.ops), failed=len(report.result.errors)
            )

    def _sync(self, dirty: set[str]) -> None:
        self._publish = True
        refs = set(self.snapshot.services) | set(self.produced) if ALL in dirty else dirty
        if STATIC in refs or ALL in dirty:
            for key, vs in self._static().items():
                self.desired[key] = vs
                self._after(self.reconciler.sync_service(key, vs), STATIC)
        fresh: dict[str, tuple[dict[ServiceKey, VirtualService], float]] = {}

        def compute(ref: str) -> None:
            started = time.perf_counter()
            fresh[ref] = (self._compute(ref), time.perf_counter() - started)

        for ref in self._order(refs - {STATIC}):
            self._guarded(f"service {ref}", compute, ref)
        blocked = self._enforce()
        for ref, (services, seconds) in fresh.items():
            self._guarded(f"service {ref}", self._program, ref, services, blocked, seconds)

    def _static(self) -> Table:
        """The configuration's services, with the API's overrides, drains and health."""
        out: Table = {}
        for key, vs in self.settings.services.items():
            spec = self.settings.static_checks.get(key, self.policy.check)  # None: unchecked
            self._set_checks(
                key,
                {d: (Target(rs.address, rs.port, spec),) for d, rs in vs.real_servers.items()}
                if spec is not None and self.settings.health is not None
                else {},
            )
            checked = self._with_health(key, self.intents.apply(key, vs), STATIC)
            out[key] = self._with_drains(key, checked, frozenset())
        return out

    # -- active health checks ------------------------------------------------------------
    def _set_checks(self, key: ServiceKey, checks: dict[DestKey, tuple[Target, ...]]) -> None:
        before = {t for targets in self.checks.get(key, {}).values() for t in targets}
        after = {t for targets in checks.values() for t in targets}
        if checks:
            self.checks[key] = checks
        else:
            self.checks.pop(key, None)
        added, removed = set(), set()
        for target in after - before:
            users = self.target_users.setdefault(target, set())
            if not users:
                added.add(target)
            users.add(key)
        for target in before - after:
            users = self.target_users.get(target, set())
            users.discard(key)
            if not users:
                self.target_users.pop(target, None)
                self.down.discard(target)
                removed.add(target)
        if (added or removed) and self.on_targets is not None:
            self.on_targets(added, removed)

    def unhealthy(self, key: ServiceKey, dkey: DestKey) -> bool:
        return any(t in self.down for t in self.checks.get(key, {}).get(dkey, ()))

    def _with_health(self, key: ServiceKey, vs: VirtualService, ref: str) -> VirtualService:
        """Real servers failing their checks: weight 0 (or removed), unless all of them fail."""
        if not self.down or key not in self.checks:
            self.all_down.discard(key)
            return vs
        failing = [d for d in vs.real_servers if self.unhealthy(key, d)]
        if not failing:
            self.all_down.discard(key)
            return vs
        health = self.settings.health
        if len(failing) == len(vs.real_servers) and (health is None or health.all_down == "keep"):
            if key not in self.all_down:
                self.all_down.add(key)
                event(log, "health.all_down", level=logging.ERROR, service=key, origin=vs.origin,
                      action="kept: serving something beats serving nothing")  # fmt: skip
                svc = self.snapshot.services.get(ref)
                if svc is not None:
                    self._report(svc, "Warning", "AllBackendsDown",
                                 f"every real server of {key} fails its health check; kept",
                                 f"all-down:{key}")  # fmt: skip
            return vs
        self.all_down.discard(key)
        dests = dict(vs.real_servers)
        for dkey in failing:
            if health is not None and health.on_failure == "remove":
                del dests[dkey]  # then drained like any removed real server
            else:
                dests[dkey] = dests[dkey]._replace(weight=0)
        return VirtualService(key, vs.config, dests, vs.origin)

    # -- API intents (validated by the API, applied here on the loop's thread) ----------
    def _take_intents(self, items: list[IntentPosted], replies: list[Reply]) -> set[str]:
        """Apply a burst of intents to a copy, store it once, then make it current. A change
        that cannot be stored is answered as such and changes nothing."""
        new = self.intents.copy()
        accepted: list[Reply] = []
        dirty: set[str] = set()
        for posted in items:
            intent, reply = posted.intent, posted.reply
            try:
                new.change(intent)
            except IntentRefused as exc:
                reply.resolve(exc.status, exc.detail)
                continue
            accepted.append(reply)
            dirty.add(STATIC if isinstance(intent, SetScheduler) else ALL)
            event(log, "api.intent", intent=type(intent).__name__, detail=intent)
        if not accepted:
            return set()
        if self.intents_file is not None and not self.dry_run:
            try:
                new.save(self.intents_file)
            except OSError as exc:
                reason = f"{self.intents_file}: {exc.strerror or exc}"
                self.health.last_error = f"intents not stored: {reason}"
                event(log, "api.intent_not_stored", level=logging.ERROR, reason=reason)
                for reply in accepted:
                    reply.resolve(503, f"the change could not be stored ({reason}); "
                                  "nothing was changed")  # fmt: skip
                return set()
        self.intents = new
        replies.extend(accepted)
        return dirty

    def _program(
        self,
        ref: str,
        fresh: dict[ServiceKey, VirtualService],
        blocked: set[ServiceKey],
        seconds: float = 0.0,
    ) -> None:
        """Bring the kernel to one Service's freshly computed virtual services."""
        started = time.perf_counter()
        before_held = {k for k, r in self.held_back.items() if r == ref}
        for key in before_held:
            del self.held_back[key]  # decided afresh
        for key in blocked & fresh.keys():
            self._hold_back(key, None if key in before_held else fresh[key], ref)
            del fresh[key]
        before = self.produced.get(ref, frozenset())
        for key in before - fresh.keys():
            self.desired.pop(key, None)
            self.owner.pop(key, None)
            self._set_checks(key, {})
            self.all_down.discard(key)
            self.draining.pop(key, None)
            self._after(self.reconciler.sync_service(key, None), ref)
        for key, vs in fresh.items():
            self.desired[key] = vs
            self.owner[key] = ref
            self._after(self.reconciler.sync_service(key, vs), ref)
        if fresh.keys() != before:
            self._keys_changed = True
        if fresh:
            self.produced[ref] = frozenset(fresh)
        else:
            self.produced.pop(ref, None)
        self._state_dirty = True
        if self.recorder is not None:
            elapsed = seconds + time.perf_counter() - started
            self.recorder.observe_sync("service", elapsed)
            self._observe_programming(ref)

    def _observe_programming(self, ref: str) -> None:
        """Trigger time of the Service's newest EndpointSlice change -> applied, once."""
        triggers = [s.trigger_time for s in self.snapshot.slices_for(ref) if s.trigger_time]
        if not triggers or self.recorder is None:
            return
        newest = max(triggers)
        if self._triggers.get(ref) != newest:
            self._triggers[ref] = newest
            self.recorder.observe_programming(newest, dt.datetime.now(dt.UTC))

    def _after(self, report: SyncReport, ref: str) -> None:
        if report.result.errors:
            self.health.failed_ops += len(report.result.errors)
            self.health.last_error = report.result.errors[0].describe()
        if self.observer is not None and (report.plan.ops or report.plan.refused):
            self.observer(ref, report)

    # -- the read model ----------------------------------------------------------------
    def _publish_view(self) -> None:
        """Publish what the loop holds now as a frozen ``LoopView`` (under the loop's lock)."""
        self._publish = False
        unhealthy = {}
        if self.down:
            for key, dests in self.checks.items():
                sick = frozenset(d for d in dests if self.unhealthy(key, d))
                if sick:
                    unhealthy[key] = sick
        self.view = LoopView(
            version=self.view.version + 1,
            status=self.health.copy(synced=self._synced),
            desired=MappingProxyType(dict(self.desired)),
            owner=MappingProxyType(dict(self.owner)),
            options=MappingProxyType(dict(self.options)),
            produced=MappingProxyType(dict(self.produced)),
            services=MappingProxyType(dict(self.snapshot.services)),
            draining=MappingProxyType({k: frozenset(v) for k, v in self.draining.items()}),
            checks=MappingProxyType(dict(self.checks)),
            unhealthy=MappingProxyType(unhealthy),
            intents=self.intents,
            leader=self.leader,
            vrrp_state=self.vrrp_state,
            pools=tuple(
                PoolUse(p.name, p.size(), self.allocator.in_use_in(p)) for p in self.settings.pools
            ),
            all_down=len(self.all_down),
            filtered=frozenset(self.enforced),
        )

    # -- shadow mode -----------------------------------------------------------------
    def _write_state(self) -> None:
        if self.state_file is None or not self._state_dirty:
            return
        self._state_dirty = False
        write_state(self.state_file, self.desired, self.addresses_by_service())

    def addresses_by_service(self) -> dict[str, list[str]]:
        return {ref: [str(a) for a in self.allocator.held(ref)] for ref in sorted(self.produced)}


def reserved_addresses(settings: Settings) -> dict[Address, str]:
    """Addresses the director serves otherwise, which IPAM must never hand to a Service."""
    out: dict[Address, str] = {}
    for key, vs in settings.services.items():
        if not key.fwmark:
            out.setdefault(ipaddress.ip_address(key.address), f"static service {vs.origin}")
    for vip in settings.kubernetes.nodeport_vips if settings.kubernetes else ():
        out[ipaddress.ip_address(vip)] = "the NodePort VIP"
    return out
