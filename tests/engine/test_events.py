"""The watchers' triples become typed events."""

from __future__ import annotations

from director.core.checks import CheckSpec, Target
from director.engine.events import (
    LeaderChanged,
    Listed,
    ObjectChanged,
    TargetChecked,
    VrrpChanged,
    WatchState,
    from_watch,
)


def test_every_watcher_triple_becomes_its_typed_event() -> None:
    target = Target("192.0.2.1", 80, CheckSpec())
    assert from_watch("health", "DOWN", target) == TargetChecked(target, up=False)
    assert from_watch("vrrp", "MASTER", None) == VrrpChanged("MASTER")
    assert from_watch("lease", "LEADER", None) == LeaderChanged(True)
    lost = WatchState("nodes", connected=False, reason="timed out")
    assert from_watch("nodes", "DISCONNECTED", "timed out") == lost
    assert from_watch("services", "RELIST", ("a", "b")) == Listed("services", ["a", "b"])
    assert from_watch("services", "ADDED", "svc") == ObjectChanged("services", "ADDED", "svc")
