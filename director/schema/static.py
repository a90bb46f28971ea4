"""The file's own objects: static services and their real servers, pools, owned ranges.

Each is an entry (its keys, types and bounds, once) that compiles to the core's model;
what one entry cannot know alone is checked by the rules in :mod:`director.schema.rules`.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, NamedTuple

from pydantic import model_validator
from pydantic.dataclasses import dataclass
from pydantic_core import PydanticCustomError

from director.core.model import (
    MAX_WEIGHT,
    Family,
    Forwarding,
    IpProtocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
    canonical_address,
    check_flags,
    plain_network,
    shown,
)
from director.core.ownership import Network
from director.core.pools import (
    NO_LIMIT,
    SELECTOR_OPERATORS,
    Allocation,
    Announce,
    LabelSelector,
    Pool,
    PoolError,
)
from director.core.services import VirtualService
from director.schema.bgp import COMMUNITY
from director.schema.fields import (
    ADDRESS,
    DNS_LABEL,
    DNS_LABEL_RE,
    FLAG,
    NAME_RE,
    QUALIFIED_RE,
    TEXT,
    Keys,
    Path,
    Rule,
    below,
    check_keys,
    digits,
    integer,
    list_of,
    matching,
    one_of,
    problem,
    scalar,
)
from director.schema.sections import FORWARDING, SCHEDULER, SECTION, WEIGHT, Defaults, Section

MAX_THRESHOLD = 2**31 - 1
MAX_PORT = 65535
MAX_PERSISTENCE = 31 * 24 * 3600


class Refusal(ValueError):
    """An entry the rules refuse, at ``path``; ``{first}`` in the reason is ``first``'s line."""

    def __init__(self, path: Path, reason: str, first: Path | None = None) -> None:
        super().__init__(reason)
        self.path, self.reason, self.first = path, reason, first


def _endpoint(value: str) -> tuple[str, int]:
    """``ADDRESS:PORT`` (IPv6 as ``[ADDRESS]:PORT``) as the long form's mapping."""
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = value.rpartition(":")
    if not host or not digits(port_text) or not 0 <= int(port_text) <= 65535:
        raise problem(
            f"{value!r} is not ADDRESS:PORT (IPv6 as [ADDRESS]:PORT), "
            "or a mapping with address and port"
        )
    try:
        return canonical_address(host), int(port_text)
    except ValueError as exc:
        raise problem(str(exc)) from None


class RealServerEntry(NamedTuple):
    """One of ``real_servers:`` as the file gives it (None: the service's, or the default)."""

    address: str
    port: int | None = None
    weight: int | None = None
    forwarding: Forwarding | None = None
    upper_threshold: int = 0
    lower_threshold: int = 0


# The keys of a real server, once: its rule, and whether it is required. A service holds
# tens of real servers and a file tens of thousands: one rule reads them all, without a
# pydantic model per real server (``make bench`` measures the file against keepalived -t).
_RS_RULES: dict[str, tuple[Rule, bool]] = {
    "address": (ADDRESS, True),
    "port": (integer(0, MAX_PORT), False),  # the service's port if not given
    "weight": (WEIGHT, False),
    "forwarding": (FORWARDING, False),
    "upper_threshold": (integer(0, MAX_THRESHOLD), False),
    "lower_threshold": (integer(0, MAX_THRESHOLD), False),
}
_RS_KEYS = Keys.of({key: required for key, (_, required) in _RS_RULES.items()})
_RS_CHECKS = {key: rule.check for key, (rule, _) in _RS_RULES.items()}


_LONG_FORM = frozenset(("address", "port", "weight"))


def _long_form(data: dict[str, Any]) -> RealServerEntry | None:
    """``{address, port, weight}`` with a valid value in each, the form most files write
    (tens of thousands of times), as the rules would read it; None: let the rules read it."""
    address, port, weight = data["address"], data["port"], data["weight"]
    if (
        address.__class__ is not str
        or port.__class__ is not int
        or weight.__class__ is not int
        or not 0 <= port <= MAX_PORT
        or not 0 <= weight <= MAX_WEIGHT
    ):
        return None
    try:
        return RealServerEntry(canonical_address(address), port, weight)
    except ValueError:
        return None


def _real_server_entry(data: object) -> RealServerEntry:
    if isinstance(data, RealServerEntry):
        return data
    if type(data) is dict and data.keys() == _LONG_FORM:
        entry = _long_form(data)
        if entry is not None:
            return entry
    if isinstance(data, str):
        return RealServerEntry(*_endpoint(data))
    fields = check_keys(data, _RS_KEYS)
    try:
        entry = RealServerEntry(**{key: _RS_CHECKS[key](value) for key, value in fields.items()})
    except PydanticCustomError:
        for key, value in fields.items():  # which key: the refusal names it
            try:
                _RS_CHECKS[key](value)
            except PydanticCustomError as exc:
                raise below(exc, key) from None
        raise
    if entry.lower_threshold > entry.upper_threshold:
        raise problem(
            f"lower_threshold ({entry.lower_threshold}) needs an upper_threshold at least "
            f"as large (got {entry.upper_threshold})",
            ("lower_threshold",),
        )
    return entry


REAL_SERVER = Rule(
    _real_server_entry,
    {
        "oneOf": [
            {"type": "string", "examples": ["192.0.2.1:8080", "[2001:db8::1]:8080"]},
            {
                "type": "object",
                "additionalProperties": False,
                "required": sorted(_RS_KEYS.required),
                "properties": {key: rule.schema for key, (rule, _) in _RS_RULES.items()},
            },
        ]
    },
)


@dataclass(frozen=True, slots=True, config=SECTION)
class ServiceEntry(Section):
    """One of ``services:``: an address, port and protocol, or a firewall mark."""

    name: Annotated[
        str | None,
        matching(
            NAME_RE,
            lambda name: (
                f"{shown(name)} is not a service name (letters, digits and _.-, 63 at "
                "most; the API addresses it as /api/v1/static/NAME)"
            ),
        ),
    ] = None
    """Label in plans, logs and the API (static/NAME): letters, digits and _.-, at most 63
    characters, unique."""
    address: Annotated[str | None, ADDRESS] = None
    """The VIP (with port); a firewall-mark service gives fwmark instead."""
    port: Annotated[int | None, integer(1, 65535)] = None
    """The VIP's port."""
    protocol: Annotated[str | None, one_of("tcp", "udp", "sctp")] = None  # tcp
    """tcp (the default), udp or sctp."""
    fwmark: Annotated[int | None, integer(1, 0xFFFFFFFF)] = None
    """A firewall-mark service instead of address and port (the mark is set by nftables or
    iptables)."""
    family: Annotated[str | None, one_of("ipv4", "ipv6")] = None  # with fwmark
    """A firewall-mark service's address family: ipv4 (the default) or ipv6."""
    scheduler: Annotated[str | None, SCHEDULER] = None
    """The service's scheduler (default: defaults.scheduler)."""
    flags: Annotated[tuple[str, ...], list_of(TEXT)] = ()
    """Scheduler flags: sh-fallback, sh-port (sh), mh-fallback, mh-port (mh), flag-1..3,
    onepacket (UDP only). The kernel keeps bits: flag-1 with sh is stored, and shown, as
    sh-fallback."""
    persistence: Annotated[int, integer(0, MAX_PERSISTENCE)] = 0  # seconds
    """Seconds a client sticks to its real server (0: off)."""
    netmask: Annotated[int | None, integer(1, 128)] = None  # 32 at most for IPv4
    """Persistence granularity as a prefix length (default: 32, or 128 for IPv6)."""
    forwarding: Annotated[Forwarding | None, FORWARDING] = None
    """Forwarding of its real servers that name none (default: defaults.forwarding). An IPv4
    real server in an IPv6 service, or the reverse, needs tun; fullnat is every real
    server's or none's, and needs an snat address of the service's family."""
    real_servers: Annotated[tuple[RealServerEntry, ...], list_of(REAL_SERVER)] = ()
    """ADDRESS:PORT ([v6]:PORT), or a mapping: address, port (default: the service's), weight
    (0-65535), forwarding, upper_threshold, lower_threshold."""
    health_check: Annotated[str | None, TEXT] = None  # none, tcp, http[:/path], https[:/path]
    """This service's check: none, tcp, http:/path, https:/path or http[s]://HOST/path (default:
    health.check)."""

    def key(self) -> ServiceKey:
        if self.fwmark is not None:
            for clash in ("address", "port", "protocol"):
                if getattr(self, clash) is not None:
                    raise Refusal(
                        (clash,), "a firewall-mark service has no address, port or protocol"
                    )
            family = Family.INET6 if self.family == "ipv6" else Family.INET
            return ServiceKey.mark(family, self.fwmark)
        if self.address is None:
            raise Refusal((), "a service needs an address and port, or a fwmark")
        if self.family is not None:
            raise Refusal(("family",), "family is implied by the address (use it with fwmark)")
        if self.port is None:
            raise Refusal((), "missing required key 'port'")
        protocol = IpProtocol[(self.protocol or "tcp").upper()]
        return ServiceKey.inet(protocol, self.address, self.port)

    def compile(self, defaults: Defaults) -> VirtualService:
        """The virtual service; Refusal (below this entry) if it cannot be one."""
        key = self.key()
        chosen = self.scheduler or defaults.scheduler
        try:  # canonical names: what the kernel reads back (flag-1 with sh is sh-fallback)
            flags = check_flags(chosen, frozenset(self.flags), key.protocol)
        except ValueError as exc:
            raise Refusal(("flags",), str(exc)) from None
        netmask = key.family.max_prefix if self.netmask is None else self.netmask
        if netmask > key.family.max_prefix:
            limit = key.family.max_prefix
            raise Refusal(("netmask",), f"must be an integer between 1 and {limit} (got {netmask})")
        real_servers = self._real_servers(key, self.forwarding or defaults.forwarding, defaults)
        config = ServiceConfig(chosen, flags, self.persistence, netmask)
        origin = f"static/{self.name}" if self.name else "static"
        return VirtualService(key, config, real_servers, origin)

    def _real_servers(
        self, key: ServiceKey, mode: Forwarding, defaults: Defaults
    ) -> dict[tuple[str, int], RealServer]:
        """The real servers, each with the service's port, forwarding and the default weight
        where it says none (one loop over tens of thousands: no call per real server)."""
        out: dict[tuple[str, int], RealServer] = {}
        index_of: dict[tuple[str, int], int] = {}
        v6, tun = key.family is Family.INET6, Forwarding.TUN
        for index, (address, given_port, given_weight, given_fwd, upper, lower) in enumerate(
            self.real_servers
        ):
            port = key.port if given_port is None else given_port
            fwd = given_fwd or mode
            if port == 0 and not key.fwmark:
                reason = "a real server of an address:port service needs a port"
                raise Refusal(("real_servers", index), reason)
            if (":" in address) is not v6 and fwd is not tun:
                raise Refusal(
                    ("real_servers", index),
                    f"real server {address} is "
                    f"{Family.of(address).label} but the service is "
                    f"{key.family.label}; mixing families only works with "
                    "forwarding: tun",
                )
            if (address, port) in out:
                first = ("real_servers", index_of[address, port])
                reason = "real server declared twice (first on line {first})"
                raise Refusal(("real_servers", index), reason, first)
            weight = defaults.weight if given_weight is None else given_weight
            out[address, port] = RealServer(address, port, weight, fwd, upper, lower)
            index_of[address, port] = index
        return out


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
        except PydanticCustomError as exc:
            raise below(exc, str(key)) from None
    return tuple(pairs)


LABEL_MAP = Rule(_label_map, {"type": "object", "additionalProperties": LABEL_VALUE.schema})


@dataclass(frozen=True, slots=True, config=SECTION)
class ExpressionEntry(Section):
    """One of a selector's ``match_expressions``."""

    key: Annotated[str, LABEL_KEY]
    """The label's key."""
    operator: Annotated[str, one_of(*SELECTOR_OPERATORS)]
    """In or NotIn (the label's value is, or is not, one of values), Exists or DoesNotExist
    (the Service has, or has not, the label)."""
    values: Annotated[tuple[str, ...], list_of(LABEL_VALUE)] = ()
    """The values In and NotIn compare with (none for Exists and DoesNotExist)."""

    @model_validator(mode="after")
    def _values(self) -> ExpressionEntry:
        if self.operator in ("In", "NotIn") and not self.values:
            raise problem(f"{self.operator} needs at least one value", ("values",))
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise problem(f"{self.operator} takes no values", ("values",))
        return self


@dataclass(frozen=True, slots=True, config=SECTION)
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


@dataclass(frozen=True, slots=True, config=SECTION)
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


@dataclass(frozen=True, slots=True, config=SECTION)
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
    local_preference: Annotated[int | None, integer(0, 4294967295)] = None  # bgp only
    """BGP local preference set on this pool's routes; announce: bgp only."""
    forwarding: Annotated[Forwarding | None, FORWARDING] = None
    """The forwarding of the Services given its addresses (their lvs-director.io/forwarding
    annotation wins; default: defaults.forwarding)."""
    allocate_to: AllocationEntry | None = None
    """Limit the pool to some Services (namespaces, label selectors) and give it a priority
    over the others (none: every Service, no priority)."""

    def compile(self) -> Pool:
        if self.announce != "bgp":
            for key in ("communities", "local_preference"):
                if getattr(self, key) not in ((), None):
                    raise Refusal((key,), f"{key} is for pools announced over BGP (announce: bgp)")
        announce = Announce(self.announce, self.communities, self.local_preference)
        try:
            return Pool.parse(
                self.name,
                self.addresses,
                self.auto_assign,
                self.all_addresses,
                announce,
                allocation=self.allocate_to.compile() if self.allocate_to else NO_LIMIT,
                forwarding=self.forwarding,
            )
        except PoolError as exc:
            raise Refusal(("addresses",), str(exc)) from None


def _network(value: object) -> Network:
    if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return value
    try:
        return plain_network(scalar(value), strict=True)
    except ValueError as exc:
        raise problem(f"not a network in CIDR form: {exc}") from None


def _marks(value: object) -> range:
    if isinstance(value, range):
        return value
    low_text, _, high_text = scalar(value).partition("-")
    if not digits(low_text) or (high_text and not digits(high_text)):
        raise problem("must be a mark or a range of marks like 100-199")
    low = int(low_text)
    high = int(high_text) if high_text else low
    if not 1 <= low <= high <= 0xFFFFFFFF:
        raise problem("marks must be between 1 and 4294967295, low to high")
    return range(low, high + 1)


@dataclass(frozen=True, slots=True, config=SECTION)
class OwnershipEntry(Section):
    """``ownership:``: what the director may create, change and delete in the kernel."""

    networks: Annotated[
        tuple[Network, ...], list_of(Rule(_network, {"type": "string", "format": "cidr"}))
    ] = ()
    """CIDRs (IPv4, IPv6) whose virtual services the director owns; its pools and NodePort VIPs
    are added. Anything else in the kernel is left alone and reported."""
    fwmarks: Annotated[
        tuple[range, ...], list_of(Rule(_marks, {"type": "string", "examples": ["100-199"]}))
    ] = ()
    """Firewall marks, or ranges like 1000-1999, whose services the director owns."""
