"""Source filtering of virtual services (``spec.loadBalancerSourceRanges``): the nftables
ruleset (rendered here, pure), the adapter Protocol, and a stateful fake.

IPVS takes a packet for a virtual service at the input hook (priority 98). The director's own
table, ``inet director``, hooks input earlier (priority -10): a packet to a restricted
``VIP . protocol . port`` is looked up in a verdict map that jumps to that service's chain,
which accepts the allowed sources and counts and drops the rest. Every forwarding mode (nat,
dr, tun) is covered, and the nodes' kube-proxy never has to see the client at all.

The whole table is brought to the desired state in one ``nft -f`` transaction (all or
nothing: a ruleset nft refuses leaves the old one in force). No other table is ever touched.
Each service's drop counter is a named counter object that outlives rule changes, so the
dropped-packets metric does not reset when an allowed range changes.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterable, Mapping
from typing import Protocol

from director.core.errors import DirectorError
from director.core.model import Family, ServiceKey

TABLE = "director"
FAMILY = "inet"
CHAIN_PREFIX = "svc"
COUNTER_PREFIX = "drop"

Restrictions = Mapping[ServiceKey, tuple[str, ...]]


class FirewallError(DirectorError):
    """nft refused a ruleset or could not be run (its own words in the message)."""

    status = 503


class Firewall(Protocol):
    """What the engine needs of the packet filter."""

    def apply(self, restrictions: Restrictions) -> None:
        """Make ``restrictions`` the whole set of filtered services. Raises FirewallError
        (the previous rules stay in force)."""
        ...

    def dropped(self) -> dict[ServiceKey, int]:
        """Packets dropped per filtered service since its filter was first made."""
        ...

    def in_use(self) -> bool:
        """Does the director's table hold filters (a previous run's, say)?"""
        ...


def object_name(prefix: str, key: ServiceKey) -> str:
    """A stable nft identifier for ``key``'s chain or counter (letters, digits, _)."""
    assert key.protocol is not None
    address = key.address.replace(".", "_").replace(":", "_")
    family = "4" if key.family is Family.INET else "6"
    return f"{prefix}{family}_{key.protocol.label}_{address}_{key.port}"


def clean_ranges(key: ServiceKey, ranges: Iterable[str]) -> list[str]:
    """The ranges of ``key``'s family, as canonical networks (anything else is dropped)."""
    out: list[str] = []
    for text in ranges:
        try:
            net = ipaddress.ip_network(text, strict=False)
        except ValueError:
            continue
        if (net.version == 6) == (key.family is Family.INET6) and str(net) not in out:
            out.append(str(net))
    return out


def render_nft(restrictions: Restrictions, existing: Iterable[str] = ()) -> str:
    """The ``nft -f`` script that makes table ``inet director`` hold exactly
    ``restrictions``; ``existing``: names of chains and counters the table holds now (the
    obsolete ones are deleted in the same transaction)."""
    t = f"{FAMILY} {TABLE}"
    lines = [
        f"add table {t}",
        f"add map {t} services4 {{ type ipv4_addr . inet_proto . inet_service : verdict ; }}",
        f"add map {t} services6 {{ type ipv6_addr . inet_proto . inet_service : verdict ; }}",
        f"add chain {t} input {{ type filter hook input priority -10 ; policy accept ; }}",
        f"flush chain {t} input",
        f"add rule {t} input meta nfproto ipv4 ip daddr . meta l4proto . th dport vmap @services4",
        f"add rule {t} input meta nfproto ipv6 ip6 daddr . meta l4proto . th dport vmap @services6",
        f"flush map {t} services4",
        f"flush map {t} services6",
    ]
    wanted: set[str] = set()
    for key in sorted(k for k in restrictions if not k.fwmark and k.protocol is not None):
        assert key.protocol is not None
        chain, counter = object_name(CHAIN_PREFIX, key), object_name(COUNTER_PREFIX, key)
        wanted |= {chain, counter}
        match = "ip saddr" if key.family is Family.INET else "ip6 saddr"
        lines += [
            f"add counter {t} {counter}",
            f"add chain {t} {chain}",
            f"flush chain {t} {chain}",
        ]
        ranges = clean_ranges(key, restrictions[key])
        if ranges:
            lines.append(f"add rule {t} {chain} {match} {{ {', '.join(ranges)} }} accept")
        lines.append(f'add rule {t} {chain} counter name "{counter}" drop')
        where = "services4" if key.family is Family.INET else "services6"
        lines.append(
            f"add element {t} {where} {{ {key.address} . {key.protocol.label} . {key.port} : "
            f"goto {chain} }}"
        )
    for name in sorted(set(existing) - wanted):
        if name.startswith(CHAIN_PREFIX):
            lines.append(f"delete chain {t} {name}")
    for name in sorted(set(existing) - wanted):
        if name.startswith(COUNTER_PREFIX):
            lines.append(f"delete counter {t} {name}")
    return "\n".join(lines) + "\n"


class FakeFirewall:
    """The filter as data, with nft's rule that a service needs an address and a port."""

    def __init__(self) -> None:
        self.rules: dict[ServiceKey, tuple[str, ...]] = {}
        self.counts: dict[ServiceKey, int] = {}
        self.applies = 0
        self.fail: str | None = None  # set by a test: the next applies are refused
        self._lock = threading.Lock()

    def apply(self, restrictions: Restrictions) -> None:
        with self._lock:
            if self.fail is not None:
                raise FirewallError(self.fail)
            self.applies += 1
            self.rules = {
                key: tuple(clean_ranges(key, ranges))
                for key, ranges in restrictions.items()
                if not key.fwmark and key.protocol is not None
            }
            self.counts = {k: v for k, v in self.counts.items() if k in self.rules}

    def dropped(self) -> dict[ServiceKey, int]:
        with self._lock:
            return {key: self.counts.get(key, 0) for key in self.rules}

    def in_use(self) -> bool:
        with self._lock:
            return bool(self.rules)

    def admits(self, key: ServiceKey, source: str) -> bool:
        """Would a packet from ``source`` to ``key`` pass? (Counts a drop when not.)"""
        with self._lock:
            ranges = self.rules.get(key)
            if ranges is None:
                return True
            address = ipaddress.ip_address(source)
            if any(address in ipaddress.ip_network(r) for r in ranges):
                return True
            self.counts[key] = self.counts.get(key, 0) + 1
            return False
