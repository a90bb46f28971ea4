"""The kernel's counters in columns: what was added reads back, a wrong row changes nothing."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given, strategies as st

from director.core.counters import DEST_COUNTERS, SERVICE_COUNTERS, Counters
from director.core.model import Family, IpProtocol as Protocol, ServiceKey, canonical_address

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
