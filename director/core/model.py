"""The domain's values: families, protocols, forwarding methods, schedulers and their flags,
addresses, a virtual service's key, a real server and a service's configuration.

Pure data, no I/O. Addresses are canonical text (``socket.inet_ntop`` form) wherever
they are read, so keys compare and hash alike; the config loader and the kernel reader
both produce canonical text. Equality of a real server means "same configuration".
A service's real servers live in ``director.core.dests``, the virtual services and their
changes in ``director.core.services``, the kernel's counters in ``director.core.counters``.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

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

# A scheduler's three flag slots (the kernel's IP_VS_SVC_F_SCHED1..3) under ipvsadm's names
# for them; flag-N names slot N with any scheduler. The bits are the codec's
# (``director.dataplane.flags``): here a flag is a slot, or onepacket.
_SCHED_FLAG_NAMES: dict[str, tuple[str, str, str]] = {
    "sh": ("sh-fallback", "sh-port", "flag-3"),
    "mh": ("mh-fallback", "mh-port", "flag-3"),
}
_GENERIC_FLAG_NAMES = ("flag-1", "flag-2", "flag-3")
ONEPACKET = "onepacket"


def scheduler_flag_names(scheduler: str) -> tuple[str, ...]:
    """The flag names valid with ``scheduler`` (besides the generic flag-1..3)."""
    named = _SCHED_FLAG_NAMES.get(scheduler, ())
    return tuple(dict.fromkeys((*named, *_GENERIC_FLAG_NAMES, ONEPACKET)))


def slot_names(scheduler: str) -> tuple[str, str, str]:
    """What the kernel's read-back calls each of ``scheduler``'s three flag slots."""
    return _SCHED_FLAG_NAMES.get(scheduler, _GENERIC_FLAG_NAMES)


def flag_slots(scheduler: str, flags: Iterable[str]) -> tuple[frozenset[int], bool]:
    """Flag names -> the scheduler slots (0-2) they set, and whether onepacket is among
    them. Raises ValueError naming a flag that is neither."""
    slots: set[int] = set()
    onepacket = False
    names = slot_names(scheduler)
    for flag in flags:
        if flag == ONEPACKET:
            onepacket = True
        elif flag in names:
            slots.add(names.index(flag))
        elif flag in _GENERIC_FLAG_NAMES:
            slots.add(_GENERIC_FLAG_NAMES.index(flag))
        else:
            allowed = ", ".join(scheduler_flag_names(scheduler))
            raise ValueError(
                f"flag {flag!r} is not valid with scheduler {scheduler!r} (allowed: {allowed})"
            )
    return frozenset(slots), onepacket


def canonical_flags(scheduler: str, flags: Iterable[str]) -> frozenset[str]:
    """The names the kernel reads back for ``flags`` (``flag-1`` with ``sh`` is
    ``sh-fallback``). Raises ValueError naming a bad flag."""
    slots, onepacket = flag_slots(scheduler, flags)
    names = slot_names(scheduler)
    return _one_of(frozenset({names[i] for i in slots} | ({ONEPACKET} if onepacket else set())))


@functools.lru_cache(maxsize=256)  # bounded: a few bits' worth of names
def _one_of(names: frozenset[str]) -> frozenset[str]:
    """The one frozenset of these names every service shares (5,000 services held 1 MB of
    their own empty ones)."""
    return names


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
    if ONEPACKET in names and protocol is not IpProtocol.UDP:
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


class NotAnEndpoint(ValueError):
    """Text not even shaped as ADDRESS:PORT (its address is not checked yet)."""


def parse_endpoint(text: str) -> tuple[str, int]:
    """``ADDRESS:PORT`` (IPv6 as ``[ADDRESS]:PORT``) -> (canonical address, port). Raises
    NotAnEndpoint, or ValueError for an address that is none, with a message safe to
    show."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = text.rpartition(":")
    ascii_digits = port_text.isascii() and port_text.isdigit()  # not 8_0, not other scripts'
    if not host or not ascii_digits or len(port_text) > 5 or int(port_text) > 65535:
        raise NotAnEndpoint(f"{shown(text)} is not ADDRESS:PORT (IPv6 as [ADDRESS]:PORT)")
    return canonical_address(host), int(port_text)


def format_endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


@dataclass(frozen=True, slots=True)
class ServiceKey:
    """Identity of a virtual service: (family, protocol, address, port) or (family, fwmark).

    Ordered by family, then firewall-mark services (no protocol) before the others, then
    protocol, address, port and mark (a generated order compared None with a protocol: a
    file with a firewall-mark service beside an address one could not be planned)."""

    family: Family
    protocol: IpProtocol | None
    address: str
    port: int
    fwmark: int = 0

    def rank(self) -> tuple[int, int, str, int, int]:
        """What keys are ordered by (``sorted(keys, key=ServiceKey.rank)`` orders them as
        ``sorted(keys)`` does, comparing in C rather than calling ``__lt__``)."""
        return (self.family, self.protocol or 0, self.address, self.port, self.fwmark)

    def __lt__(self, other: ServiceKey) -> bool:
        return self.rank() < other.rank()

    def __le__(self, other: ServiceKey) -> bool:
        return self.rank() <= other.rank()

    def __gt__(self, other: ServiceKey) -> bool:
        return self.rank() > other.rank()

    def __ge__(self, other: ServiceKey) -> bool:
        return self.rank() >= other.rank()

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


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """What can be changed on a live virtual service in place (IPVS_CMD_SET_SERVICE)."""

    scheduler: str = "wlc"
    flags: frozenset[str] = frozenset()
    persistence: int = 0  # seconds; 0 = no persistence
    netmask: int = 32  # persistence granularity as a prefix length

    def describe(self) -> str:
        text = f"scheduler={self.scheduler}"
        if self.flags:
            text += f" flags={','.join(sorted(self.flags))}"
        if self.persistence:
            text += f" persistence={self.persistence}s/{self.netmask}"
        return text


@dataclass(frozen=True, slots=True)
class RateLimit:
    """New TCP connections a second a virtual service takes from one client address
    (``client``) and from all clients together (``service``); 0: no limit. A burst of one
    second's worth is let through at once; what is over is dropped (the client's TCP tries
    again) and counted."""

    client: int = 0
    service: int = 0

    def __bool__(self) -> bool:
        return bool(self.client or self.service)


MAX_RATE = 10_000_000  # new connections a second: far past what a box can take
MAX_CONNECTIONS = 2**31 - 1  # IPVS's thresholds are 32-bit


@dataclass(frozen=True, slots=True)
class Caps:
    """What a Service (or its pool) caps: new connections a second (``rate``, the box's
    nftables table) and connections a real server holds at once (``max_connections``:
    IPVS's upper threshold, past which it sends the real server no new ones; 0: none)."""

    rate: RateLimit = RateLimit()
    max_connections: int = 0

    def __bool__(self) -> bool:
        return bool(self.rate or self.max_connections)


NO_CAPS = Caps()
