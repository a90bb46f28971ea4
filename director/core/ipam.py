"""Load-balancer address allocation from the pools (``director.core.pools``). Pure
bookkeeping, no I/O.

A Service asks for addresses of the families in ``spec.ipFamilies``; it may name addresses
(``lvs-director.io/load-balancer-ips`` or the deprecated ``spec.loadBalancerIP``), a pool
(``lvs-director.io/pool``), and a sharing key (``lvs-director.io/allow-shared-ip``). Two
Services share one address only when both carry the same sharing key and none of their
(protocol, port) pairs collide.

The allocator is restart-safe: the controller first hands it what Service status already
says (``keep``), so a restart assigns nothing new and moves nothing.

Addresses the director uses otherwise (the NodePort VIPs, static services' VIPs) are
``reserved``: never assigned, and refused when a Service asks for them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from director.core.pools import Address, Pool, PortKey


@dataclass(frozen=True, slots=True)
class Request:
    """What one Service asks of IPAM."""

    name: str  # [cluster/]namespace/name
    versions: tuple[int, ...]  # address families wanted, in order (4, 6)
    ports: frozenset[PortKey]
    requested: tuple[Address, ...] = ()
    pool: str | None = None
    sharing_key: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)  # the Service's labels
    cluster: str = ""  # the Service's cluster ("": the one cluster)
    pools: frozenset[str] | None = None  # the pools its cluster may draw from (None: all)

    @property
    def namespace(self) -> str:
        return self.name.split("/")[-2]

    def given(self, pool: Pool) -> bool:
        """Is ``pool`` one the Service's cluster may draw from?"""
        return self.pools is None or pool.name in self.pools

    def admitted(self, pool: Pool) -> bool:
        return self.given(pool) and pool.allocation.admits(self.namespace, self.labels)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an assignment gave a Service: its addresses, or why none."""

    addresses: tuple[Address, ...] = ()
    error: str | None = None  # why nothing was assigned (all or nothing)
    pool: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class _Holder:
    """A Service's hold on an address: its sharing key and its ports."""

    sharing_key: str | None
    ports: frozenset[PortKey]


@lru_cache(maxsize=4096)
def _holder(sharing_key: str | None, ports: frozenset[PortKey]) -> _Holder:
    """One holder per distinct (sharing key, ports): most Services hold the same few, and
    each set of ports costs 216 bytes (bounded: distinct ones cannot grow it)."""
    return _Holder(sharing_key, ports)


@dataclass
class Allocator:
    """The pools' addresses and who holds each."""

    pools: tuple[Pool, ...]
    # Addresses never given out, with what they are ("the NodePort VIP").
    reserved: dict[Address, str] = field(default_factory=dict)
    # address -> its holders, as (Service, _Holder) pairs: a tuple, not a dict, since most
    # addresses have one (a dict each was 2 MB at 10,000 Services)
    _used: dict[Address, tuple[tuple[str, _Holder], ...]] = field(default_factory=dict)
    _held: dict[str, tuple[Address, ...]] = field(default_factory=dict)
    _cursor: dict[tuple[str, int], int] = field(default_factory=dict)
    # Addresses in use per pool, kept as they are taken and freed: the loop reads it on
    # every step, and counting every address against the pools each time was not cheap.
    _in_pool: dict[str, int] = field(default_factory=dict)
    # address -> the Service whose status names it and that holds nothing yet: no other
    # Service is given it as a fresh address meanwhile (``claim``)
    _claims: dict[Address, str] = field(default_factory=dict)
    _claimed: dict[str, tuple[Address, ...]] = field(default_factory=dict)

    # -- queries -------------------------------------------------------------------------
    def pool_of(self, address: Address) -> Pool | None:
        return next((p for p in self.pools if p.contains(address)), None)

    def held(self, name: str) -> tuple[Address, ...]:
        return self._held.get(name, ())

    def in_use(self) -> int:
        return len(self._used)

    def users(self, address: Address) -> tuple[str, ...]:
        """The Services ``address`` is assigned to."""
        return tuple(sorted(name for name, _ in self._used.get(address, ())))

    def holders_in(self, pool: Pool) -> list[str]:
        """The Services holding an address of ``pool``."""
        return sorted(n for n, held in self._held.items() if any(pool.contains(a) for a in held))

    def in_use_in(self, pool: Pool) -> int:
        return self._in_pool.get(pool.name, 0)

    # -- changes -------------------------------------------------------------------------
    def claim(self, name: str, addresses: Iterable[Address]) -> None:
        """What Service ``name``'s status names, claimed for it until it is assigned or
        released: a Service whose own address was taken meanwhile then gets a free one, not
        the next Service's (a cluster added back would otherwise renumber a chain of its
        Services). A Service that holds addresses already claims nothing."""
        if name in self._held or name in self._claimed:
            return
        mine = tuple(addresses)
        for address in mine:
            self._claims.setdefault(address, name)
        self._claimed[name] = mine

    def _unclaim(self, name: str) -> None:
        for address in self._claimed.pop(name, ()):
            if self._claims.get(address) == name:
                del self._claims[address]

    def release(self, name: str) -> None:
        self._unclaim(name)
        for address in self._held.pop(name, ()):
            holders = self._used.get(address)
            if holders is not None:
                rest = tuple(pair for pair in holders if pair[0] != name)
                if rest:
                    self._used[address] = rest
                else:
                    del self._used[address]
                    self._count(address, -1)

    def assign(self, request: Request, keep: Iterable[Address] = ()) -> Outcome:
        """Addresses for ``request``; ``keep`` is what its status already says.

        Keeps what it can of ``keep`` (restart safety), honours requested addresses, and
        otherwise picks the first free address of each wanted family. All or nothing: on
        error the Service holds no address.
        """
        # What it holds now counts as much as what status says: status may lag a write.
        keep = (*keep, *self._held.get(request.name, ()))
        self.release(request.name)
        pools = self._candidate_pools(request)
        if isinstance(pools, str):
            return Outcome(error=pools)
        chosen: list[Address] = []
        if request.requested:
            for address in request.requested:
                problem = self._check(request, address, pools, requested=True)
                if problem:
                    return Outcome(error=problem)
                chosen.append(address)
        else:
            kept: dict[int, Address] = {}
            for a in keep:
                if a.version not in kept and not self._check(request, a, pools):
                    kept[a.version] = a
            for version in request.versions:
                found = kept.get(version) or self._first_free(request, pools, version)
                if found is None:
                    names = ", ".join(p.name for p in pools)
                    return Outcome(
                        error=f"no free IPv{version} address in pool(s) {names} "
                        f"(pool exhausted or no IPv{version} range)"
                    )
                chosen.append(found)
        holder = _holder(request.sharing_key, request.ports)
        for address in chosen:
            holders = self._used.get(address)
            if holders is None:
                self._count(address, 1)
            others = tuple(pair for pair in holders or () if pair[0] != request.name)
            self._used[address] = (*others, (request.name, holder))
        self._held[request.name] = tuple(chosen)
        pool = self.pool_of(chosen[0]) if chosen else None
        return Outcome(tuple(chosen), pool=pool.name if pool else None)

    # -- internals -----------------------------------------------------------------------
    def _count(self, address: Address, change: int) -> None:
        pool = self.pool_of(address)
        if pool is not None:
            self._in_pool[pool.name] = self._in_pool.get(pool.name, 0) + change

    def _candidate_pools(self, request: Request) -> tuple[Pool, ...] | str:
        """The pools ``request`` may draw from, in the order to try them: those it names or
        may get automatically, that serve it (``allocate_to``), by priority."""
        if request.pool is not None:
            named = [p for p in self.pools if p.name == request.pool]
            if not named:
                known = ", ".join(p.name for p in self.pools) or "none configured"
                return f"pool {request.pool!r} does not exist (pools: {known})"
            if not request.admitted(named[0]):
                return _not_served(named[0], request)
            return tuple(named)
        served = [p for p in self.pools if request.admitted(p)]
        if request.requested:
            return tuple(served)
        auto = [p for p in served if p.auto_assign]
        if not auto:
            if any(p.auto_assign for p in self.pools):
                return (
                    f"no pool with auto_assign serves {request.name} (allocate_to: "
                    + "; ".join(
                        f"{p.name}: {p.allocation.describe()}" for p in self.pools if p.auto_assign
                    )
                    + ")"
                )
            return "no pool has auto_assign enabled; request an address or a pool"
        # By priority (lower first), pools without one last; the file's order otherwise.
        auto.sort(key=lambda p: (p.allocation.priority is None, p.allocation.priority or 0))
        return tuple(auto)

    def _check(
        self, request: Request, address: Address, pools: tuple[Pool, ...], requested: bool = False
    ) -> str | None:
        if not any(p.contains(address) for p in pools):
            home = self.pool_of(address)
            if home is not None and not request.admitted(home):
                return f"address {address}: {_not_served(home, request)}"
            where = f"pool {pools[0].name!r}" if len(pools) == 1 else "any configured pool"
            return f"address {address} is outside {where}"
        if address in self.reserved:
            return f"address {address} is reserved for {self.reserved[address]}"
        if requested and address.version not in request.versions:
            return (
                f"address {address} is IPv{address.version} but the Service's "
                "ipFamilies do not include it"
            )
        return self._conflict(request, address)

    def _conflict(self, request: Request, address: Address) -> str | None:
        holders = self._used.get(address)
        if not holders:
            return None
        for other, holder in holders:
            if request.sharing_key is None or holder.sharing_key != request.sharing_key:
                return f"address {address} is already used by {other}"
            clash = request.ports & holder.ports
            if clash:
                proto, port = sorted(clash)[0]
                return (
                    f"address {address} is shared with {other}, which already uses {proto}/{port}"
                )
        return None

    def _first_free(
        self, request: Request, pools: tuple[Pool, ...], version: int
    ) -> Address | None:
        # Shareable addresses first (a sharing key asks to pack Services together).
        if request.sharing_key is not None:
            for address, holders in self._used.items():
                if (
                    address.version == version
                    and any(h.sharing_key == request.sharing_key for _, h in holders)
                    and any(p.contains(address) for p in pools)
                    and self._conflict(request, address) is None
                ):
                    return address
        for pool in pools:
            found = self._scan(pool, version, request.name)
            if found is not None:
                return found
        return None

    def _scan(self, pool: Pool, version: int, name: str = "") -> Address | None:
        """The first free address of ``version`` in ``pool``, starting after the last pick.

        The cursor keeps a fresh cluster's 10,000 allocations linear instead of quadratic.
        """
        make = ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address
        ranges = [(first, last) for fam, first, last in pool.ranges if fam == version]
        start = self._cursor.get((pool.name, version), 0)
        for low, high in [(max(first, start), last) for first, last in ranges if last >= start] + [
            (first, min(last, start - 1)) for first, last in ranges if first < start
        ]:
            value = low
            while value <= high:
                address = make(value)
                if (
                    address not in self._used
                    and address not in self.reserved
                    and self._claims.get(address, name) == name
                ):
                    self._cursor[(pool.name, version)] = value + 1
                    return address
                value += 1
        return None


def _not_served(pool: Pool, request: Request) -> str:
    if not request.given(pool):
        return f"pool {pool.name!r} is not given to cluster {request.cluster!r}"
    return f"pool {pool.name!r} serves only {pool.allocation.describe()}, not {request.name}"
