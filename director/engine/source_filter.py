"""Source filtering of restricted Services (``spec.loadBalancerSourceRanges``) as the loop
keeps it: what each Service asks for, what the firewall holds, and what is held back.

A restricted virtual service whose filter is not in force is not programmed (closed, not
open) and is tried again with its Service. A refused ruleset is tried again every 5 s, or at
once when the wanted rules change; the old rules stay in force meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from director.core.firewall import Firewall, FirewallError
from director.core.model import ServiceKey, VirtualService
from director.engine.view import LoopStatus
from director.logs import event

log = logging.getLogger("director.controller")
RETRY_SECONDS = 5.0


class SourceFilter:
    def __init__(
        self,
        firewall: Firewall | None,
        status: LoopStatus,
        clock: Callable[[], float],
        *,
        dry_run: bool,
    ) -> None:
        self.firewall, self.status, self.clock, self.dry_run = firewall, status, clock, dry_run
        self.restrictions: dict[str, dict[ServiceKey, tuple[str, ...]]] = {}
        self.enforced: dict[ServiceKey, tuple[str, ...]] = {}  # in force, as far as known
        self.synced = False  # the firewall holds exactly ``enforced``
        self._attempted: dict[ServiceKey, tuple[str, ...]] | None = None
        self.next_retry = 0.0
        self.held_back: dict[ServiceKey, str] = {}  # restricted, filter not in force -> Service

    def want(self, ref: str, restrictions: dict[ServiceKey, tuple[str, ...]]) -> None:
        """What a Service asks for now (only restricted Services are kept: ``enforce``
        walks them on every sync)."""
        if restrictions:
            self.restrictions[ref] = restrictions
        else:
            self.restrictions.pop(ref, None)

    def enforce(self) -> set[ServiceKey]:
        """Bring the firewall to the Services' source ranges; return the restricted virtual
        services whose filter is not in force."""
        wanted: dict[ServiceKey, tuple[str, ...]] = {}
        for by_key in self.restrictions.values():
            wanted.update(by_key)
        now = self.clock()
        due = wanted != self._attempted or now >= self.next_retry
        if due and (wanted != self.enforced or not self.synced):
            self._attempted = dict(wanted)
            if not (wanted or self.enforced or self._in_use()):
                self.synced = True  # nothing wanted, nothing of ours in force
            else:
                self._apply(wanted)
        return {key for key in wanted if key not in self.enforced}

    def hold_back(self, key: ServiceKey, vs: VirtualService | None, ref: str) -> None:
        """Not programmed until its filter is in force. ``vs``: say so (None: said before)."""
        if vs is not None:
            event(log, "firewall.held_back", level=logging.WARNING, service=key,
                  origin=vs.origin, reason="its source filter is not in force")  # fmt: skip
        self.held_back[key] = ref

    def release(self, ref: str) -> set[ServiceKey]:
        """The Service's held-back virtual services, decided afresh from now on."""
        keys = {k for k, r in self.held_back.items() if r == ref}
        for key in keys:
            del self.held_back[key]
        return keys

    def _in_use(self) -> bool:
        return not self.dry_run and self.firewall is not None and self.firewall.in_use()

    def _apply(self, wanted: dict[ServiceKey, tuple[str, ...]]) -> None:
        if self.dry_run:
            event(log, "firewall.would_apply", services=len(wanted))
        else:
            try:
                if self.firewall is None:
                    raise FirewallError("no packet filter is configured on this director")
                self.firewall.apply(wanted)
            except FirewallError as exc:
                self.status.firewall_errors += 1
                self.status.last_error = f"firewall: {exc}"[:300]
                self.synced = False
                self.next_retry = self.clock() + RETRY_SECONDS
                event(log, "firewall.rejected", level=logging.ERROR, services=len(wanted),
                      nft=str(exc)[:500], action="old rules kept, new ones held back")  # fmt: skip
                return
            event(log, "firewall.applied", services=len(wanted))
        self.enforced = dict(wanted)
        self.synced = True
