"""The director's policy applied to a Service: which Services are this director's, what one
gets when it says nothing (over BGP: Maglev and tun), its effective options (its annotations
under the policy, the last valid value kept), and what no endpoint may be. Pure.

``director.core.translate`` turns a Service and its options into virtual services.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

from director.core.annotations import (
    A_BACKENDS,
    A_CLIENT_RATE,
    A_FORWARDING,
    A_LOCAL_WEIGHTS,
    A_MAX_CONNECTIONS,
    A_NODEPORT,
    A_OVERRIDE,
    A_SCHEDULER,
    A_SERVICE_RATE,
    A_SORRY,
    A_SYN_GUARD,
    ANNOTATIONS,
    BACKEND_MODES,
    LOCAL_WEIGHTS,
    NO_FLAGS,
    PROTOCOLS,
    SWITCH,
    Options,
    Problem,
    interned,
    parse_scheduler,
    protocols,
)
from director.core.checks import CheckSpec
from director.core.cluster import PREFIX, ServiceInfo
from director.core.dests import BGP_SCHEDULER, HASHING_SCHEDULERS, NAT_OVER_BGP
from director.core.model import (
    CONFIGURABLE_FORWARDING,
    MAX_CONNECTIONS,
    MAX_RATE,
    NO_CAPS,
    Caps,
    Family,
    Forwarding,
    RateLimit,
    parse_endpoint,
    shown,
)
from director.core.pools import Pool


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
    # The box's SYN guard (guard.syn resolved): a Service is guarded unless it opts out.
    # False: the box guards none (off, or auto in a pair or a fleet; syn_guard_off says why).
    syn_guard: bool = False
    syn_guard_off: str = ""


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


def options(
    svc: ServiceInfo,
    policy: Policy,
    previous: Options | None,
    bgp: bool = False,
    *,
    pool: Pool | None = None,
) -> tuple[Options, list[Problem]]:
    """Per-Service settings from annotations; an invalid one keeps the last valid value.
    ``bgp``: its address is announced over BGP (see :func:`defaults`); ``pool``: its
    addresses' pool, whose forwarding, limits and guard switch an annotation overrides."""
    default = defaults(policy, bgp, pool.forwarding if pool else None)
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
        parsed = parse_scheduler(text, policy.schedulers, protocols(svc))
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
    syn_guard = _syn_guard(svc, policy, forwarding, problems, pool.syn_guard if pool else None)
    caps = _caps(svc, pool.caps if pool else NO_CAPS, (previous or default).caps, problems)
    sorry = _sorry(svc, policy, (previous or default).sorry, problems)
    return interned(
        Options(
            scheduler, flags, forwarding, backends, source, local_weights, syn_guard, caps, sorry
        )
    ), problems


def _sorry(
    svc: ServiceInfo, policy: Policy, kept: tuple[str, int] | None, problems: list[Problem]
) -> tuple[str, int] | None:
    """The Service's sorry server (ADDRESS:PORT), or none; a bad one keeps the last valid
    one. Not the box itself nor a VIP (``Policy.reserved``), as no endpoint may be."""
    text = svc.annotations.get(A_SORRY)
    if text is None:
        return None
    try:
        address, port = parse_endpoint(text.strip())
    except ValueError as exc:
        problems.append(Problem(A_SORRY, str(exc)))
        return kept
    why = policy.reserved.why(address)
    if why is not None or not port:
        reason = f"{address} is {why}" if why else "port 0 is no port"
        problems.append(Problem(A_SORRY, f"{shown(text)}: {reason}; not used", "SorryRefused"))
        return kept
    return address, port


def _count(text: str, largest: int) -> int | str:
    """A limit's annotation: a whole number (0, off or none: no limit), or why not."""
    word = text.strip().lower()
    if word in ("off", "none"):
        return 0
    # ASCII digits only, and no longer than the largest: int() would take ٨٠, or refuse
    # thousands of digits with an error of its own
    if not (word.isascii() and word.isdigit()) or len(word) > len(str(largest)):
        return f"{shown(text)} is not a whole number from 0 to {largest} (or off)"
    if int(word) > largest:
        return f"{shown(text)} is not a whole number from 0 to {largest} (or off)"
    return int(word)


def _caps(svc: ServiceInfo, pool: Caps, kept: Caps, problems: list[Problem]) -> Caps:
    """The Service's limits: its pool's, each part overridden by its annotation; a bad
    value keeps the part's last valid one."""
    values = {"client": pool.rate.client, "service": pool.rate.service}
    values["connections"] = pool.max_connections
    last = {"client": kept.rate.client, "service": kept.rate.service}
    last["connections"] = kept.max_connections
    for part, annotation, largest in (
        ("client", A_CLIENT_RATE, MAX_RATE),
        ("service", A_SERVICE_RATE, MAX_RATE),
        ("connections", A_MAX_CONNECTIONS, MAX_CONNECTIONS),
    ):
        text = svc.annotations.get(annotation)
        if text is None:
            continue
        value = _count(text, largest)
        if isinstance(value, str):
            problems.append(Problem(annotation, value))
            values[part] = last[part]
        else:
            values[part] = value
    rate = RateLimit(values["client"], values["service"])
    if rate and not any(p.protocol == "TCP" for p in svc.ports):
        problems.append(
            Problem(
                A_CLIENT_RATE if rate.client else A_SERVICE_RATE,
                "a rate counts TCP connection attempts, and this Service has no TCP port: "
                "not limited",
                "LimitRefused",
            )
        )
    return Caps(rate, values["connections"])


def _syn_guard(
    svc: ServiceInfo,
    policy: Policy,
    forwarding: Forwarding,
    problems: list[Problem],
    pool: bool | None = None,
) -> bool:
    """Is the Service SYN-guarded: the box's default, its pool's switch (``pool``), or its
    annotation's on/off. Only nat and fullnat can be (by dr or tun the real server's answer
    never comes back through the box), and only on a box whose guard can run at all."""
    text = svc.annotations.get(A_SYN_GUARD)
    wanted = policy.syn_guard and pool is not False
    switch = None if text is None else SWITCH.get(text.strip().lower())
    if text is not None:
        if switch is None:
            problems.append(Problem(A_SYN_GUARD, f"{shown(text)} is not one of on, off"))
        elif switch and not policy.syn_guard:
            problems.append(
                Problem(
                    A_SYN_GUARD,
                    f"this box guards no Service ({policy.syn_guard_off or 'guard.syn is off'}); "
                    "not guarded",
                    "GuardRefused",
                )
            )
        else:
            wanted = switch
    if wanted and forwarding not in (Forwarding.NAT, Forwarding.FULLNAT):
        if switch:
            problems.append(
                Problem(
                    A_SYN_GUARD,
                    f"{forwarding.label} cannot be SYN-guarded (the real servers answer the "
                    "clients directly: the box never sees the handshake end); not guarded",
                    "GuardRefused",
                )
            )
        return False
    return wanted


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
