"""Cluster writes (Service status, Events) on their own thread, so the loop never waits on
the API server.

The latest write per target wins. Writes never wait on each other: each target that fails
is retried on its own, with its own backoff, while the others go ahead; status goes before
Events. A refusal that will not change on retry (403 in a namespace being deleted, 422, 404
for a Service that is gone) drops that write, with a log line and a count."""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from director.engine.events import WriteFailed
from director.engine.ports import ClusterWriter
from director.logs import event

log = logging.getLogger("director.controller")

# What each kind of target is to the API server (the metric's verb and resource labels).
KINDS = {"status": ("patch", "services/status"), "event": ("create", "events")}
# Answers a retry cannot change: the write is dropped. 401, 408, 409, 429 and 5xx are
# retried, as is a connection that failed.
PERMANENT = frozenset({400, 403, 404, 405, 410, 422})
FIRST_RETRY, LAST_RETRY = 0.5, 30.0  # seconds; doubled per failure of one target, jittered


@dataclass(slots=True)
class _Write:
    write: Callable[[], None]
    seq: int
    failures: int = 0
    due: float = 0.0  # monotonic time of the next attempt (0: now)


class Outbox:
    def __init__(
        self,
        writer: ClusterWriter,
        on_error: Callable[[WriteFailed], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.writer, self.on_error, self._clock = writer, on_error, clock
        self._pending: dict[tuple[str, ...], _Write] = {}
        # Two queues of (due, seq, target): status first, then Events. Entries replaced by
        # a later write stay in the heap and are skipped when they come up (their seq).
        self._queues: tuple[list[tuple[float, int, tuple[str, ...]]], ...] = ([], [])
        self._seq = itertools.count()
        self._random = random.Random()
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="cluster-writer", daemon=True)
        self._thread.start()

    def put(self, target: tuple[str, ...], write: Callable[[], None]) -> None:
        with self._cv:
            before = self._pending.get(target)
            entry = _Write(write, next(self._seq))
            if before is not None and before.failures:  # the target's backoff still holds
                entry.failures, entry.due = before.failures, before.due
            self._pending[target] = entry
            self._push(target, entry)
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()

    def idle(self) -> bool:
        with self._cv:
            return not self._pending

    def _push(self, target: tuple[str, ...], entry: _Write) -> None:
        queue = self._queues[0 if target[0] == "status" else 1]
        heapq.heappush(queue, (entry.due, entry.seq, target))

    def _next(self) -> tuple[tuple[str, ...], _Write] | float | None:
        """The write to make now; else the seconds until one is due (None: nothing)."""
        now, soonest = self._clock(), None
        for queue in self._queues:
            while queue:
                due, seq, target = queue[0]
                entry = self._pending.get(target)
                if entry is None or entry.seq != seq:
                    heapq.heappop(queue)  # replaced or done
                    continue
                if due <= now:
                    heapq.heappop(queue)
                    return target, entry
                soonest = due - now if soonest is None else min(soonest, due - now)
                break
        return soonest

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stop:
                        return
                    picked = self._next()
                    if isinstance(picked, tuple):
                        break
                    self._cv.wait(picked)
            target, entry = picked
            try:
                entry.write()
            except Exception as exc:  # the API may be down, or refuse this one write
                self._failed(target, entry, exc)
                continue
            with self._cv:
                if self._pending.get(target) is entry:
                    del self._pending[target]

    def _failed(self, target: tuple[str, ...], entry: _Write, exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        status = getattr(exc, "status", None)
        code = str(status) if isinstance(status, int) else "unreachable"
        verb, resource = KINDS.get(target[0], ("write", target[0]))
        dropped = isinstance(status, int) and status in PERMANENT
        wait = 0.0
        with self._cv:
            current = self._pending.get(target) is entry
            if dropped and current:
                del self._pending[target]
            elif current:
                entry.failures += 1
                delay = min(FIRST_RETRY * 2 ** (entry.failures - 1), LAST_RETRY)
                wait = self._random.uniform(delay / 2, delay)
                entry.due = self._clock() + wait
                self._push(target, entry)
        where = "/".join(target)
        if dropped:  # a Service deleted meanwhile (404, 410) is no news
            level = logging.INFO if status in (404, 410) else logging.WARNING
            event(log, "kube.write_dropped", level=level, target=where, code=code, reason=reason)
        else:
            event(log, "kube.write_failed", level=logging.WARNING, target=where, code=code,
                  reason=reason, retry_in=f"{wait:.1f}s" if current else "-")  # fmt: skip
        if self.on_error is not None:
            self.on_error(WriteFailed(verb, resource, code, dropped))
