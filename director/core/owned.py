"""Owned state: every resource the director writes outside its own process (IPVS, the
nftables table, the VIPs on ``lo``, keepalived's file, FRR's announcements and boot file,
the state and intents files, the start's caches, the Lease) is kept by the one pattern IPVS follows.

Each keeper knows what it wants, reads back what is really there, applies the difference,
and does so again on a schedule and after any failure. What happened is reported here:

- ``Failure``: a failure is a value of one of two kinds. *transient*: the work could not be
  done this time (a binary missing mid-upgrade, a timeout, EAGAIN, EMFILE, ENOSPC): tried
  again with a jittered backoff, never remembered as a verdict on the input. *refused*: the
  daemon said no on the merits (``keepalived -t``, ``vtysh --dryrun``): the last good state
  stays, the reason is shown, and it is tried again when the input changes, or after
  ``REFUSED_RETRY`` seconds (an upgrade may have fixed the daemon).
- ``Retry``: when to try again, per resource.
- ``Ledger``: each resource's state (in sync, repairs of drift, failures, the last error),
  written by the thread that keeps it, read by ``/readyz``, ``director status`` and the
  metrics. A *repair* is drift found and put right: what was there differed from what the
  director had made, because someone else changed it.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from director.core.errors import DirectorError

TRANSIENT, REFUSED = "transient", "refused"
FIRST_RETRY, LAST_RETRY = 0.5, 30.0  # seconds, doubled per transient failure, jittered
REFUSED_RETRY = 300.0  # seconds before a refused input is tried again as it is
# The resources, in the order the status shows them.
RESOURCES = (
    "ipvs",
    "nftables",
    "addresses",
    "keepalived",
    "frr",
    "state-file",
    "intents-file",
    "lease",
)


class Failure(DirectorError):
    """Owned state could not be brought to what is wanted; ``kind`` says whether trying the
    same again can help (TRANSIENT) or the input itself was refused (REFUSED)."""

    kind = TRANSIENT

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Transient(Failure):
    """Could not run, timed out, or the system was short of something: try again."""

    status = 503
    kind = TRANSIENT


class Refused(Failure):
    """The daemon (or the kernel) refused the input on its merits."""

    status = 422
    kind = REFUSED


def describe(exc: BaseException) -> str:
    """One line for an exception, as a log or a status shows it."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def run_failure(program: str, exc: BaseException) -> Transient:
    """A program that could not be run, or did not finish in time: never its verdict."""
    if isinstance(exc, subprocess.TimeoutExpired):
        return Transient(f"{program} did not finish within {exc.timeout:g} s")
    return Transient(f"cannot run {program}: {describe(exc)}")


def not_run(program: str, returncode: int, output: str = "") -> Transient | None:
    """The failure an exit status stands for when it says the program never ran its course
    (killed by a signal; 126 or 127: the shell or a wrapper could not execute it, as when
    a package is being replaced; ``ip netns exec`` saying it could not exec it, with exit
    status 1), or None: the program's own verdict."""
    if returncode < 0:
        return Transient(f"{program} ended by signal {-returncode}")
    if returncode in (126, 127):
        return Transient(f"{program} could not be executed (exit status {returncode})")
    said = _EXEC_FAILED.search(output) if returncode else None
    if said is not None:
        return Transient(f"{program} could not be executed: {said[0]}")
    return None


# ip netns exec (iproute2), when the program it was to run is not there or not runnable.
_EXEC_FAILED = re.compile(r'exec of "[^"\n]*" failed: [^\n]*')


def classify(exc: BaseException) -> Failure:
    """The failure an exception stands for: ours as they are; anything else (an OSError: a
    full disk, no descriptor left, a folder removed or made read-only) transient: the world
    around the director, which someone may put right at any time. Only a daemon's verdict
    on the input is a refusal."""
    if isinstance(exc, Failure):
        return exc
    if isinstance(exc, subprocess.TimeoutExpired):
        return run_failure(str(exc.cmd[0] if isinstance(exc.cmd, list) else exc.cmd), exc)
    return Transient(describe(exc))


class Retry:
    """When one resource is next tried after failures: transient ones back off (doubling
    from FIRST_RETRY to LAST_RETRY, jittered between half and all of the delay, so the two
    boxes of a pair do not retry in lock-step); a refusal waits ``refused_after`` seconds
    unless the input changes first (``changed``)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        *,
        first: float = FIRST_RETRY,
        cap: float = LAST_RETRY,
        refused_after: float = REFUSED_RETRY,
    ) -> None:
        self.clock, self.rng = clock, rng or random.Random()
        self.first, self.cap, self.refused_after = first, cap, refused_after
        self.failures = 0  # in a row
        self.kind: str | None = None  # of the last failure, None after a success
        self.next_at = float("-inf")

    def due(self, now: float | None = None) -> bool:
        return (self.clock() if now is None else now) >= self.next_at

    def failed(self, kind: str) -> float:
        """A failure of ``kind``: the seconds until the next try."""
        self.failures += 1
        self.kind = kind
        if kind == REFUSED:
            wait = self.refused_after
        else:
            delay = min(self.first * 2 ** (self.failures - 1), self.cap)
            wait = self.rng.uniform(delay / 2, delay)
        self.next_at = self.clock() + wait
        return wait

    def succeeded(self) -> None:
        self.failures, self.kind, self.next_at = 0, None, float("-inf")

    def changed(self) -> None:
        """The input changed: a refusal no longer stands (a transient backoff still does:
        what could not run then cannot run now either, most likely)."""
        if self.kind == REFUSED:
            self.next_at = float("-inf")


@dataclass(frozen=True, slots=True)
class OwnedState:
    """One resource as its keeper last found it."""

    resource: str
    in_sync: bool = True
    repairs: int = 0  # drift found and put right
    failures: int = 0  # attempts that failed (transient or refused), in all
    last_error: str | None = None  # while out of sync: why
    kind: str | None = None  # of the last failure (TRANSIENT, REFUSED), None when in sync
    since: float | None = None  # wall clock: out of sync since
    checked: float | None = None  # wall clock of the last read-back or apply


class Ledger:
    """Each owned resource's state, written by whichever thread keeps it."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self._lock = threading.Lock()
        self._states: dict[str, OwnedState] = {}

    def track(self, resource: str) -> None:
        """``resource`` is kept on this director (shown from now on, in sync until found
        otherwise)."""
        with self._lock:
            self._states.setdefault(resource, OwnedState(resource))

    def ok(self, resource: str, *, repaired: bool = False) -> OwnedState:
        """What is there is what is wanted (``repaired``: because the keeper just put drift
        right)."""
        with self._lock:
            state = self._states.get(resource) or OwnedState(resource)
            state = replace(
                state,
                in_sync=True,
                repairs=state.repairs + repaired,
                last_error=None,
                kind=None,
                since=None,
                checked=self._wall(),
            )
            self._states[resource] = state
            return state

    def drift(self, resource: str, what: str) -> OwnedState:
        """What is there differs from what the director made (``what``: how); the keeper
        is about to repair it."""
        return self._out(resource, f"drift: {what}", None, count=False)

    def waiting(self, resource: str, what: str) -> OwnedState:
        """Nothing is written yet: out of sync until the first write (``what``: of what)."""
        return self._out(resource, f"not written yet: {what}", None, count=False)

    def failed(self, resource: str, failure: Failure) -> OwnedState:
        return self._out(resource, failure.reason, failure.kind, count=True)

    def _out(self, resource: str, reason: str, kind: str | None, *, count: bool) -> OwnedState:
        with self._lock:
            state = self._states.get(resource) or OwnedState(resource)
            now = self._wall()
            state = replace(
                state,
                in_sync=False,
                failures=state.failures + count,
                last_error=reason[:500],
                kind=kind or state.kind,
                since=state.since if state.since is not None else now,
                checked=now,
            )
            self._states[resource] = state
            return state

    def get(self, resource: str) -> OwnedState | None:
        with self._lock:
            return self._states.get(resource)

    def snapshot(self) -> Mapping[str, OwnedState]:
        """Every tracked resource, in RESOURCES order."""
        with self._lock:
            states = dict(self._states)
        order = {name: at for at, name in enumerate(RESOURCES)}
        return MappingProxyType(
            {k: states[k] for k in sorted(states, key=lambda k: (order.get(k, 99), k))}
        )

    def out_of_sync(self) -> list[OwnedState]:
        return [state for state in self.snapshot().values() if not state.in_sync]


def write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` atomically and durably: written to a file of a unique
    name beside it (two writers never share one), synced, renamed, the folder synced. An
    acknowledged write survives a crash or a power cut; a failed one leaves the old file
    and no debris. ``mode``: the file's permissions (else 0644 less the umask). Raises
    OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with open(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode if mode is not None else 0o644 & ~_umask())
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def file_mark(path: Path) -> tuple[int, int, int] | None:
    """What tells one version of a file from another without reading it (inode, size,
    modification time); None when there is no file. A file written with ``write_atomic``
    gets a new inode each time, so a rewrite by anyone else shows."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _umask() -> int:
    """The process's umask, read without changing it (os.umask sets it: a race with other
    threads creating files)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022
