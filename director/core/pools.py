"""Address pools: what a pool holds, who may draw from it, and how its VIPs are announced.
Pure, no I/O.

A pool is a list of CIDRs and ranges (IPv4 and IPv6). A pool never holds an address that
cannot be a service address (unspecified, loopback, link-local, multicast, reserved,
IPv4-mapped), and an IPv4 CIDR of /30 or wider gives out neither its network nor its
broadcast address unless the operator asks for ``all_addresses``. Allocation from pools is
``director.core.ipam``'s.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from director.core.errors import DirectorError
from director.core.model import NO_CAPS, Caps, Forwarding, plain_address, plain_network

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
    large_communities: tuple[str, ...] = ()  # RFC 8092: GLOBAL:LOCAL1:LOCAL2

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
    """An address pool: its ranges, how its addresses are announced and whom it serves."""

    name: str
    # Inclusive (first, last) address ranges as integers, each of one family.
    ranges: tuple[tuple[int, int, int], ...]  # (family 4|6, first, last)
    auto_assign: bool = True
    announce: Announce = Announce()  # how its addresses are made reachable
    allocation: Allocation = NO_LIMIT  # which Services it serves, and its priority
    forwarding: Forwarding | None = None  # its Services' default (None: the director's)
    caps: Caps = NO_CAPS  # its Services' limits (each annotation wins over its part)
    syn_guard: bool | None = None  # its Services SYN-guarded (None: the box's guard.syn)

    @property
    def gives(self) -> bool:
        """Does it give its Services anything beyond addresses (forwarding, limits, guard)?"""
        return self.forwarding is not None or bool(self.caps) or self.syn_guard is not None

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
        caps: Caps = NO_CAPS,
        syn_guard: bool | None = None,
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
        announce = announce or Announce()
        return cls(
            name, tuple(ranges), auto_assign, announce, allocation, forwarding, caps, syn_guard
        )

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
