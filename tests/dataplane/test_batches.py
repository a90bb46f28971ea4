"""Operations as the datagrams the kernel is sent: numbered, acked once a datagram, each
real server's message (packed by the fast path) what the general encoder makes of it."""

from __future__ import annotations

import struct
from types import SimpleNamespace

from hypothesis import given, settings, strategies as st

from director.core.added import AddedService, OpChain
from director.core.model import (
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.core.services import Op, OpKind, VirtualService
from director.dataplane.batches import encoded_batches
from director.dataplane.codec import encode_op
from director.dataplane.genl import BATCH_BYTES
from director.dataplane.interface import scheduler_refusals
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


def added(key: ServiceKey, count: int, first: int, forwarding: Forwarding) -> AddedService:
    v6 = key.family.value == 10
    servers = [
        RealServer(
            f"2001:db8:200::{i:x}" if v6 else f"10.0.{i // 250}.{i % 250 + 1}",
            1000 + i % 7,
            weight=i % 3,
            forwarding=forwarding if i % 5 == 0 else Forwarding.NAT,
            upper_threshold=i % 2,
        )
        for i in range(first, first + count)
    ]
    return AddedService(key, VirtualService.build(key, ServiceConfig("wlc"), servers, "x"))


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(
        st.tuples(st.integers(0, 700), st.integers(0, 400), st.booleans(), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    skip=st.sets(st.integers(0, 3000), max_size=6),
    start=st.sampled_from([0, 41, 0xFFFFFE00]),
)
def test_added_services_packed_from_their_rows_are_the_datagrams_their_ops_make(
    shape: list[tuple[int, int, bool, bool]], skip: set[int], start: int
) -> None:
    """An ``OpChain`` of added services (some with ``fullnat`` real servers, refused one
    by one, some with skipped operations) among other parts: the same datagrams, positions
    and sequence numbers as the operations themselves, made one by one."""
    chain = OpChain()
    for n, (count, first, fullnat, listed) in enumerate(shape):
        part = added(KEYS[n % 2], count, first, Forwarding.FULLNAT if fullnat else Forwarding.DR)
        chain.append(list(part) if listed else part)
        chain.append([Op(OpKind.SET_SERVICE, KEYS[n % 2], config=ServiceConfig("rr"))])
    refused = set(scheduler_refusals(chain, ["wlc", "rr"]))
    assert refused == set(scheduler_refusals(list(chain), ["wlc", "rr"]))
    skipped = refused | skip
    fast, slow = SimpleNamespace(seq=start), SimpleNamespace(seq=start)
    assert list(encoded_batches(chain, skipped, FAMILY, fast)) == list(
        encoded_batches(list(chain), skipped, FAMILY, slow)
    )
    assert fast.seq == slow.seq


def test_an_added_service_whose_scheduler_is_refused_has_each_real_server_refused() -> None:
    part = added(KEYS[0], 3, 0, Forwarding.NAT)
    chain = OpChain([[Op(OpKind.SET_SERVICE, KEYS[1], config=ServiceConfig("rr"))], part])
    refusals = scheduler_refusals(chain, ["rr"])
    assert sorted(refusals) == [1, 2, 3, 4]
    assert [refusals[i].errno for i in (1, 2, 3, 4)] == ["ENOENT", "ESRCH", "ESRCH", "ESRCH"]
    assert refusals == scheduler_refusals(list(chain), ["rr"])
