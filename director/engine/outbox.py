"""Cluster writes (Service status, Events) on their own thread, so the loop never waits on
the API server. The latest write per target wins; a failed one is retried with backoff."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from director.engine.ports import ClusterWriter
from director.logs import event

log = logging.getLogger("director.controller")


class Outbox:
    def __init__(self, writer: ClusterWriter) -> None:
        self.writer = writer
        self._pending: dict[tuple[str, ...], Callable[[], None]] = {}
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="cluster-writer", daemon=True)
        self._thread.start()

    def put(self, target: tuple[str, ...], write: Callable[[], None]) -> None:
        with self._cv:
            self._pending[target] = write
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()

    def idle(self) -> bool:
        with self._cv:
            return not self._pending

    def _run(self) -> None:
        delay = 0.5
        while True:
            with self._cv:
                while not self._pending and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
                target, write = next(iter(self._pending.items()))
            try:
                write()
            except Exception as exc:  # the API may be down: retried, unless it is gone
                reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                if getattr(exc, "status", None) in (404, 410):  # the Service was deleted
                    event(log, "kube.write_dropped", target="/".join(target), reason=reason)
                else:
                    event(log, "kube.write_failed", level=logging.WARNING,
                          target="/".join(target), reason=reason,
                          retry_in=f"{delay:.1f}s")  # fmt: skip
                    time.sleep(delay)
                    delay = min(delay * 2, 30.0)
                    continue
            delay = 0.5
            with self._cv:
                if self._pending.get(target) is write:
                    del self._pending[target]
