"""What the loop shows the world besides the kernel and the cluster: the read model
(``LoopView``, for the API, the status page and the metrics), the state file, the VIP set
(to keepalived) and readiness (to systemd). Each is written when it changed, and only
then."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from director.core.intents import Intents
from director.core.model import DestKey, RateLimit, ServiceKey
from director.core.owned import Ledger, Retry, classify, file_mark
from director.core.pools import Pool
from director.engine.announcer import VipAnnouncer
from director.engine.hooks import Hooks
from director.engine.state_file import write_state
from director.engine.view import Addressing, LoopStatus, LoopView, PoolUse
from director.logs import event

if TYPE_CHECKING:
    from director.core.snapshot import Snapshot
    from director.engine.addresses import Addresses
    from director.engine.health_gate import HealthGate
    from director.engine.table import Programmed

K = TypeVar("K")
V = TypeVar("V")
STATE_FILE_SECONDS = 1.0
VERIFY_SECONDS = 5.0  # the state file is looked at (stat) this often
log = logging.getLogger("director.controller")


class Step(NamedTuple):
    """What a step of the loop leaves for the view, taken from each part as the step ends
    (under the loop's lock): frozen, so the view holds it as it was."""

    status: LoopStatus
    draining: Mapping[ServiceKey, frozenset[DestKey]]
    intents: Intents
    pools: tuple[PoolUse, ...]
    filtered: frozenset[ServiceKey]
    limits: Mapping[ServiceKey, RateLimit]  # the rate limits in force
    lease_refused: str | None


class Exports:
    def __init__(
        self,
        state_file: Path | None,
        hooks: Hooks,
        bgp_pools: Iterable[Pool] = (),
        *,
        ledger: Ledger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.view = LoopView()  # published after each step that changed something
        # the VIP set to keepalived, the bgp pools' routes to FRR, whenever they change
        self.vips = VipAnnouncer(hooks, bgp_pools)
        self.hooks = hooks  # on_ready: once, when the first sync is applied
        self.state_file = state_file
        self.due = True  # the view is behind: publish it at the end of this step
        self.state_due = False
        self.settle_due = False  # the view copied its base afresh: see settle
        self._state_next = float("-inf")  # when the state file may be written again
        self.ledger = ledger or Ledger()
        self._clock = clock
        self._state_retry = Retry(clock)
        self._state_mark: tuple[int, int, int] | None = None  # the file as last written
        self._state_verify = float("-inf")
        self._state_drift: str | None = None
        if state_file is not None:
            self.ledger.track("state-file")
        self._seen = (-1, -1, -1)  # snapshot, checks and verdicts versions last published

    def publish(self, step: Step, table: Programmed, gate: HealthGate, snapshot: Snapshot) -> None:
        """Publish ``step`` with the programmed table, the checks and the cluster's snapshot
        as a frozen ``LoopView`` (under the loop's lock). Of the desired table, what changed
        since the last view; the rest only when it changed."""
        self.due = False
        prev, stale = self.view, table.stale
        seen = (snapshot.services_version, gate.version, gate.verdicts)
        if seen[0] != self._seen[0]:
            stale.add("services")
        if seen[1] != self._seen[1]:
            stale.add("checks")
        if seen[1:] != self._seen[1:]:
            stale.add("verdicts")
        self._seen = seen
        desired = prev.desired.then(table.desired, table.changed)
        self.settle_due |= desired.rebased(prev.desired)
        self.view = LoopView(
            version=prev.version + 1,
            status=step.status,
            desired=desired,
            owner=_frozen(table.owner) if "keys" in stale else prev.owner,
            options=_frozen(table.options) if "options" in stale else prev.options,
            produced=_frozen(table.produced) if "keys" in stale else prev.produced,
            services=_frozen(snapshot.services) if "services" in stale else prev.services,
            draining=step.draining,
            checks=_frozen(gate.checks) if "checks" in stale else prev.checks,
            unhealthy=_frozen(gate.failing()) if "verdicts" in stale else prev.unhealthy,
            intents=step.intents,
            addressing=Addressing(
                step.pools, self.vips.snapshot, self.vips.maintenance, self.vips.transitions
            ),
            all_down=len(gate.all_down),
            sorry=_frozen({key: server.key for key, server in gate.sorry.items()}),
            filtered=step.filtered,
            limits=step.limits,
            lease_refused=step.lease_refused,
        )
        stale.clear()
        table.changed.clear()

    def settle(self) -> None:
        """After a step whose view copied the desired table afresh (one dict as big as the
        table, about once per sqrt(2n) changes): collect the young generations now, out of
        the lock and after the kernel has the step's changes, so the copy moves to the old
        generation here and not during a later event (whose young collection would otherwise
        walk it, several times the cost of any other)."""
        self.settle_due = False
        gc.collect(1)

    def write_state(self, table: Programmed, addresses: Addresses) -> None:
        """Rewrite the state file if the table changed: at most once every
        ``STATE_FILE_SECONDS``, and spending at most a tenth of the loop's time on it. Each
        write is the whole table (megabytes at 10,000 Services) where a change is one
        virtual service. The loop steps at least twice a second, so the last
        change is always written, that much later. The file is owned state: looked at every
        ``VERIFY_SECONDS`` and written again if someone removed or replaced it; a write
        that fails (a full disk, the folder gone) is tried again with a backoff, and never
        stops the step."""
        if self.state_file is None:
            return
        started = self._clock()
        if not self.state_due and started >= self._state_verify:
            self._state_verify = started + VERIFY_SECONDS
            if self._state_mark is not None and file_mark(self.state_file) != self._state_mark:
                self._state_drift = f"{self.state_file} was removed or replaced"
                self.ledger.drift("state-file", self._state_drift)
                event(
                    log,
                    "owned.drift",
                    level=logging.WARNING,
                    resource="state-file",
                    drift=self._state_drift,
                    action="writing it again",
                )
                self.state_due = True
        if not self.state_due or started < self._state_next:
            return
        held = {ref: addresses.held(ref) for ref in sorted(table.produced)}
        try:
            write_state(self.state_file, table.desired, held)
            self._state_mark = file_mark(self.state_file)
        except OSError as exc:
            failure = classify(exc)
            wait = self._state_retry.failed(failure.kind)
            self._state_next = started + wait
            self.ledger.failed("state-file", failure)
            event(
                log,
                "state_file.write_failed",
                level=logging.ERROR,
                file=str(self.state_file),
                kind=failure.kind,
                reason=failure.reason,
                retry_in=f"{wait:.1f}s",
            )
            return
        self.state_due = False
        self._state_retry.succeeded()
        self.ledger.ok("state-file", repaired=self._state_drift is not None)
        if self._state_drift is not None:
            event(log, "owned.repaired", resource="state-file", drift=self._state_drift)
            self._state_drift = None
        took = self._clock() - started
        self._state_next = started + max(STATE_FILE_SECONDS, 10 * took)

    def ready(self, message: str) -> None:
        if self.hooks.on_ready is not None:
            self.hooks.on_ready(message)


def _frozen(table: Mapping[K, V]) -> Mapping[K, V]:
    """A read-only copy, for the view."""
    return MappingProxyType(dict(table))
