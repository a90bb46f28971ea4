"""A service the kernel lacks, as operations made only when asked for, and a chunk of whole
services' operations as one sequence: each reads as the list of operations it stands for."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, strategies as st

from director.core.added import AddedService, OpChain, added_whole, kinds_counted, service_ops
from director.core.dests import Dests, hash_order
from director.core.model import (
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.core.plan import as_applied, plan_service
from director.core.services import Op, OpKind, VirtualService

WEB = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
DNS = ServiceKey.inet(Protocol.UDP, "2001:db8::53", 53)

addresses = st.one_of(
    st.builds("10.{}.{}.{}".format, *(st.integers(0, 255) for _ in range(3))),
    st.builds("2001:db8::{:x}".format, st.integers(1, 0xFFFF)),
)
servers = st.builds(
    RealServer,
    addresses,
    st.integers(0, 65535),
    st.integers(0, 3),
    st.sampled_from([Forwarding.NAT, Forwarding.DR, Forwarding.TUN]),
    st.sampled_from([0, 10]),
    st.sampled_from([0, 5]),
)
service_servers = st.lists(servers, max_size=40, unique_by=lambda rs: rs.key)


def service(key: ServiceKey, real_servers: list[RealServer]) -> VirtualService:
    return VirtualService.build(key, ServiceConfig("wlc"), real_servers, origin="static/web")


@given(service_servers)
def test_an_added_service_is_added_then_its_real_servers_last_in_the_kernels_list_first(
    real_servers: list[RealServer],
) -> None:
    desired = service(WEB, real_servers)
    added = AddedService(WEB, desired)
    in_kernel_order = [desired.real_servers[key] for key in hash_order(desired.real_servers)]
    expected = [Op(OpKind.ADD_SERVICE, WEB, config=desired.config, origin="static/web")]
    expected += [
        Op(OpKind.ADD_DEST, WEB, dest=rs, origin="static/web") for rs in in_kernel_order[::-1]
    ]
    assert list(added) == expected
    assert len(added) == len(expected)
    assert [added[i] for i in range(-len(expected), len(expected))] == expected * 2
    assert added[1:4] == expected[1:4] and added[::-2] == expected[::-2]
    for outside in (len(expected), -len(expected) - 1):
        with pytest.raises(IndexError):
            added[outside]


@given(service_servers)
def test_an_added_service_is_cached_as_the_kernel_then_holds_it(
    real_servers: list[RealServer],
) -> None:
    desired = service(WEB, real_servers)
    applied = AddedService(WEB, desired).applied
    assert applied == desired
    assert list(applied.real_servers) == hash_order(desired.real_servers)
    assert Dests.of(applied.real_servers).same_order(as_applied(desired, None).real_servers)


def test_a_service_already_in_the_kernels_order_is_cached_as_itself() -> None:
    desired = service(WEB, [RealServer("10.0.0.1", 80), RealServer("10.0.0.10", 80)])
    assert AddedService(WEB, desired).applied is desired
    unsorted = service(WEB, [RealServer("10.0.0.2", 80), RealServer("10.0.0.10", 80)])
    assert list(AddedService(WEB, unsorted).applied.real_servers) == [
        ("10.0.0.10", 80),
        ("10.0.0.2", 80),
    ]  # the text's order, as hash_order and the other directors of a fleet keep it


def test_fullnat_real_servers_make_an_added_service_not_plain() -> None:
    nat = service(WEB, [RealServer("10.0.0.1", 80)])
    full = service(WEB, [RealServer("10.0.0.1", 80, forwarding=Forwarding.FULLNAT)])
    assert AddedService(WEB, nat).plain and not AddedService(WEB, full).plain


@given(service_servers, st.sampled_from(["wlc", "rr", "sh", "dh", "mh"]))
def test_a_service_the_kernel_lacks_is_added_as_onto_an_empty_one_whatever_its_scheduler(
    real_servers: list[RealServer], scheduler: str
) -> None:
    """sh, dh and mh choose from a table built in the order of the kernel's list: added
    whole, a hashing service's list is in hash_order as when its real servers are added to
    it empty. An mh service with a quiesced real server is planned apart (added live, then
    quiesced: mh keeps its last weight above 0), and only it."""
    config = ServiceConfig(scheduler)
    desired = VirtualService.build(WEB, config, real_servers, origin="static/web")
    empty = VirtualService.build(WEB, config, [], origin="static/web")
    add = Op(OpKind.ADD_SERVICE, WEB, config=config, origin="static/web")
    assert plan_service(WEB, desired, None) == [add, *plan_service(WEB, desired, empty)]
    quiesced = any(rs.weight == 0 for rs in real_servers)
    assert added_whole(desired) is not (scheduler == "mh" and quiesced)
    if added_whole(desired):
        assert AddedService(WEB, desired).applied == as_applied(desired, None)
        assert list(AddedService(WEB, desired).applied.real_servers) == list(
            as_applied(desired, None).real_servers
        )


def parts_strategy() -> st.SearchStrategy[list[list[Op] | AddedService]]:
    listed = st.lists(
        st.builds(
            Op,
            st.sampled_from(list(OpKind)),
            st.sampled_from([WEB, DNS]),
            st.none(),
            st.one_of(st.none(), servers),
        ),
        max_size=5,
    )
    added = st.builds(lambda rs: AddedService(DNS, service(DNS, rs)), service_servers)
    return st.lists(st.one_of(listed, added), max_size=8)


@given(parts_strategy())
def test_a_chain_of_parts_reads_as_their_operations_one_after_another(
    parts: list[list[Op] | AddedService],
) -> None:
    chain = OpChain(parts)
    flat = [op for part in parts for op in part]
    assert list(chain) == flat and len(chain) == len(flat)
    assert [chain[i] for i in range(-len(flat), len(flat))] == flat * 2
    assert chain[2:7] == flat[2:7] and chain[::-3] == flat[::-3]
    with pytest.raises(IndexError):
        chain[len(flat)]
    assert [start for start, _ in chain.placed()] == [
        sum(len(p) for p in parts[:n]) for n in range(len(parts))
    ]
    assert kinds_counted(chain) == Counter(op.kind for op in flat) == kinds_counted(flat)
    assert list(service_ops(chain)) == [op for op in flat if op.config is not None]
