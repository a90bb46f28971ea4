"""Polling helpers shared by the tests, the demo and the benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(probe: Callable[[], T], timeout: float = 30.0, what: str = "condition") -> T:
    """Poll until ``probe`` returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def wait_for(probe: Callable[[], object], timeout: float, step: float = 0.01) -> float | None:
    """Seconds until ``probe()`` is true, or None after ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if probe():
            return time.monotonic() - started
        time.sleep(step)
    return None


class Clock:
    """A clock the test moves by hand (`clock.now += 5`), for code that takes `clock=`."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def stop_group(proc: subprocess.Popen[bytes], grace: float = 60.0) -> None:
    """SIGTERM to ``proc``'s process group (started with ``start_new_session``), SIGKILL if it
    is still there after ``grace`` seconds; returns once it has exited (at once if the whole
    group is gone already)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        proc.wait()
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
