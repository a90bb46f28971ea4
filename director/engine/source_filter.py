"""Source filtering of restricted Services (``spec.loadBalancerSourceRanges``) as the loop
keeps it: what each Service asks for, what the firewall holds, and what is held back.

A restricted virtual service whose filter is not in force is not programmed (closed, not
open) and is tried again with its Service. The filter is owned state: after each write the
loop takes the table's fingerprint, and reads it back every ``VERIFY_SECONDS`` (longer when
the table is big: a tenth of the loop's time at most, but never more than ``VERIFY_MAX``
apart). A table that changed
behind the director's back (``nft flush ruleset``) counts as holding nothing: every
restricted Service is recomputed, the filter written again (a repair), and should that
fail, the restricted virtual services are taken out of IPVS until it succeeds. A failure
to run nft is retried with a backoff of up to ``RETRY_SECONDS``; a ruleset nft refuses
when the wanted rules change, or every ``REFUSED_SECONDS``; the old rules stay in force
meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from director.core.firewall import Firewall, FirewallError
from director.core.model import RateLimit, ServiceKey
from director.core.owned import Failure, Ledger, Retry
from director.core.services import VirtualService
from director.engine.view import LoopStatus
from director.logs import event

log = logging.getLogger("director.controller")
RESOURCE = "nftables"
RETRY_SECONDS = 5.0  # the longest wait after a failure to run nft
REFUSED_SECONDS = 5.0  # a refused ruleset is tried again this often, unchanged (as before)
VERIFY_SECONDS = 2.0  # the table is read back this often, at least
VERIFY_MAX = 10.0  # and at most this long apart, however long a read-back takes


@dataclass
class FullNat:
    """The full-NAT virtual services each Service asks for, and those in force."""

    wanted: dict[str, frozenset[ServiceKey]] = field(default_factory=dict)
    enforced: frozenset[ServiceKey] = frozenset()


@dataclass
class Guarded:
    """The SYN-guarded virtual services each Service asks for, and those in force. A
    guarded service whose guard is not in force is served all the same (the guard is a
    defence, not what the Service asks to be); the status says which are guarded."""

    wanted: dict[str, frozenset[ServiceKey]] = field(default_factory=dict)
    enforced: frozenset[ServiceKey] = frozenset()
    # The guard nft refused (a kernel without synproxy, say), and why: the rest of the table
    # went in without it, and it is tried again when the guarded services change or the
    # table is written again after drift.
    refused: frozenset[ServiceKey] | None = None
    reason: str = ""


@dataclass
class Limited:
    """The limits each Service asks for, and those in force. A limited service whose
    limits are not in force is served all the same (a limit is a defence, as the guard is);
    the status says what is in force."""

    wanted: dict[str, dict[ServiceKey, RateLimit]] = field(default_factory=dict)
    enforced: dict[ServiceKey, RateLimit] = field(default_factory=dict)


_Attempt = tuple[
    dict[ServiceKey, tuple[str, ...]],
    frozenset[ServiceKey],
    frozenset[ServiceKey],
    dict[ServiceKey, RateLimit],
]


class SourceFilter:
    def __init__(
        self,
        firewall: Firewall | None,
        status: LoopStatus,
        clock: Callable[[], float],
        *,
        dry_run: bool,
        ledger: Ledger | None = None,
    ) -> None:
        self.firewall, self.status, self.clock, self.dry_run = firewall, status, clock, dry_run
        self.ledger = ledger or Ledger()
        self.restrictions: dict[str, dict[ServiceKey, tuple[str, ...]]] = {}
        self.fullnat = FullNat()  # full-NAT Services' virtual services
        self.guard = Guarded()  # SYN-guarded virtual services
        self.limits = Limited()  # rate-limited virtual services
        self.enforced: dict[ServiceKey, tuple[str, ...]] = {}  # in force, as far as known
        self.synced = False  # the firewall holds exactly ``enforced`` and ``fullnat.enforced``
        self._attempted: _Attempt | None = None
        self.retry = Retry(clock, cap=RETRY_SECONDS, refused_after=REFUSED_SECONDS)
        self.held_back: dict[ServiceKey, str] = {}  # restricted, filter not in force -> Service
        self._print: str | None = None  # the table's fingerprint after our last write
        self._next_verify = 0.0
        self._drift: str | None = None  # found, not yet repaired

    def want(
        self,
        ref: str,
        restrictions: dict[ServiceKey, tuple[str, ...]],
        snat: frozenset[ServiceKey] = frozenset(),
        guard: frozenset[ServiceKey] = frozenset(),
        limits: dict[ServiceKey, RateLimit] | None = None,
    ) -> None:
        """What a Service asks for now: source ranges, full NAT, the SYN guard and limits
        (only Services with any are kept: ``enforce`` walks them on every sync)."""
        if restrictions:
            self.restrictions[ref] = restrictions
        else:
            self.restrictions.pop(ref, None)
        for held, asked in ((self.fullnat.wanted, snat), (self.guard.wanted, guard)):
            if asked:
                held[ref] = asked
            else:
                held.pop(ref, None)
        if limits:
            self.limits.wanted[ref] = limits
        else:
            self.limits.wanted.pop(ref, None)

    def enforce(self) -> set[ServiceKey]:
        """Bring the firewall to the Services' source ranges and full NAT; return the
        virtual services whose rules are not in force."""
        wanted: dict[ServiceKey, tuple[str, ...]] = {}
        for by_key in self.restrictions.values():
            wanted.update(by_key)
        wanted_snat = frozenset().union(*self.fullnat.wanted.values())
        wanted_guard = frozenset().union(*self.guard.wanted.values())
        if self.firewall is None or wanted_guard == self.guard.refused:
            wanted_guard = frozenset()  # nothing to guard with, or nft will not take it
        wanted_limits: dict[ServiceKey, RateLimit] = {}
        for limits in self.limits.wanted.values():
            wanted_limits.update(limits)
        attempt = (wanted, wanted_snat, wanted_guard, wanted_limits)
        if attempt != self._attempted:
            self.retry.changed()
        changed = (
            wanted != self.enforced
            or wanted_snat != self.fullnat.enforced
            or wanted_guard != self.guard.enforced
            or wanted_limits != self.limits.enforced
        )
        if self.retry.due() and (changed or not self.synced):
            self._attempted = (dict(wanted), wanted_snat, wanted_guard, dict(wanted_limits))
            held = (
                self.enforced
                or self.fullnat.enforced
                or self.guard.enforced
                or self.limits.enforced
            )
            if not (any(attempt) or held or self._in_use()):
                self.synced = True  # nothing wanted, nothing of ours in force
            else:
                self._apply(*attempt)
        return {key for key in wanted if key not in self.enforced} | (
            wanted_snat - self.fullnat.enforced
        )

    def timed(self, now: float) -> tuple[set[str], bool]:
        """What the filter's timers make due: the Services to recompute (all the restricted
        ones after drift, the held-back ones when a retry is due), and whether the view is
        behind."""
        drifted = self.verify(now)
        if drifted:
            return drifted, True
        if self.held_back and self.retry.due(now):
            return set(self.held_back.values()) - {""}, False  # recomputed and programmed
        if not self.synced:
            self.enforce()
            return set(), True
        return set(), False

    def verify(self, now: float) -> set[str]:
        """Read the table back when due; on drift, the Services to recompute (every
        restricted one: their filters are written again, or they are held back)."""
        if now < self._next_verify or self._print is None or not self.synced:
            return set()
        assert self.firewall is not None  # _print is only taken from one
        started = self.clock()
        try:
            found = self.firewall.fingerprint()
        except Failure as exc:
            self._next_verify = self.clock() + VERIFY_SECONDS
            self.ledger.failed(RESOURCE, exc)
            event(log, "firewall.verify_failed", level=logging.ERROR, reason=exc.reason)
            return set()
        took = self.clock() - started
        self._next_verify = self.clock() + min(max(VERIFY_SECONDS, 10 * took), VERIFY_MAX)
        if found == self._print:
            self.ledger.ok(RESOURCE)
            return set()
        self._drift = (
            "the table is gone (flushed by someone else)"
            if not found
            else "the table differs from what the director wrote"
        )
        self.ledger.drift(RESOURCE, self._drift)
        event(
            log,
            "owned.drift",
            level=logging.ERROR,
            resource=RESOURCE,
            drift=self._drift,
            restricted=len(self.enforced),
            action="writing the filter again; the "
            "restricted virtual services leave IPVS should that fail",
        )
        # Nothing is known to be in force: what cannot be written again is held back.
        self.enforced, self.fullnat.enforced, self.guard.enforced = {}, frozenset(), frozenset()
        self.limits.enforced = {}
        self.guard.refused = None  # written again whole: the guard is tried again too
        self.synced, self._print = False, None
        self.retry.succeeded()  # try at once
        return (
            set(self.restrictions)
            | set(self.fullnat.wanted)
            | set(self.guard.wanted)
            | set(self.limits.wanted)
        )

    def hold_back(self, key: ServiceKey, vs: VirtualService | None, ref: str) -> None:
        """Not programmed until its filter is in force. ``vs``: say so (None: said before)."""
        if vs is not None:
            event(
                log,
                "firewall.held_back",
                level=logging.WARNING,
                service=key,
                origin=vs.origin,
                reason="its source filter or full NAT is not in force",
            )
        self.held_back[key] = ref

    def release(self, ref: str) -> set[ServiceKey]:
        """The Service's held-back virtual services, decided afresh from now on."""
        keys = {k for k, r in self.held_back.items() if r == ref}
        for key in keys:
            del self.held_back[key]
        return keys

    def _apply_guarded(
        self,
        wanted: dict[ServiceKey, tuple[str, ...]],
        snat: frozenset[ServiceKey],
        guard: frozenset[ServiceKey],
        limits: dict[ServiceKey, RateLimit],
    ) -> frozenset[ServiceKey]:
        """The table with the guard; should nft refuse it, without (the guard is a defence:
        the source filters and full NAT must not go down with it). What went in."""
        assert self.firewall is not None
        try:
            self.firewall.apply(wanted, snat, guard, limits)
            self.guard.refused = None
            return guard
        except FirewallError as exc:
            if not guard:
                raise
            self.firewall.apply(wanted, snat, frozenset(), limits)
            self.guard.refused, self.guard.reason = guard, str(exc)[:500]
            event(
                log,
                "guard.refused",
                level=logging.ERROR,
                guarded=len(guard),
                nft=str(exc)[:500],
                action="served without the SYN guard; tried again when the guarded services change",
            )
            return frozenset()

    def _in_use(self) -> bool:
        return not self.dry_run and self.firewall is not None and self.firewall.in_use()

    def _apply(
        self,
        wanted: dict[ServiceKey, tuple[str, ...]],
        snat: frozenset[ServiceKey],
        guard: frozenset[ServiceKey],
        limits: dict[ServiceKey, RateLimit],
    ) -> None:
        if self.dry_run:
            event(log, "firewall.would_apply", fields=_sizes(wanted, snat, guard, limits))
        else:
            try:
                if self.firewall is None:
                    raise FirewallError("no packet filter is configured on this director")
                guard = self._apply_guarded(wanted, snat, guard, limits)
                self._print = self.firewall.fingerprint()
            except Failure as exc:
                self.status.last_error = f"firewall: {exc}"[:300]
                self.synced = False
                wait = self.retry.failed(exc.kind)
                self.ledger.failed(RESOURCE, exc)
                event(
                    log,
                    "firewall.rejected",
                    level=logging.ERROR,
                    services=len(wanted),
                    kind=exc.kind,
                    nft=str(exc)[:500],
                    retry_in=f"{wait:.1f}s",
                    action="old rules kept, new ones held back",
                )
                return
            self.ledger.ok(RESOURCE, repaired=self._drift is not None)
            if self._drift is not None:
                event(
                    log,
                    "owned.repaired",
                    resource=RESOURCE,
                    drift=self._drift,
                    services=len(wanted),
                )
                self._drift = None
            event(log, "firewall.applied", fields=_sizes(wanted, snat, guard, limits))
        self.retry.succeeded()
        self.enforced, self.fullnat.enforced, self.guard.enforced = dict(wanted), snat, guard
        self.limits.enforced = dict(limits)
        self.synced = True
        self._next_verify = self.clock() + VERIFY_SECONDS


def _sizes(
    wanted: dict[ServiceKey, tuple[str, ...]],
    snat: frozenset[ServiceKey],
    guard: frozenset[ServiceKey],
    limits: dict[ServiceKey, RateLimit],
) -> dict[str, int]:
    """What a write holds, as its events say it."""
    return {"services": len(wanted), "snat": len(snat), "guard": len(guard), "limited": len(limits)}
