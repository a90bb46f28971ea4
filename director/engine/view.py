"""The read model: what the loop publishes after each step that changed something.

A ``LoopView`` is frozen, and built from the loop's state while the loop holds its own
lock; the admin API, the status page and the metrics read the latest one without taking
that lock, so a scrape or a listing of 10,000 services never holds up the loop (Seesaw's
engine publishes snapshots to its RPC surface the same way).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from math import isqrt
from types import MappingProxyType
from typing import Any, TypeVar, overload

from director.core.annotations import Options
from director.core.announce import Route
from director.core.checks import Target
from director.core.cluster import ServiceInfo, split_resource
from director.core.intents import Intents
from director.core.model import DestKey, RateLimit, ServiceKey
from director.core.owned import Ledger
from director.core.services import VirtualService

STATIC = "static"  # the owner of the configuration's own services
Checks = Mapping[DestKey, tuple[Target, ...]]  # a virtual service's checked real servers


K = TypeVar("K")
V = TypeVar("V")


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


class Layered(Mapping[K, V]):
    """A read-only copy of a table that changes a few keys at a time: a base copy, shared
    by the views that follow, and the changes made since (``None``: removed). Publishing a
    step that changed one virtual service copies the changes so far, not 10,000 entries;
    a copy that large made every step's garbage a young 10,000-entry dict, and the next
    young-generation collection walked it. The base is copied afresh once the changes
    outgrow ~sqrt(2n), which keeps the cost per change at about that."""

    __slots__ = ("_base", "_changes", "_len")

    def __init__(
        self, base: dict[K, V], changes: dict[K, V | None] | None = None, length: int = -1
    ) -> None:
        self._base = base  # never changed once shared
        self._changes = changes or {}
        self._len = len(base) if length < 0 else length

    def then(self, table: Mapping[K, V], changed: Collection[K]) -> Layered[K, V]:
        """``table`` as it is now, given that it was this mapping but for ``changed``."""
        if not changed:
            return self
        if len(self._changes) + len(changed) > max(64, isqrt(2 * len(self._base))):
            return Layered(dict(table))
        changes = dict(self._changes)
        for key in changed:
            changes[key] = table.get(key)
        return Layered(self._base, changes, len(table))

    def rebased(self, before: Layered[K, V]) -> bool:
        """Whether this mapping made its own copy of the table instead of sharing
        ``before``'s."""
        return self._base is not before._base

    def __getitem__(self, key: K) -> V:
        changes = self._changes
        if key in changes:
            value = changes[key]
            if value is None:
                raise KeyError(key)
            return value
        return self._base[key]

    @overload
    def get(self, key: K, /) -> V | None: ...
    @overload
    def get(self, key: K, /, default: V) -> V: ...
    @overload
    def get(self, key: K, /, default: Any) -> Any: ...
    def get(self, key: K, /, default: Any = None) -> Any:
        changes = self._changes
        if key in changes:
            value = changes[key]
            return default if value is None else value
        return self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        changes = self._changes
        if key in changes:
            return changes[key] is not None
        return key in self._base

    def __iter__(self) -> Iterator[K]:
        # In the order of a dict that had the same changes made to it (a key removed and
        # put back keeps its first place).
        changes, base = self._changes, self._base
        if not changes:
            return iter(base)
        return self._merged(changes, base)

    @staticmethod
    def _merged(changes: dict[K, V | None], base: dict[K, V]) -> Iterator[K]:
        for key in base:
            if key not in changes or changes[key] is not None:
                yield key
        for key, value in changes.items():
            if value is not None and key not in base:
                yield key

    def __len__(self) -> int:
        return self._len


@dataclass
class LoopStatus:
    """What ``director status``, /readyz and the metrics report (kept by the loop; the
    view holds a copy)."""

    synced: bool = False  # the first full sync is applied, and the view says so
    first_sync_done: bool = False  # the first full sync is applied (the loop's own flag)
    leaders: dict[str, bool] = field(default_factory=dict)  # cluster -> holds its Lease
    vrrp_state: str | None = None  # MASTER / BACKUP / FAULT once keepalived reports
    connected: dict[str, bool] = field(default_factory=dict)
    disconnected_since: float | None = None
    last_error: str | None = None
    last_sync: float | None = None  # wall clock of the last full sync
    last_sync_seconds: float = 0.0
    failed_ops: int = 0
    drift_ops: int = 0  # operations a periodic full resync had to apply (the kernel drifted)
    loop_errors: int = 0  # unexpected exceptions in a step, survived
    refused: dict[str, int] = field(default_factory=dict)  # resource -> objects refused
    # (cluster, verb, resource, code) -> cluster writes that failed (retried or dropped)
    write_errors: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    # Every owned resource's state: one live ledger, shared by the copies (its keepers run
    # on their own threads and write to it as they go).
    owned: Ledger = field(default_factory=Ledger)

    @property
    def leader(self) -> bool:
        """Holds the status Lease of every cluster served."""
        return bool(self.leaders) and all(self.leaders.values())

    def clusters_connected(self) -> dict[str, bool]:
        """Each named cluster whose watches reported: every one of them connected."""
        out: dict[str, bool] = {}
        for resource, up in self.connected.items():
            cluster, _ = split_resource(resource)
            if cluster:
                out[cluster] = out.get(cluster, True) and up
        return out

    @property
    def kubernetes_connected(self) -> bool:
        return bool(self.connected) and all(self.connected.values())

    def copy(self, synced: bool) -> LoopStatus:
        return dataclasses.replace(
            self,
            synced=synced,
            connected=dict(self.connected),
            leaders=dict(self.leaders),
            refused=dict(self.refused),
            write_errors=dict(self.write_errors),
        )


@dataclass(frozen=True, slots=True)
class PoolUse:
    """How much of an address pool is in use."""

    name: str
    size: int
    in_use: int


@dataclass(frozen=True, slots=True)
class Addressing:
    """The VIPs' side: each pool's use, each BGP route with the reason for its state, and
    why every route is withdrawn (maintenance), if it is."""

    pools: tuple[PoolUse, ...] = ()
    routes: Mapping[str, Route] = field(default_factory=_empty)
    maintenance: str | None = None
    transitions: int = 0  # routes announced or withdrawn since the start


@dataclass(frozen=True, slots=True)
class LoopView:
    """The loop's state at the end of one step. Mappings are read-only copies."""

    version: int = 0
    status: LoopStatus = field(default_factory=LoopStatus)
    desired: Layered[ServiceKey, VirtualService] = field(default_factory=lambda: Layered({}))
    owner: Mapping[ServiceKey, str] = field(default_factory=_empty)
    options: Mapping[str, Options] = field(default_factory=_empty)
    produced: Mapping[str, tuple[ServiceKey, ...]] = field(default_factory=_empty)
    services: Mapping[str, ServiceInfo] = field(default_factory=_empty)
    draining: Mapping[ServiceKey, frozenset[DestKey]] = field(default_factory=_empty)
    # The real servers with active checks, and those failing them.
    checks: Mapping[ServiceKey, Checks] = field(default_factory=_empty)
    unhealthy: Mapping[ServiceKey, frozenset[DestKey]] = field(default_factory=_empty)
    intents: Intents = field(default_factory=Intents)
    addressing: Addressing = field(default_factory=Addressing)
    all_down: int = 0
    # each virtual service's sorry server (what serves while none of its real servers is up)
    sorry: Mapping[ServiceKey, DestKey] = field(default_factory=_empty)
    filtered: frozenset[ServiceKey] = frozenset()
    limits: Mapping[ServiceKey, RateLimit] = field(default_factory=_empty)  # in force
    lease_refused: str | None = None  # why the API server refuses the status Lease

    @property
    def real_servers(self) -> int:
        return sum(len(vs.real_servers) for vs in self.desired.values())

    def unhealthy_dest(self, key: ServiceKey, dkey: DestKey) -> bool:
        return dkey in self.unhealthy.get(key, ())
