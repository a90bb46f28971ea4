"""The loop's rhythm: its clock, when the next full resync and drain check are due, the
pause after steps that failed, and the heartbeat (``/healthz`` and systemd's watchdog)."""

from __future__ import annotations

import time
from collections.abc import Callable

from director.engine.hooks import Hooks

MAX_BACKOFF = 5.0  # seconds between failing steps, at most


class Pace:
    def __init__(self, hooks: Hooks, clock: Callable[[], float] = time.monotonic) -> None:
        self.hooks = hooks
        self.clock = clock
        self.last_step = time.monotonic()  # /healthz: the loop is alive
        self._next_resync = 0.0
        self._next_drain_check = 0.0
        self._failures = 0  # steps in a row that raised

    def pause(self) -> None:
        """Before a step: wait a little longer after each step that failed."""
        if self._failures:
            time.sleep(min(0.1 * 2**self._failures, MAX_BACKOFF))

    def stepped(self, ok: bool) -> None:
        self._failures = 0 if ok else min(self._failures + 1, 6)

    def beat(self) -> None:
        self.last_step = time.monotonic()

    def after_step(self) -> None:
        if self.hooks.on_step is not None:
            self.hooks.on_step()

    def resync_due(self, now: float) -> bool:
        return now >= self._next_resync

    def resynced(self, period: float) -> None:
        self._next_resync = self.clock() + period

    def drain_check_due(self, now: float) -> bool:
        """Once a second at most, while drains wait."""
        if now < self._next_drain_check:
            return False
        self._next_drain_check = now + 1.0
        return True
