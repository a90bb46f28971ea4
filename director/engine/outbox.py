"""Cluster writes (Service status, Events) on threads of their own, so the loop never waits
on the API server: ``STATUS_WRITERS`` threads for status, one for Events, so an Event write
that hangs (an admission webhook that accepts and never answers) never holds a Service's
status back, and one Service's status write that hangs never holds another's. A target is
written by one thread at a time: a newer write for it waits until the one in flight ends.

The latest write per target wins. Writes never wait on each other: each target that fails
is retried on its own, with its own backoff, while the others go ahead. A refusal that will
not change on retry (403 in a namespace being deleted, 422, 404 for a Service that is gone)
drops that write, with a log line and a count.

An answer that speaks for the whole server (429 Too Many Requests, 503, no answer at all)
pauses that whole queue, with one backoff that doubles while the server keeps answering so:
5,000 distinct Events against a server answering 429 are one attempt per backoff step, not
5,000. Events are news, not state: at most ``MAX_EVENTS`` wait (the oldest gives way), one
not written within ``EVENT_MAX_AGE`` seconds is dropped as stale, and a later Event of the
same Service and reason replaces one still waiting (the caller's target says so). Status
writes are the Services' state: never dropped but for a refusal, at most one per Service."""

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
# Answers about the server, not the write: the whole queue waits.
SERVER_BUSY = frozenset({429, 502, 503, 504})
FIRST_RETRY, LAST_RETRY = 0.5, 30.0  # seconds; doubled per failure of one target, jittered
MAX_EVENTS = 1000  # Event writes waiting, at most (the oldest is dropped for a new one)
EVENT_MAX_AGE = 300.0  # seconds: an Event not written by then is stale, and dropped
STATUS_WRITERS = 4  # threads writing Service status (one Service's hanging write holds one)


@dataclass(slots=True)
class _Write:
    """A write waiting in the outbox, and its retries."""

    write: Callable[[], None]
    seq: int
    born: float = 0.0  # monotonic time the target was first put (an Event's age)
    failures: int = 0
    due: float = 0.0  # monotonic time of the next attempt (0: now)


class Outbox:
    def __init__(
        self,
        writer: ClusterWriter,
        on_error: Callable[[WriteFailed], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        cluster: str = "",
    ) -> None:
        self.writer, self.on_error, self._clock = writer, on_error, clock
        self.cluster = cluster  # named in its logs, its threads and its WriteFailed
        named = f"-{cluster}" if cluster else ""
        self._pending: dict[tuple[str, ...], _Write] = {}
        # Two queues of (due, seq, target): status first, then Events. Entries replaced by
        # a later write stay in the heap and are skipped when they come up (their seq).
        self._queues: tuple[list[tuple[float, int, tuple[str, ...]]], ...] = ([], [])
        self._seq = itertools.count()
        self._events: dict[tuple[str, ...], None] = {}  # pending Event targets, oldest first
        self._inflight: set[tuple[str, ...]] = set()  # targets a thread is writing now
        # Per queue: no write before this (the server answered for itself), and how many
        # such answers in a row.
        self._paused = [0.0, 0.0]
        self._busy = [0, 0]
        self.dropped = 0  # Events dropped: stale or overflowing (a figure for tests)
        self._random = random.Random()
        self._cv = threading.Condition()
        self._stop = False
        lanes = [(0, f"status-{n}") for n in range(STATUS_WRITERS)] + [(1, "events")]
        self.threads = [
            threading.Thread(
                target=self._run, args=(index,), name=f"cluster-writer-{lane}{named}", daemon=True
            )
            for index, lane in lanes
        ]
        for thread in self.threads:
            thread.start()

    def put(self, target: tuple[str, ...], write: Callable[[], None]) -> None:
        overflow: tuple[str, ...] | None = None
        with self._cv:
            before = self._pending.get(target)
            entry = _Write(write, next(self._seq), self._clock())
            if before is not None:
                entry.born = before.born
                if before.failures:  # the target's backoff still holds
                    entry.failures, entry.due = before.failures, before.due
            elif _queue(target) == 1:
                self._events[target] = None
                if len(self._events) > MAX_EVENTS:
                    overflow = next(iter(self._events))
                    self._forget(overflow)
            self._pending[target] = entry
            self._push(target, entry)
            self._cv.notify_all()
        if overflow is not None:
            self._drop(overflow, "overflow", f"more than {MAX_EVENTS} Events wait")

    def _forget(self, target: tuple[str, ...]) -> None:
        """(Under the lock.) The target's write is done with, written or not."""
        self._pending.pop(target, None)
        self._events.pop(target, None)

    def _drop(self, target: tuple[str, ...], code: str, reason: str) -> None:
        self.dropped += 1
        event(
            log,
            "kube.write_dropped",
            level=logging.WARNING,
            target=self._where(target),
            code=code,
            reason=reason,
        )
        if self.on_error is not None:
            verb, resource = KINDS.get(target[0], ("write", target[0]))
            self.on_error(WriteFailed(verb, resource, code, True, self.cluster))

    def _where(self, target: tuple[str, ...]) -> str:
        """The target as logged: ``status/ns/name``, its cluster first when named."""
        return "/".join((self.cluster, *target) if self.cluster else target)

    def retire(self, seconds: float) -> None:
        """Close once every write is done, or after ``seconds`` (a cluster no longer
        served: its last writes go out, within bounds)."""

        def run() -> None:
            deadline = self._clock() + seconds
            while not self.idle() and self._clock() < deadline:
                time.sleep(0.1)
            self.close()

        name = self.threads[0].name.replace("-status", "-retire", 1)
        threading.Thread(target=run, name=name, daemon=True).start()

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()

    def idle(self) -> bool:
        with self._cv:
            return not self._pending

    def _push(self, target: tuple[str, ...], entry: _Write) -> None:
        heapq.heappush(self._queues[_queue(target)], (entry.due, entry.seq, target))

    def _next(self, index: int) -> tuple[tuple[str, ...], _Write | None] | float | None:
        """The write of queue ``index`` to make now; else the seconds until one is due
        (None: nothing)."""
        now, queue = self._clock(), self._queues[index]
        if now < self._paused[index]:  # the server asked for a pause
            return self._paused[index] - now
        while queue:
            due, seq, target = queue[0]
            entry = self._pending.get(target)
            if entry is None or entry.seq != seq or entry.due != due or target in self._inflight:
                heapq.heappop(queue)  # replaced, done, retried later, or put back once it ends
                continue
            if index == 1 and now - entry.born > EVENT_MAX_AGE:
                heapq.heappop(queue)
                self._forget(target)
                return target, None  # stale: dropped (said outside the lock)
            if due <= now:
                heapq.heappop(queue)
                self._inflight.add(target)
                return target, entry
            return due - now
        return None

    def _run(self, index: int) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stop:
                        return
                    picked = self._next(index)
                    if isinstance(picked, tuple):
                        break
                    self._cv.wait(picked)
            target, entry = picked
            if entry is None:
                self._drop(target, "stale", f"not written within {EVENT_MAX_AGE:.0f} s")
                continue
            try:
                entry.write()
            except Exception as exc:  # the API may be down, or refuse this one write
                self._failed(target, entry, exc)
                self._landed(target)
                continue
            with self._cv:
                self._busy[_queue(target)] = 0
                if self._pending.get(target) is entry:
                    self._forget(target)
            self._landed(target)

    def _landed(self, target: tuple[str, ...]) -> None:
        """The write in flight for ``target`` has ended: a newer one that came meanwhile
        (or its retry) goes back in its queue."""
        with self._cv:
            self._inflight.discard(target)
            later = self._pending.get(target)
            if later is not None:
                self._push(target, later)
                self._cv.notify_all()

    def _failed(self, target: tuple[str, ...], entry: _Write, exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        status = getattr(exc, "status", None)
        code = str(status) if isinstance(status, int) else "unreachable"
        verb, resource = KINDS.get(target[0], ("write", target[0]))
        dropped = isinstance(status, int) and status in PERMANENT
        server = status is None or status in SERVER_BUSY  # the whole queue waits
        wait = 0.0
        with self._cv:
            current = self._pending.get(target) is entry
            if dropped and current:
                self._forget(target)
            elif current:
                entry.failures += 1
                index = _queue(target)
                tries = entry.failures
                if server:
                    self._busy[index] += 1
                    tries = self._busy[index]
                delay = min(FIRST_RETRY * 2 ** (tries - 1), LAST_RETRY)
                wait = self._random.uniform(delay / 2, delay)
                entry.due = self._clock() + wait
                if server:
                    self._paused[index] = entry.due
                # back in its queue once the write in flight is over (_landed)
        where = self._where(target)
        if dropped:  # a Service deleted meanwhile (404, 410) is no news
            level = logging.INFO if status in (404, 410) else logging.WARNING
            event(log, "kube.write_dropped", level=level, target=where, code=code, reason=reason)
        else:
            event(
                log,
                "kube.write_failed",
                level=logging.WARNING,
                target=where,
                code=code,
                reason=reason,
                retry_in=f"{wait:.1f}s" if current else "-",
            )
        if self.on_error is not None:
            self.on_error(WriteFailed(verb, resource, code, dropped, self.cluster))


def _queue(target: tuple[str, ...]) -> int:
    """Status writes' queue (0), or Events' (1)."""
    return 0 if target[0] == "status" else 1
