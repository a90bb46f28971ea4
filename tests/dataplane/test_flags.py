"""A scheduler's flags as the kernel's bits, and back, under ipvsadm's names."""

from __future__ import annotations

import pytest

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
