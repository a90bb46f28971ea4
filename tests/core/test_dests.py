"""A service's real servers kept packed: read back as a dict of them would, edited in the
kernel's list order, and one of no address refused with a reason."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from director.core.dests import DestEdit, Dests
from director.core.model import Forwarding, RealServer

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


def test_the_forwarding_methods_are_read_without_unpacking_a_real_server() -> None:
    """What the full-NAT rule asks of every static service: every method in use, whether
    the real servers share one tuple of attributes or each has its own."""
    shared = Dests([RealServer(f"192.0.2.{i}", 80, 1, Forwarding.FULLNAT) for i in range(1, 4)])
    assert shared.forwardings() == {Forwarding.FULLNAT}
    mixed = Dests(
        [
            RealServer("192.0.2.1", 80, 1, Forwarding.NAT),
            RealServer("192.0.2.2", 80, 2, Forwarding.TUN),
        ]
    )
    assert mixed.forwardings() == {Forwarding.NAT, Forwarding.TUN}
    assert Dests().forwardings() == frozenset()


@given(st.lists(_SERVERS, max_size=12), st.randoms(use_true_random=False))
def test_real_servers_put_in_another_order_are_the_same_ones_in_that_order(
    servers: list[RealServer], shuffler: object
) -> None:
    """The kernel's order of a service (``as_applied``) moves the packed rows as they are:
    every real server, with its own weight, forwarding and thresholds, in the order asked."""
    import random

    assert isinstance(shuffler, random.Random)
    reference = {rs.key: rs for rs in servers}
    order = list(reference)
    shuffler.shuffle(order)
    moved = Dests(servers).reordered(order)
    assert list(moved) == order
    assert list(moved.values()) == [reference[key] for key in order]
    assert moved.same_order(Dests.of({key: reference[key] for key in order}))
    if order:
        with pytest.raises(ValueError, match="every real server once"):
            Dests(servers).reordered(order[1:])
    if len(order) > 1:
        with pytest.raises(ValueError, match="every real server once"):
            Dests(servers).reordered([order[0], *order[:-1]])


V4_TEXT = st.tuples(*[st.integers(0, 255)] * 4).map(lambda o: ".".join(map(str, o)))
V6_TEXT = st.ip_addresses(v=6).map(str)


@given(
    servers=st.lists(
        st.tuples(st.one_of(V4_TEXT, V4_TEXT, V6_TEXT), st.integers(0, 65535)), max_size=40
    )
)
def test_hash_rows_are_the_order_of_the_address_text_then_the_port(
    servers: list[tuple[str, int]],
) -> None:
    """What two directors must agree on (a hashing scheduler's list): by the canonical text
    of the address, then the port; the IPv4 shortcut (no text made) gives that order, as
    the text does when an IPv6 address is among them."""
    dests = Dests.of(
        [RealServer(a, p, i % 3, Forwarding.NAT) for i, (a, p) in enumerate(dict.fromkeys(servers))]
    )
    keys = list(dests)
    assert [keys[row] for row in dests.hash_rows()] == sorted(keys)
    ordered = dests.hash_ordered()  # None: in that order already
    assert list((ordered or dests).items()) == sorted(dests.items())
    assert (ordered is None) == (keys == sorted(keys))


def test_hash_rows_put_1_before_10_before_2() -> None:
    addresses = ["10.0.0.2", "10.0.0.10", "10.0.0.1", "9.0.0.1", "100.0.0.1", "10.0.0.100"]
    dests = Dests.of([RealServer(a, 80, 1, Forwarding.NAT) for a in addresses])
    keys = list(dests)
    shown = [keys[row][0] for row in dests.hash_rows()]
    assert (
        shown
        == sorted(addresses)
        == ["10.0.0.1", "10.0.0.10", "10.0.0.100", "10.0.0.2", "100.0.0.1", "9.0.0.1"]
    )
