"""Virtual services' keys and the operations on them read as ipvsadm writes them."""

from __future__ import annotations

from director.core.model import (
    Family,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.core.services import Op, OpKind


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
