"""A start with the file unchanged since the last one takes its parse from a cache.

Parsing and validating a 5,000-service file is most of a second natively and about twenty
under emulation, every start, for a file that has usually not changed since the last one (a
restart, an upgrade of something else, a reboot). ``director run`` keeps what the last start
(or reload) made of the file, with the reader's memory of each services item (so the first
reload after a start is still paid by the edit alone), in its state directory.

The cache is taken only when everything the parse depended on is the same: the file's exact
bytes and its name, the working directory (relative paths are resolved against it), the
director's own code (every module's size and modification time: an upgrade, or an edit of a
development tree, makes a new key) and the Python that runs it. Anything else - no cache,
another key, a file that does not unpickle, a version of this format that is not ours, a
file not owned by the director's user or writable by another (a planted pickle runs code) - and
the file is parsed as ever, with its faults reported with their lines; the cache is written
again once the director is serving. It is written whole to a new file and renamed into
place (never half), readable by its owner only, its key ahead of the pickle: nothing is
unpickled from a file written for another key (another release's, say).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from director.core.planted import planted
from director.logs import event
from director.schema.config import Settings
from director.schema.stamp import FORMAT, default_cache, header, key_of

__all__ = ["default_path", "key_of", "load", "store", "stored_key"]

log = logging.getLogger("director.config")


def default_path() -> Path | None:
    """The cache in systemd's state directory for the unit, or no cache outside such a unit."""
    found = default_cache()
    return Path(found) if found is not None else None


def load(path: Path, key: str) -> tuple[Settings, Any] | None:
    """The settings and the reader's memory stored under ``key``; None (and why, logged)
    when there is none to take."""
    started = time.monotonic()
    try:
        with path.open("rb") as handle:
            untrusted = planted(str(path), os.fstat(handle.fileno()))
            if untrusted is not None:  # a key anyone can compute is no guard against a plant
                return _ignored(path, untrusted)
            # The header first: nothing is unpickled from a file of another format or key.
            if handle.readline() != f"{FORMAT}\n".encode():
                return _ignored(path, "not this format")
            if handle.readline() != f"{key}\n".encode():
                return _ignored(path, "the file or the code changed")
            import pickle  # here, as in store: a first start has no cache to read

            stored = pickle.load(handle)
    except FileNotFoundError:
        return None
    except Exception as exc:  # anything a damaged file raises: parse instead
        return _ignored(path, f"unreadable: {exc}"[:200])
    if not (isinstance(stored, tuple) and len(stored) == 2 and isinstance(stored[0], Settings)):
        return _ignored(path, "not this format")
    settings, memory = stored
    took = time.monotonic() - started
    event(log, "config.cache_used", cache=str(path), seconds=f"{took:.3f}")
    return settings, memory


def stored_key(path: Path) -> str | None:
    """The key the cache at ``path`` was kept under (None: none, or not this format), read
    from its header alone."""
    try:
        with path.open("rb") as handle:
            if handle.readline() != f"{FORMAT}\n".encode():
                return None
            return handle.readline().rstrip(b"\n").decode()
    except (OSError, UnicodeDecodeError):
        return None


def _ignored(path: Path, reason: str) -> tuple[Settings, Any] | None:
    """Log why the cache is not taken; None (the file is parsed)."""
    event(log, "config.cache_ignored", cache=str(path), reason=reason)
    return None


def store(path: Path, key: str, settings: Settings, memory: Any) -> bool:
    """Write the cache (a new file, renamed into place); False, logged, when it cannot be."""
    import pickle  # here: a first start reads its file before it loads what writes the cache

    started = time.monotonic()
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(header(key))
            pickle.dump((settings, memory), handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, path)
    except Exception as exc:  # a full disk, a read-only folder: the next start parses
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        event(
            log,
            "config.cache_not_saved",
            level=logging.WARNING,
            cache=str(path),
            reason=str(exc)[:200],
        )
        return False
    event(log, "config.cache_saved", cache=str(path), seconds=f"{time.monotonic() - started:.3f}")
    return True
