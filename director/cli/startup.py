"""Where a start's time goes: seconds since the process was exec'd, split at the points an
operator can act on (the interpreter, imports, reading the file, starting the parts, the first
read of the kernel, programming it).

The clock starts at the kernel's record of the process's start (``/proc/self/stat``, to the
clock tick, 10 ms) so the interpreter's own start counts; where ``/proc`` is missing the first
mark is taken as the start.
"""

from __future__ import annotations

import os
import time

from director import FIRST_LINE


def _since_exec() -> float | None:
    """Seconds since this process was started, by the kernel's clock (None without /proc)."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            # Field 22 (starttime, clock ticks since boot); the name (field 2) may hold
            # spaces and parentheses, so count from its closing one.
            fields = stat.read().rsplit(b")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)


class Startup:
    """Marks on one clock; ``figures()`` gives each phase's seconds, in order."""

    def __init__(self, first_line: float = FIRST_LINE) -> None:
        now = time.monotonic()
        age = _since_exec()
        self._origin = now - age if age is not None else first_line
        self._marks: list[tuple[str, float]] = [("interpreter", first_line)]

    def mark(self, phase: str) -> None:
        """``phase`` ended now (it began at the previous mark)."""
        self._marks.append((phase, time.monotonic()))

    def figures(self, **measured: float) -> dict[str, float]:
        """Each phase's seconds (rounded to the millisecond), then the ``measured`` ones
        (phases timed elsewhere, inside the last mark), then ``total`` since exec."""
        out: dict[str, float] = {}
        before = self._origin
        for phase, at in self._marks:
            out[phase] = round(at - before, 3)
            before = at
        out.update({name: round(value, 3) for name, value in measured.items()})
        out["total"] = round(before - self._origin, 3)
        return out


STARTUP = Startup()
# What ``director run``'s first moments did with a static box's kept table
# (director.cli.boot): logged as ``event=startup.replay`` once logging is up.
REPLAY: dict[str, object] = {}
# What the child that parses the file while the command loads did (director.cli.ahead):
# logged as ``event=startup.parse_ahead``.
AHEAD: dict[str, object] = {}
# What a first start sent of a static box's table once its file was read, with no kept table
# to replay (director.cli.early): logged as ``event=startup.early``.
EARLY: dict[str, object] = {}
# The file as the first moments read it (director.cli.boot.parse_here): (the file's path as
# given, the cache, the reader, the settings), taken by ``director run`` rather than read
# again. Types left open: this module loads nothing.
PARSED: list[tuple[str, object, object, object]] = []
# Log records made before logging was set up (that parse's), handled once it is.
HELD: list[object] = []
