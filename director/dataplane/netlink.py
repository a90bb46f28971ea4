"""Netlink's own wire format: message and attribute headers, the generic netlink
controller's question (which id a family has), a datagram split into its messages, and the
kernel's words for an error. Pure: :mod:`director.dataplane.codec` holds IPVS's own
messages on top of it."""

from __future__ import annotations

import os
import struct

# --- netlink ---------------------------------------------------------------------------
NETLINK_GENERIC = 16
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLM_F_ACK_TLVS = 0x200
NLMSGERR_ATTR_MSG = 1
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11
NLA_TYPE_MASK = 0x3FFF

NLMSGHDR = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
GENLMSGHDR = struct.Struct("=BBH")  # genlmsghdr: cmd, version, reserved
NLA = struct.Struct("=HH")
U16 = struct.Struct("=H")
U32 = struct.Struct("=I")
I32 = struct.Struct("=i")
GENL_VERSION = 1

Wire = bytes | bytearray  # a datagram, or the receive buffer it is still in


def pack_nla(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return NLA.pack(size, kind) + payload + b"\0" * (-size & 3)


def parse_attrs(data: Wire, start: int, end: int) -> dict[int, tuple[int, int]]:
    """type -> (payload offset, payload length) for the attributes in data[start:end]."""
    out: dict[int, tuple[int, int]] = {}
    unpack = NLA.unpack_from
    while start + 4 <= end:
        size, kind = unpack(data, start)
        if size < 4:
            break
        out[kind & NLA_TYPE_MASK] = (start + 4, size - 4)
        start += (size + 3) & ~3
    return out


# The generic netlink controller: which family id IPVS has on this kernel.
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
IPVS_GENL_NAME = "IPVS"


def family_request(seq: int, name: str = IPVS_GENL_NAME) -> bytes:
    """CTRL_CMD_GETFAMILY for ``name``: the controller answers with the family's id."""
    payload = pack_nla(CTRL_ATTR_FAMILY_NAME, name.encode() + b"\0")
    return (
        NLMSGHDR.pack(20 + len(payload), GENL_ID_CTRL, NLM_F_REQUEST, seq, 0)
        + GENLMSGHDR.pack(CTRL_CMD_GETFAMILY, GENL_VERSION, 0)
        + payload
    )


def family_id(data: Wire, start: int, end: int) -> int:
    """The family id in the controller's answer (``start``: its genl header)."""
    off, _size = parse_attrs(data, start + 4, end)[CTRL_ATTR_FAMILY_ID]
    return int(U16.unpack_from(data, off)[0])


def split_messages(data: bytes) -> list[tuple[int, int, int, int, int]]:
    """(type, flags, seq, payload start, end) for every netlink message in a datagram."""
    out = []
    offset = 0
    while offset + 16 <= len(data):
        size, kind, flags, seq, _pid = NLMSGHDR.unpack_from(data, offset)
        if size < 16:
            break
        out.append((kind, flags, seq, offset + 16, offset + size))
        offset += (size + 3) & ~3
    return out


def error_text(data: Wire, flags: int, start: int, end: int) -> str:
    code = -I32.unpack_from(data, start)[0]
    text = os.strerror(code)
    if flags & NLM_F_ACK_TLVS:
        inner_len = NLMSGHDR.unpack_from(data, start + 4)[0]
        # With NETLINK_CAP_ACK the original request is echoed as its header only.
        tlv_start = start + 4 + (16 if flags & 0x100 else inner_len)
        attrs = parse_attrs(data, tlv_start, end)
        if NLMSGERR_ATTR_MSG in attrs:
            off, size = attrs[NLMSGERR_ATTR_MSG]
            text += ": " + data[off : off + size].split(b"\0", 1)[0].decode(errors="replace")
    return text
