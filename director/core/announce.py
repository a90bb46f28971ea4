"""Which VIPs this director announces over BGP, and why (pure).

A VIP of a ``bgp`` pool is announced when this director can serve it: the kernel holds its
virtual services (programmed, not merely wanted), at least one of their real servers takes
new connections (weight above 0: healthy, not drained), and the director itself is ready
(its first sync is applied) and not in maintenance. Otherwise it is withdrawn, and the
routers send its flows to the other directors. Every decision carries its reason, which the
loop logs when it changes (MetalLB's announce decisions are the model).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from director.core.model import ServiceKey
from director.core.pools import Pool
from director.core.services import VirtualService


@dataclass(frozen=True, slots=True)
class Route:
    """One VIP as this director announces it (or does not), with the pool's attributes."""

    vip: str
    pool: str
    announced: bool
    reason: str
    communities: tuple[str, ...] = ()
    local_preference: int | None = None
    large_communities: tuple[str, ...] = ()

    @property
    def prefix(self) -> str:
        return f"{self.vip}/{128 if ':' in self.vip else 32}"


@dataclass(frozen=True, slots=True)
class PeerState:
    """One BGP session as the routing daemon reports it."""

    address: str
    asn: int
    state: str  # Established, Active, Connect, ... ("unknown": the daemon did not answer)
    uptime_seconds: float = 0.0
    prefixes_sent: int = 0
    bfd: str = "-"  # up, down, init, ... or "-" (no BFD)

    @property
    def up(self) -> bool:
        return self.state == "Established"


def pool_of(vip: str, pools: Iterable[Pool]) -> Pool | None:
    address = ipaddress.ip_address(vip)
    return next((pool for pool in pools if pool.contains(address)), None)


def serving(
    keys: Iterable[ServiceKey],
    programmed: Mapping[ServiceKey, VirtualService],
    down: Collection[ServiceKey] = (),
) -> int:
    """How many real servers of ``keys`` (one VIP's services) take new connections in the
    kernel's table; none for a service in ``down`` (every real server fails its check,
    kept in the table only because serving something beats serving nothing)."""
    return sum(
        1
        for key in keys
        if key not in down
        for rs in (programmed[key].real_servers.values() if key in programmed else ())
        if rs.weight > 0
    )


def decide(
    vip: str,
    pool: Pool,
    keys: Iterable[ServiceKey],
    programmed: Mapping[ServiceKey, VirtualService],
    *,
    ready: bool,
    maintenance: str | None = None,
    down: Collection[ServiceKey] = (),
) -> Route:
    """The route for ``vip`` (in ``pool``), whose virtual services are ``keys``."""
    keys = tuple(keys)

    def route(announced: bool, reason: str) -> Route:
        attrs = pool.announce
        return Route(
            vip,
            pool.name,
            announced,
            reason,
            attrs.communities,
            attrs.local_preference,
            attrs.large_communities,
        )

    if maintenance is not None:
        return route(False, f"maintenance: {maintenance}")
    if not ready:
        return route(False, "not ready: the first sync is not applied yet")
    held = [key for key in keys if key in programmed]
    if not held:
        return route(False, "not programmed: the kernel holds no virtual service for it")
    count = serving(held, programmed, down)
    if count == 0:
        return route(False, "no healthy real server (every one is down, drained or at weight 0)")
    missing = len(keys) - len(held)
    note = f"; {missing} of its virtual services not programmed" if missing else ""
    return route(True, f"serving: {count} real servers take new connections{note}")
