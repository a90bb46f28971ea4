"""The hand-packed netlink wire format, checked against pyroute2's own IPVS decoder and
encoder (an independent implementation of the same protocol). Host only, no kernel."""

from __future__ import annotations

import errno
import socket
import struct
import threading

import pytest
from hypothesis import given, strategies as st
from pyroute2.netlink.generic.ipvs import ipvsmsg

from director.core.dests import packed_key
from director.core.model import (
    Family,
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.core.services import Op, OpKind
from director.dataplane.codec import (
    CMD_ATTR_DEST,
    CMD_ATTR_SERVICE,
    decode_dest,
    decode_service,
    encode_op,
    encode_service_config,
    encode_service_key,
    wire_key,
)
from director.dataplane.genl import RECV_BYTES, GenlSocket
from director.dataplane.kernel import KernelIpvs
from director.dataplane.netlink import parse_attrs as _attrs
from director.dataplane.replies import DestReplies
from director.dataplane.tabletext import TableText

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


# A real server's counters in the replies below: connections (over 32 bits: STATS carries
# them cut to 32, STATS64 whole), packets in and out, bytes in and out.
COUNTS = (2**33 + 7, 70, 60, 2**40 + 1, 2**64 - 1)


def kernel_dest_reply(
    rs: RealServer,
    family: int,
    extra: bytes = b"",
    counts: tuple[int, ...] = COUNTS,
    conns: tuple[int, int, int] = (3, 1, 0),
) -> bytes:
    """IPVS_CMD_ATTR_DEST as ip_vs_genl_fill_dest() writes it (Linux 6.1 order); ``counts``
    and ``conns`` (active, inactive, persistent): what traffic changes."""

    def nla(kind: int, payload: bytes) -> bytes:
        size = 4 + len(payload)
        return struct.pack("=HH", size, kind) + payload + b"\0" * (-size & 3)

    packed = socket.inet_pton(family, rs.address).ljust(16, b"\0")
    rates = (5, 4, 3, 2, 1)  # cps, pps in and out, bps in and out
    stats = b"".join(  # ip_vs_genl_fill_stats: 32 bits but for the bytes
        nla(i + 1, struct.pack("=Q", v) if i in (3, 4) else struct.pack("=I", v & 0xFFFFFFFF))
        for i, v in enumerate((*counts, *rates))
    )
    stats64 = b"".join(nla(i + 1, struct.pack("=Q", v)) for i, v in enumerate((*counts, *rates)))
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
        + nla(7, struct.pack("=I", conns[0]))
        + nla(8, struct.pack("=I", conns[1]))
        + nla(9, struct.pack("=I", conns[2]))
        + nla(11, struct.pack("=H", family))
        + extra
        + nla(10 | 0x8000, stats)
        + nla(12 | 0x8000, stats64)
    )
    return nla(CMD_ATTR_DEST | 0x8000, body)


def dest_message(
    rs: RealServer,
    family: int,
    seq: int,
    genl_family: int = 0x21,
    *,
    counts: tuple[int, ...] = COUNTS,
    conns: tuple[int, int, int] = (3, 1, 0),
) -> bytes:
    body = kernel_dest_reply(rs, family, counts=counts, conns=conns)
    return struct.pack("=IHHII", 20 + len(body), genl_family, 2, seq, 0) + b"\x08\x01\0\0" + body


class ScriptedSocket:
    """Replays kernel datagrams for one dump: what a GET_DEST reply looks like on the wire."""

    def __init__(self) -> None:
        self.datagrams: list[bytes] = []
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        return len(data)

    def recv_into(self, buffer: bytearray, nbytes: int = 0, flags: int = 0) -> int:
        """As the kernel's netlink_recvmsg: a datagram longer than the buffer is cut to it
        (and gone); with MSG_TRUNC the answer is its whole length."""
        data = self.datagrams.pop(0)
        copied = min(len(data), nbytes or len(buffer))
        buffer[:copied] = data[:copied]
        return len(data) if flags & socket.MSG_TRUNC else copied


def scripted_kernel() -> tuple[KernelIpvs, ScriptedSocket]:
    kernel = object.__new__(KernelIpvs)
    sock = ScriptedSocket()
    kernel.family = 0x21
    kernel._genl = GenlSocket(sock, 0x21)  # type: ignore[arg-type]
    kernel._dest_layout, kernel._counter_layout = None, None
    kernel._replies, kernel._settled = DestReplies(), {}
    kernel._text = TableText(None, opened=False)  # no text: every service read in full
    kernel._lock = threading.RLock()
    kernel._service_layouts = {}
    return kernel, sock


def done(seq: int) -> bytes:
    return struct.pack("=IHHIIi", 20, 3, 2, seq, 0, 0)


def odd_dest_message(rs: RealServer, seq: int) -> bytes:
    """A real server's reply with an unknown attribute first: every field elsewhere."""
    body = kernel_dest_reply(rs, socket.AF_INET)
    extra = struct.pack("=HHI", 8, 99, 0)
    odd = struct.pack("=HH", len(body) + 8, CMD_ATTR_DEST | 0x8000) + extra + body[4:]
    return struct.pack("=IHHII", 20 + len(odd), 0x21, 2, seq, 0) + b"\x08\x01\0\0" + odd


def swapped(message: bytes, first: int, second: int) -> bytes:
    """``message`` with two of its (8-byte) attributes in each other's place: same length."""
    out = bytearray(message)
    attrs = _attrs(message, 24, len(message))
    one, other = attrs[first][0] - 4, attrs[second][0] - 4
    out[one : one + 8], out[other : other + 8] = message[other : other + 8], message[one : one + 8]
    return bytes(out)


def test_a_reply_longer_than_the_receive_buffer_is_refused_not_read_cut_short() -> None:
    kernel, sock = scripted_kernel()
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    rs = RealServer("192.0.2.11", 8080)
    seq = kernel._genl.seq + 1
    one = dest_message(rs, socket.AF_INET, seq)
    sock.datagrams = [one * (RECV_BYTES // len(one) + 1) + done(seq)]
    with pytest.raises(OSError) as caught:
        kernel._dest_configs(key)
    assert caught.value.errno == errno.EMSGSIZE
    assert "did not fit" in str(caught.value)
    # Within the buffer, the same reply is read whole.
    seq = kernel._genl.seq + 1
    one = dest_message(rs, socket.AF_INET, seq)
    sock.datagrams = [one * (RECV_BYTES // len(one) - 1) + done(seq)]
    assert kernel._dest_configs(key)[0] == {rs.key: rs}


def test_an_error_reply_raises_with_the_errno() -> None:
    kernel, sock = scripted_kernel()
    seq = kernel._genl.seq + 1
    sock.datagrams = [struct.pack("=IHHIIi", 36, 2, 0, seq, 0, -3) + bytes(16)]
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    with pytest.raises(OSError) as caught:
        kernel._dest_configs(key)
    assert caught.value.errno == 3


def service_message(
    key: ServiceKey, config: ServiceConfig, seq: int, pe: bytes = b"", hashed: int = 0x2
) -> bytes:
    """A GET_SERVICE reply message as ip_vs_genl_fill_service() writes it: the key, the
    scheduler, a persistence engine if any, flags (with IP_VS_SVC_F_HASHED), timeout,
    netmask, then STATS and STATS64 (Linux 6.1 order)."""

    def nla(kind: int, payload: bytes) -> bytes:
        size = 4 + len(payload)
        return struct.pack("=HH", size, kind) + payload + b"\0" * (-size & 3)

    sched, flags, timeout, netmask = (
        nla(kind, payload) for kind, payload in _attrs_list(encode_service_config(key, config))
    )
    bits = struct.unpack("=II", _payload(flags))[0] | hashed
    stats64 = b"".join(
        nla(i + 1, struct.pack("=Q", v)) for i, v in enumerate((*COUNTS, 1, 2, 3, 4, 5))
    )
    stats = b"".join(nla(i + 1, struct.pack("=I", v & 0xFFFFFFFF)) for i, v in enumerate(COUNTS))
    body = (
        encode_service_key(key)
        + sched
        + (nla(11, pe) if pe else b"")
        + nla(7, struct.pack("=II", bits, 0xFFFFFFFF))
        + timeout
        + netmask
        + nla(10 | 0x8000, stats)
        + nla(12 | 0x8000, stats64)
    )
    nested = nla(CMD_ATTR_SERVICE | 0x8000, body)
    return struct.pack("=IHHII", 20 + len(nested), 0x21, 2, seq, 0) + b"\x01\x01\0\0" + nested


def _attrs_list(data: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    while at < len(data):
        size, kind = struct.unpack_from("=HH", data, at)
        out.append((kind, data[at + 4 : at + size]))
        at += (size + 3) & ~3
    return out


def _payload(attr: bytes) -> bytes:
    return attr[4 : struct.unpack_from("=H", attr)[0]]


@given(address=st.ip_addresses().map(str), port=st.integers(0, 65535))
def test_the_codec_packs_a_real_server_s_key_as_dests_holds_it(address: str, port: int) -> None:
    """``Dests`` (the core's) and the codec (the kernel's attributes: a 16-byte address,
    IPv4's in the first four, the port in network order, the family) make one key alike:
    a dump's real servers are found by the keys the configuration made."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    raw = socket.inet_pton(family, address).ljust(16, b"\0")
    assert wire_key(raw, port.to_bytes(2, "big"), family) == packed_key(address, port)


@given(
    addresses=st.lists(st.ip_addresses().map(str), min_size=1, max_size=12, unique=True),
    port=st.integers(1, 65535),
    attrs=st.tuples(
        st.integers(0, 65535),
        st.sampled_from([Forwarding.NAT, Forwarding.DR, Forwarding.TUN]),
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**32 - 1),
    ),
    seq=st.integers(0, 2**32 - 1),
    service=st.sampled_from([V6, ServiceKey.inet(Protocol.TCP, "198.51.100.7", 443)]),
)
def test_real_servers_alike_are_packed_as_each_one_is(
    addresses: list[str],
    port: int,
    attrs: tuple[int, Forwarding, int, int],
    seq: int,
    service: ServiceKey,
) -> None:
    """Real servers that share their settings (the common case, packed from what varies
    alone) make the very requests the same real servers make given their settings each:
    every address family, number (wrapping past 2**32), order and setting."""
    from director.dataplane.codec import dest_row_layout, pack_added_rows
    from director.dataplane.netlink import pack_nla

    keys = b"".join(packed_key(address, port) for address in addresses)
    nested = pack_nla(CMD_ATTR_SERVICE, encode_service_key(service))
    layout = dest_row_layout(len(nested))
    rows = range(len(addresses) - 1, -1, -1)
    alike = pack_added_rows(layout, 0x2F, seq, nested, packed=(keys, (attrs,)), rows=rows)
    each = pack_added_rows(
        layout, 0x2F, seq, nested, packed=(keys, (attrs,) * len(addresses)), rows=rows
    )
    assert alike == each
