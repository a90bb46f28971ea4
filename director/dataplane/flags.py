"""A virtual service's flags as the kernel's bits (IP_VS_SVC_F_*, include/uapi/linux/ip_vs.h).

The core knows a flag by name, as a scheduler slot or onepacket (``director.core.model``);
only what talks to the kernel turns names into bits and back.
"""

from __future__ import annotations

from collections.abc import Iterable

from director.core.model import ONEPACKET, ServiceConfig, flag_slots, slot_names

SVC_F_PERSISTENT = 0x0001
SVC_F_HASHED = 0x0002  # kernel-internal, never configured
SVC_F_ONEPACKET = 0x0004
SVC_F_SCHED1 = 0x0008
SVC_F_SCHED2 = 0x0010
SVC_F_SCHED3 = 0x0020
SCHED_BITS = (SVC_F_SCHED1, SVC_F_SCHED2, SVC_F_SCHED3)  # slot 0, 1, 2


def encode_flags(scheduler: str, flags: Iterable[str], persistent: bool) -> int:
    """Flag names -> the kernel's service flag bits. Raises ValueError naming a bad flag."""
    slots, onepacket = flag_slots(scheduler, flags)
    bits = SVC_F_PERSISTENT if persistent else 0
    for slot in slots:
        bits |= SCHED_BITS[slot]
    return bits | (SVC_F_ONEPACKET if onepacket else 0)


def decode_flags(scheduler: str, bits: int) -> frozenset[str]:
    """The kernel's bits -> the names it reads back (persistence is not a flag name)."""
    names = slot_names(scheduler)
    out = {names[i] for i, bit in enumerate(SCHED_BITS) if bits & bit}
    if bits & SVC_F_ONEPACKET:
        out.add(ONEPACKET)
    return frozenset(out)


def config_bits(config: ServiceConfig) -> int:
    """A service's configuration as the flags word it is sent with."""
    return encode_flags(config.scheduler, config.flags, config.persistence > 0)
