"""Operations as the datagrams the kernel is sent: numbered, acked once a datagram, each
real server's message (packed by the fast path) what the general encoder makes of it."""

from __future__ import annotations

import struct
from types import SimpleNamespace

from hypothesis import given, settings, strategies as st

from director.core.model import IpProtocol as Protocol, RealServer, ServiceConfig, ServiceKey
from director.core.services import Op, OpKind
from director.dataplane.batches import encoded_batches
from director.dataplane.codec import encode_op
from director.dataplane.genl import BATCH_BYTES
from director.dataplane.netlink import NLM_F_ACK, split_messages

FAMILY = 0x1D  # any generic netlink family id: the batches carry it as each message's type
KEYS = [
    ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80),
    ServiceKey.inet(Protocol.UDP, "2001:db8:100::53", 53),
]


def ops_for(dests: int, deleted: int) -> list[Op]:
    ops: list[Op] = []
    for key in KEYS:
        v6 = key.family.value == 10
        servers = [
            RealServer(f"2001:db8:200::{i + 1:x}" if v6 else f"10.0.{i // 250}.{i % 250 + 1}", 53)
            for i in range(dests)
        ]
        ops.append(Op(OpKind.ADD_SERVICE, key, config=ServiceConfig("wlc")))
        ops += [Op(OpKind.ADD_DEST, key, dest=rs) for rs in servers]
        ops += [Op(OpKind.DEL_DEST, key, dest=rs) for rs in servers[:deleted]]
        ops.append(Op(OpKind.SET_SERVICE, key, config=ServiceConfig("rr")))
    return ops


@settings(max_examples=25, deadline=None)
@given(
    dests=st.integers(0, 900),
    deleted=st.integers(0, 5),
    skip=st.sets(st.integers(0, 2000), max_size=20),
    start=st.sampled_from([0, 41, 0xFFFFFFF0]),
)
def test_every_op_but_the_skipped_is_sent_once_in_order_and_each_datagram_acked_once(
    dests: int, deleted: int, skip: set[int], start: int
) -> None:
    ops = ops_for(dests, min(deleted, dests))
    numbering = SimpleNamespace(seq=start)
    sent: list[int] = []
    expected_seq = (start + 1) & 0xFFFFFFFF
    for data, indices, first in encoded_batches(ops, skip, FAMILY, numbering):
        assert len(data) <= BATCH_BYTES
        assert first == expected_seq
        messages = split_messages(data)
        assert len(messages) == len(indices)
        for n, ((kind, flags, seq, start_at, end), index) in enumerate(
            zip(messages, indices, strict=True)
        ):
            assert kind == FAMILY and seq == (first + n) & 0xFFFFFFFF
            assert bool(flags & NLM_F_ACK) == (n == len(messages) - 1)  # only the last
            cmd, payload = encode_op(ops[index])
            assert struct.unpack_from("=B", data, start_at)[0] == cmd
            assert data[start_at + 4 : end] == payload, ops[index].describe()
        sent += indices
        expected_seq = (first + len(indices)) & 0xFFFFFFFF
    assert sent == [i for i in range(len(ops)) if i not in skip]
    assert numbering.seq == (start + len(sent)) & 0xFFFFFFFF
