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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from director.core.annotations import (
    A_FORWARDING,
    A_HEALTH,
    A_SORRY,
    NODE_HEALTHZ,
    PROTOCOLS,
    Options,
    Problem,
    interned,
)
from director.core.checks import CheckSpec, Target, parse_check
from director.core.cluster import NodeInfo, ServiceInfo, SliceInfo
from director.core.dests import hash_order
from director.core.model import (
    MAX_WEIGHT,
    DestKey,
    Family,
    Forwarding,
    IpProtocol,
    RateLimit,
    RealServer,
    ServiceConfig,
    ServiceKey,
    format_endpoint,
    shown,
    sloppy_address,
)
from director.core.policy import Policy, options, wants_address, wants_nodeports
from director.core.pools import Pool
from director.core.services import VirtualService


@dataclass(frozen=True, slots=True)
class Translation:
    """The desired table made from a snapshot, and what could not be made."""

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
    # SYN-guarded virtual services (TCP, nat or fullnat): the box answers their SYNs with
    # cookies before IPVS sees a connection.
    guard: frozenset[ServiceKey] = frozenset()
    # Rate-limited virtual services (TCP): what is over is dropped by the box's nftables.
    limits: dict[ServiceKey, RateLimit] = field(default_factory=dict)
    # What serves each virtual service while none of its real servers is up.
    sorry: dict[ServiceKey, RealServer] = field(default_factory=dict)


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
    pool: Pool | None = None,
) -> Translation:
    """``bgp``: the Service's address is announced over BGP (every director serves it);
    ``pool``: its addresses' pool (its forwarding, limits and guard switch are the
    Service's unless an annotation says otherwise)."""
    opts, problems = options(svc, policy, previous, bgp, pool=pool)
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
    guard: set[ServiceKey] = set()
    limits: dict[ServiceKey, RateLimit] = {}
    sorry: dict[ServiceKey, RealServer] = {}
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
        if opts.syn_guard and key.protocol is IpProtocol.TCP:
            guard.add(key)
        if opts.caps.rate and key.protocol is IpProtocol.TCP:
            limits[key] = opts.caps.rate
        if opts.sorry is not None:
            address, port = opts.sorry
            if Family.of(address) is key.family:
                sorry[key] = RealServer(address, port, 1, opts.forwarding.kernel)
        config = interned(
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
            max_connections=opts.caps.max_connections,
        )
        draining.update((key, dkey) for dkey in gone)
        if targets:
            checks[key] = targets
        if want.allowed is not None:
            restrictions[key] = want.allowed
    if opts.sorry is not None and out and not sorry:
        problems.append(
            Problem(
                A_SORRY,
                f"sorry server {format_endpoint(*opts.sorry)} is of neither of the Service's "
                "address families; not used",
                "SorryRefused",
            )
        )
    return Translation(
        out,
        opts,
        tuple(problems),
        frozenset(draining),
        checks,
        restrictions,
        frozenset(snat),
        frozenset(guard),
        limits,
        sorry,
    )


def _health_check(svc: ServiceInfo, policy: Policy, problems: list[Problem]) -> CheckSpec | None:
    """The Service's active check: the default, or its annotation's (``none``: no check).
    The annotation is read whether or not checks are configured: a broken value is said now,
    not only once checks are turned on."""
    text = svc.annotations.get(A_HEALTH)
    if text is None:
        return policy.check
    parsed = None if text == "none" else parse_check(text, policy.check or CheckSpec())
    if isinstance(parsed, str):
        problems.append(Problem(A_HEALTH, parsed))
        return policy.check
    return parsed if policy.checking else policy.check


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
    refused: set[str] = set()  # endpoints refused (said once each)
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
                    if _endpoint_allowed(a, policy, refused, problems)
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


def _endpoint_allowed(
    address: str, policy: Policy, refused: set[str], problems: list[Problem]
) -> bool:
    """Whether an endpoint may be a real server: not one of the box's own addresses or a
    VIP (``Policy.reserved``); a refusal is said once per address."""
    why = policy.reserved.why(address)
    if why is None:
        return True
    if address not in refused:
        refused.add(address)
        problems.append(
            Problem(
                "endpointslice",
                f"endpoint {address} is {why}: refused as a real server (traffic to the VIP "
                "would loop through the box)",
                "EndpointRefused",
            )
        )
    return False


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
    max_connections: int = 0,
) -> tuple[VirtualService, dict[DestKey, tuple[Target, ...]], list[DestKey]]:
    """The virtual service, its real servers' checks, and those draining (not live).
    ``max_connections``: each real server's upper threshold (0: none)."""
    dests: dict[DestKey, RealServer] = {}
    targets: dict[DestKey, tuple[Target, ...]] = {}
    draining: list[DestKey] = []
    for address, port, share in want.backends:
        if port <= 0 or (address, port) in dests:
            continue
        dests[(address, port)] = RealServer(
            address, port, min(weight * share, MAX_WEIGHT), forwarding, max_connections
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
