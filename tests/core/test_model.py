"""The domain's values: canonical addresses, keys and operations as ipvsadm reads them."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, strategies as st

from director.core.model import Family, IpProtocol, ServiceKey, canonical_address


def test_addresses_are_canonical() -> None:
    assert canonical_address("2001:DB8:0:0::1") == "2001:db8::1"
    with pytest.raises(ValueError, match="not an IPv4 or IPv6 address"):
        canonical_address("198.51.100.300")


_KEYS = st.one_of(
    st.builds(
        ServiceKey.inet,
        st.sampled_from(list(IpProtocol)),
        st.sampled_from(["198.51.100.1", "198.51.100.2", "2001:db8::1"]),
        st.integers(1, 3),
    ),
    st.builds(ServiceKey.mark, st.sampled_from(list(Family)), st.integers(1, 3)),
)


@given(st.lists(_KEYS, max_size=12))
def test_firewall_mark_and_address_services_sort_together(keys: list[ServiceKey]) -> None:
    """A plan lists services in order: a file with a firewall-mark service beside an address
    service of the same family once made every step of the loop fail (None < TCP)."""
    ordered = sorted(keys)
    assert all(a <= b and not a > b for a, b in itertools.pairwise(ordered))
    assert sorted(reversed(ordered)) == ordered
    marks = [k for k in ordered if k.family is Family.INET and k.is_fwmark]
    others = [k for k in ordered if k.family is Family.INET and not k.is_fwmark]
    if marks and others:
        assert ordered.index(marks[-1]) < ordered.index(others[0]), "marks first in a family"
