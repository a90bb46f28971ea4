from __future__ import annotations

import pytest

from director.core.model import (
    SVC_F_ONEPACKET,
    SVC_F_PERSISTENT,
    SVC_F_SCHED1,
    SVC_F_SCHED2,
    Family,
    IpProtocol as Protocol,
    Op,
    OpKind,
    RealServer,
    ServiceConfig,
    ServiceKey,
    canonical_address,
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
