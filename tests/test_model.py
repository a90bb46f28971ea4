from __future__ import annotations

import socket

import pytest
from hypothesis import given, strategies as st

from director.core.counters import DEST_COUNTERS, SERVICE_COUNTERS, Counters
from director.core.dests import DestEdit, Dests
from director.core.model import (
    Family,
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
    canonical_address,
)
from director.core.services import Op, OpKind
from director.dataplane.flags import (
    SVC_F_ONEPACKET,
    SVC_F_PERSISTENT,
    SVC_F_SCHED1,
    SVC_F_SCHED2,
    decode_flags,
    encode_flags,
)


def test_scheduler_flags_round_trip_with_ipvsadm_names() -> None:
    bits = encode_flags("sh", {"sh-fallback", "sh-port"}, persistent=True)
    assert bits == SVC_F_PERSISTENT | SVC_F_SCHED1 | SVC_F_SCHED2
    assert decode_flags("sh", bits & ~SVC_F_PERSISTENT) == {"sh-fallback", "sh-port"}
    assert decode_flags("mh", SVC_F_SCHED1) == {"mh-fallback"}
    assert decode_flags("rr", SVC_F_SCHED1 | SVC_F_ONEPACKET) == {"flag-1", "onepacket"}


def test_a_flag_of_another_scheduler_is_refused_with_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"'sh-port' is not valid with scheduler 'rr'.*flag-1"):
        encode_flags("rr", {"sh-port"}, persistent=False)


def test_addresses_are_canonical() -> None:
    assert canonical_address("2001:DB8:0:0::1") == "2001:db8::1"
    with pytest.raises(ValueError, match="not an IPv4 or IPv6 address"):
        canonical_address("198.51.100.300")


def test_keys_and_ops_read_like_ipvsadm() -> None:
    key = ServiceKey.inet(Protocol.UDP, "2001:db8::1", 53)
    assert key.family is Family.INET6
    assert str(key) == "udp [2001:db8::1]:53"
    assert str(ServiceKey.mark(Family.INET, 9)) == "fwmark 9 ipv4"
    op = Op(OpKind.ADD_DEST, key, dest=RealServer("2001:db8::2", 53, weight=2))
    assert (
        op.describe()
        == "+ real server [2001:db8::2]:53 weight=2 forwarding=nat in udp [2001:db8::1]:53"
    )
    assert Op(OpKind.SET_SERVICE, key, config=ServiceConfig("sh", persistence=60)).describe() == (
        "~ service udp [2001:db8::1]:53 scheduler=sh persistence=60s/32"
    )


# A few addresses and ports, so that real servers collide on a key and share attributes,
# and packed keys whose bytes recur across two keys' boundary (0.0.0.80 and :: hold zeros
# and a port's bytes).
_ADDRESSES = st.sampled_from(
    ["10.0.0.1", "10.0.0.2", "10.0.0.10", "2001:db8::1", "0.0.0.80", "::", "::1f90"]
)
_PORTS = st.sampled_from([80, 8080, 443])
_SERVERS = st.builds(
    RealServer,
    _ADDRESSES,
    _PORTS,
    st.integers(0, 3),
    st.sampled_from(list(Forwarding)),
    st.integers(0, 2),
    st.integers(0, 2),
)


@given(st.lists(_SERVERS, max_size=12), st.lists(st.tuples(_ADDRESSES, _PORTS), max_size=8))
def test_real_servers_kept_compact_read_back_as_a_dict_of_them_would(
    servers: list[RealServer], probes: list[tuple[str, int]]
) -> None:
    """A service's real servers are kept packed (Dests), not a dict of objects: every read
    gives what the dict would have (order, lookups, equality), whatever the order of the
    lookups (the one after the last found is tried first)."""
    reference = {rs.key: rs for rs in servers}
    dests = Dests(servers)
    assert list(dests.items()) == list(reference.items())
    assert list(dests) == list(reference) and list(dests.values()) == list(reference.values())
    assert len(dests) == len(reference)
    assert dict(dests) == reference and {**dests} == reference
    assert dests == reference and reference == dests and Dests.of(reference) == dests
    for key in [*probes, *reversed(list(reference))]:
        assert (key in dests) == (key in reference)
        assert dests.get(key) == reference.get(key)
        if key in reference:
            assert dests[key] == reference[key]
        else:
            with pytest.raises(KeyError):
                dests[key]
    assert ("10.0.0.1", 80, 1) not in dests and 80 not in dests
    assert (80, 80) not in dests and (80, 443) not in dests  # a port is not an address
    assert ("80", 80) not in dests and ("10.0.0.1", 65536) not in dests
    assert ("10.0.0.1", -1) not in dests
    # Equal in any order, as a dict is; unequal when any real server differs.
    assert Dests(reversed(list(reference.values()))) == dests
    if reference:
        first = next(iter(reference.values()))
        changed = Dests.of({**reference, first.key: first._replace(weight=first.weight + 1)})
        assert changed != dests
        assert changed != reference


def test_real_servers_of_no_address_are_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="'80' is not an IPv4 or IPv6 address"):
        Dests([RealServer("80", 80)])
    with pytest.raises(ValueError, match="not an IPv4"):
        Dests.of({("backend-1", 80): RealServer("backend-1", 80)})


@given(
    st.lists(st.tuples(st.sampled_from(["add", "set", "remove"]), _SERVERS), max_size=20),
    st.lists(_SERVERS, max_size=6),
)
def test_an_edit_of_real_servers_keeps_the_kernels_list_order(
    ops: list[tuple[str, RealServer]], start: list[RealServer]
) -> None:
    """Real servers changed one operation at a time come out in the order of the kernel's
    list: an added one at the head, a changed one where it was (a missing one at the tail),
    a removed one gone."""
    model = list({rs.key: rs for rs in start}.values())  # the kernel's list, head first
    edit = DestEdit(Dests(model))
    for kind, rs in ops:
        at = next((i for i, have in enumerate(model) if have.key == rs.key), None)
        if kind == "add":
            if at is not None:
                del model[at]
            model.insert(0, rs)
            edit.add(rs)
        elif kind == "set":
            if at is None:
                model.append(rs)
            else:
                model[at] = rs
            edit.set(rs)
        else:
            if at is not None:
                del model[at]
            edit.remove(rs.key)
        assert edit.get(rs.key) == next((m for m in model if m.key == rs.key), None)
    assert list(edit.done().values()) == model


_U64 = st.integers(0, 2**64 - 1)
_COUNTED = st.tuples(
    st.sampled_from(["10.0.0.1", "192.0.2.255", "2001:db8::1", "::ffff:10.0.0.1", "::"]),
    st.integers(0, 65535),
    st.lists(_U64, min_size=9, max_size=9),  # weight, conns, and the five totals
)


@given(
    st.lists(
        st.tuples(
            _U64.map(lambda n: n % 65536),
            st.lists(_COUNTED, max_size=5),
            st.lists(_U64, min_size=5, max_size=5),
            st.booleans(),
        ),
        max_size=6,
    )
)
def test_counters_in_columns_read_back_what_was_added(
    services: list[tuple[int, list[tuple[str, int, list[int]]], list[int], bool]],
) -> None:
    """What a scrape reads: each service's real servers, and no other's, with every figure
    to 64 bits; a service whose read failed leaves nothing behind."""
    counters, expected = Counters(), {}
    for port, dests, totals, fails in services:
        key = ServiceKey.inet(Protocol.TCP, "198.51.100.1", port)
        rows = {}
        for address, dport, figures in dests:
            family = Family.of(address)
            values = [dport, *figures, family]
            counters.add_dest(socket.inet_pton(family, address), values)
            figured = dict(zip(DEST_COUNTERS, values, strict=True))
            rows[(canonical_address(address), dport)] = figured
        if fails or key in expected:
            counters.drop_open()
            continue
        counters.add_service(key, totals)
        expected[key] = (dict(zip(SERVICE_COUNTERS, totals, strict=True)), rows)
    assert counters.table() == expected
    assert len(counters) == len(expected)


def test_counters_refuse_a_row_of_the_wrong_width_and_keep_the_rest() -> None:
    counters = Counters()
    counters.add_dest(socket.inet_pton(socket.AF_INET, "10.0.0.1"), [80, *[1] * 9, 2])
    with pytest.raises(ValueError, match="11 figures"):
        counters.add_dest(b"\0" * 16, [80, 1])
    with pytest.raises(OverflowError):  # a negative figure, late in the row
        counters.add_dest(b"\0" * 16, [80, 1, 1, 1, 1, 1, 1, 1, 1, -1, 2])
    with pytest.raises(ValueError, match="5 figures"):
        counters.add_service(ServiceKey.inet(Protocol.TCP, "198.51.100.1", 80), [1])
    counters.add_service(ServiceKey.inet(Protocol.TCP, "198.51.100.1", 80), [1] * 5)
    assert next(iter(counters.table().values()))[1] == {
        ("10.0.0.1", 80): dict(zip(DEST_COUNTERS, [80, *[1] * 9, 2], strict=True))
    }
