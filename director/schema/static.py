"""The file's own objects: static services and their real servers (pools and owned ranges
are :mod:`director.schema.pool_entries`'s).

Each is an entry (its keys, types and bounds, once) that compiles to the core's model;
what one entry cannot know alone is checked by the rules in :mod:`director.schema.rules`.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, NamedTuple

from director.core.dests import KEY_SIZE, Dests, key_at, packed_key, shared_attrs
from director.core.model import (
    MAX_RATE,
    MAX_WEIGHT,
    Family,
    Forwarding,
    IpProtocol,
    NotAnEndpoint,
    RealServer,
    ServiceConfig,
    ServiceKey,
    check_flags,
    parse_endpoint,
    shown,
)
from director.core.services import VirtualService
from director.schema.fields import (
    ADDRESS,
    FLAG,
    NAME_RE,
    TEXT,
    Path,
    Rule,
    below,
    integer,
    list_of,
    matching,
    one_of,
    problem,
)
from director.schema.sections import FORWARDING, SCHEDULER, WEIGHT, Defaults, Section
from director.schema.sections_base import Keys, Problem, check_keys, section

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
    try:
        return parse_endpoint(value)
    except NotAnEndpoint:
        raise problem(
            f"{value!r} is not ADDRESS:PORT (IPv6 as [ADDRESS]:PORT), "
            "or a mapping with address and port"
        ) from None
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


# A file's services mostly share their real servers (the same nodes behind many VIPs and
# ports): each address is read, and packed, once per file, not once per mention. Bounded,
# and emptied after each file (``forget_addresses``): nothing of a file stays in memory.
@functools.lru_cache(maxsize=4096)
def _packed(address: str, port: int) -> bytes:
    return packed_key(address, port)


def forget_addresses() -> None:
    """Empty the per-file cache of addresses (called once a file is read)."""
    _packed.cache_clear()


def _real_server_entry(data: object) -> RealServerEntry:
    """One real server, any form, by the rules (a list in the long form throughout is read
    by :func:`_real_servers_of` in one loop)."""
    if isinstance(data, RealServerEntry):
        return data
    if isinstance(data, str):
        return RealServerEntry(*_endpoint(data))
    fields = check_keys(data, _RS_KEYS)
    try:
        entry = RealServerEntry(**{key: _RS_CHECKS[key](value) for key, value in fields.items()})
    except Problem:
        for key, value in fields.items():  # which key: the refusal names it
            try:
                _RS_CHECKS[key](value)
            except Problem as exc:
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


_EACH = list_of(REAL_SERVER)


class PackedServers:
    """A ``real_servers:`` list in the long form throughout (``{address, port, weight}``
    each, what most files write tens of thousands of times), as one loop reads it: each real
    server's packed key and its weight, nothing else made per real server. What only the
    service can tell (the family, a repeat) is checked when it compiles."""

    __slots__ = ("keys", "weights")

    def __init__(self, keys: list[bytes], weights: list[int]) -> None:
        self.keys, self.weights = keys, weights


def _real_servers_of(value: object) -> tuple[RealServerEntry, ...] | PackedServers:
    """``real_servers:``. A list in the long form throughout is read in one loop, one call
    per service, not per real server (:class:`PackedServers`); anything else, a port 0 or a
    fault, item by item by the rules (which name the item)."""
    if type(value) is list:
        keys: list[bytes] = []
        weights: list[int] = []
        packed = _packed
        for data in value:
            if type(data) is not dict or len(data) != 3:
                break
            try:
                address, port, weight = data["address"], data["port"], data["weight"]
            except KeyError:
                break
            if not (
                address.__class__ is str
                and port.__class__ is int
                and weight.__class__ is int
                and 0 < port <= MAX_PORT
                and 0 <= weight <= MAX_WEIGHT
            ):
                break
            try:
                keys.append(packed(address, port))
            except ValueError:
                break
            weights.append(weight)
        else:
            return PackedServers(keys, weights)
    result: tuple[RealServerEntry, ...] = _EACH.check(value)
    return result


REAL_SERVERS = Rule(_real_servers_of, _EACH.schema)


@functools.lru_cache(maxsize=1024)  # bounded: a file's services mostly share a few
def _shared(config: ServiceConfig) -> ServiceConfig:
    """The one ServiceConfig of these values the file's services share."""
    return config


@section
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
    real_servers: Annotated[tuple[RealServerEntry, ...] | PackedServers, REAL_SERVERS] = ()
    """ADDRESS:PORT ([v6]:PORT), or a mapping: address, port (default: the service's), weight
    (0-65535), forwarding, upper_threshold, lower_threshold."""
    health_check: Annotated[str | None, TEXT] = None  # none, tcp, http[:/path], https[:/path]
    """This service's check: none, tcp, http:/path, https:/path or http[s]://HOST/path (default:
    health.check)."""
    syn_guard: Annotated[bool | None, FLAG] = None
    """false: this service's SYNs are not answered with cookies by the box (default: guarded
    where guard.syn guards, if it is TCP forwarded by nat or fullnat)."""
    client_rate: Annotated[int, integer(0, MAX_RATE)] = 0
    """New connections a second this TCP service takes from one client address; what is over
    is dropped by the box and counted (0: no limit)."""
    service_rate: Annotated[int, integer(0, MAX_RATE)] = 0
    """New connections a second this TCP service takes from all clients together (0: no
    limit)."""
    sorry_server: Annotated[str | None, TEXT] = None
    """ADDRESS:PORT ([v6]:PORT) that takes the traffic while none of its real servers is up
    (all failing their checks), forwarded as they are; not checked itself."""

    def sorry(self, key: ServiceKey, vs: VirtualService, default: Forwarding) -> RealServer | None:
        """The sorry server as a real server of ``vs``; Refusal (below this entry) if it
        cannot be one."""
        if self.sorry_server is None:
            return None
        try:
            address, port = _endpoint(self.sorry_server)
        except Problem as exc:
            raise Refusal(("sorry_server",), exc.reason) from None
        if Family.of(address) is not key.family or not port:
            raise Refusal(
                ("sorry_server",), "the sorry server needs a port, in the service's family"
            )
        if (address, port) in vs.real_servers:
            raise Refusal(("sorry_server",), f"{self.sorry_server} is one of its real servers")
        first = next(iter(vs.real_servers.values()), None)
        mode = first.forwarding if first is not None else (self.forwarding or default)
        return RealServer(address, port, 1, mode)

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
        config = _shared(ServiceConfig(chosen, flags, self.persistence, netmask))
        origin = f"static/{self.name}" if self.name else "static"
        return VirtualService(key, config, real_servers, origin)

    def _real_servers(self, key: ServiceKey, mode: Forwarding, defaults: Defaults) -> Dests:
        """The real servers, each with the service's port, forwarding and the default weight
        where it says none, packed as they are read (one loop over tens of thousands: no
        call per real server, and no RealServer made)."""
        if isinstance(self.real_servers, PackedServers):
            return _packed_servers(self.real_servers, key, mode)
        rows: list[Any] = []
        index_of: dict[bytes, int] = {}  # by packed key: the same bytes object for a repeat
        v6, tun, marked = key.family is Family.INET6, Forwarding.TUN, key.fwmark
        service_port, default_weight = key.port, defaults.weight
        for index, (address, given_port, given_weight, given_fwd, upper, lower) in enumerate(
            self.real_servers
        ):
            port = service_port if given_port is None else given_port
            fwd = given_fwd or mode
            if port == 0 and not marked:
                reason = "a real server of an address:port service needs a port"
                raise Refusal(("real_servers", index), reason)
            if (":" in address) is not v6 and fwd is not tun:
                raise Refusal(("real_servers", index), _mixed(address, key))
            dest = _packed(address, port)
            first = index_of.setdefault(dest, index)
            if first != index:
                raise Refusal(("real_servers", index), _TWICE, ("real_servers", first))
            weight = default_weight if given_weight is None else given_weight
            rows += (dest, shared_attrs((weight, fwd, upper, lower)))
        return Dests.from_rows(rows)


_TWICE = "real server declared twice (first on line {first})"


def _mixed(address: str, key: ServiceKey) -> str:
    return (
        f"real server {address} is {Family.of(address).label} but the service is "
        f"{key.family.label}; mixing families only works with forwarding: tun"
    )


def _packed_servers(given: PackedServers, key: ServiceKey, mode: Forwarding) -> Dests:
    """A long-form list's real servers (:class:`PackedServers`): its family and repeats
    checked over the joined keys (in C), the first fault in the file's order refused."""
    keys = b"".join(given.keys)
    count = len(given.keys)
    faults: list[tuple[int, str, Path | None]] = []
    if mode is not Forwarding.TUN:  # each key's last byte is its family
        other = Family.INET if key.family is Family.INET6 else Family.INET6
        at = keys[KEY_SIZE - 1 :: KEY_SIZE].find(other)
        if at >= 0:
            faults.append((at, _mixed(key_at(keys, at * KEY_SIZE)[0], key), None))
    if len(set(given.keys)) != count:
        first: dict[bytes, int] = {}
        for index, dest in enumerate(given.keys):
            if first.setdefault(dest, index) != index:
                faults.append((index, _TWICE, ("real_servers", first[dest])))
                break
    if faults:
        index, reason, before = min(faults, key=lambda fault: fault[0])
        raise Refusal(("real_servers", index), reason, before)
    attrs = {weight: shared_attrs((weight, mode, 0, 0)) for weight in set(given.weights)}
    return Dests.from_packed(keys, [attrs[weight] for weight in given.weights])
