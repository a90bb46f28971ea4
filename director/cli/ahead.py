"""``director run`` reads its file in a child process while it imports the rest of itself.

A start with no parse of this very file in its cache (a first start, a changed file, an
upgraded director) used to parse the file after importing the runtime, one after the other,
and kept the parse's leavings: the parse of a 5,000-service file builds some 40 MB of
documents and checks that are freed at once, but the allocator keeps most of the pages they
were on (live objects remain scattered among them), so the box held 74 MB for life, where
the same table taken from the cache held 46 MB (host, 5,000 services x 10).

So at the command's first moments (:mod:`director.cli.boot`), when the cache is named
(systemd's state directory, or ``--config-cache``), its folder writable, and it does not
hold this file's parse, a child process is forked: it parses the file and writes the cache,
exactly as a running director keeps it (:class:`director.schema.reparse.Reparser`), and
exits. Meanwhile the command imports the runtime (side by side where a second core is
free: under the lab's emulation they were not); then it waits for the child and takes the
parse from the cache, as any restart does. A child that
fails (a fault in the file, a full disk, a signal) leaves the cache as it was: the file is
then parsed in the command itself, and a fault is reported with its line as ever.

Light: ``os`` and the stamp only, until the child imports the parser.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from director.schema.stamp import header, key_of_file

# The child's pid and when it was forked, once one is; what came of it (logged as
# ``event=startup.parse_ahead`` by ``director run``).
_CHILD: list[tuple[int, float]] = []


def start(config: str | None, cache: str | None, args: Sequence[str]) -> dict[str, object]:
    """Fork the child that parses ``config`` into ``cache``, when it is worth it; what was
    done (or why not)."""
    if "-h" in args or "--help" in args:
        return {"forked": False, "reason": "not asked (--help)"}
    if not config or not cache:
        return {"forked": False, "reason": "no file, or no cache (--config-cache '')"}
    try:
        wanted = key_of_file(config)
    except OSError as exc:
        return {"forked": False, "reason": f"the file: {exc.strerror or exc}"}
    if _holds(cache, wanted):
        return {"forked": False, "reason": "the cache holds this file's parse"}
    folder = os.path.dirname(os.path.abspath(cache))
    if not os.access(folder, os.W_OK | os.X_OK):
        return {"forked": False, "reason": f"{folder} is not writable"}
    began = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: parse, keep, exit (never back into the command)
        _child(config, cache)
    _CHILD.append((pid, began))
    return {"forked": True}


def _holds(cache: str, key: str) -> bool:
    """The cache's header names this key (what ``director.schema.cache.load`` checks first)."""
    try:
        with open(cache, "rb") as handle:
            return handle.read(len(wanted := header(key))) == wanted
    except OSError:
        return False


def _child(config: str, cache: str) -> None:
    status = 1
    try:
        import logging

        logging.disable(logging.CRITICAL)  # the command says what came of it, once
        from pathlib import Path

        from director.schema.reparse import Reparser

        reader = Reparser()
        reader.load(config, Path(cache))
        status = 0 if reader.save(Path(cache)) else 1
    except BaseException:  # a fault in the file: the command parses it and says where
        status = 1
    finally:
        os._exit(status)


def wait() -> dict[str, object]:
    """Wait for the child, if one was forked: what it did, and how long the command waited
    for it beyond its own imports. Once."""
    if not _CHILD:
        return {}
    pid, began = _CHILD.pop()
    waited = time.monotonic()
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:  # reaped elsewhere: the cache says whether it was written
        return {"parsed": False, "reason": "the child was reaped elsewhere"}
    done = time.monotonic()
    code = os.waitstatus_to_exitcode(status)
    figures: dict[str, object] = {
        "parsed": code == 0,
        "seconds": round(done - began, 3),
        "waited": round(done - waited, 3),
    }
    if code != 0:
        figures["reason"] = f"the child exited {code}: the file is parsed here"
    return figures
