"""A lock that says a director runs with a configuration file: ``director run`` holds it
shared for as long as it runs, and ``director decommission`` asks for it alone, so it finds
a running director whether or not that director has an admin API to ask. The kernel drops
the lock with the process, however it ends (kill -9 included): no stale file misleads."""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path
from typing import IO

# Where the lock is: the unit's runtime directory (the hardened unit can write nothing else
# under /run, and keeps it across restarts), else the system's lock directory; an operator's
# shell finds the same one, whether or not it runs under the unit.
LOCK_DIRS = (Path("/run/director"), Path("/run/lock"), Path("/tmp"))


def path_for(config: str) -> Path:
    """The lock of ``config`` (one per file, whatever path names it)."""
    digest = hashlib.sha256(os.path.realpath(config).encode()).hexdigest()[:16]
    where = next((d for d in LOCK_DIRS if d.is_dir()), Path("/tmp"))
    return where / f"lvs-director-{digest}.lock"


def hold(config: str) -> IO[bytes] | None:
    """Held shared by ``director run`` until it ends (None: no lock could be had, a
    read-only /run: said by the caller, not fatal)."""
    try:
        handle = open(path_for(config), "ab")  # noqa: SIM115 held for the process's life
    except OSError:
        return None
    fcntl.flock(handle, fcntl.LOCK_SH)
    return handle


def running(config: str) -> bool:
    """Whether a director runs with ``config`` now (it holds the lock)."""
    try:
        with open(path_for(config), "ab") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:
        return False
    return False
