"""The hand-packed netlink wire format, checked against pyroute2's own IPVS decoder and
encoder (an independent implementation of the same protocol). Host only, no kernel."""

from __future__ import annotations

import socket
import struct

from pyroute2.netlink.generic.ipvs import ipvsmsg

from director.ipvs import (
    CMD_ATTR_DEST,
    CMD_ATTR_SERVICE,
    DestLayout,
    _attrs,
    decode_dest,
    decode_service,
    encode_op,
)
from director.model import (
    Family,
    Forwarding,
    Op,
    OpKind,
    Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)

V6 = ServiceKey.inet(Protocol.UDP, "2001:db8:100::53", 53)


def pyroute2_decode(cmd: int, payload: bytes) -> ipvsmsg:
    raw = struct.pack("=IHHII", 20 + len(payload), 0x20, 1, 1, 0) + struct.pack("=BBH", cmd, 1, 0)
    msg = ipvsmsg(raw + payload)
    msg.decode()
    return msg


def test_a_service_add_decodes_identically_in_pyroute2() -> None:
    config = ServiceConfig("sh", frozenset({"sh-port"}), persistence=300, netmask=64)
    cmd, payload = encode_op(Op(OpKind.ADD_SERVICE, V6, config=config))
    svc = pyroute2_decode(cmd, payload).get_attr("IPVS_CMD_ATTR_SERVICE")
    assert cmd == 1
    assert svc.get_attr("IPVS_SVC_ATTR_AF") == socket.AF_INET6
    assert svc.get_attr("IPVS_SVC_ATTR_PROTOCOL") == socket.IPPROTO_UDP
    assert svc.get_attr("IPVS_SVC_ATTR_PORT") == 53
    assert svc.get_attr("IPVS_SVC_ATTR_SCHED_NAME") == "sh"
    assert svc.get_attr("IPVS_SVC_ATTR_TIMEOUT") == 300
    flags = svc.get_attr("IPVS_SVC_ATTR_FLAGS")
    assert (flags["flags"], flags["mask"]) == (0x1 | 0x10, 0xFFFFFFFF)
    # Our own decoder reads back what we wrote.
    off, size = _attrs(payload, 0, len(payload))[CMD_ATTR_SERVICE]
    key, decoded, _ = decode_service(payload, off, off + size)
    assert (key, decoded) == (V6, config)


def test_a_real_server_set_is_a_set_not_a_delete() -> None:
    rs = RealServer("2001:db8:2::11", 5353, 7, Forwarding.TUN, 100, 50)
    cmd, payload = encode_op(Op(OpKind.SET_DEST, V6, dest=rs))
    assert cmd == 6  # IPVS_CMD_SET_DEST (pyroute2's "update" would send 7, a delete)
    dest = pyroute2_decode(cmd, payload).get_attr("IPVS_CMD_ATTR_DEST")
    assert dest.get_attr("IPVS_DEST_ATTR_PORT") == 5353
    assert dest.get_attr("IPVS_DEST_ATTR_WEIGHT") == 7
    assert dest.get_attr("IPVS_DEST_ATTR_FWD_METHOD") == 2
    assert dest.get_attr("IPVS_DEST_ATTR_U_THRESH") == 100
    assert dest.get_attr("IPVS_DEST_ATTR_L_THRESH") == 50
    off, size = _attrs(payload, 0, len(payload))[CMD_ATTR_DEST]
    assert decode_dest(payload, off, off + size, Family.INET6, False)[0] == rs


def test_we_decode_a_service_that_pyroute2_encoded() -> None:
    msg = ipvsmsg()
    msg["cmd"] = 1
    msg["version"] = 1
    msg["attrs"] = [
        (
            "IPVS_CMD_ATTR_SERVICE",
            {
                "attrs": [
                    ("IPVS_SVC_ATTR_AF", socket.AF_INET),
                    ("IPVS_SVC_ATTR_PROTOCOL", socket.IPPROTO_TCP),
                    ("IPVS_SVC_ATTR_ADDR", "198.51.100.10"),
                    ("IPVS_SVC_ATTR_PORT", 443),
                    ("IPVS_SVC_ATTR_SCHED_NAME", "wrr"),
                    ("IPVS_SVC_ATTR_FLAGS", {"flags": 0x1 | 0x2, "mask": 0xFFFFFFFF}),
                    ("IPVS_SVC_ATTR_TIMEOUT", 60),
                    ("IPVS_SVC_ATTR_NETMASK", "255.255.255.0"),
                ]
            },
        )
    ]
    msg.encode()
    data = bytes(msg.data)
    attrs = _attrs(data, 20, len(data))
    off, size = attrs[CMD_ATTR_SERVICE]
    key, config, _ = decode_service(data, off, off + size)
    assert key == ServiceKey.inet(Protocol.TCP, "198.51.100.10", 443)
    assert config == ServiceConfig("wrr", frozenset(), persistence=60, netmask=24)


def kernel_dest_reply(rs: RealServer, family: int, extra: bytes = b"") -> bytes:
    """IPVS_CMD_ATTR_DEST as ip_vs_genl_fill_dest() writes it (Linux 6.1 order)."""

    def nla(kind: int, payload: bytes) -> bytes:
        size = 4 + len(payload)
        return struct.pack("=HH", size, kind) + payload + b"\0" * (-size & 3)

    packed = socket.inet_pton(family, rs.address).ljust(16, b"\0")
    stats = nla(1, struct.pack("=I", 7))
    body = (
        nla(1, packed)
        + nla(2, struct.pack(">H", rs.port))
        + nla(3, struct.pack("=I", rs.forwarding))
        + nla(4, struct.pack("=i", rs.weight))
        + nla(13, b"\0")  # tun_type
        + nla(14, b"\0\0")  # tun_port
        + nla(15, b"\0\0")  # tun_flags
        + nla(5, struct.pack("=I", rs.upper_threshold))
        + nla(6, struct.pack("=I", rs.lower_threshold))
        + nla(7, struct.pack("=I", 3))
        + nla(8, struct.pack("=I", 1))
        + nla(9, struct.pack("=I", 0))
        + nla(11, struct.pack("=H", family))
        + extra
        + nla(10 | 0x8000, stats)
        + nla(12 | 0x8000, stats)
    )
    return nla(CMD_ATTR_DEST | 0x8000, body)


def test_the_learned_dest_layout_decodes_like_the_generic_decoder() -> None:
    first = RealServer("192.0.2.11", 8080, 3, Forwarding.NAT)
    data = kernel_dest_reply(first, socket.AF_INET)
    layout = DestLayout.learn(data, 4, len(data))
    assert layout is not None
    for rs, family in (
        (RealServer("192.0.2.200", 443, 0, Forwarding.DR, 100, 10), socket.AF_INET),
        (RealServer("2001:db8::7", 53, 65535, Forwarding.TUN), socket.AF_INET6),
    ):
        reply = kernel_dest_reply(rs, family)
        generic, _ = decode_dest(reply, 4, len(reply), socket.AF_INET, False)
        assert layout.decode(reply, 4, len(reply), socket.AF_INET) == generic == rs


def test_a_reply_with_another_layout_falls_back_to_the_generic_decoder() -> None:
    rs = RealServer("192.0.2.11", 8080)
    data = kernel_dest_reply(rs, socket.AF_INET)
    layout = DestLayout.learn(data, 4, len(data))
    assert layout is not None
    # An unknown attribute after the fields it reads changes nothing...
    odd = kernel_dest_reply(rs, socket.AF_INET, extra=struct.pack("=HHI", 8, 99, 0))
    assert layout.decode(odd, 4, len(odd), socket.AF_INET) == rs
    # ... one before them shifts them all: the fast path declines...
    moved = odd[:4] + struct.pack("=HHI", 8, 99, 0) + odd[4:]
    moved = struct.pack("=HH", len(moved), CMD_ATTR_DEST | 0x8000) + moved[4:]
    assert layout.decode(moved, 4, len(moved), socket.AF_INET) is None
    # ... and the generic decoder still reads it.
    assert decode_dest(moved, 4, len(moved), socket.AF_INET, False)[0] == rs
