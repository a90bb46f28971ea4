"""Address pools and load-balancer address allocation. Pure bookkeeping, no I/O.

A pool is a list of CIDRs and ranges (IPv4 and IPv6). A Service asks for addresses of the
families in ``spec.ipFamilies``; it may name addresses (``lvs-director.io/load-balancer-ips``
or the deprecated ``spec.loadBalancerIP``), a pool (``lvs-director.io/pool``), and a sharing
key (``lvs-director.io/allow-shared-ip``). Two Services share one address only when both
carry the same sharing key and none of their (protocol, port) pairs collide.

The allocator is restart-safe: the controller first hands it what Service status already
says (``keep``), so a restart assigns nothing new and moves nothing.

A pool never holds an address that cannot be a service address (unspecified, loopback,
link-local, multicast, reserved, IPv4-mapped), and an IPv4 CIDR of /30 or wider gives out
neither its network nor its broadcast address unless the operator asks for ``all_addresses``.
Addresses the director uses otherwise (the NodePort VIPs, static services' VIPs) are
``reserved``: never assigned, and refused when a Service asks for them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from director.core.errors import DirectorError
from director.core.model import Forwarding, plain_address, plain_network

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
PortKey = tuple[str, int]  # (protocol label, port)


class PoolError(DirectorError, ValueError):
    """A pool definition that cannot be used (raised while loading the config)."""


# (network, why) that no pool may reach into.
SPECIAL = tuple(
    (ipaddress.ip_network(net), why)
    for net, why in (
        ("0.0.0.0/8", "this-network addresses"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved, with the broadcast address"),
        ("::/128", "the unspecified address"),
        ("::1/128", "loopback"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("fe80::/10", "link-local"),
        ("ff00::/8", "multicast"),
    )
)


def _special(version: int, first: int, last: int) -> str | None:
    for net, why in SPECIAL:
        if net.version == version and first <= int(net[-1]) and int(net[0]) <= last:
            return f"{net} ({why})"
    return None


@dataclass(frozen=True, slots=True)
class Announce:
    """How a pool's addresses are made reachable: ``vrrp`` (keepalived moves them between the
    boxes of a pair) or ``bgp`` (every director announces them to its routers, which spread
    flows by ECMP), with the BGP attributes its routes carry."""

    kind: str = "vrrp"  # vrrp | bgp
    communities: tuple[str, ...] = ()
    local_preference: int | None = None

    @property
    def bgp(self) -> bool:
        return self.kind == "bgp"


SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector: every ``match_labels`` pair and every expression holds
    (an empty selector matches everything)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    # (key, operator, values): In, NotIn (values), Exists, DoesNotExist (none)
    expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(key) != value for key, value in self.match_labels):
            return False
        for key, operator, values in self.expressions:
            present = key in labels
            if operator == "In" and not (present and labels[key] in values):
                return False
            if operator == "NotIn" and present and labels[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels]
        for key, operator, values in self.expressions:
            listed = f" ({','.join(values)})" if values else ""
            parts.append(f"{key} {operator}{listed}")
        return ", ".join(parts) or "everything"


@dataclass(frozen=True, slots=True)
class Allocation:
    """Which Services a pool serves, and before which other pools (MetalLB's
    ``serviceAllocation``): no limit and no priority by default."""

    priority: int | None = None  # lower first; pools without one after those with one
    namespaces: frozenset[str] = frozenset()  # empty: any namespace
    service_selectors: tuple[LabelSelector, ...] = ()  # any of them; empty: any Service

    def admits(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.namespaces and namespace not in self.namespaces:
            return False
        return not self.service_selectors or any(
            selector.matches(labels) for selector in self.service_selectors
        )

    def describe(self) -> str:
        limits = []
        if self.namespaces:
            limits.append(f"namespaces {', '.join(sorted(self.namespaces))}")
        if self.service_selectors:
            limits.append(
                "Services labelled "
                + " or ".join(f"[{s.describe()}]" for s in self.service_selectors)
            )
        return " and ".join(limits) or "every Service"


NO_LIMIT = Allocation()


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    # Inclusive (first, last) address ranges as integers, each of one family.
    ranges: tuple[tuple[int, int, int], ...]  # (family 4|6, first, last)
    auto_assign: bool = True
    announce: Announce = Announce()  # how its addresses are made reachable
    allocation: Allocation = NO_LIMIT  # which Services it serves, and its priority
    forwarding: Forwarding | None = None  # its Services' default (None: the director's)

    @classmethod
    def parse(
        cls,
        name: str,
        entries: Iterable[str],
        auto_assign: bool = True,
        all_addresses: bool = False,
        announce: Announce | None = None,
        *,
        allocation: Allocation = NO_LIMIT,
        forwarding: Forwarding | None = None,
    ) -> Pool:
        """``all_addresses``: IPv4 CIDRs give out their network and broadcast addresses too."""
        ranges = []
        for entry in entries:
            text = entry.strip()
            try:
                if "-" in text:
                    low, high = (plain_address(p.strip()) for p in text.split("-", 1))
                    if low.version != high.version:
                        raise PoolError(f"range {text!r} mixes IPv4 and IPv6")
                    if int(low) > int(high):
                        raise PoolError(f"range {text!r} ends before it starts")
                    ranges.append((low.version, int(low), int(high)))
                else:
                    net = plain_network(text, strict=True)
                    first, last = int(net[0]), int(net[-1])
                    if net.version == 4 and net.prefixlen <= 30 and not all_addresses:
                        first, last = first + 1, last - 1  # network and broadcast
                    ranges.append((net.version, first, last))
            except ValueError as exc:
                if isinstance(exc, PoolError):
                    raise
                raise PoolError(f"{text!r} is not a CIDR or an address range ({exc})") from None
            special = _special(*ranges[-1])
            if special is not None:
                raise PoolError(
                    f"{text!r} includes {special}, which cannot be a load-balancer address"
                )
        if not ranges:
            raise PoolError("a pool needs at least one CIDR or range")
        return cls(name, tuple(ranges), auto_assign, announce or Announce(), allocation, forwarding)

    def contains(self, address: Address) -> bool:
        value = int(address)
        return any(
            fam == address.version and first <= value <= last for fam, first, last in self.ranges
        )

    def size(self) -> int:
        return sum(last - first + 1 for _fam, first, last in self.ranges)

    def networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        out: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for fam, first, last in self.ranges:
            cls: type[ipaddress.IPv4Address] | type[ipaddress.IPv6Address] = (
                ipaddress.IPv4Address if fam == 4 else ipaddress.IPv6Address
            )
            out.extend(ipaddress.summarize_address_range(cls(first), cls(last)))
        return out


@dataclass(frozen=True, slots=True)
class Request:
    """What one Service asks of IPAM."""

    name: str  # namespace/name
    versions: tuple[int, ...]  # address families wanted, in order (4, 6)
    ports: frozenset[PortKey]
    requested: tuple[Address, ...] = ()
    pool: str | None = None
    sharing_key: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)  # the Service's labels

    @property
    def namespace(self) -> str:
        return self.name.partition("/")[0]

    def admitted(self, pool: Pool) -> bool:
        return pool.allocation.admits(self.namespace, self.labels)


@dataclass(frozen=True, slots=True)
class Outcome:
    addresses: tuple[Address, ...] = ()
    error: str | None = None  # why nothing was assigned (all or nothing)
    pool: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class _Holder:
    sharing_key: str | None
    ports: frozenset[PortKey]


@lru_cache(maxsize=4096)
def _holder(sharing_key: str | None, ports: frozenset[PortKey]) -> _Holder:
    """One holder per distinct (sharing key, ports): most Services hold the same few, and
    each set of ports costs 216 bytes (bounded: distinct ones cannot grow it)."""
    return _Holder(sharing_key, ports)


@dataclass
class Allocator:
    pools: tuple[Pool, ...]
    # Addresses never given out, with what they are ("the NodePort VIP").
    reserved: dict[Address, str] = field(default_factory=dict)
    # address -> its holders, as (Service, _Holder) pairs: a tuple, not a dict, since most
    # addresses have one (a dict each was 2 MB at 10,000 Services)
    _used: dict[Address, tuple[tuple[str, _Holder], ...]] = field(default_factory=dict)
    _held: dict[str, tuple[Address, ...]] = field(default_factory=dict)
    _cursor: dict[tuple[str, int], int] = field(default_factory=dict)
    # Addresses in use per pool, kept as they are taken and freed: the loop reads it on
    # every step, and counting 10,000 addresses against the pools took 40 ms each time.
    _in_pool: dict[str, int] = field(default_factory=dict)

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

    def in_use_in(self, pool: Pool) -> int:
        return self._in_pool.get(pool.name, 0)

    # -- changes -------------------------------------------------------------------------
    def release(self, name: str) -> None:
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
            found = self._scan(pool, version)
            if found is not None:
                return found
        return None

    def _scan(self, pool: Pool, version: int) -> Address | None:
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
                if address not in self._used and address not in self.reserved:
                    self._cursor[(pool.name, version)] = value + 1
                    return address
                value += 1
        return None


def _not_served(pool: Pool, request: Request) -> str:
    return f"pool {pool.name!r} serves only {pool.allocation.describe()}, not {request.name}"
