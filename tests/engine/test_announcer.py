"""The VIP set is announced when it changes, and only then."""

from __future__ import annotations

from director.core.model import ServiceKey
from director.engine.announcer import VipAnnouncer
from director.engine.hooks import Hooks
from tests.enginelab import TCP, UDP


def test_the_vip_set_is_announced_when_it_changes_and_only_then() -> None:
    hooks = Hooks()
    vips = VipAnnouncer(hooks)
    heard: list[frozenset[str]] = []
    vips.update([TCP])  # nobody to tell yet: nothing is lost, it is told once someone listens
    hooks.announce = heard.append
    vips.update([TCP, UDP, ServiceKey.mark(TCP.family, 100)])  # a mark has no address
    assert heard == [frozenset({"198.51.100.10"})]
    vips.keys_changed()
    vips.update([TCP])  # same address: keepalived is not reloaded
    assert heard == [frozenset({"198.51.100.10"})]
    vips.keys_changed()
    vips.update([])
    assert heard == [frozenset({"198.51.100.10"}), frozenset()]
