"""What a Service asks of the director, read from its annotations (and MetalLB's, and
``spec.loadBalancerIP``): their names, the scheduler text, the address request. Each bad
value is refused on its own with a reason (a ``Problem``); nothing here knows the director's
settings (``director.core.policy`` applies them). Pure."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar, cast

from director.core.checks import CheckSpec
from director.core.cluster import PREFIX, ServiceInfo
from director.core.ipam import Request
from director.core.model import (
    NO_CAPS,
    Caps,
    Forwarding,
    IpProtocol,
    ServiceConfig,
    UdpOnly,
    check_flags,
    shown,
    sloppy_address,
)
from director.core.pools import Address

A_SCHEDULER = PREFIX + "scheduler"
A_OVERRIDE = PREFIX + "scheduler-override"  # written by the admin API
A_FORWARDING = PREFIX + "forwarding"
A_BACKENDS = PREFIX + "backends"
A_NODEPORT = PREFIX + "nodeport"
A_IPS = PREFIX + "load-balancer-ips"
A_POOL = PREFIX + "pool"
A_SHARED = PREFIX + "allow-shared-ip"
A_HEALTH = PREFIX + "health-check"  # none | tcp | http[:/path] | https[:/path]
A_LOCAL_WEIGHTS = PREFIX + "local-weights"  # endpoints (the default) | even
A_SYN_GUARD = PREFIX + "syn-guard"  # on | off (default: the box's guard.syn)
A_CLIENT_RATE = PREFIX + "client-rate"  # new TCP connections a second from one client address
A_SERVICE_RATE = PREFIX + "service-rate"  # new TCP connections a second from all clients
A_MAX_CONNECTIONS = PREFIX + "max-connections"  # connections a real server holds at once
A_SORRY = PREFIX + "sorry-server"  # ADDRESS:PORT serving while no real server is up
# Every annotation the director reads: another under its prefix is a typo (``schedular``),
# said with an Event rather than silently ignored.
ANNOTATIONS = frozenset(
    {
        A_SCHEDULER,
        A_OVERRIDE,
        A_FORWARDING,
        A_BACKENDS,
        A_NODEPORT,
        A_IPS,
        A_POOL,
        A_SHARED,
        A_HEALTH,
        A_LOCAL_WEIGHTS,
        A_SYN_GUARD,
        A_CLIENT_RATE,
        A_SERVICE_RATE,
        A_MAX_CONNECTIONS,
        A_SORRY,
    }
)
SWITCH = {"on": True, "true": True, "off": False, "false": False}
BACKEND_MODES = ("nodeport", "pod")
LOCAL_WEIGHTS = ("endpoints", "even")
NODE_HEALTHZ = CheckSpec("http", "/healthz", (200, 200), interval=2.0, timeout=1.0, rise=1, fall=1)
PROTOCOLS = {"TCP": IpProtocol.TCP, "UDP": IpProtocol.UDP, "SCTP": IpProtocol.SCTP}


@dataclass(frozen=True, slots=True)
class Options:
    """A Service's effective per-Service settings, and where the scheduler came from."""

    scheduler: str
    flags: frozenset[str]
    forwarding: Forwarding
    backends: str
    scheduler_source: str = "default"  # default | annotation
    # externalTrafficPolicy Local: weigh each node by its ready local endpoints (else evenly)
    local_weights: bool = True
    # SYN cookies answered by the box before IPVS (TCP, nat and fullnat only)
    syn_guard: bool = False
    # new connections a second (per client, in all) and connections per real server
    caps: Caps = NO_CAPS
    # (address, port) that takes the traffic while none of its real servers is up
    sorry: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    """Something of the Service refused, with where it was (an annotation, a field)."""

    annotation: str
    message: str
    reason: str = "InvalidAnnotation"  # the Event's reason


NO_FLAGS: frozenset[str] = frozenset()  # not a singleton since Python 3.10: 216 bytes each
T = TypeVar("T", "Options", ServiceConfig)


@lru_cache(maxsize=4096)  # bounded: annotations are the tenants'
def _first(value: object) -> object:
    return value


def interned(value: T) -> T:
    """One object for every Service's equal settings (10,000 Services, a few kinds)."""
    return cast(T, _first(value))


def protocols(svc: ServiceInfo) -> frozenset[IpProtocol]:
    return frozenset(PROTOCOLS[p.protocol] for p in svc.ports if p.protocol in PROTOCOLS)


def parse_scheduler(
    text: str, offered: frozenset[str], protocols: frozenset[IpProtocol] = frozenset()
) -> tuple[str, frozenset[str]] | str:
    """``sh`` or ``sh:sh-port,sh-fallback`` -> (scheduler, canonical flags), or why not.

    ``protocols``: those of the Service's ports (``onepacket`` needs them all UDP)."""
    name, _, flag_text = text.strip().partition(":")
    wanted = frozenset(f.strip() for f in flag_text.split(",") if f.strip())
    if name not in offered:
        return (
            f"scheduler {shown(name)} is not offered by this kernel "
            f"(allowed: {', '.join(sorted(offered))})"
        )
    udp_only = bool(protocols) and protocols <= {IpProtocol.UDP}
    try:
        return name, check_flags(name, wanted, IpProtocol.UDP if udp_only else IpProtocol.TCP)
    except UdpOnly as exc:
        return f"{shown(text)}: {exc}"
    except ValueError as exc:
        return f"{shown(text)}: {exc} (write sh:sh-port,sh-fallback)"


# Ours, and MetalLB's for the same thing (metallb.io/ first, then the older form).
METALLB_KEYS = {
    A_IPS: ("metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs"),
    A_POOL: ("metallb.io/address-pool", "metallb.universe.tf/address-pool"),
    A_SHARED: ("metallb.io/allow-shared-ip", "metallb.universe.tf/allow-shared-ip"),
}


def _address_annotation(svc: ServiceInfo, key: str, metallb: bool) -> tuple[str | None, str]:
    """The value of one of the address annotations, and the annotation it came from: ours,
    else (with ``metallb``) MetalLB's."""
    for name in (key, *(METALLB_KEYS[key] if metallb else ())):
        value = svc.annotations.get(name)
        if value is not None:
            return value, name
    return None, key


def ipam_request(
    svc: ServiceInfo, metallb: bool = False, pools: frozenset[str] | None = None
) -> tuple[Request | None, list[Problem]]:
    """What the Service asks of IPAM; None (with the problem) when the ask is invalid.
    ``metallb``: MetalLB's annotations stand in for ours where ours are absent. ``pools``:
    the pools its cluster may draw from (None: every pool). A sharing key is its cluster's:
    Services of two clusters never share an address."""
    requested: list[Address] = []
    text, source = _address_annotation(svc, A_IPS, metallb)
    if text is None and svc.load_balancer_ip:
        text, source = svc.load_balancer_ip, "spec.loadBalancerIP"
    for part in (text or "").split(","):
        if not part.strip():
            continue
        canonical = sloppy_address(part.strip())
        if canonical is None:  # zones (fe80::1%eth0) too: not an address to announce
            return None, [Problem(source, f"{shown(part.strip())} is not an IP address")]
        requested.append(ipaddress.ip_address(canonical))
    if len({a.version for a in requested}) != len(requested):
        return None, [Problem(source, "at most one address per IP family")]
    ports = frozenset((p.protocol, p.port) for p in svc.ports)
    sharing = _address_annotation(svc, A_SHARED, metallb)[0]
    request = Request(
        svc.ref,
        svc.ip_families,
        ports,
        tuple(requested),
        _address_annotation(svc, A_POOL, metallb)[0],
        f"{svc.cluster}/{sharing}" if sharing is not None and svc.cluster else sharing,
        svc.labels,
        cluster=svc.cluster,
        pools=pools,
    )
    return request, []
