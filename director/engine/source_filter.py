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
from director.core.model import ServiceKey
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
        self.enforced: dict[ServiceKey, tuple[str, ...]] = {}  # in force, as far as known
        self.synced = False  # the firewall holds exactly ``enforced`` and ``fullnat.enforced``
        self._attempted: tuple[dict[ServiceKey, tuple[str, ...]], frozenset[ServiceKey]] | None
        self._attempted = None
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
    ) -> None:
        """What a Service asks for now: source ranges, and full NAT (only Services with
        either are kept: ``enforce`` walks them on every sync)."""
        if restrictions:
            self.restrictions[ref] = restrictions
        else:
            self.restrictions.pop(ref, None)
        if snat:
            self.fullnat.wanted[ref] = snat
        else:
            self.fullnat.wanted.pop(ref, None)

    def enforce(self) -> set[ServiceKey]:
        """Bring the firewall to the Services' source ranges and full NAT; return the
        virtual services whose rules are not in force."""
        wanted: dict[ServiceKey, tuple[str, ...]] = {}
        for by_key in self.restrictions.values():
            wanted.update(by_key)
        wanted_snat = frozenset().union(*self.fullnat.wanted.values())
        if (wanted, wanted_snat) != self._attempted:
            self.retry.changed()
        changed = wanted != self.enforced or wanted_snat != self.fullnat.enforced
        if self.retry.due() and (changed or not self.synced):
            self._attempted = (dict(wanted), wanted_snat)
            if not (
                wanted or wanted_snat or self.enforced or self.fullnat.enforced or self._in_use()
            ):
                self.synced = True  # nothing wanted, nothing of ours in force
            else:
                self._apply(wanted, wanted_snat)
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
        self.enforced, self.fullnat.enforced = {}, frozenset()
        self.synced, self._print = False, None
        self.retry.succeeded()  # try at once
        return set(self.restrictions) | set(self.fullnat.wanted)

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

    def _in_use(self) -> bool:
        return not self.dry_run and self.firewall is not None and self.firewall.in_use()

    def _apply(
        self, wanted: dict[ServiceKey, tuple[str, ...]], snat: frozenset[ServiceKey]
    ) -> None:
        if self.dry_run:
            event(log, "firewall.would_apply", services=len(wanted), snat=len(snat))
        else:
            try:
                if self.firewall is None:
                    raise FirewallError("no packet filter is configured on this director")
                self.firewall.apply(wanted, snat)
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
            event(log, "firewall.applied", services=len(wanted), snat=len(snat))
        self.retry.succeeded()
        self.enforced, self.fullnat.enforced = dict(wanted), snat
        self.synced = True
        self._next_verify = self.clock() + VERIFY_SECONDS
