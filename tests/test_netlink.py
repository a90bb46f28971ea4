"""The hand-packed netlink wire format, checked against pyroute2's own IPVS decoder and
encoder (an independent implementation of the same protocol). Host only, no kernel."""

from __future__ import annotations

import socket
import struct

from pyroute2.netlink.generic.ipvs import ipvsmsg

from director.ipvs import (
    CMD_ATTR_DEST,
    CMD_ATTR_SERVICE,
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
