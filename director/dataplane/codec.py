"""The IPVS generic netlink wire format (include/uapi/linux/ip_vs.h), as data. Pure.

The hot paths (encoding thousands of requests, decoding dumps of 100,000 real servers) pack
and unpack the wire format directly with ``struct``: pyroute2's per-message NLA objects cost
20-35x the kernel's own work (see ``../shared/LAB-FACTS.md``). ``tests/dataplane/test_codec.py``
holds this codec to pyroute2's own encoding on the host; ``director.dataplane.kernel`` sends
and receives it.
"""

from __future__ import annotations

import functools
import socket
import struct
from collections.abc import Sequence

from director.core.dests import KEY_SIZE
from director.core.model import (
    Family,
    Forwarding,
    IpProtocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.core.services import DestState, Op, OpKind, Stats
from director.dataplane.flags import SVC_F_HASHED, SVC_F_PERSISTENT, config_bits, decode_flags
from director.dataplane.netlink import (
    GENL_VERSION,
    I32,
    NLM_F_REQUEST,
    U16,
    U32,
    pack_nla,
    parse_attrs,
)

# A real server's key as ``Dests`` packs it (director.core.dests), made from the kernel's
# attributes without making text.
_ZEROS = bytes(12)
_V4_BYTE, _V6_BYTE = bytes((socket.AF_INET,)), bytes((socket.AF_INET6,))


def wire_key(address: bytes, port: bytes, family: int) -> bytes:
    """The same from the kernel's attributes: a 16-byte address (IPv4's in the first four),
    the port as sent (network order), the family (any but IPv6's read as IPv4's, as the
    codec reads an address)."""
    if family != socket.AF_INET6:
        return address[:4] + _ZEROS + port + _V4_BYTE
    return address + port + _V6_BYTE


_U64 = struct.Struct("=Q")
BE16 = struct.Struct(">H")
_FLAGS = struct.Struct("=II")

# --- IPVS generic netlink (include/uapi/linux/ip_vs.h) ---------------------------------
CMD_NEW_SERVICE, CMD_SET_SERVICE, CMD_DEL_SERVICE, CMD_GET_SERVICE = 1, 2, 3, 4
CMD_NEW_DEST, CMD_SET_DEST, CMD_DEL_DEST, CMD_GET_DEST = 5, 6, 7, 8
CMD_GET_INFO = 15
CMD_ATTR_SERVICE, CMD_ATTR_DEST = 1, 2
SVC_AF, SVC_PROTOCOL, SVC_ADDR, SVC_PORT, SVC_FWMARK = 1, 2, 3, 4, 5
SVC_SCHED_NAME, SVC_FLAGS, SVC_TIMEOUT, SVC_NETMASK, SVC_STATS = 6, 7, 8, 9, 10
SVC_PE_NAME, SVC_STATS64 = 11, 12
DEST_ADDR, DEST_PORT, DEST_FWD_METHOD, DEST_WEIGHT, DEST_U_THRESH = 1, 2, 3, 4, 5
DEST_L_THRESH, DEST_ACTIVE_CONNS, DEST_INACT_CONNS, DEST_PERSIST_CONNS = 6, 7, 8, 9
DEST_STATS, DEST_ADDR_FAMILY, DEST_STATS64 = 10, 11, 12
INFO_VERSION, INFO_CONN_TAB_SIZE = 1, 2

OP_CMD = {
    OpKind.ADD_SERVICE: CMD_NEW_SERVICE,
    OpKind.SET_SERVICE: CMD_SET_SERVICE,
    OpKind.DEL_SERVICE: CMD_DEL_SERVICE,
    OpKind.ADD_DEST: CMD_NEW_DEST,
    OpKind.SET_DEST: CMD_SET_DEST,
    OpKind.DEL_DEST: CMD_DEL_DEST,
}


# --- encoding ---------------------------------------------------------------------------
def _addr16(address: str) -> tuple[int, bytes]:
    if ":" in address:
        return socket.AF_INET6, socket.inet_pton(socket.AF_INET6, address)
    return socket.AF_INET, socket.inet_pton(socket.AF_INET, address) + bytes(12)


def _netmask(family: Family, prefix: int) -> bytes:
    if family is Family.INET6:
        return U32.pack(prefix)
    return ((0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF).to_bytes(4, "big")


# An address service's key attributes, each as pack_nla makes it (4-byte aligned), at once.
_INET_KEY = struct.Struct("=HHH2xHHH2xHH16sHH2s2x")


def encode_service_key(key: ServiceKey) -> bytes:
    """The attributes that identify a service (nested in IPVS_CMD_ATTR_SERVICE)."""
    if key.fwmark:
        return pack_nla(SVC_AF, U16.pack(key.family)) + pack_nla(SVC_FWMARK, U32.pack(key.fwmark))
    assert key.protocol is not None
    _, packed = _addr16(key.address)
    return _INET_KEY.pack(
        6, SVC_AF, key.family, 6, SVC_PROTOCOL, key.protocol, 20, SVC_ADDR, packed,
        6, SVC_PORT, BE16.pack(key.port),
    )  # fmt: skip


def encode_service_config(key: ServiceKey, config: ServiceConfig) -> bytes:
    return _config_attrs(key.family, config)


def encode_added_service(key: ServiceKey, config: ServiceConfig) -> tuple[bytes, bytes]:
    """An added service's request payload (IPVS_CMD_ATTR_SERVICE: its key and config), and
    its key nested as its real servers' requests carry it; the key encoded once, the config
    once for every service that shares it."""
    key_attrs = encode_service_key(key)
    return (
        pack_nla(CMD_ATTR_SERVICE, key_attrs + _config_attrs(key.family, config)),
        pack_nla(CMD_ATTR_SERVICE, key_attrs),
    )


@functools.lru_cache(maxsize=256)  # a table's services share a handful of configs
def _config_attrs(family: Family, config: ServiceConfig) -> bytes:
    return (
        pack_nla(SVC_SCHED_NAME, config.scheduler.encode() + b"\0")
        + pack_nla(SVC_FLAGS, _FLAGS.pack(config_bits(config), 0xFFFFFFFF))
        + pack_nla(SVC_TIMEOUT, U32.pack(config.persistence))
        + pack_nla(SVC_NETMASK, _netmask(family, config.netmask))
    )


# A real server's attributes, nested in IPVS_CMD_ATTR_DEST: address (16), port (network
# order, padded), address family, and for add/set the four u32 settings.
_DEST_KEY_FMT = "HHHH16sHHH2xHHH2x"
_DEST_FULL_FMT = _DEST_KEY_FMT + "HHIHHIHHIHHI"
_DEST_KEY_LEN = struct.calcsize("=" + _DEST_KEY_FMT)
_DEST_FULL_LEN = struct.calcsize("=" + _DEST_FULL_FMT)
HEAD = struct.Struct("=IHHIIBBH")  # nlmsghdr + genlmsghdr


@functools.lru_cache(maxsize=64)
def dest_message_layout(nested_len: int, full: bool) -> struct.Struct:
    """A whole real-server request (headers, service key, dest attributes) as one struct."""
    return struct.Struct(f"=IHHIIBBH{nested_len}s{_DEST_FULL_FMT if full else _DEST_KEY_FMT}")


# The same request for an added real server packed from its ``Dests`` row: its address's 16
# bytes and its port's two (network order) as the row holds them.
_DEST_ROW_FMT = "HHHH16sHH2s2xHHH2x" + _DEST_FULL_FMT[len(_DEST_KEY_FMT) :]


@functools.lru_cache(maxsize=64)
def dest_row_layout(nested_len: int) -> struct.Struct:
    """An added real server's whole request (headers, service key, dest attributes) as one
    struct, from its packed row (``director.core.dests``)."""
    return struct.Struct(f"=IHHIIBBH{nested_len}s{_DEST_ROW_FMT}")


def pack_added_rows(
    layout: struct.Struct,
    family: int,
    seq: int,
    nested: bytes,
    *,
    packed: tuple[bytes, Sequence[tuple[int, Forwarding, int, int]]],
    rows: range,
) -> list[bytes]:
    """Requests adding the real servers in ``rows`` of ``packed`` (``Dests.packed``: the
    keys, and one (weight, forwarding, upper, lower) for all or one each), in the order
    ``rows`` gives, numbered from ``seq + 1``; ``layout`` is ``dest_row_layout``'s for the
    service's ``nested`` key. None may be ``fullnat`` (refused before sending)."""
    keys, attrs = packed
    if len(attrs) == 1:  # one (weight, forwarding, upper, lower) for all: the common case
        return _pack_alike_rows(
            layout.size, family, seq, nested, keys=keys, attrs=attrs[0], rows=rows
        )
    pack, size = layout.pack, layout.size
    out = []
    for number, row in enumerate(rows, seq + 1):
        at = row * KEY_SIZE
        weight, forwarding, upper, lower = attrs[row]
        # fmt: off
        out.append(pack(
            size, family, NLM_F_REQUEST, number & 0xFFFFFFFF, 0, CMD_NEW_DEST, GENL_VERSION, 0,
            nested, _DEST_FULL_LEN, CMD_ATTR_DEST,
            20, DEST_ADDR, keys[at : at + 16], 6, DEST_PORT, keys[at + 16 : at + 18],
            6, DEST_ADDR_FAMILY, keys[at + 18], 8, DEST_FWD_METHOD, forwarding,
            8, DEST_WEIGHT, weight, 8, DEST_U_THRESH, upper, 8, DEST_L_THRESH, lower,
        ))
        # fmt: on
    return out


# The same requests where the real servers share their attributes, each packed from what
# varies alone (its number, address, port and family) between the parts every one of the
# service's requests has alike, made once a call: 9 values a request, not 27 (the early
# send's packing, the lab's guest: 0.72 s for 1,000 services x 10 where the kernel took 0.28).
_PORT_NLA = struct.pack("=HH", 6, DEST_PORT)
_FAMILY_NLA = struct.pack("=2xHH", 6, DEST_ADDR_FAMILY)  # after the port's padding


@functools.lru_cache(maxsize=64)
def _alike_layout(middle: int, tail: int) -> struct.Struct:
    """head (8 bytes), number, the parts up to the address, the address, the port's header,
    the port, the family's header, the family, the rest."""
    return struct.Struct(f"=8sI{middle}s16s4s2s{len(_FAMILY_NLA)}sH{tail}s")


def _pack_alike_rows(
    size: int,
    family: int,
    seq: int,
    nested: bytes,
    *,
    keys: bytes,
    attrs: tuple[int, Forwarding, int, int],
    rows: range,
) -> list[bytes]:
    weight, forwarding, upper, lower = attrs
    head = struct.pack("=IHH", size, family, NLM_F_REQUEST)
    middle = (
        struct.pack("=IBBH", 0, CMD_NEW_DEST, GENL_VERSION, 0)
        + nested
        + struct.pack("=HHHH", _DEST_FULL_LEN, CMD_ATTR_DEST, 20, DEST_ADDR)
    )
    # fmt: off
    tail = struct.pack(
        "=2xHHIHHIHHIHHI",  # the family's padding, then the four settings
        8, DEST_FWD_METHOD, forwarding, 8, DEST_WEIGHT, weight,
        8, DEST_U_THRESH, upper, 8, DEST_L_THRESH, lower,
    )
    # fmt: on
    pack = _alike_layout(len(middle), len(tail)).pack
    port_nla, family_nla = _PORT_NLA, _FAMILY_NLA
    out = []
    for number, row in enumerate(rows, seq + 1):
        at = row * KEY_SIZE
        out.append(
            pack(
                head,
                number & 0xFFFFFFFF,
                middle,
                keys[at : at + 16],
                port_nla,
                keys[at + 16 : at + 18],
                family_nla,
                keys[at + 18],
                tail,
            )
        )
    return out


def pack_dest_message(
    layout: struct.Struct, family: int, seq: int, cmd: int, nested: bytes, *, rs: RealServer
) -> bytes:
    """One real-server request, packed in one call (the hot path of a full sync).

    The port goes in as ``socket.htons(port)`` in a native u16, which is network order."""
    address = rs.address
    af = socket.AF_INET6 if ":" in address else socket.AF_INET
    if cmd == CMD_DEL_DEST:
        return layout.pack(
            layout.size, family, NLM_F_REQUEST, seq, 0, cmd, GENL_VERSION, 0, nested,
            _DEST_KEY_LEN, CMD_ATTR_DEST,
            20, DEST_ADDR, socket.inet_pton(af, address), 6, DEST_PORT, socket.htons(rs.port),
            6, DEST_ADDR_FAMILY, af,
        )  # fmt: skip
    if rs.forwarding is Forwarding.FULLNAT:  # translated to NAT and an SNAT rule before here
        raise ValueError("fullnat is the director's mode, not an IPVS forwarding method")
    return layout.pack(
        layout.size, family, NLM_F_REQUEST, seq, 0, cmd, GENL_VERSION, 0, nested,
        _DEST_FULL_LEN, CMD_ATTR_DEST,
        20, DEST_ADDR, socket.inet_pton(af, address), 6, DEST_PORT, socket.htons(rs.port),
        6, DEST_ADDR_FAMILY, af, 8, DEST_FWD_METHOD, rs.forwarding,
        8, DEST_WEIGHT, rs.weight, 8, DEST_U_THRESH, rs.upper_threshold,
        8, DEST_L_THRESH, rs.lower_threshold,
    )  # fmt: skip


def encode_dest(rs: RealServer, full: bool) -> bytes:
    """IPVS_CMD_ATTR_DEST with its nested attributes."""
    cmd = CMD_NEW_DEST if full else CMD_DEL_DEST
    return pack_dest_message(dest_message_layout(0, full), 0, 0, cmd, b"", rs=rs)[HEAD.size :]


def encode_op(op: Op) -> tuple[int, bytes]:
    """(command, genl payload) for one operation."""
    key_attrs = encode_service_key(op.key)
    if op.dest is None:
        if op.config is not None and op.kind is not OpKind.DEL_SERVICE:
            key_attrs += encode_service_config(op.key, op.config)
        return OP_CMD[op.kind], pack_nla(CMD_ATTR_SERVICE, key_attrs)
    full = op.kind is not OpKind.DEL_DEST
    return OP_CMD[op.kind], pack_nla(CMD_ATTR_SERVICE, key_attrs) + encode_dest(op.dest, full)


# --- decoding ---------------------------------------------------------------------------
def u32(data: bytes, attrs: dict[int, tuple[int, int]], kind: int) -> int:
    where = attrs.get(kind)
    return U32.unpack_from(data, where[0])[0] if where else 0


def decode_stats64(data: bytes, where: tuple[int, int] | None) -> Stats:
    if where is None:
        return Stats()
    attrs = parse_attrs(data, where[0], where[0] + where[1])
    values = [
        _U64.unpack_from(data, attrs[i][0])[0] if i in attrs and attrs[i][1] >= 8 else 0
        for i in range(1, 11)
    ]
    return Stats(*values)


def address_text(data: bytes, offset: int, family: int) -> str:
    if family == socket.AF_INET6:
        return socket.inet_ntop(socket.AF_INET6, data[offset : offset + 16])
    return socket.inet_ntop(socket.AF_INET, data[offset : offset + 4])


def decode_service(
    data: bytes, start: int, end: int
) -> tuple[ServiceKey, ServiceConfig, tuple[int, int] | None]:
    """A nested IPVS_CMD_ATTR_SERVICE -> key, config and the STATS64 location."""
    a = parse_attrs(data, start, end)
    family = Family(U16.unpack_from(data, a[SVC_AF][0])[0])
    fwmark = u32(data, a, SVC_FWMARK)
    if fwmark:
        key = ServiceKey.mark(family, fwmark)
    else:
        proto = IpProtocol(U16.unpack_from(data, a[SVC_PROTOCOL][0])[0])
        address = address_text(data, a[SVC_ADDR][0], family)
        key = ServiceKey(family, proto, address, BE16.unpack_from(data, a[SVC_PORT][0])[0])
    off, size = a[SVC_SCHED_NAME]
    scheduler = data[off : off + size].split(b"\0", 1)[0].decode()
    bits = _FLAGS.unpack_from(data, a[SVC_FLAGS][0])[0] & ~SVC_F_HASHED
    persistence = u32(data, a, SVC_TIMEOUT) if bits & SVC_F_PERSISTENT else 0
    off = a[SVC_NETMASK][0]
    if family is Family.INET6:
        netmask = U32.unpack_from(data, off)[0]
    else:
        netmask = int.from_bytes(data[off : off + 4], "big").bit_count()
    return key, service_config(scheduler, bits, persistence, netmask), a.get(SVC_STATS64)


@functools.lru_cache(maxsize=1024)  # bounded: the kernel may hold what others wrote
def service_config(scheduler: str, bits: int, persistence: int, netmask: int) -> ServiceConfig:
    """One configuration object for every service configured alike (10,000 services read
    back held 10,000 equal ones, each with its own scheduler name)."""
    return ServiceConfig(scheduler, decode_flags(scheduler, bits), persistence, netmask)


FORWARDING = (*Forwarding, Forwarding.BYPASS, Forwarding.BYPASS, Forwarding.BYPASS)


def decode_dest(
    data: bytes, start: int, end: int, family: int, with_stats: bool
) -> tuple[RealServer, DestState | None]:
    a = parse_attrs(data, start, end)
    where = a.get(DEST_ADDR_FAMILY)
    if where is not None:
        family = U16.unpack_from(data, where[0])[0]
    rs = RealServer(
        address_text(data, a[DEST_ADDR][0], family),
        BE16.unpack_from(data, a[DEST_PORT][0])[0],
        I32.unpack_from(data, a[DEST_WEIGHT][0])[0],
        FORWARDING[u32(data, a, DEST_FWD_METHOD) & 0x7],
        u32(data, a, DEST_U_THRESH),
        u32(data, a, DEST_L_THRESH),
    )
    if not with_stats:
        return rs, None
    state = DestState(
        u32(data, a, DEST_ACTIVE_CONNS),
        u32(data, a, DEST_INACT_CONNS),
        u32(data, a, DEST_PERSIST_CONNS),
        decode_stats64(data, a.get(DEST_STATS64)),
    )
    return rs, state
