"""Value types for IPVS state: virtual services, real servers, counters.

Pure data, no I/O. Addresses are canonical text (``socket.inet_ntop`` form) wherever
they are read, so keys compare and hash alike; the config loader and the kernel reader
both produce canonical text. A service's real servers (``Dests``) keep theirs packed, and
make the text when asked. Equality of a virtual service or real server
means "same configuration": counters live in separate types.
"""

from __future__ import annotations

import ipaddress
import socket
from array import array
from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from functools import lru_cache
from itertools import repeat
from typing import Any, NamedTuple

from director.core.errors import DirectorError


class Family(IntEnum):
    __hash__ = int.__hash__  # Enum's own __hash__ is Python code; keys hash this often

    INET = socket.AF_INET
    INET6 = socket.AF_INET6

    @property
    def label(self) -> str:
        return "ipv4" if self is Family.INET else "ipv6"

    @property
    def max_prefix(self) -> int:
        return 32 if self is Family.INET else 128

    @classmethod
    def of(cls, address: str) -> Family:
        return cls.INET6 if ":" in address else cls.INET


class IpProtocol(IntEnum):
    __hash__ = int.__hash__  # Enum's own __hash__ is Python code; keys hash this often

    TCP = socket.IPPROTO_TCP
    UDP = socket.IPPROTO_UDP
    SCTP = 132

    @property
    def label(self) -> str:
        return self.name.lower()


class Forwarding(IntEnum):
    """IPVS forwarding method (the kernel's IP_VS_CONN_F_FWD_MASK values)."""

    __hash__ = int.__hash__

    NAT = 0  # masquerading
    LOCAL = 1  # local node: only ever read from the kernel, never configured
    TUN = 2  # IP-in-IP tunnelling
    DR = 3  # direct routing
    BYPASS = 4  # only ever read from the kernel
    # The director's full NAT: masquerading, and the director's own address as the source
    # the real servers see (an nftables SNAT), so their replies come back whatever their
    # routes. Never in the kernel: a full-NAT service's real servers are NAT (``kernel``).
    FULLNAT = 6

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def kernel(self) -> Forwarding:
        """The forwarding method IPVS is given."""
        return Forwarding.NAT if self is Forwarding.FULLNAT else self

    @property
    def masquerades(self) -> bool:
        """IPVS rewrites the destination (to a node port, say): nat and fullnat."""
        return self in (Forwarding.NAT, Forwarding.FULLNAT)


CONFIGURABLE_FORWARDING = (Forwarding.NAT, Forwarding.FULLNAT, Forwarding.DR, Forwarding.TUN)

# Every scheduler Linux ships (net/netfilter/ipvs/ip_vs_*.c). Which of them a given kernel
# offers is the adapter's business (``Ipvs.schedulers()``).
KNOWN_SCHEDULERS = (
    "rr",
    "wrr",
    "lc",
    "wlc",
    "lblc",
    "lblcr",
    "dh",
    "sh",
    "sed",
    "nq",
    "mh",
    "fo",
    "ovf",
    "twos",
)

# Service flag bits (include/uapi/linux/ip_vs.h).
SVC_F_PERSISTENT = 0x0001
SVC_F_HASHED = 0x0002  # kernel-internal, never configured
SVC_F_ONEPACKET = 0x0004
SVC_F_SCHED1 = 0x0008
SVC_F_SCHED2 = 0x0010
SVC_F_SCHED3 = 0x0020

_SCHED_BITS = (SVC_F_SCHED1, SVC_F_SCHED2, SVC_F_SCHED3)
# ipvsadm's names for the scheduler flag bits; flag-N works with any scheduler.
_SCHED_FLAG_NAMES: dict[str, tuple[str, str, str]] = {
    "sh": ("sh-fallback", "sh-port", "flag-3"),
    "mh": ("mh-fallback", "mh-port", "flag-3"),
}
_GENERIC_FLAG_NAMES = ("flag-1", "flag-2", "flag-3")


def scheduler_flag_names(scheduler: str) -> tuple[str, ...]:
    """The flag names valid with ``scheduler`` (besides the generic flag-1..3)."""
    named = _SCHED_FLAG_NAMES.get(scheduler, ())
    return tuple(dict.fromkeys((*named, *_GENERIC_FLAG_NAMES, "onepacket")))


def encode_flags(scheduler: str, flags: Iterable[str], persistent: bool) -> int:
    """Flag names -> the kernel's service flag bits. Raises ValueError naming a bad flag."""
    bits = SVC_F_PERSISTENT if persistent else 0
    names = _SCHED_FLAG_NAMES.get(scheduler, _GENERIC_FLAG_NAMES)
    for flag in flags:
        if flag == "onepacket":
            bits |= SVC_F_ONEPACKET
        elif flag in names:
            bits |= _SCHED_BITS[names.index(flag)]
        elif flag in _GENERIC_FLAG_NAMES:
            bits |= _SCHED_BITS[_GENERIC_FLAG_NAMES.index(flag)]
        else:
            allowed = ", ".join(scheduler_flag_names(scheduler))
            raise ValueError(
                f"flag {flag!r} is not valid with scheduler {scheduler!r} (allowed: {allowed})"
            )
    return bits


def decode_flags(scheduler: str, bits: int) -> frozenset[str]:
    names = _SCHED_FLAG_NAMES.get(scheduler, _GENERIC_FLAG_NAMES)
    out = {names[i] for i, bit in enumerate(_SCHED_BITS) if bits & bit}
    if bits & SVC_F_ONEPACKET:
        out.add("onepacket")
    return frozenset(out)


def canonical_flags(scheduler: str, flags: Iterable[str]) -> frozenset[str]:
    """The names the kernel reads back for ``flags`` (``flag-1`` with ``sh`` is
    ``sh-fallback``). Raises ValueError naming a bad flag."""
    bits = encode_flags(scheduler, flags, False)
    return decode_flags(scheduler, bits)


class UdpOnly(DirectorError, ValueError):
    """A flag that is valid, but not for a service of this protocol (onepacket)."""

    status = 409


def check_flags(
    scheduler: str, flags: Iterable[str], protocol: IpProtocol | None
) -> frozenset[str]:
    """Validated, canonical flags for a service of ``protocol`` (None: a firewall mark).
    The one rule set of the config file, the admin API and the annotation. Raises ValueError
    for a name with no bit, UdpOnly for onepacket on anything but UDP."""
    names = canonical_flags(scheduler, flags)
    if "onepacket" in names and protocol is not IpProtocol.UDP:
        raise UdpOnly("onepacket scheduling only applies to UDP services")
    return names


def shown(text: object, limit: int = 80) -> str:
    """``text`` quoted for an error message: printable, escaped, bounded."""
    out = ascii(text) if isinstance(text, str) else ascii(str(text))
    return out if len(out) <= limit else out[: limit - 4] + "...'"


_NETWORK_CHARS = frozenset("0123456789abcdefABCDEF.:/")


def plain_network(text: str, *, strict: bool) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """``ipaddress.ip_network``, refusing what it takes that no network is: an IPv6 zone
    (``fe80::1%eth0``: after the ``%`` it takes any text, newlines and braces included, which
    the nftables renderer would then write out) or any other character an address never
    has. Raises ValueError, with a message safe to show."""
    if not text or not set(text) <= _NETWORK_CHARS:
        raise ValueError(f"{shown(text)} is not a network in CIDR form (no zone, no spaces)")
    return ipaddress.ip_network(text, strict=strict)


def plain_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``ipaddress.ip_address`` without zones (see ``plain_network``)."""
    if not text or not set(text) <= _NETWORK_CHARS or "/" in text:
        raise ValueError(f"{shown(text)} is not an IP address (no zone, no spaces)")
    return ipaddress.ip_address(text)


def canonical_address(text: str) -> str:
    """Canonical text of an IPv4 or IPv6 address (no zone, no leading zeros). Raises
    ValueError, with a message safe to show, if it is not one."""
    family = socket.AF_INET6 if ":" in text else socket.AF_INET
    try:
        return socket.inet_ntop(family, socket.inet_pton(family, text))
    except (OSError, ValueError):  # ValueError: NUL bytes, lone surrogates
        raise ValueError(f"{shown(text)} is not an IPv4 or IPv6 address") from None


def sloppy_address(text: object) -> str | None:
    """Canonical text of an address as the Kubernetes API server may store it, or None.

    kube-apiserver validates with Go's legacy parser (netutils.ParseIPSloppy), which reads
    IPv4 parts with leading zeros as decimal (``10.0.0.01`` is 10.0.0.1), as kube-proxy
    does; zones (``fe80::1%eth0``) and anything else are refused."""
    if not isinstance(text, str) or not 2 <= len(text) <= 45:
        return None
    if ":" not in text:
        parts = text.split(".")
        if len(parts) != 4 or not all(p.isascii() and p.isdigit() and len(p) <= 3 for p in parts):
            return None
        values = [int(p) for p in parts]
        if any(v > 255 for v in values):
            return None
        if type(text) is str and not any(len(p) > 1 and p[0] == "0" for p in parts):
            # Canonical already: the string itself, not a copy (one string fewer an endpoint).
            return text
        return ".".join(str(v) for v in values)
    try:
        canonical = canonical_address(text)
    except ValueError:
        return None
    return text if canonical == text and type(text) is str else canonical


def format_endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


@dataclass(frozen=True, slots=True, order=True)
class ServiceKey:
    """Identity of a virtual service: (family, protocol, address, port) or (family, fwmark)."""

    family: Family
    protocol: IpProtocol | None
    address: str
    port: int
    fwmark: int = 0

    @classmethod
    def inet(cls, protocol: IpProtocol, address: str, port: int) -> ServiceKey:
        return cls(Family.of(address), protocol, address, port)

    @classmethod
    def mark(cls, family: Family, fwmark: int) -> ServiceKey:
        return cls(family, None, "", 0, fwmark)

    @property
    def is_fwmark(self) -> bool:
        return self.fwmark != 0

    def __str__(self) -> str:
        if self.fwmark:
            return f"fwmark {self.fwmark} {self.family.label}"
        assert self.protocol is not None
        return f"{self.protocol.label} {format_endpoint(self.address, self.port)}"


DestKey = tuple[str, int]
MAX_WEIGHT = 65535  # the highest weight ipvsadm and the director's configuration accept


class RealServer(NamedTuple):
    """A real server's configuration. A NamedTuple: a full read of 100,000 builds 100,000."""

    address: str
    port: int
    weight: int = 1
    forwarding: Forwarding = Forwarding.NAT
    upper_threshold: int = 0
    lower_threshold: int = 0

    @property
    def key(self) -> DestKey:
        return (self.address, self.port)

    def describe(self) -> str:
        text = (
            f"{format_endpoint(self.address, self.port)} weight={self.weight} "
            f"forwarding={self.forwarding.label}"
        )
        if self.upper_threshold or self.lower_threshold:
            text += f" thresholds={self.lower_threshold}-{self.upper_threshold}"
        return text


_Attrs = tuple[int, Forwarding, int, int]  # weight, forwarding, upper and lower threshold


@lru_cache(maxsize=4096)  # bounded: weights and thresholds come from tenants
def shared_attrs(attrs: _Attrs) -> _Attrs:
    """The one tuple of these (weight, forwarding, upper, lower) every real server shares."""
    return attrs


# The packed key of a real server in ``Dests``: its address in 16 bytes (IPv4's first four,
# then zeros, as the kernel's union nf_inet_addr), its port in network order, its family.
_KEY = 19
_ZEROS = bytes(12)
_V4, _V6 = int(socket.AF_INET), int(socket.AF_INET6)
_V4_BYTE, _V6_BYTE = bytes((_V4,)), bytes((_V6,))


def packed_key(address: str, port: int) -> bytes:
    """A real server's (address, port) packed as ``Dests`` holds it. Raises ValueError if
    the address is not canonical-able text or the port is not 0-65535."""
    try:
        if ":" in address:
            return socket.inet_pton(_V6, address) + port.to_bytes(2, "big") + _V6_BYTE
        return socket.inet_pton(_V4, address) + _ZEROS + port.to_bytes(2, "big") + _V4_BYTE
    except OverflowError:
        raise ValueError(f"port {shown(port)} is not 0-65535") from None
    except (OSError, ValueError):  # ValueError: NUL bytes, lone surrogates
        raise ValueError(f"{shown(address)} is not an IPv4 or IPv6 address") from None


def wire_key(address: bytes, port: bytes, family: int) -> bytes:
    """The same from the kernel's attributes: a 16-byte address (IPv4's in the first four),
    the port as sent (network order), the family (any but IPv6's read as IPv4's, as the
    codec reads an address)."""
    if family != _V6:
        return address[:4] + _ZEROS + port + _V4_BYTE
    return address + port + _V6_BYTE


def _key_at(keys: bytes, at: int) -> DestKey:
    """The (address, port) of the packed key at ``at``."""
    port = (keys[at + 16] << 8) | keys[at + 17]
    if keys[at + 18] == _V4:
        return socket.inet_ntop(_V4, keys[at : at + 4]), port
    return socket.inet_ntop(_V6, keys[at : at + 16]), port


@lru_cache(maxsize=4096)
def _for_all(attrs: _Attrs) -> tuple[_Attrs]:
    """The one tuple every Dests whose real servers all share ``attrs`` holds."""
    return (attrs,)


class Dests(Mapping[DestKey, RealServer]):
    """A virtual service's real servers, in order: an immutable mapping by (address, port).

    Kept packed: one bytes of 19 a real server (its address in 16, port, family), and its
    weight, forwarding and thresholds as one tuple shared by every real server alike (one
    for all when they all share it). 10 real servers cost ~330 bytes where a dict of
    RealServer costs ~2,800 and a tuple of address strings ~900, so 100,000 real servers
    hold ~3.3 MB. A RealServer, its key and its address text are made when asked for. Two
    tables of the same real servers in the same order compare as two bytes (a no-op resync
    compares the kernel's read with what it wants without making a string). A lookup by
    key searches the bytes (in C); the one that follows the last found is tried first, so
    ``dict(dests)`` and ``{**dests}`` stay linear.

    Equal to any mapping with the same real servers, in any order (as a dict is)."""

    __slots__ = ("_attrs", "_keys", "_next")
    _keys: bytes
    _attrs: tuple[_Attrs, ...]  # one per real server, or one for all
    _next: int

    def __init__(self, servers: Iterable[RealServer] = ()) -> None:
        unique = {rs.key: rs for rs in servers}.values()
        self._keys, self._attrs = Dests._packed(unique)
        self._next = 0

    @staticmethod
    def row(rs: RealServer) -> tuple[bytes, _Attrs]:
        """A real server's row: its packed key and its ``shared_attrs`` tuple."""
        return (packed_key(rs[0], rs[1]), shared_attrs(rs[2:]))

    @staticmethod
    def _packed(servers: Iterable[RealServer]) -> tuple[bytes, tuple[_Attrs, ...]]:
        rows = [Dests.row(rs) for rs in servers]
        return b"".join(key for key, _ in rows), Dests._one_or_each([a for _, a in rows])

    @staticmethod
    def _one_or_each(attrs: Sequence[_Attrs]) -> tuple[_Attrs, ...]:
        if attrs and attrs.count(attrs[0]) == len(attrs):
            return _for_all(attrs[0])
        return tuple(attrs)

    @classmethod
    def from_rows(cls, rows: Sequence[Any]) -> Dests:
        """Real servers given flat (packed key, ``shared_attrs`` tuple, ...), each key once:
        as the kernel adapter decodes them, with no RealServer and no text made."""
        out = cls.__new__(cls)
        out._keys, out._attrs = b"".join(rows[0::2]), Dests._one_or_each(rows[1::2])
        out._next = 0
        return out

    @classmethod
    def of(cls, servers: Mapping[DestKey, RealServer] | Iterable[RealServer]) -> Dests:
        """``servers`` as Dests: itself if it is one; a mapping's values, in its order."""
        if isinstance(servers, Dests):
            return servers
        if isinstance(servers, Mapping):
            out = cls.__new__(cls)
            out._keys, out._attrs = Dests._packed(servers.values())
            out._next = 0
            return out
        return cls(servers)

    def _find(self, key: object) -> int:
        if not isinstance(key, tuple) or len(key) != 2:
            return -1
        address, port = key
        if not isinstance(address, str) or not isinstance(port, int):
            return -1
        try:
            needle = packed_key(address, port)
        except ValueError:
            return -1
        keys, at = self._keys, self._next
        if keys.startswith(needle, at):
            return at
        at = 0
        while True:
            at = keys.find(needle, at)
            if at < 0 or at % _KEY == 0:
                return at
            at += 1

    def _attr(self, at: int) -> _Attrs:
        attrs = self._attrs
        return attrs[0] if len(attrs) == 1 else attrs[at // _KEY]

    def _server(self, at: int) -> RealServer:
        address, port = _key_at(self._keys, at)
        return RealServer(address, port, *self._attr(at))

    def __getitem__(self, key: DestKey) -> RealServer:
        at = self._find(key)
        if at < 0:
            raise KeyError(key)
        self._next = at + _KEY  # a hint, no more: a race between readers only costs a scan
        return self._server(at)

    def get(self, key: DestKey, default: Any = None) -> Any:
        at = self._find(key)
        return default if at < 0 else self._server(at)

    def __contains__(self, key: object) -> bool:
        return self._find(key) >= 0

    def __len__(self) -> int:
        return len(self._keys) // _KEY

    def __iter__(self) -> Iterator[DestKey]:
        keys = self._keys
        return map(_key_at, repeat(keys), range(0, len(keys), _KEY))

    def servers(self) -> Iterator[RealServer]:
        attrs, make = self._attrs, tuple.__new__  # RealServer's own __new__ costs as much
        if len(attrs) == 1:
            one = attrs[0]
            for address, port in self:
                yield make(RealServer, (address, port, *one))
        else:
            for (address, port), each in zip(self, attrs, strict=True):
                yield make(RealServer, (address, port, *each))

    def items(self) -> ItemsView[DestKey, RealServer]:
        return _DestItems(self)

    def values(self) -> ValuesView[RealServer]:
        return _DestValues(self)

    def _set(self) -> frozenset[tuple[bytes, _Attrs]]:
        keys = self._keys
        return frozenset((keys[at : at + _KEY], self._attr(at)) for at in range(0, len(keys), _KEY))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Dests):
            if self.same_order(other):
                return True
            return len(self._keys) == len(other._keys) and self._set() == other._set()
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def same_order(self, other: Mapping[DestKey, RealServer]) -> bool:
        """The same real servers, in the same order (the kernel's list order matters to the
        hashing schedulers; ``==`` does not look at it)."""
        if isinstance(other, Dests):
            return self._keys == other._keys and self._attrs == other._attrs
        return list(self.values()) == list(other.values())

    def covers(self, other: Mapping[DestKey, RealServer]) -> bool:
        """Every real server of ``other`` is one of these (by key): at the cost of comparing
        two bytes when both hold the same keys in the same order."""
        if isinstance(other, Dests) and other._keys == self._keys:
            return True
        return all(key in self for key in other)

    def __repr__(self) -> str:
        return f"Dests({dict(self.items())!r})"


class _DestItems(ItemsView[DestKey, RealServer]):
    _mapping: Dests

    def __iter__(self) -> Iterator[tuple[DestKey, RealServer]]:
        for rs in self._mapping.servers():
            yield (rs[0], rs[1]), rs


class _DestValues(ValuesView[RealServer]):
    _mapping: Dests

    def __iter__(self) -> Iterator[RealServer]:
        return self._mapping.servers()


class DestEdit:
    """A service's real servers changed one operation at a time, as the kernel's list
    changes: an added real server goes to the head, a changed one stays where it is. Kept
    in reverse, so an add costs a dict insert however long the list."""

    __slots__ = ("_reversed",)

    def __init__(self, dests: Mapping[DestKey, RealServer]) -> None:
        self._reversed = dict(reversed(list(dests.items())))

    def get(self, key: DestKey) -> RealServer | None:
        return self._reversed.get(key)

    def add(self, rs: RealServer) -> None:
        self._reversed.pop(rs.key, None)
        self._reversed[rs.key] = rs

    def set(self, rs: RealServer) -> None:
        if rs.key in self._reversed:
            self._reversed[rs.key] = rs
        else:  # at the tail
            self._reversed = {rs.key: rs, **self._reversed}

    def remove(self, key: DestKey) -> None:
        self._reversed.pop(key, None)

    def done(self) -> Dests:
        return Dests.of(dict(reversed(self._reversed.items())))


# Schedulers whose choice is a table the kernel builds by walking the real servers in the
# order its list holds them (ip_vs_sh.c, ip_vs_dh.c, ip_vs_mh.c), where a real server added
# goes to the head. Two directors with the same real servers choose alike only when their
# lists hold them in one order, so the director keeps these in ``hash_order``.
HASHING_SCHEDULERS = frozenset({"sh", "dh", "mh"})


def hash_order(keys: Iterable[DestKey]) -> list[DestKey]:
    """The order (head first) in which the kernel's list holds a hashing service's real
    servers: by canonical address text, then port (any order will do if every director
    keeps the same one, whatever the order in which it saw them come and go)."""
    return sorted(keys)


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """What can be changed on a live virtual service in place (IPVS_CMD_SET_SERVICE)."""

    scheduler: str = "wlc"
    flags: frozenset[str] = frozenset()
    persistence: int = 0  # seconds; 0 = no persistence
    netmask: int = 32  # persistence granularity as a prefix length

    def flag_bits(self) -> int:
        return encode_flags(self.scheduler, self.flags, self.persistence > 0)

    def describe(self) -> str:
        text = f"scheduler={self.scheduler}"
        if self.flags:
            text += f" flags={','.join(sorted(self.flags))}"
        if self.persistence:
            text += f" persistence={self.persistence}s/{self.netmask}"
        return text


@dataclass(frozen=True, slots=True)
class VirtualService:
    key: ServiceKey
    config: ServiceConfig
    # Given as any mapping (or nothing), kept as Dests: compact, and compared fast.
    real_servers: Mapping[DestKey, RealServer] = field(default_factory=dict)
    # Where it came from ("static/web", "default/shop:http"); not part of its identity.
    origin: str = field(default="", compare=False)

    __hash__ = None  # type: ignore[assignment]  # holds a mapping

    def __post_init__(self) -> None:
        if type(self.real_servers) is not Dests:
            object.__setattr__(self, "real_servers", Dests.of(self.real_servers))

    @classmethod
    def build(
        cls,
        key: ServiceKey,
        config: ServiceConfig,
        real_servers: Iterable[RealServer] = (),
        origin: str = "",
    ) -> VirtualService:
        return cls(key, config, Dests(real_servers), origin)


Table = dict[ServiceKey, VirtualService]


@dataclass(frozen=True, slots=True)
class Stats:
    """Kernel counters of a virtual service or real server (64-bit variants)."""

    connections: int = 0
    packets_in: int = 0
    packets_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    cps: int = 0
    pps_in: int = 0
    pps_out: int = 0
    bps_in: int = 0
    bps_out: int = 0


@dataclass(frozen=True, slots=True)
class DestState:
    active_connections: int = 0
    inactive_connections: int = 0
    persistent_connections: int = 0
    stats: Stats = field(default_factory=Stats)


@dataclass(slots=True)
class KernelTable:
    """Everything read back from IPVS: configuration and, when asked for, counters."""

    services: Table = field(default_factory=dict)
    service_stats: dict[ServiceKey, Stats] = field(default_factory=dict)
    dest_state: dict[tuple[ServiceKey, DestKey], DestState] = field(default_factory=dict)


# The columns of ``Counters``: a virtual service's totals, and a real server's figures.
SERVICE_COUNTERS = ("connections", "packets_in", "packets_out", "bytes_in", "bytes_out")
DEST_COUNTERS = ("port", "weight", "active", "inactive", "persistent", *SERVICE_COUNTERS, "family")
_ADDRESS_BYTES = 16  # as IPVS carries one: an IPv4 address in the first 4


def _extend_whole(column: array[int], values: Iterable[int], width: int, what: str) -> None:
    """``values`` appended to ``column``, all ``width`` of them or none (a figure that is
    not a 64-bit unsigned integer, or one too many or too few, leaves it as it was)."""
    size = len(column)
    try:
        column.extend(values)
        if len(column) != size + width:
            raise ValueError(f"{what} has {width} figures")
    except (OverflowError, TypeError, ValueError):
        del column[size:]
        raise


class Counters:
    """The kernel's counters of a whole table, in columns: what a scrape formats.

    Read as objects (a RealServer, a DestState and a Stats a real server, in dicts keyed by
    tuples), 100,000 real servers made ~70 MB of small objects, alive for the whole scrape;
    whatever the process kept meanwhile pinned the heap around them. Here a real server is
    16 bytes of address and 11 integers of 8 bytes in two buffers (10.4 MB at 100,000) that
    are freed whole. Services come in the kernel's order; a real server's address and key are
    made when asked for."""

    __slots__ = ("_addresses", "_ends", "_service_values", "_values", "services")

    def __init__(self) -> None:
        self.services: list[ServiceKey] = []
        self._service_values = array("Q")  # SERVICE_COUNTERS for each service
        self._ends = array("Q")  # where each service's real servers end
        self._addresses = bytearray()  # _ADDRESS_BYTES for each real server
        self._values = array("Q")  # DEST_COUNTERS for each real server

    # -- filled by an adapter: a service's real servers, then the service ---------------
    def add_dest(self, address: bytes, values: Iterable[int]) -> None:
        """One real server of the service being read: its address as IPVS packs it, and
        ``DEST_COUNTERS`` in order."""
        _extend_whole(self._values, values, len(DEST_COUNTERS), "a real server")
        self._addresses += address.ljust(_ADDRESS_BYTES, b"\0")[:_ADDRESS_BYTES]

    def add_service(self, key: ServiceKey, values: Iterable[int]) -> None:
        """Closes a service: the real servers added since the last one are its own."""
        _extend_whole(self._service_values, values, len(SERVICE_COUNTERS), "a service")
        self.services.append(key)
        self._ends.append(len(self._addresses) // _ADDRESS_BYTES)

    def drop_open(self) -> None:
        """Forgets the real servers added since the last service (its read failed)."""
        count = self._ends[-1] if self._ends else 0
        del self._addresses[count * _ADDRESS_BYTES :]
        del self._values[count * len(DEST_COUNTERS) :]

    # -- read by the formatter -----------------------------------------------------------
    def __len__(self) -> int:
        return len(self.services)

    def service_value(self, index: int, column: int) -> int:
        """Column ``column`` of SERVICE_COUNTERS of the service at ``index``."""
        return self._service_values[index * len(SERVICE_COUNTERS) + column]

    def dests(self, index: int) -> range:
        """The real servers of the service at ``index``, as positions."""
        return range(self._ends[index - 1] if index else 0, self._ends[index])

    def column(self, index: int, column: int) -> Sequence[int]:
        """Column ``column`` of DEST_COUNTERS for each real server of the service at
        ``index``, in order."""
        width, found = len(DEST_COUNTERS), self.dests(index)
        return self._values[found.start * width + column : found.stop * width : width]

    def hosts(self, index: int) -> list[str]:
        """The address of each real server of the service at ``index``, in order."""
        found, addresses = self.dests(index), self._addresses
        families = self.column(index, len(DEST_COUNTERS) - 1)
        return [
            socket.inet_ntop(family, addresses[at : at + (16 if family == socket.AF_INET6 else 4)])
            for at, family in zip(
                range(found.start * _ADDRESS_BYTES, found.stop * _ADDRESS_BYTES, _ADDRESS_BYTES),
                families,
                strict=True,
            )
        ]

    def value(self, dest: int, column: int) -> int:
        """Column ``column`` of DEST_COUNTERS of the real server at position ``dest``."""
        return self._values[dest * len(DEST_COUNTERS) + column]

    def address(self, dest: int) -> str:
        at = dest * _ADDRESS_BYTES
        family = self._values[dest * len(DEST_COUNTERS) + len(DEST_COUNTERS) - 1]
        size = 16 if family == socket.AF_INET6 else 4
        return socket.inet_ntop(family, self._addresses[at : at + size])

    def dest_key(self, dest: int) -> DestKey:
        return self.address(dest), self.value(dest, 0)

    def table(self) -> dict[ServiceKey, tuple[dict[str, int], dict[DestKey, dict[str, int]]]]:
        """Everything as dicts by name: for tests and small tables, not for a scrape."""
        out = {}
        for index, key in enumerate(self.services):
            service = {n: self.service_value(index, c) for c, n in enumerate(SERVICE_COUNTERS)}
            dests = {
                self.dest_key(d): {n: self.value(d, c) for c, n in enumerate(DEST_COUNTERS)}
                for d in self.dests(index)
            }
            out[key] = (service, dests)
        return out


class OpKind(Enum):
    __hash__ = object.__hash__  # members are singletons; Enum's __hash__ is Python code

    ADD_SERVICE = "add-service"
    SET_SERVICE = "set-service"
    DEL_SERVICE = "del-service"
    ADD_DEST = "add-dest"
    SET_DEST = "set-dest"
    DEL_DEST = "del-dest"


class Op(NamedTuple):
    """One IPVS change. ``config`` is set for service adds/sets, ``dest`` for dest ops.

    A NamedTuple, not a dataclass: a full sync of 10,000 services creates 110,000 of them,
    and tuple construction costs half of a frozen dataclass's.
    """

    kind: OpKind
    key: ServiceKey
    config: ServiceConfig | None = None
    dest: RealServer | None = None
    origin: str = ""

    def describe(self) -> str:
        symbol = {"add": "+", "set": "~", "del": "-"}[self.kind.value[:3]]
        if self.dest is None:
            detail = f" {self.config.describe()}" if self.config is not None else ""
            return f"{symbol} service {self.key}{detail}"
        detail = (
            self.dest.describe()
            if self.kind is not OpKind.DEL_DEST
            else (format_endpoint(self.dest.address, self.dest.port))
        )
        return f"{symbol} real server {detail} in {self.key}"
