"""A Service's options, read and checked: the director's annotations (scheduler, forwarding,
backends, node port, addresses, pool, sharing, health check, local weights) against the
director's policy, each refused on its own with a reason (a ``Problem``). Pure.

``director.core.translate`` turns a Service and these options into virtual services.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeVar, cast

from director.core.checks import CheckSpec
from director.core.cluster import PREFIX, ServiceInfo
from director.core.dests import BGP_SCHEDULER, HASHING_SCHEDULERS, NAT_OVER_BGP
from director.core.ipam import Request
from director.core.model import (
    CONFIGURABLE_FORWARDING,
    Family,
    Forwarding,
    IpProtocol,
    ServiceConfig,
    UdpOnly,
    check_flags,
    shown,
    sloppy_address,
)
from director.core.pools import Address, Pool

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
    }
)
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


@dataclass(frozen=True, slots=True)
class Problem:
    """Something of the Service refused, with where it was (an annotation, a field)."""

    annotation: str
    message: str
    reason: str = "InvalidAnnotation"  # the Event's reason


@dataclass(frozen=True, slots=True)
class Reserved:
    """Addresses no endpoint may be: the box's own that the file names, every static VIP
    and NodePort VIP, and every address of a pool (a VIP, or one to be). A selector-less
    Service's EndpointSlice is written by hand, and could point a VIP at the box itself or
    at another VIP."""

    named: Mapping[str, str] = field(default_factory=dict)  # address -> what it is
    pools: tuple[Pool, ...] = ()

    def why(self, text: str) -> str | None:
        """What ``text`` is, when no endpoint may be it; None when it may."""
        said = self.named.get(text)
        if said is not None:
            return said
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            return None
        for pool in self.pools:
            if pool.contains(address):
                return f"an address of pool {pool.name!r} (a VIP)"
        return None


@dataclass(frozen=True, slots=True)
class Policy:
    """What the director's settings say about Services in general."""

    load_balancer_class: str
    default_class: bool
    nodeport_vips: tuple[str, ...]
    backends: str
    scheduler: str
    forwarding: Forwarding
    weight: int
    schedulers: frozenset[str]  # what the kernel offers
    check: CheckSpec | None = None  # the default active check; None: no check by default
    checking: bool = False  # health checks configured (healthCheckNodePort is then probed)
    metallb: bool = False  # MetalLB's address annotations count where ours are absent
    snat: frozenset[Family] = frozenset()  # the families the box has an SNAT address of
    cluster: str = ""  # the cluster this policy is for ("": the one cluster)
    pools: frozenset[str] | None = None  # the pools its Services may draw from (None: all)
    reserved: Reserved = field(default_factory=Reserved)  # what no endpoint may be


def wants_address(svc: ServiceInfo, policy: Policy) -> bool:
    """Is this a LoadBalancer Service this director implements?"""
    if svc.type != "LoadBalancer":
        return False
    if svc.load_balancer_class is None:
        return policy.default_class
    return svc.load_balancer_class == policy.load_balancer_class


def wants_nodeports(svc: ServiceInfo, policy: Policy) -> bool:
    if not policy.nodeport_vips or svc.type not in ("NodePort", "LoadBalancer"):
        return False
    return svc.annotations.get(A_NODEPORT, "true").lower() not in ("false", "disabled", "off")


def node_ports_missing(svc: ServiceInfo, policy: Policy, previous: Options | None) -> str | None:
    """Why the director could not reach this Service's nodes, if it could not: in nodeport
    mode with nat forwarding it sends to each node at the node port, and a Service with
    ``allocateLoadBalancerNodePorts: false`` may have none. Its address would be dead."""
    opts, _ = options(svc, policy, previous)
    if opts.backends != "nodeport" or not opts.forwarding.masquerades:
        return None
    missing = [
        str(sp.name or sp.port) for sp in svc.ports if sp.protocol in PROTOCOLS and not sp.node_port
    ]
    if not missing:
        return None
    flag = "" if svc.allocate_node_ports else "allocateLoadBalancerNodePorts is false: "
    return (
        f"{flag}port {', '.join(missing)} has no node port, and in nodeport mode with "
        f"nat forwarding the nodes are reached at their node ports; set {A_BACKENDS}: "
        "pod, or give the port a nodePort"
    )


def relevant(svc: ServiceInfo, policy: Policy) -> bool:
    return wants_address(svc, policy) or wants_nodeports(svc, policy)


def defaults(policy: Policy, bgp: bool, pool_forwarding: Forwarding | None = None) -> Options:
    """What a Service gets when it says nothing (``pool_forwarding``: its pool's forwarding,
    over the director's). Announced over BGP (every director serves it, ECMP picks one per
    flow): Maglev hashing with the port, and tun unless dr or fullnat is the default, so any
    director can take over the middle of a connection."""
    chosen = pool_forwarding or policy.forwarding
    if not bgp:
        return interned(Options(policy.scheduler, NO_FLAGS, chosen, policy.backends))
    scheduler, flags = BGP_SCHEDULER if "mh" in policy.schedulers else (policy.scheduler, set())
    forwarding = Forwarding.TUN if chosen is Forwarding.NAT else chosen
    return interned(Options(scheduler, frozenset(flags), forwarding, policy.backends))


NO_FLAGS: frozenset[str] = frozenset()  # not a singleton since Python 3.10: 216 bytes each
T = TypeVar("T", "Options", ServiceConfig)


@lru_cache(maxsize=4096)  # bounded: annotations are the tenants'
def _first(value: object) -> object:
    return value


def interned(value: T) -> T:
    """One object for every Service's equal settings (10,000 Services, a few kinds)."""
    return cast(T, _first(value))


def options(
    svc: ServiceInfo,
    policy: Policy,
    previous: Options | None,
    bgp: bool = False,
    pool_forwarding: Forwarding | None = None,
) -> tuple[Options, list[Problem]]:
    """Per-Service settings from annotations; an invalid one keeps the last valid value.
    ``bgp``: its address is announced over BGP (see :func:`defaults`)."""
    default = defaults(policy, bgp, pool_forwarding)
    base = previous or default
    problems: list[Problem] = [
        Problem(
            key,
            f"{key} is not an annotation the director knows; ignored (known: "
            f"{', '.join(sorted(a.removeprefix(PREFIX) for a in ANNOTATIONS))})",
            "UnknownAnnotation",
        )
        for key in sorted(svc.annotations)
        if key.startswith(PREFIX) and key not in ANNOTATIONS
    ]
    scheduler, flags, source = default.scheduler, default.flags, "default"
    for annotation, origin in ((A_SCHEDULER, "annotation"), (A_OVERRIDE, "api")):
        text = svc.annotations.get(annotation)
        if text is None:
            continue
        parsed = parse_scheduler(text, policy.schedulers, _protocols(svc))
        if isinstance(parsed, str):
            problems.append(Problem(annotation, parsed))
            if source == "default":  # keep the last valid setting
                scheduler, flags, source = base.scheduler, base.flags, base.scheduler_source
        else:
            (scheduler, flags), source = parsed, origin
    forwarding = default.forwarding
    text = svc.annotations.get(A_FORWARDING)
    if text is not None:
        labels = [f.label for f in CONFIGURABLE_FORWARDING]
        if text.lower() not in labels:
            problems.append(Problem(A_FORWARDING, f"{text!r} is not one of {', '.join(labels)}"))
            forwarding = base.forwarding
        elif bgp and text.lower() == "nat":
            problems.append(Problem(A_FORWARDING, NAT_OVER_BGP, "ForwardingRefused"))
            kept = base.forwarding
            forwarding = kept if kept is not Forwarding.NAT else default.forwarding
        else:
            forwarding = Forwarding[text.upper()]
    if bgp:
        problems += _bgp_problems(scheduler, policy)
    backends = policy.backends
    text = svc.annotations.get(A_BACKENDS)
    if text is not None:
        if text in BACKEND_MODES:
            backends = text
        else:
            problems.append(
                Problem(A_BACKENDS, f"{text!r} is not one of {', '.join(BACKEND_MODES)}")
            )
            backends = base.backends
    local_weights = base.local_weights
    text = svc.annotations.get(A_LOCAL_WEIGHTS)
    if text is None:
        local_weights = True
    elif text in LOCAL_WEIGHTS:
        local_weights = text == "endpoints"
    else:
        problems.append(
            Problem(A_LOCAL_WEIGHTS, f"{shown(text)} is not one of {', '.join(LOCAL_WEIGHTS)}")
        )
    return interned(
        Options(scheduler, flags, forwarding, backends, source, local_weights)
    ), problems


def _bgp_problems(scheduler: str, policy: Policy) -> list[Problem]:
    if "mh" not in policy.schedulers:
        return [
            Problem(
                "spec",
                "this kernel has no mh scheduler (ip_vs_mh): connections "
                f"will break when a director joins or leaves ({scheduler} is used)",
                "HashingUnavailable",
            )
        ]
    if scheduler not in HASHING_SCHEDULERS:
        return [
            Problem(
                A_SCHEDULER,
                f"{scheduler} does not pick the same real server on every "
                "director: connections will break when a director joins or leaves "
                "(mh, the default for addresses announced over BGP, keeps them)",
                "SchedulerNotHashing",
            )
        ]
    return []


def _protocols(svc: ServiceInfo) -> frozenset[IpProtocol]:
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
