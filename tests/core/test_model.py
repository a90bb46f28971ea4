"""The domain's values: canonical addresses, keys and operations as ipvsadm reads them."""

from __future__ import annotations

import pytest

from director.core.model import (
    Family,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
    canonical_address,
)
from director.core.services import Op, OpKind


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
