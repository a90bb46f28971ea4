"""The loop's rhythm: a longer pause after each step that failed (capped, and gone after a
good one), a full resync when its period has passed, drains checked once a second at most,
and the step hook called after every step."""

from __future__ import annotations

import pytest

from director.engine import pace as pacing
from director.engine.hooks import Hooks
from director.engine.pace import MAX_BACKOFF, Pace


def test_failing_steps_pause_longer_each_time_up_to_the_cap_and_a_good_step_ends_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(pacing.time, "sleep", slept.append)
    pace = Pace(Hooks())
    pace.pause()
    assert slept == [], "no pause while steps succeed"
    for _ in range(8):
        pace.stepped(ok=False)
        pace.pause()
    assert slept[:3] == [0.2, 0.4, 0.8]
    assert max(slept) == MAX_BACKOFF and slept[-1] == MAX_BACKOFF
    pace.stepped(ok=True)
    pace.pause()
    assert len(slept) == 8


def test_a_resync_is_due_once_its_period_has_passed_on_the_loops_clock() -> None:
    now = [100.0]
    pace = Pace(Hooks(), clock=lambda: now[0])
    assert pace.resync_due(now[0]), "the first resync is due at once"
    pace.resynced(period=30.0)
    assert not pace.resync_due(129.9)
    assert pace.resync_due(130.0)


def test_drains_are_checked_once_a_second_at_most() -> None:
    pace = Pace(Hooks())
    assert pace.drain_check_due(10.0)
    assert not pace.drain_check_due(10.5)
    assert pace.drain_check_due(11.0)


def test_the_step_hook_hears_every_step_and_the_heartbeat_moves() -> None:
    heard: list[int] = []
    hooks = Hooks()
    hooks.on_step = lambda: heard.append(1)
    pace = Pace(hooks)
    before = pace.last_step
    pace.after_step()
    pace.after_step()
    pace.beat()
    assert heard == [1, 1] and pace.last_step >= before
