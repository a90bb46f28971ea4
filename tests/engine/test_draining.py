"""Draining: a removed real server drains until its connections end or its timeout."""

from __future__ import annotations

from typing import Any

import pytest

from director.core.model import ServiceKey
from director.core.plan import build_plan
from director.dataplane.fake import FakeIpvs
from director.engine.draining import Draining
from lab.wait import Clock
from tests.enginelab import OWN, TCP, UDP, A, B, vs


def test_a_removed_real_server_drains_until_its_connections_end() -> None:
    ipvs, clock = FakeIpvs(), Clock()
    drains = Draining(ipvs, clock, timeout=60)
    actual = vs(TCP, A, B)
    ipvs.apply(build_plan({TCP: actual}, {}, OWN).ops)  # what the kernel holds
    ipvs.set_connections(TCP, B, active=3, inactive=0)
    out = drains.apply(TCP, vs(TCP, A), actual, frozenset())
    assert out.real_servers[B].weight == 0 and drains.waiting == {TCP: {B: 160.0}}
    ipvs.set_connections(TCP, B, active=0, inactive=0)
    out = drains.apply(TCP, vs(TCP, A), actual, frozenset())
    assert set(out.real_servers) == {A} and drains.waiting == {}


def test_a_drain_ends_at_its_timeout_and_udp_does_not_drain() -> None:
    ipvs, clock = FakeIpvs(), Clock()
    drains = Draining(ipvs, clock, timeout=5)
    drains.waiting[TCP] = {B: clock.now + 5}
    clock.now += 5
    assert set(drains.apply(TCP, vs(TCP, A), vs(TCP, A, B), frozenset()).real_servers) == {A}
    # A terminating UDP endpoint goes at once: there is no connection to finish.
    out = drains.apply(UDP, vs(UDP, A, B), vs(UDP, A, B), frozenset({(UDP, B)}))
    assert set(out.real_servers) == {A} and drains.waiting == {}


def test_nothing_to_drain_leaves_the_service_as_it_is_and_asks_the_kernel_nothing() -> None:
    """A first start (nothing in the kernel), and a resync that finds the same real servers
    in any order, drain nothing: the desired service goes through as it is, with no
    connection count read. The shortcut that skips the work must still see a real server the
    kernel holds and the service no longer has (drained), and UDP's (removed at once)."""

    class Unread(FakeIpvs):
        def read_dest_states(self, key: ServiceKey) -> Any:
            raise AssertionError("the kernel's connections were read")

    drains = Draining(Unread(), Clock(), timeout=60)
    wanted = vs(TCP, A, B)
    assert drains.apply(TCP, wanted, None, frozenset()) is wanted
    assert drains.apply(TCP, wanted, vs(TCP, B, A), frozenset()) is wanted  # any order
    assert drains.apply(UDP, vs(UDP, A), vs(UDP, A, B), frozenset()).real_servers == {
        A: vs(UDP, A).real_servers[A]
    }  # UDP: removed at once, not drained
    # Removed from what the kernel holds: drained (weight 0), so the kernel is asked.
    with pytest.raises(AssertionError, match="connections were read"):
        drains.apply(TCP, vs(TCP, A), wanted, frozenset())
