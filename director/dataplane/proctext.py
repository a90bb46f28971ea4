"""The kernel's own text of the IPVS table (``/proc/net/ip_vs``), marked service by service,
to tell which services a resync must read again through netlink. Pure.

A periodic resync reads every real server back through netlink: three system calls a
service, as ``ipvsadm -Ln`` makes them. The kernel's text is one read for the whole table,
3-5x cheaper, but it leaves out each real server's thresholds and tunnel settings, and it
prints a bypassed real server as a masqueraded one. So the text is used to skip, never to
read: a service whose text (its traffic counters aside) is the same as at the last resync
keeps the real servers netlink read then, and each resync still reads a share of the
services in full (``Rotation``), by their key, so that what the text cannot show is read
back within ``PARTS`` resyncs. A service the director changes itself is read in full at the
next resync (the adapter forgets what it read of it). A table of up to ``SHARE`` services
is read in full every time: the text is not read at all, but at a process's first read
(which cannot know the size yet). ``ReadCounts`` says what the reads did (the metrics'
``director_resync_services_read_total`` and ``director_resync_shares``).

The text, as ``ip_vs_info_seq_show`` (net/netfilter/ipvs/ip_vs_ctl.c) prints it::

    IP Virtual Server version 1.2.1 (size=4096)
    Prot LocalAddress:Port Scheduler Flags
      -> RemoteAddress:Port Forward Weight ActiveConn InActConn
    TCP  C6120001:0050 wlc
      -> C6130001:1F90      Masq    1      0          0

(Both lines end in spaces, not shown.) A real server's line ends with its two connection
counts, each printed ``%-10d`` (so the line's last 21 characters); everything before them
is configuration.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from director.core.model import ONEPACKET, Family, Forwarding, IpProtocol, ServiceKey
from director.core.services import VirtualService

SHARE = 1000  # a resync reads at least this many services' real servers in full
PARTS = 10  # ... and each service's in full at least once in this many resyncs
COUNTS = 21  # the last characters of a real server's line: its two connection counts
HZ = 250  # Debian's kernels (CONFIG_HZ): the text prints a persistence timeout in jiffies

_SERVICES = re.compile(rb"\n(?=[^ ])")  # a service's line starts at the line's start
_PROTOCOLS = {IpProtocol.TCP: b"TCP", IpProtocol.UDP: b"UDP", IpProtocol.SCTP: b"SCTP"}
_NAMED = {name: protocol for protocol, name in _PROTOCOLS.items()}
_FORWARDING = {Forwarding.LOCAL: b"Local", Forwarding.TUN: b"Tunnel", Forwarding.DR: b"Route"}
HEADINGS = (
    b"IP Virtual Server version 1.2.1 (size=4096)\n"
    b"Prot LocalAddress:Port Scheduler Flags\n"
    b"  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n"
)
_LAYOUTS: dict[tuple[int, int], struct.Struct] = {}  # (line length, lines): bounded below


def body_start(text: bytes) -> int:
    """Where the services' lines begin: after the text's three lines of headings."""
    start = 0
    for _ in range(3):
        start = text.find(b"\n", start) + 1
        if not start:
            return len(text)
    return start


def body_of(text: bytes) -> bytes:
    """The services' lines: the text without its headings."""
    return text[body_start(text) :]


def block_marks(text: bytes) -> list[tuple[bytes, int]]:
    """Each service's block in ``text``: (its line, up to the address and port, which is
    ``prefix_of`` its key; the mark of the whole block but its connection counts)."""
    return list(marks_of([text]))


def marks_of(chunks: Iterable[bytes]) -> Iterator[tuple[bytes, int]]:
    """``block_marks`` of the text read in ``chunks``: each chunk's whole blocks marked as
    it comes, in place, and the block it ends in carried to the next. The whole text is
    never held (at 5,000 services, 3.2 MB read whole and copied left the heap 3.5 MiB
    larger for good)."""
    data = b""
    begin = -1
    for chunk in chunks:
        data = data + chunk if data else chunk
        if begin < 0:
            begin = body_start(data)
            if begin >= len(data):  # the headings are not whole yet
                begin = -1
                continue
        ends = [m.start() for m in _SERVICES.finditer(data, begin)]
        if ends:
            yield from _marked(data, begin, ends)
            data, begin = data[ends[-1] + 1 :], 0
    close = len(data) - 1 if data.endswith(b"\n") else len(data)
    if 0 <= begin < close:
        yield from _marked(data, begin, [close])


def _marked(data: bytes, start: int, ends: list[int]) -> Iterator[tuple[bytes, int]]:
    """The blocks from ``start`` each ending at one of ``ends`` (before its newline)."""
    for end in ends:
        line_end = data.find(b"\n", start, end)
        if line_end < 0:  # a service with no real server
            line = data[start:end]
            yield _prefix_of_line(line), hash(line)
        else:
            line = data[start:line_end]
            yield _prefix_of_line(line), hash((line, _settled_lines(data, line_end + 1, end)))
        start = end + 1


def _prefix_of_line(line: bytes) -> bytes:
    """``TCP  C6120001:0050 wlc`` -> ``TCP  C6120001:0050`` (and ``SCTP  ...``: the two
    spaces after the protocol's name, however long, then the address up to the next)."""
    end = line.find(b" ", line.find(b"  ") + 2)
    return line if end < 0 else line[:end]


def _settled_lines(text: bytes, start: int, end: int) -> tuple[bytes, ...]:
    """The real servers' lines between ``start`` and ``end`` (the last one's newline),
    each without its connection counts. Lines of one length (one family, weights alike in
    width: nearly always) are cut by one struct call; any other block line by line. Either
    way nothing before the counts is left out: a count printed wider than 10 characters
    only moves a digit into the mark (the service is read again, never missed)."""
    first = text.find(b"\n", start, end)
    length = (first if first >= 0 else end) - start + 1  # with its newline
    region = end - start + 1
    lines = region // length
    if (
        region == lines * length
        and length > COUNTS + 1
        and text.count(b"\n", start, end) == lines - 1
        and text[start + length - 1 : end : length].count(b"\n") == lines - 1
    ):
        layout = _LAYOUTS.get((length, lines))
        if layout is None:
            keep = f"{length - COUNTS - 1}s"
            layout = struct.Struct((keep + f"{COUNTS + 1}x") * (lines - 1) + keep)
            if len(_LAYOUTS) < 256:
                _LAYOUTS[(length, lines)] = layout
        found: tuple[bytes, ...] = layout.unpack_from(text, start)
        return found
    return tuple(line[:-COUNTS] for line in text[start:end].split(b"\n"))


@dataclass(slots=True)
class ReadCounts:
    """What the resyncs' reads of the whole table have done since the adapter opened: the
    services whose real servers were read through netlink, and those the kernel's text
    showed unchanged, taken as the read before had them; and, as of the last read, in how
    many resyncs every service's real servers are read through netlink at least once (1: in
    each; past ``SHARE`` services, up to ``PARTS``)."""

    netlink: int = 0
    text: int = 0
    parts: int = 1


class Rotation:
    """Which services' real servers each resync reads in full through netlink."""

    def __init__(self) -> None:
        self.counts = ReadCounts()
        self.before: array[int] | None = None  # the marks of the last resync's text
        self.turn = 0
        self.size = 0  # services the last read found, and those added since
        self.read = False  # whether a read has ended (and told the table's size)

    def wants_text(self) -> bool:
        """A small table is read in full every time, its text not read at all. A process's
        first read, which cannot know the table's size, reads the text: a director started
        on a big table (a restart, a replay) compares its second read with it, where it
        would otherwise read the whole table in full twice."""
        return self.size > SHARE or not self.read

    def plan(self, marks: Iterable[tuple[bytes, int]] | None) -> Share:
        """Start a resync with the marks of the kernel's text (``marks_of``), read before
        anything else; None: no text (a small table, or none to read), all in full."""
        self.turn += 1
        self.counts.parts = 1
        if marks is None:
            self.before = None
            return Share(None, 1, 0)
        seen = None if self.before is None else set(self.before)
        now: array[int] = array("q")
        changed: set[bytes] = set()
        for prefix, mark in marks:
            now.append(mark)
            if seen is not None and mark not in seen:
                changed.add(prefix)
        parts = max(1, min(PARTS, -(-len(now) // SHARE)))
        if parts == 1:
            self.before = None
            return Share(None, 1, 0)
        self.before = now
        self.counts.parts = parts
        keys = None if seen is None else changed_keys(changed)  # None: nothing to compare with
        return Share(keys, parts, self.turn % parts)

    def added(self, services: int) -> None:
        self.size += services

    def done(self, services: int, kept: int) -> None:
        """A read ended, having found ``services``, of which it took ``kept`` as the read
        before had them (the rest read through netlink)."""
        self.size = services
        self.read = True
        self.counts.netlink += services - kept
        self.counts.text += kept

    def forget(self) -> None:
        """A read that failed part way: the next reads every service in full."""
        self.before = None


class Share:
    """One resync's choice: ``full(key)`` says whether a service's real servers are read in
    full (netlink), or may be taken as the last resync had them."""

    __slots__ = ("changed", "parts", "turn")

    def __init__(self, changed: set[ServiceKey] | None, parts: int, turn: int) -> None:
        self.changed = changed  # the services whose text changed; None: every one in full
        self.parts = parts
        self.turn = turn  # the services whose number is it (modulo parts) are read in full

    def full(self, number: int, key: ServiceKey) -> bool:
        """Whether ``key``'s service is read in full, ``number`` choosing its share: any
        number that stays while what the service was read as stays makes it due within
        ``parts`` resyncs (the kernel adapter's is its reply's mark mixed with its key's
        hash, which spreads services with the same real servers over the shares)."""
        changed = self.changed
        return changed is None or number % self.parts == self.turn or key in changed


def changed_keys(prefixes: Iterable[bytes]) -> set[ServiceKey] | None:
    """The keys of the services the text ``prefixes`` begin (``prefix_of``'s inverse; a
    firewall mark's, both families'), each address as the kernel adapter reads it
    (``socket.inet_ntop``). None, every service read in full, if one cannot be read back:
    a change is never missed for want of a name. Only the changed few are read back: a
    resync tests each service it would skip against a set of keys, never formats its
    prefix."""
    keys: set[ServiceKey] = set()
    for prefix in prefixes:
        found = _keys_of(prefix)
        if found is None:
            return None
        keys.update(found)
    return keys


def _keys_of(prefix: bytes) -> tuple[ServiceKey, ...] | None:
    name, sep, endpoint = prefix.partition(b"  ")
    try:
        if name == b"FWM":
            mark = int(endpoint, 16)
            return (ServiceKey.mark(Family.INET, mark), ServiceKey.mark(Family.INET6, mark))
        protocol = _NAMED.get(name)
        if protocol is None or not sep:
            return None
        address, _colon, port = endpoint.rpartition(b":")
        if address.startswith(b"["):
            packed = ipaddress.IPv6Address(address[1:-1].decode()).packed
            text = socket.inet_ntop(socket.AF_INET6, packed)
        else:
            text = socket.inet_ntop(socket.AF_INET, int(address, 16).to_bytes(4, "big"))
        return (ServiceKey.inet(protocol, text, int(port, 16)),)
    except (ValueError, OverflowError, UnicodeDecodeError):
        return None


def prefix_of(key: ServiceKey) -> bytes:
    """How the text begins a service's line: protocol, address and port (or mark)."""
    if key.fwmark:
        return b"FWM  %08X" % key.fwmark
    assert key.protocol is not None
    name = _PROTOCOLS.get(key.protocol, b"IP_%d" % key.protocol)
    return name + b"  " + _endpoint(key.family, key.address, key.port)


def _endpoint(family: Family, address: str, port: int) -> bytes:
    if family is Family.INET6:
        return b"[%s]:%04X" % (ipaddress.IPv6Address(address).exploded.encode(), port)
    return b"%08X:%04X" % (int(ipaddress.IPv4Address(address)), port)


def service_text(vs: VirtualService) -> bytes:
    """A service's block as the kernel prints it, its counts 0 (real servers in the order
    given: the kernel's is newest first)."""
    key, config = vs.key, vs.config
    name = config.scheduler.encode()
    ops = b"ops " if ONEPACKET in config.flags else b""
    if key.fwmark:
        line = b"FWM  %08X %s %s" % (key.fwmark, name, ops)
    elif key.family is Family.INET6:
        line = prefix_of(key) + b" %s " % name
    else:
        line = prefix_of(key) + b" %s %s " % (name, ops)
    if config.persistence:
        if key.family is Family.INET6:  # a prefix length, kept as it was sent (host order)
            mask = int.from_bytes(config.netmask.to_bytes(4, sys.byteorder), "big")
        else:
            mask = (0xFFFFFFFF << (32 - config.netmask)) & 0xFFFFFFFF
        line += b"persistent %d %08X\n" % (config.persistence * HZ, mask)
    else:
        line += b"\n"
    out = [line]
    for rs in vs.real_servers.values():
        method = _FORWARDING.get(rs.forwarding.kernel, b"Masq")
        where = _endpoint(Family.of(rs.address), rs.address, rs.port)
        out.append(b"  -> %s      %-7s %-6d %-10d %-10d\n" % (where, method, rs.weight, 0, 0))
    return b"".join(out)


def render(services: Iterable[VirtualService]) -> bytes:
    """The text the kernel would print for these services: what the fake shows."""
    return HEADINGS + b"".join(service_text(vs) for vs in services)
