"""A thread that keeps one owned resource at the latest value handed in (a VIP set, a route
table), off the loop: installs it, reads back what is really there on a schedule, repairs
drift, and tries again after failures (``director.core.owned``).

Installing can take a while (a daemon validating its configuration), and only the newest
value matters: the control loop hands values in and never waits; a value handed in while
another is being installed replaces whatever was still pending. A value that fails is
never dropped: it stays pending until it is installed or a newer one replaces it. A
transient failure (could not run, timed out, a full disk) is tried again with a jittered
backoff; a refusal (the daemon said no) when a new value comes, or after a long while.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from director.core.owned import REFUSED, Failure, Ledger, Retry, Transient, classify, write_atomic
from director.logs import event

T = TypeVar("T")
log = logging.getLogger("director.worker")


def file_drift(path: Path, wanted: str | None) -> str | None:
    """A daemon file read back: None when it holds ``wanted``, else what drifted. Raises a
    ``Failure`` when it cannot be read."""
    try:
        live = path.read_text()
    except FileNotFoundError:
        return f"{path} is gone"
    except OSError as exc:
        raise classify(exc) from None
    return None if live == wanted else f"{path} was changed by someone else"


def install_checked(path: Path, text: str, check: Callable[[Path], None], mode: int) -> bool:
    """Make ``text`` the content of daemon file ``path``: written beside it (``FILE.new``),
    read by the daemon's own check, then put in place atomically and durably. ``check``
    raises to refuse it: the live file stays, and the refused one beside it, for whoever
    looks. False when it already was; raises Transient when it could not be written."""
    with contextlib.suppress(FileNotFoundError):
        if path.read_text() == text:
            return False
    candidate = path.with_name(path.name + ".new")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        candidate.write_text(text)
    except OSError as exc:
        raise classify(exc) from None
    check(candidate)
    try:
        write_atomic(path, text, mode=mode)  # fsync'd: a crash leaves one or the other
    except OSError as exc:
        raise classify(exc) from None
    finally:
        with contextlib.suppress(OSError):
            candidate.unlink()
    return True


class Keeper(Generic[T]):
    name = "worker"  # the thread's name and the log events' prefix
    resource = "worker"  # the owned resource, as the ledger, /readyz and the metrics name it
    verify_seconds: float | None = None  # read back what is there this often (None: never)
    idle_seconds: float | None = None  # ``poll`` this often (None: never)

    def __init__(self, ledger: Ledger | None = None, clock: Callable[[], float] = time.monotonic):
        self.ledger = ledger or Ledger()
        self.clock = clock
        self.retry = Retry(clock)
        self._pending: T | None = None
        self._cv = threading.Condition()
        self._stop = False
        self.installed: T | None = None  # the last value installed
        self.attempts = 0  # installs tried (a figure for tests and the lab)
        self._next_verify = float("inf")
        self._next_poll = 0.0
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    # -- what a keeper does -----------------------------------------------------------
    def install(self, value: T) -> None:
        """Make ``value`` live (on the keeper's thread). Raises a ``Failure`` (Transient,
        Refused) or any exception (classified): the old value stays live either way."""
        raise NotImplementedError

    def verify(self, value: T) -> str | None:
        """Read back what is there: None when it is ``value`` as installed, else what
        drifted (it is then repaired). Raises a ``Failure`` when it cannot be read."""
        return None

    def repair(self, value: T, drift: str) -> None:
        """Put drift right (by default: install ``value`` again)."""
        self.install(value)

    def poll(self) -> None:
        """Called on the keeper's thread every ``idle_seconds`` (FRR's sessions)."""

    # -- the thread ---------------------------------------------------------------------
    def start(self) -> None:
        if self.ledger is not None:
            self.ledger.track(self.resource)
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        if self._thread.ident is not None:
            self._thread.join(timeout=30)

    def submit(self, value: T) -> None:
        with self._cv:
            if self.installed is None and self._pending is None:
                # Until the first value is live the resource is not what the loop wants:
                # /readyz waits for it (keepalived's file before keepalived is started).
                self.ledger.waiting(self.resource, "its first value is being installed")
            self._pending = value
            self.retry.changed()  # a refusal was of the old value
            self._cv.notify()

    def read_back_soon(self) -> None:
        """Read back what is there at once, not at the next ``verify_seconds`` (the daemon
        behind it said it changed: restarted, say)."""
        with self._cv:
            if self.installed is not None and self.verify_seconds:
                self._next_verify = self.clock()
                self._cv.notify()

    def settle(self, timeout: float = 30.0) -> bool:
        """Wait until the latest value is installed (tests, the demo, a leave); False after
        ``timeout`` (it is still failing, and still tried)."""
        with self._cv:
            return self._cv.wait_for(lambda: self._pending is None, timeout)

    def quiet(self, timeout: float = 30.0) -> bool:
        """Wait until no attempt is in flight or coming soon: the latest value installed,
        or refused (it stands until the input changes); False after ``timeout``."""
        with self._cv:
            return self._cv.wait_for(
                lambda: (
                    self._pending is None or (self.retry.kind == REFUSED and not self.retry.due())
                ),
                timeout,
            )

    @property
    def pending(self) -> T | None:
        return self._pending

    def _wake_in(self, now: float) -> float:
        # While a value waits to be installed, the next attempt replaces the read-back (the
        # old value's file is not what is wanted anyway; reading it back would count its
        # being there as "in sync" and reset the backoff).
        times = [self.retry.next_at if self._pending is not None else self._next_verify]
        if self.idle_seconds:
            times.append(self._next_poll)
        return max(0.0, min(min(times) - now, 3600.0))

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop:
                    now = self.clock()
                    if self._due(now) or (self.idle_seconds and now >= self._next_poll):
                        break
                    self._cv.wait(self._wake_in(now))
                if self._stop:
                    return
                value = self._pending
            now = self.clock()
            if value is not None:
                if self.retry.due(now):
                    self._guard(self._attempt, value)
            elif now >= self._next_verify:
                if self.installed is not None:
                    self._guard(self._check, self.installed)
                else:  # nothing installed yet: nothing to read back
                    self._next_verify = float("inf")
            if self.idle_seconds and self.clock() >= self._next_poll:
                self._next_poll = self.clock() + self.idle_seconds
                self._guard(self.poll)

    def _due(self, now: float) -> bool:
        """An attempt (a value waits) or a read-back (none does) is due."""
        if self._pending is not None:
            return self.retry.due(now)
        return now >= self._next_verify

    def _verify_after(self, now: float) -> float:
        return now + self.verify_seconds if self.verify_seconds else float("inf")

    def _attempt(self, value: T, drift: str | None = None) -> None:
        self.attempts += 1
        try:
            if drift is None:
                self.install(value)
            else:
                self.repair(value, drift)
        except Exception as exc:
            self._failed(classify(exc), "repair" if drift else "install")
            with self._cv:
                if self._pending is None:  # a failed repair is tried again like a new value
                    self._pending = value
                self._cv.notify_all()
            return
        self.retry.succeeded()
        self.ledger.ok(self.resource, repaired=drift is not None)
        if drift is not None:
            event(log, "owned.repaired", resource=self.resource, drift=drift)
        self.installed = value
        self._next_verify = self._verify_after(self.clock())
        with self._cv:
            if self._pending is value:
                self._pending = None
            self._cv.notify_all()

    def _check(self, value: T) -> None:
        try:
            drift = self.verify(value)
        except Exception as exc:  # could not read back: not drift, not in sync either
            failure = classify(exc)
            self._failed(
                failure if failure.kind == "transient" else Transient(failure.reason), "verify"
            )
            self._next_verify = self.retry.next_at
            return
        if drift is None:
            if self.retry.kind is not None:
                self.retry.succeeded()
            self.ledger.ok(self.resource)
            self._next_verify = self._verify_after(self.clock())
            return
        self.ledger.drift(self.resource, drift)
        event(
            log,
            "owned.drift",
            level=logging.WARNING,
            resource=self.resource,
            drift=drift,
            action="repairing",
        )
        self._attempt(value, drift)

    def _failed(self, failure: Failure, what: str) -> None:
        wait = self.retry.failed(failure.kind)
        self.ledger.failed(self.resource, failure)
        event(
            log,
            f"{self.name}.{what}_failed",
            level=logging.ERROR,
            resource=self.resource,
            kind=failure.kind,
            reason=failure.reason[:500],
            retry_in=f"{wait:.1f}s",
        )

    def _guard(self, action: Callable[..., object], *args: object) -> None:
        try:
            action(*args)
        except Exception as exc:  # a bug in a keeper must not end its thread
            event(
                log, f"{self.name}.error", level=logging.ERROR, reason=repr(exc)[:500], exc_info=exc
            )
