"""The domain's values: canonical addresses, keys and operations as ipvsadm reads them."""

from __future__ import annotations

import pytest

from director.core.model import canonical_address


def test_addresses_are_canonical() -> None:
    assert canonical_address("2001:DB8:0:0::1") == "2001:db8::1"
    with pytest.raises(ValueError, match="not an IPv4 or IPv6 address"):
        canonical_address("198.51.100.300")
