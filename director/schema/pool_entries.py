"""The file's pools (with whom each serves: namespaces and label selectors, its priority) and
its owned ranges, as entries that compile to the core's pools and ownership."""

from __future__ import annotations

from typing import Annotated

from director.core.model import MAX_CONNECTIONS, MAX_RATE, Caps, Forwarding, RateLimit
from director.core.pools import (
    NO_LIMIT,
    SELECTOR_OPERATORS,
    Allocation,
    Announce,
    LabelSelector,
    Pool,
    PoolError,
)
from director.schema.bgp import COMMUNITY, LARGE_COMMUNITY
from director.schema.fields import (
    DNS_LABEL,
    DNS_LABEL_RE,
    FLAG,
    QUALIFIED_RE,
    TEXT,
    Rule,
    below,
    integer,
    list_of,
    matching,
    one_of,
    problem,
)
from director.schema.sections import FORWARDING, Section
from director.schema.sections_base import Problem, after, section
from director.schema.static import Refusal

MAX_THRESHOLD = 2**31 - 1
MAX_PORT = 65535
MAX_PERSISTENCE = 31 * 24 * 3600


LABEL_KEY = matching(
    QUALIFIED_RE, lambda key: f"{key!r} is not a label key (such as app or example.com/tier)"
)
LABEL_VALUE = matching(
    r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?",
    lambda value: (
        f"{value!r} is not a label value (63 characters at most: letters, digits, "
        "-_., starting and ending with a letter or digit)"
    ),
)


def _label_map(value: object) -> tuple[tuple[str, str], ...]:
    if isinstance(value, tuple):  # from Python: the pairs themselves
        return tuple((LABEL_KEY(k), LABEL_VALUE(v)) for k, v in value)
    if not isinstance(value, dict):
        raise problem("must be a mapping of label keys to values")
    pairs = []
    for key, text in value.items():
        try:
            pairs.append((LABEL_KEY(key), LABEL_VALUE("" if text is None else text)))
        except Problem as exc:
            raise below(exc, str(key)) from None
    return tuple(pairs)


LABEL_MAP = Rule(_label_map, {"type": "object", "additionalProperties": LABEL_VALUE.schema})


@section
class ExpressionEntry(Section):
    """One of a selector's ``match_expressions``."""

    key: Annotated[str, LABEL_KEY]
    """The label's key."""
    operator: Annotated[str, one_of(*SELECTOR_OPERATORS)]
    """In or NotIn (the label's value is, or is not, one of values), Exists or DoesNotExist
    (the Service has, or has not, the label)."""
    values: Annotated[tuple[str, ...], list_of(LABEL_VALUE)] = ()
    """The values In and NotIn compare with (none for Exists and DoesNotExist)."""

    @after
    def _values(self) -> ExpressionEntry:
        if self.operator in ("In", "NotIn") and not self.values:
            raise problem(f"{self.operator} needs at least one value", ("values",))
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise problem(f"{self.operator} takes no values", ("values",))
        return self


@section
class SelectorEntry(Section):
    """A label selector, as Kubernetes writes one (every part must hold)."""

    match_labels: Annotated[tuple[tuple[str, str], ...], LABEL_MAP] = ()
    """Labels the Service must carry, with these values."""
    match_expressions: tuple[ExpressionEntry, ...] = ()
    """Further conditions on its labels."""

    def compile(self) -> LabelSelector:
        return LabelSelector(
            self.match_labels, tuple((e.key, e.operator, e.values) for e in self.match_expressions)
        )


@section
class AllocationEntry(Section):
    """A pool's ``allocate_to:``: which Services it gives addresses to, and before which
    pools (MetalLB's serviceAllocation)."""

    priority: Annotated[int | None, integer(0, 2**31 - 1)] = None
    """Pools a Service may draw from automatically are tried by priority, lowest first;
    pools without one come after those with one (the file's order between equals)."""
    namespaces: Annotated[tuple[str, ...], list_of(DNS_LABEL)] = ()
    """Only Services in these namespaces (none listed: any namespace)."""
    service_selectors: tuple[SelectorEntry, ...] = ()
    """Only Services whose labels match one of these selectors (none: any Service)."""

    def compile(self) -> Allocation:
        return Allocation(
            self.priority,
            frozenset(self.namespaces),
            tuple(s.compile() for s in self.service_selectors),
        )


@section
class PoolEntry(Section):
    """One of ``pools:``: addresses the director gives to LoadBalancer Services."""

    name: Annotated[
        str,
        matching(
            DNS_LABEL_RE, lambda _: "a pool name is a DNS label (lowercase letters, digits, -)"
        ),
    ]
    """A DNS label; a Service asks for the pool with lvs-director.io/pool."""
    # CIDRs (198.51.100.0/24) and ranges (198.51.100.10-198.51.100.20)
    addresses: Annotated[tuple[str, ...], list_of(TEXT)]
    """CIDRs (198.51.100.0/24) and ranges (198.51.100.10-198.51.100.20), IPv4 and IPv6. Pools
    may not overlap, nor reach into unspecified, loopback, link-local, multicast, reserved or
    IPv4-mapped addresses, nor hold the box's own."""
    auto_assign: Annotated[bool, FLAG] = True  # false: only Services that ask for the pool
    """Give addresses to any Service; false: only to Services that ask for this pool."""
    all_addresses: Annotated[bool, FLAG] = False  # IPv4 CIDRs give out network and broadcast
    """IPv4 CIDRs of /30 and wider also give out their network and broadcast addresses (skipped
    by default: some clients and routers mishandle them)."""
    # vrrp: the keepalived pair moves the addresses (ha:); bgp: announced to bgp.peers
    announce: Annotated[str, one_of("vrrp", "bgp")] = "vrrp"
    """How the addresses reach the network: vrrp (the keepalived pair holds them) or bgp (every
    director announces them to bgp.peers)."""
    communities: Annotated[tuple[str, ...], list_of(COMMUNITY)] = ()  # bgp only
    """BGP communities set on this pool's routes (AA:NN, or a well-known name); announce: bgp
    only."""
    large_communities: Annotated[tuple[str, ...], list_of(LARGE_COMMUNITY)] = ()  # bgp only
    """BGP large communities (RFC 8092) set on this pool's routes, beside the standard ones:
    GLOBAL:LOCAL1:LOCAL2, each part 0 to 4294967295; announce: bgp only."""
    local_preference: Annotated[int | None, integer(0, 4294967295)] = None  # bgp only
    """BGP local preference set on this pool's routes; announce: bgp only."""
    forwarding: Annotated[Forwarding | None, FORWARDING] = None
    """The forwarding of the Services given its addresses (their lvs-director.io/forwarding
    annotation wins; default: defaults.forwarding)."""
    client_rate: Annotated[int, integer(0, MAX_RATE)] = 0
    """New TCP connections a second its Services take from one client address (0: no limit;
    a Service's lvs-director.io/client-rate wins). What is over is dropped and counted."""
    service_rate: Annotated[int, integer(0, MAX_RATE)] = 0
    """New TCP connections a second each of its Services takes from all clients together (0:
    no limit; a Service's lvs-director.io/service-rate wins)."""
    max_connections: Annotated[int, integer(0, MAX_CONNECTIONS)] = 0
    """Connections each real server of its Services holds at once (IPVS's upper threshold:
    past it the real server gets no new ones; 0: no limit; lvs-director.io/max-connections
    wins)."""
    syn_guard: Annotated[bool | None, FLAG] = None
    """false: its Services' SYNs are not answered with cookies by the box; true: they are
    (where guard.syn guards at all; nat and fullnat only). A Service's
    lvs-director.io/syn-guard wins. Default: guard.syn's choice."""
    allocate_to: AllocationEntry | None = None
    """Limit the pool to some Services (namespaces, label selectors) and give it a priority
    over the others (none: every Service, no priority)."""

    def compile(self) -> Pool:
        if self.announce != "bgp":
            for key in ("communities", "large_communities", "local_preference"):
                if getattr(self, key) not in ((), None):
                    raise Refusal((key,), f"{key} is for pools announced over BGP (announce: bgp)")
        announce = Announce(
            self.announce, self.communities, self.local_preference, self.large_communities
        )
        try:
            return Pool.parse(
                self.name,
                self.addresses,
                self.auto_assign,
                self.all_addresses,
                announce,
                allocation=self.allocate_to.compile() if self.allocate_to else NO_LIMIT,
                forwarding=self.forwarding,
                caps=Caps(RateLimit(self.client_rate, self.service_rate), self.max_connections),
                syn_guard=self.syn_guard,
            )
        except PoolError as exc:
            raise Refusal(("addresses",), str(exc)) from None
