"""Announcing the VIPs: the addresses the director serves, handed to whatever makes them
reachable, whenever that changes, and only then.

- VIPs outside the ``bgp`` pools go to keepalived as one set (VRRP moves them with the
  pair's master); the set is recomputed only when the virtual services' keys changed.
- VIPs of ``bgp`` pools become routes (:func:`director.core.announce.decide`): announced
  while this director can serve them, withdrawn otherwise, each decision logged with its
  reason when it changes. Only the VIPs whose virtual services were touched in a step are
  decided again, so one change costs the same at 10 VIPs and at 10,000.

Where the address set comes from and who announces it are kept apart: keepalived and FRR
are hooks the runtime sets.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType

from director.core.announce import Route, decide, pool_of
from director.core.model import ServiceKey
from director.core.pools import Pool
from director.core.services import Table
from director.engine.hooks import Hooks
from director.logs import event

log = logging.getLogger("director.announce")


class VipAnnouncer:
    def __init__(self, hooks: Hooks, bgp_pools: Iterable[Pool] = ()) -> None:
        self.hooks = hooks  # announce: the VRRP VIP set; on_routes: every route
        self.bgp_pools = tuple(bgp_pools)
        self.maintenance: str | None = None  # why every route is withdrawn, if it is
        self.leaving: str | None = None  # the director is stopping (not kept: it comes back)
        self.routes: dict[str, Route] = {}
        self.transitions = 0  # announced <-> withdrawn (a metric)
        self.snapshot: Mapping[str, Route] = MappingProxyType({})  # for the view: a copy
        self._vrrp_vips: frozenset[str] = frozenset()
        self._announced: frozenset[str] | None = None
        self._keys_changed = True
        self._by_vip: dict[str, set[ServiceKey]] = {}  # bgp VIP -> its virtual services
        self._dirty: set[str] | None = None  # bgp VIPs to decide again (None: every one)
        self._ready = False
        self._pushed = False

    def keys_changed(self) -> None:
        """The set of virtual services changed: the VIPs may have."""
        self._keys_changed = True

    def touched(self, keys: Iterable[ServiceKey]) -> None:
        """These virtual services were programmed (or removed): decide their VIPs again."""
        if self.bgp_pools:
            self._mark(key.address for key in keys if not key.fwmark)

    def _mark(self, vips: Iterable[str]) -> None:
        if self._dirty is not None:
            self._dirty.update(vips)

    def update(
        self,
        keys: Iterable[ServiceKey],
        programmed: Table | None = None,
        ready: bool = True,
        down: Collection[ServiceKey] = (),
        maintenance: str | None = None,
    ) -> None:
        """Announce what changed: the VRRP set if the keys changed, the routes of the VIPs
        touched since the last call (``programmed``: what the kernel holds; ``down``: the
        services whose every real server fails its check; ``maintenance``: the operator's
        reason to withdraw everything)."""
        if ready != self._ready:
            self._ready, self._dirty = ready, None
        reason = f"the director is stopping ({self.leaving})" if self.leaving else maintenance
        if reason != self.maintenance:
            self.maintenance, self._dirty = reason, None
            event(log, "bgp.maintenance", withdrawn=reason is not None, reason=reason or "-")
        if self._keys_changed:
            self._keys_changed = False
            self._index(keys)
        if self.hooks.announce is not None and self._vrrp_vips is not self._announced:
            if self._vrrp_vips != self._announced:  # the same addresses: no reload
                self.hooks.announce(self._vrrp_vips)
            self._announced = self._vrrp_vips
        if self.bgp_pools and (self._dirty is None or self._dirty):
            self._decide(programmed if programmed is not None else {}, down)

    def _index(self, keys: Iterable[ServiceKey]) -> None:
        """The VRRP set, and each bgp VIP's virtual services."""
        vips: set[str] = set()
        by_vip: dict[str, set[ServiceKey]] = {}
        for key in keys:
            if key.fwmark:
                continue
            if self.bgp_pools and pool_of(key.address, self.bgp_pools) is not None:
                by_vip.setdefault(key.address, set()).add(key)
            else:
                vips.add(key.address)
        if self.bgp_pools:
            gone = self._by_vip.keys() - by_vip.keys()
            self._mark(gone | {v for v, ks in by_vip.items() if ks != self._by_vip.get(v)})
            self._by_vip = by_vip
        self._vrrp_vips = frozenset(vips)

    def _decide(self, programmed: Table, down: Collection[ServiceKey]) -> None:
        vips = set(self._by_vip) | set(self.routes) if self._dirty is None else self._dirty
        self._dirty = set()
        flipped, changed = not self._pushed, False
        for vip in vips:
            keys = self._by_vip.get(vip)
            pool = pool_of(vip, self.bgp_pools)
            before = self.routes.get(vip)
            if not keys or pool is None:
                if before is not None:  # FRR releases its address too
                    del self.routes[vip]
                    flipped = changed = True
                    event(
                        log,
                        "bgp.announce",
                        vip=vip,
                        announced=False,
                        pool=before.pool,
                        reason="gone: no virtual service has this address",
                    )
                continue
            route = decide(
                vip,
                pool,
                keys,
                programmed,
                ready=self._ready,
                maintenance=self.maintenance,
                down=down,
            )
            if route != before:
                self.routes[vip] = route
                changed = True
                if before is None or before.announced != route.announced:
                    flipped = True
                    self.transitions += before is not None
                    event(
                        log,
                        "bgp.announce",
                        vip=vip,
                        announced=route.announced,
                        pool=route.pool,
                        reason=route.reason,
                    )
        if changed:
            self.snapshot = MappingProxyType(dict(self.routes))
        if flipped and self.hooks.on_routes is not None:
            self._pushed = True
            self.hooks.on_routes(self.snapshot)
