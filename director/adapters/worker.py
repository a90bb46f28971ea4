"""A thread that installs the latest of something (a VIP set, a route table), off the loop.

Installing can take a while (a daemon validating its configuration), and only the newest
value matters: the control loop hands values in and never waits; a value handed in while
another is being installed replaces whatever was still pending.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from director.logs import event

T = TypeVar("T")
log = logging.getLogger("director.worker")


class LatestWins(Generic[T]):
    name = "worker"

    def __init__(self) -> None:
        self._pending: T | None = None
        self._cv = threading.Condition()
        self._stop = False
        self.installed: T | None = None  # the last value installed
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def install(self, value: T) -> bool:
        """Make ``value`` live (on the worker's thread); False when it was refused (and the
        refusal logged). An exception is logged too; either way the old value stays live."""
        raise NotImplementedError

    def idle(self) -> None:
        """Called on the worker's thread when nothing was handed in for ``idle_seconds``."""

    idle_seconds: float | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        if self._thread.ident is not None:
            self._thread.join(timeout=30)

    def submit(self, value: T) -> None:
        with self._cv:
            self._pending = value
            self._cv.notify()

    def settle(self, timeout: float = 30.0) -> bool:
        """Wait until the latest value is installed (tests, the demo)."""
        with self._cv:
            return self._cv.wait_for(lambda: self._pending is None, timeout)

    def _run(self) -> None:
        while True:
            with self._cv:
                woke = self._cv.wait_for(
                    lambda: self._pending is not None or self._stop, self.idle_seconds
                )
                if self._stop:
                    return
                value = self._pending
            if not woke or value is None:
                self._guard(self.idle)
                continue
            if self._guard(self.install, value) is True:
                self.installed = value
            with self._cv:
                if self._pending is value:
                    self._pending = None
                self._cv.notify_all()

    def _guard(self, action: Callable[..., object], *args: object) -> object:
        try:
            return action(*args)
        except Exception as exc:  # a full disk must not stop the thread
            event(log, f"{self.name}.install_failed", level=logging.ERROR, reason=repr(exc))
            return False
