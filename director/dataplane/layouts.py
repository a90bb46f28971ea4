"""Decoding a dump by the layout learnt from its first reply (the resync's and the scrape's
hot path): a reply of the same length with the same attribute headers at the same places
decodes with one ``struct`` call, no walk of its attributes. Pure.
"""

from __future__ import annotations

import functools
import socket
import struct
from typing import Any, NamedTuple

from director.core.dests import shared_attrs
from director.core.model import Family, IpProtocol, ServiceConfig, ServiceKey
from director.dataplane.codec import (
    BE16,
    CMD_ATTR_DEST,
    CMD_ATTR_SERVICE,
    DEST_ACTIVE_CONNS,
    DEST_ADDR,
    DEST_ADDR_FAMILY,
    DEST_FWD_METHOD,
    DEST_INACT_CONNS,
    DEST_L_THRESH,
    DEST_PERSIST_CONNS,
    DEST_PORT,
    DEST_STATS,
    DEST_STATS64,
    DEST_U_THRESH,
    DEST_WEIGHT,
    FORWARDING,
    SVC_ADDR,
    SVC_AF,
    SVC_FLAGS,
    SVC_FWMARK,
    SVC_NETMASK,
    SVC_PORT,
    SVC_PROTOCOL,
    SVC_SCHED_NAME,
    SVC_STATS64,
    SVC_TIMEOUT,
    address_text,
    decode_stats64,
    service_config,
    u32,
    wire_key,
)
from director.dataplane.flags import SVC_F_HASHED, SVC_F_PERSISTENT
from director.dataplane.netlink import I32, NLA, NLA_TYPE_MASK, U16, U32, Wire, parse_attrs

# A real server's configuration in a GET_DEST reply: (attribute, payload format). The
# kernel writes the same attributes, in the same order and sizes, for every real server.
_DEST_FIELDS: tuple[tuple[tuple[int, ...], str], ...] = (
    ((DEST_ADDR,), "16s"),
    ((DEST_PORT,), "2s"),  # network order, as a Dests key holds it
    ((DEST_FWD_METHOD,), "I"),
    ((DEST_WEIGHT,), "i"),
    ((DEST_U_THRESH,), "I"),
    ((DEST_L_THRESH,), "I"),
    ((DEST_ADDR_FAMILY,), "H"),
)
# Its counters, for a scrape: model.DEST_COUNTERS' order, after the address. A counter
# inside STATS64 is a path of two attributes.
_COUNTER_FIELDS: tuple[tuple[tuple[int, ...], str], ...] = (
    ((DEST_ADDR,), "16s"),
    ((DEST_PORT,), "H"),
    ((DEST_WEIGHT,), "i"),
    ((DEST_ACTIVE_CONNS,), "I"),
    ((DEST_INACT_CONNS,), "I"),
    ((DEST_PERSIST_CONNS,), "I"),
    *(((DEST_STATS64, kind), "Q") for kind in range(1, 6)),  # connections .. bytes out
    ((DEST_ADDR_FAMILY,), "H"),
)


class Layout(NamedTuple):
    """Where one kernel's GET_DEST (or GET_SERVICE) reply messages keep a real server's (or
    a service's) fields, learnt from the first: a message of the same length with the same
    attribute headers at those places decodes with one struct call (no walk of its
    attributes, nothing cached: a cache of decoded replies was 57 MiB at 100,000 real
    servers)."""

    length: int  # of the whole message
    fields: struct.Struct  # each field's attribute header (one word), then its payload
    headers: tuple[int, ...]  # the header words expected, in the message's order
    at: tuple[int, ...]  # where each field's payload is in the unpacked values


def _find(
    data: Wire, attrs: dict[int, tuple[int, int]], path: tuple[int, ...]
) -> tuple[int, int] | None:
    where = attrs.get(path[0])
    for kind in path[1:]:
        if where is None:
            return None
        where = parse_attrs(data, where[0], where[0] + where[1]).get(kind)
    return where


def dest_layout(
    data: Wire,
    offset: int,
    end: int,
    fields: tuple[tuple[tuple[int, ...], str], ...] = _DEST_FIELDS,
    nest: int = CMD_ATTR_DEST,
) -> Layout | None:
    """The layout of ``fields`` in the reply message at ``offset`` whose attributes are
    nested in ``nest`` (None: not a plain one). A field of format "" is a string of the size
    this message gives it."""
    start = offset + 20  # nlmsghdr + genlmsghdr
    alen, akind = NLA.unpack_from(data, start)
    if akind & NLA_TYPE_MASK != nest or start + alen > end:
        return None
    attrs = parse_attrs(data, start + 4, start + alen)
    places = []
    for rank, (path, wanted) in enumerate(fields):
        where = _find(data, attrs, path)
        fmt = wanted or f"{where[1] if where else 0}s"
        if where is None or where[1] != struct.calcsize(fmt):
            return None
        places.append((where[0] - 4 - offset, rank, fmt))
    places.sort()
    layout, headers, at, pos = "=", [], [0] * len(fields), 0
    for value, (header, rank, fmt) in enumerate(places):
        layout += f"{header - pos}xI{fmt}"
        pos = header + 4 + struct.calcsize(fmt)
        headers.append(U32.unpack_from(data, offset + header)[0])
        at[rank] = 2 * value + 1
    return Layout(end - offset, struct.Struct(layout), tuple(headers), tuple(at))


def counter_layout(data: Wire, offset: int, end: int) -> Layout | None:
    """The layout of a real server's counters in the GET_DEST reply message at ``offset``."""
    return dest_layout(data, offset, end, _COUNTER_FIELDS)


# A service's fields in a GET_SERVICE reply (ip_vs_genl_fill_service): its key, either an
# address (protocol, address, port) or a firewall mark, then its configuration and, in
# STATS64, its counters (model.SERVICE_COUNTERS' order).
_SERVICE_TAIL: tuple[tuple[tuple[int, ...], str], ...] = (
    ((SVC_SCHED_NAME,), ""),
    ((SVC_FLAGS,), "I4x"),  # struct ip_vs_flags: the flags, then a mask
    ((SVC_TIMEOUT,), "I"),
    ((SVC_NETMASK,), "4s"),  # IPv4: a mask, in network order; IPv6: a prefix length
    *(((SVC_STATS64, kind), "Q") for kind in range(1, 6)),
)
_SERVICE_FIELDS = (
    ((SVC_AF,), "H"), ((SVC_PROTOCOL,), "H"), ((SVC_ADDR,), "16s"), ((SVC_PORT,), "H"),
    *_SERVICE_TAIL,
)  # fmt: skip
_MARK_FIELDS = (((SVC_AF,), "H"), ((SVC_FWMARK,), "I"), *_SERVICE_TAIL)
_FAMILIES = {int(f): f for f in Family}
_PROTOCOLS = {int(p): p for p in IpProtocol}


def service_layout(data: Wire, offset: int, end: int) -> Layout | None:
    """The layout of the GET_SERVICE reply message at ``offset``: a service of an address
    or of a firewall mark (None: neither, plainly)."""
    return dest_layout(data, offset, end, _SERVICE_FIELDS, CMD_ATTR_SERVICE) or dest_layout(
        data, offset, end, _MARK_FIELDS, CMD_ATTR_SERVICE
    )


def decode_service_row(
    data: bytes, offset: int, layout: Layout
) -> tuple[ServiceKey, ServiceConfig, tuple[int, ...]] | None:
    """A service's key, configuration and counters, if the message at ``offset`` is laid
    out as ``layout`` (from ``service_layout``) says."""
    values = layout.fields.unpack_from(data, offset)
    if values[0::2] != layout.headers:
        return None
    at = layout.at
    family = _FAMILIES.get(values[at[0]])
    if family is None:
        return None
    if len(at) == len(_SERVICE_FIELDS):  # a service of an address, not of a mark
        protocol = _PROTOCOLS.get(values[at[1]])
        if protocol is None:
            return None
        key = ServiceKey(
            family, protocol, address_text(values[at[2]], 0, family), socket.ntohs(values[at[3]])
        )
    else:
        key = ServiceKey.mark(family, values[at[1]])
    sched, flags, timeout, mask, c0, c1, c2, c3, c4 = at[-len(_SERVICE_TAIL) :]
    config = _wire_service_config(
        family, values[sched], values[flags], values[timeout], values[mask]
    )
    return key, config, (values[c0], values[c1], values[c2], values[c3], values[c4])


@functools.lru_cache(maxsize=1024)  # bounded: the kernel may hold what others wrote
def _wire_service_config(
    family: Family, sched: bytes, flags: int, timeout: int, mask: bytes
) -> ServiceConfig:
    """A configuration from its attributes' payloads as the kernel writes them (the mask:
    IPv4's in network order, an IPv6 prefix length as a number)."""
    bits = flags & ~SVC_F_HASHED
    if family is Family.INET6:
        netmask = U32.unpack(mask)[0]
    else:
        netmask = int.from_bytes(mask, "big").bit_count()
    persistence = timeout if bits & SVC_F_PERSISTENT else 0
    return service_config(sched.split(b"\0", 1)[0].decode(), bits, persistence, netmask)


# What the kernel changes in a real server's message by itself, as traffic flows: its
# connection counts and its counters. Everything else in the message is its configuration
# (or the attributes' own headers), which only a command changes.
_DEST_VOLATILE = frozenset(
    (DEST_ACTIVE_CONNS, DEST_INACT_CONNS, DEST_PERSIST_CONNS, DEST_STATS, DEST_STATS64)
)


def dest_settled(data: Wire, offset: int, end: int) -> struct.Struct | None:
    """A struct that takes, from a GET_DEST reply message laid out as the one at
    ``offset``, every byte but the message header (the request's sequence number and port)
    and the volatile attributes (connection counts and counters, headers and all), in a
    few pieces; None for a message not nested as a real server's. Its size is the whole
    message's: a message of another length is another layout. Two messages whose pieces
    are equal decode alike (``decode_dest_row`` reads none of what it skips)."""
    start = offset + 20  # nlmsghdr + genlmsghdr
    alen, akind = NLA.unpack_from(data, start)
    nest_end = start + alen
    if akind & NLA_TYPE_MASK != CMD_ATTR_DEST or nest_end > end:
        return None
    skipped = sorted(  # (first, last) of each volatile attribute, its header included
        (at - 4 - offset, at - 4 - offset + ((size + 7) & ~3))
        for kind, (at, size) in parse_attrs(data, start + 4, nest_end).items()
        if kind in _DEST_VOLATILE
    )
    if skipped and skipped[-1][1] > nest_end - offset:
        return None
    layout, at = "=16x", 16
    for first, last in skipped:
        if first > at:
            layout += f"{first - at}s"
        layout += f"{last - first}x"
        at = last
    if end - offset > at:
        layout += f"{end - offset - at}s"
    return struct.Struct(layout)


def decode_dest_row(data: bytes, offset: int, layout: Layout) -> tuple[bytes, Any] | None:
    """The real server of the message at ``offset`` as a ``Dests`` row (packed key, shared
    attributes: no text made), if the message is laid out as ``layout`` says."""
    values = layout.fields.unpack_from(data, offset)
    if values[0::2] != layout.headers:
        return None
    at = layout.at
    return (
        wire_key(values[at[0]], values[at[1]], values[at[6]]),
        shared_attrs(
            (values[at[3]], FORWARDING[values[at[2]] & 0x7], values[at[4]], values[at[5]])
        ),
    )


def decode_dest_counters(
    data: bytes, offset: int, layout: Layout
) -> tuple[bytes, list[int]] | None:
    """A real server's packed address and ``model.DEST_COUNTERS``, if the message at
    ``offset`` is laid out as ``layout`` (from ``counter_layout``) says."""
    values = layout.fields.unpack_from(data, offset)
    if values[0::2] != layout.headers:
        return None
    figures = [values[i] for i in layout.at[1:]]
    figures[0] = socket.ntohs(figures[0])
    return values[layout.at[0]], figures


def dest_counters(data: bytes, offset: int, end: int, family: int) -> tuple[bytes, list[int]]:
    """The same, from a message of any layout (its attributes walked)."""
    start = offset + 20
    nested, size = parse_attrs(data, start, end)[CMD_ATTR_DEST]
    a = parse_attrs(data, nested, nested + size)
    where = a.get(DEST_ADDR_FAMILY)
    if where is not None:
        family = U16.unpack_from(data, where[0])[0]
    stats = decode_stats64(data, a.get(DEST_STATS64))
    off = a[DEST_ADDR][0]
    return data[off : off + 16], [
        BE16.unpack_from(data, a[DEST_PORT][0])[0],
        I32.unpack_from(data, a[DEST_WEIGHT][0])[0],
        u32(data, a, DEST_ACTIVE_CONNS),
        u32(data, a, DEST_INACT_CONNS),
        u32(data, a, DEST_PERSIST_CONNS),
        stats.connections,
        stats.packets_in,
        stats.packets_out,
        stats.bytes_in,
        stats.bytes_out,
        family,
    ]
