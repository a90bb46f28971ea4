"""Cluster objects -> desired IPVS virtual services. Pure.

One Service becomes one virtual service per (load-balancer address, port), plus one per
node port on the NodePort VIP when one is configured. Real servers are the usable nodes at
the node port (``nodeport`` mode) or the ready endpoints at their target port (``pod``
mode). Serving-but-terminating endpoints are kept at weight 0 and reported as draining, so
their open connections finish while new ones go elsewhere. With ``externalTrafficPolicy:
Local`` a node serves only its own pods, so its weight is the number of its ready local
endpoints (a node with three pods takes three times the share of a node with one).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeVar, cast

from director.core.checks import CheckSpec, Target, parse_check
from director.core.cluster import PREFIX, NodeInfo, ServiceInfo, SliceInfo
from director.core.dests import hash_order
from director.core.ipam import Request
from director.core.model import (
    CONFIGURABLE_FORWARDING,
    MAX_WEIGHT,
    DestKey,
    Family,
    Forwarding,
    IpProtocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
    UdpOnly,
    check_flags,
    shown,
    sloppy_address,
)
from director.core.pools import Address
from director.core.services import VirtualService

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
class Translation:
    services: dict[ServiceKey, VirtualService] = field(default_factory=dict)
    options: Options | None = None
    problems: tuple[Problem, ...] = ()
    # Real servers kept at weight 0 because their endpoint is terminating.
    draining: frozenset[tuple[ServiceKey, DestKey]] = frozenset()
    # What to check for each real server (it is up when all of them are).
    checks: dict[ServiceKey, dict[DestKey, tuple[Target, ...]]] = field(default_factory=dict)
    # Virtual services open only to these sources (loadBalancerSourceRanges, CIDRs of the
    # service's family; empty: open to none).
    restrictions: dict[ServiceKey, tuple[str, ...]] = field(default_factory=dict)
    # Full-NAT virtual services: the director's SNAT address is the source their real
    # servers see (not programmed until that rule is in force).
    snat: frozenset[ServiceKey] = frozenset()


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


# Schedulers whose choice depends only on the packet and the real-server list, so every
# director (kept in one order) picks the same real server for a flow.
HASHING = frozenset(("mh", "sh", "dh"))
BGP_SCHEDULER = ("mh", frozenset({"mh-port"}))
NAT_OVER_BGP = (
    "nat cannot serve an address announced over BGP: the replies would have to come back "
    "through the one director that saw the connection start; use tun or dr"
)


def defaults(policy: Policy, bgp: bool, pool_forwarding: Forwarding | None = None) -> Options:
    """What a Service gets when it says nothing (``pool_forwarding``: its pool's forwarding,
    over the director's). Announced over BGP (every director serves it, ECMP picks one per
    flow): Maglev hashing with the port, and tun unless dr or fullnat is the default, so any
    director can take over the middle of a connection."""
    chosen = pool_forwarding or policy.forwarding
    if not bgp:
        return _shared(Options(policy.scheduler, NO_FLAGS, chosen, policy.backends))
    scheduler, flags = BGP_SCHEDULER if "mh" in policy.schedulers else (policy.scheduler, set())
    forwarding = Forwarding.TUN if chosen is Forwarding.NAT else chosen
    return _shared(Options(scheduler, frozenset(flags), forwarding, policy.backends))


NO_FLAGS: frozenset[str] = frozenset()  # not a singleton since Python 3.10: 216 bytes each
T = TypeVar("T", "Options", ServiceConfig)


@lru_cache(maxsize=4096)  # bounded: annotations are the tenants'
def _first(value: object) -> object:
    return value


def _shared(value: T) -> T:
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
    problems: list[Problem] = []
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
    return _shared(Options(scheduler, flags, forwarding, backends, source, local_weights)), problems


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
    if scheduler not in HASHING:
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


def ipam_request(svc: ServiceInfo, metallb: bool = False) -> tuple[Request | None, list[Problem]]:
    """What the Service asks of IPAM; None (with the problem) when the ask is invalid.
    ``metallb``: MetalLB's annotations stand in for ours where ours are absent."""
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
    request = Request(
        svc.ref,
        svc.ip_families,
        ports,
        tuple(requested),
        _address_annotation(svc, A_POOL, metallb)[0],
        _address_annotation(svc, A_SHARED, metallb)[0],
        svc.labels,
    )
    return request, []


def _target_port(port: Mapping[str, int], svc_port_name: str, target: int | str) -> int:
    if svc_port_name in port:
        return port[svc_port_name]
    return target if isinstance(target, int) else 0


# address, port, share: the real server's weight in units of the configured weight (0:
# draining; a node under externalTrafficPolicy Local: its ready local endpoints)
Backend = tuple[str, int, int]
Endpoint = tuple[str, str | None, bool, Mapping[str, int]]  # address, node, ready, ports


@dataclass(frozen=True, slots=True)
class _Want:
    """One virtual service to build: its key, where its real servers are, its origin."""

    key: ServiceKey
    backends: list[Backend]
    origin: str
    on_nodes: bool
    allowed: tuple[str, ...] | None = None  # source ranges; None: unrestricted


def translate(
    svc: ServiceInfo,
    addresses: Iterable[str],
    slices: Iterable[SliceInfo],
    nodes: Mapping[str, NodeInfo],
    policy: Policy,
    *,
    previous: Options | None = None,
    bgp: bool = False,
    pool_forwarding: Forwarding | None = None,
) -> Translation:
    """``bgp``: the Service's address is announced over BGP (every director serves it);
    ``pool_forwarding``: the forwarding its pool gives its Services (the annotation wins)."""
    opts, problems = options(svc, policy, previous, bgp, pool_forwarding)
    problems += [Problem("spec", text, "InvalidServiceField") for text in svc.problems]
    slices = tuple(slices)
    for sl in slices:
        problems += [Problem("endpointslice", text, "InvalidEndpoint") for text in sl.problems]
    check = _health_check(svc, policy, problems)
    probe = (
        svc.health_check_node_port
        if policy.checking and svc.external_traffic_policy == "Local"
        else 0
    )
    wants = _lb_wants(svc, addresses, slices, nodes, policy, opts=opts, problems=problems)
    wants += _nodeport_wants(svc, slices, nodes, policy, opts.local_weights)
    out: dict[ServiceKey, VirtualService] = {}
    checks: dict[ServiceKey, dict[DestKey, tuple[Target, ...]]] = {}
    draining: set[tuple[ServiceKey, DestKey]] = set()
    restrictions: dict[ServiceKey, tuple[str, ...]] = {}
    snat: set[ServiceKey] = set()
    fullnat = opts.forwarding is Forwarding.FULLNAT
    for want in wants:
        key = want.key
        if fullnat and key.family not in policy.snat:
            version = 4 if key.family is Family.INET else 6
            problems.append(
                Problem(
                    A_FORWARDING,
                    f"fullnat needs an IPv{version} address in snat.addresses; {key} is not served",
                    "ForwardingRefused",
                )
            )
            continue
        if fullnat:
            snat.add(key)
        config = _shared(
            ServiceConfig(
                opts.scheduler, opts.flags, svc.affinity_timeout or 0, key.family.max_prefix
            )
        )
        out[key], targets, gone = _virtual_service(
            want,
            config,
            weight=policy.weight,
            forwarding=opts.forwarding.kernel,
            check=check,
            probe_port=probe if want.on_nodes else 0,
        )
        draining.update((key, dkey) for dkey in gone)
        if targets:
            checks[key] = targets
        if want.allowed is not None:
            restrictions[key] = want.allowed
    return Translation(
        out, opts, tuple(problems), frozenset(draining), checks, restrictions, frozenset(snat)
    )


def _health_check(svc: ServiceInfo, policy: Policy, problems: list[Problem]) -> CheckSpec | None:
    """The Service's active check: the default, or its annotation's (``none``: no check)."""
    text = svc.annotations.get(A_HEALTH)
    if text is None or not policy.checking:
        return policy.check
    if text == "none":
        return None
    parsed = parse_check(text, policy.check or CheckSpec())
    if isinstance(parsed, str):
        problems.append(Problem(A_HEALTH, parsed))
        return policy.check
    return parsed


def _endpoints(slices: Iterable[SliceInfo], family: Family) -> list[Endpoint]:
    """The family's serving endpoints: (address, node, ready, ports by name)."""
    kind = "IPv6" if family is Family.INET6 else "IPv4"
    found: list[Endpoint] = []
    for sl in slices:
        if sl.address_type != kind:
            continue
        ports = {name: port for name, _proto, port in sl.ports}
        for ep in sl.endpoints:
            if ep.ready or ep.serving:
                found.append((ep.address, ep.node, ep.ready, ports))
    return found


def _local_shares(
    slices: Iterable[SliceInfo], family: Family, by_endpoints: bool
) -> dict[str, int]:
    """externalTrafficPolicy Local: each node with an endpoint of the family, and its share:
    its ready endpoints (each address once, however many slices list it), or 1 for every
    node with one when ``by_endpoints`` is off; 0 for a node whose endpoints are all
    terminating (its connections finish, new ones go elsewhere)."""
    ready: dict[str, set[str]] = {}
    for address, where, is_ready, _ports in _endpoints(slices, family):
        if where is not None:
            found = ready.setdefault(where, set())
            if is_ready:
                found.add(address)
    if by_endpoints:
        return {node: len(addresses) for node, addresses in ready.items()}
    return {node: 1 if addresses else 0 for node, addresses in ready.items()}


def _node_backends(
    svc: ServiceInfo,
    slices: Iterable[SliceInfo],
    nodes: Mapping[str, NodeInfo],
    family: Family,
    port: int,
    *,
    by_endpoints: bool = True,
) -> list[Backend]:
    """The usable nodes at ``port`` (with ``Local`` traffic: only nodes with an endpoint,
    weighed by their ready endpoints unless ``by_endpoints`` is off)."""
    local: dict[str, int] | None = None
    if svc.external_traffic_policy == "Local":
        local = _local_shares(slices, family, by_endpoints)
    out: list[Backend] = []
    for node in nodes.values():
        if not node.usable or (local is not None and node.name not in local):
            continue
        for address in node.internal_ips:
            if Family.of(address) is family:
                out.append((address, port, 1 if local is None else local[node.name]))
    return out


def _lb_wants(
    svc: ServiceInfo,
    addresses: Iterable[str],
    slices: tuple[SliceInfo, ...],
    nodes: Mapping[str, NodeInfo],
    policy: Policy,
    *,
    opts: Options,
    problems: list[Problem],
) -> list[_Want]:
    """One virtual service per load-balancer address and port."""
    if not wants_address(svc, policy):
        return []
    wants: list[_Want] = []
    for text in addresses:
        address = sloppy_address(text)
        if address is None:  # IPAM hands out canonical text: a bug, not the tenant's
            problems.append(Problem("address", f"{shown(text)} is not an IP address"))
            continue
        family = Family.of(address)
        allowed = (
            None
            if svc.source_ranges is None
            else tuple(r for r in svc.source_ranges if Family.of(r) is family)
        )
        for sp in svc.ports:
            protocol = PROTOCOLS.get(sp.protocol)
            if protocol is None:
                continue
            if opts.backends == "pod":
                backends = [
                    (a, _target_port(ports, sp.name, sp.target_port), 1 if live else 0)
                    for a, _node, live, ports in _endpoints(slices, family)
                ]
            else:
                # nat rewrites to the node port; dr and tun cannot change the port, and
                # kube-proxy on the node accepts the load-balancer address at the port.
                port = sp.node_port if opts.forwarding.masquerades else sp.port
                backends = _node_backends(
                    svc, slices, nodes, family, port, by_endpoints=opts.local_weights
                )
            key = ServiceKey(family, protocol, address, sp.port)
            origin = f"{svc.ref}:{sp.name or sp.port}"
            wants.append(_Want(key, backends, origin, opts.backends != "pod", allowed))
    return wants


def _nodeport_wants(
    svc: ServiceInfo,
    slices: tuple[SliceInfo, ...],
    nodes: Mapping[str, NodeInfo],
    policy: Policy,
    by_endpoints: bool = True,
) -> list[_Want]:
    """One virtual service per node port on each NodePort VIP."""
    if not wants_nodeports(svc, policy):
        return []
    wants: list[_Want] = []
    for vip in policy.nodeport_vips:
        family = Family.of(vip)
        for sp in svc.ports:
            protocol = PROTOCOLS.get(sp.protocol)
            if protocol is None or not sp.node_port:
                continue
            key = ServiceKey(family, protocol, vip, sp.node_port)
            backends = _node_backends(
                svc, slices, nodes, family, sp.node_port, by_endpoints=by_endpoints
            )
            wants.append(_Want(key, backends, f"{svc.ref}:nodeport/{sp.node_port}", True))
    return wants


def _virtual_service(
    want: _Want,
    config: ServiceConfig,
    *,
    weight: int,
    forwarding: Forwarding,
    check: CheckSpec | None,
    probe_port: int,
) -> tuple[VirtualService, dict[DestKey, tuple[Target, ...]], list[DestKey]]:
    """The virtual service, its real servers' checks, and those draining (not live)."""
    dests: dict[DestKey, RealServer] = {}
    targets: dict[DestKey, tuple[Target, ...]] = {}
    draining: list[DestKey] = []
    for address, port, share in want.backends:
        if port <= 0 or (address, port) in dests:
            continue
        dests[(address, port)] = RealServer(
            address, port, min(weight * share, MAX_WEIGHT), forwarding
        )
        if not share:
            draining.append((address, port))
        found: list[Target] = []
        if check is not None:
            found.append(Target(address, port, check))
        if probe_port > 0:
            # kube-proxy answers GET /healthz on the healthCheckNodePort: 200 when the
            # node has a local endpoint, 503 when it has none.
            found.append(Target(address, probe_port, NODE_HEALTHZ))
        if found:
            targets[(address, port)] = tuple(found)
    # In hash_order, the order the kernel's list takes for a new service: the reconciler's
    # copy of what it applied is then this very object, not a reordered copy of it.
    ordered = {dkey: dests[dkey] for dkey in hash_order(dests)}
    return VirtualService(want.key, config, ordered, want.origin), targets, draining
