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
exits. Before it writes the cache, it sends a static box's table to the kernel
(:mod:`director.cli.early`), once the command has said ``go`` (it has read its arguments:
``director run`` with a mistyped option must leave no table behind), and writes what it
sent on a pipe the command reads. Meanwhile the command imports the runtime (side by side
where a second core is free; when the child sends a table, only once it has: ``sent``);
then it waits for the child and takes the parse from the cache, as any restart does. A child that
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
_CHILD: list[tuple[int, float, int]] = []  # pid, when, the read end of its report
_SENT: list[dict[str, object] | None] = []  # its report, once ``sent`` has read it
_GOES: list[bool] = []  # the child was told to go (it sends the table)
_GO: list[int] = []  # the write end of the pipe the child waits on before it sends


NOT_SENT = "\0not sent"  # ``netns`` for a child that sends no table (a replay did; a shadow)


def start(
    config: str | None, cache: str | None, args: Sequence[str], *, netns: str | None = NOT_SENT
) -> dict[str, object]:
    """Fork the child that parses ``config`` into ``cache``, when it is worth it, and sends
    the file's static table to the kernel of ``netns`` (None: this one's; NOT_SENT: none)
    as soon as it is parsed (:mod:`director.cli.early`); what was done (or why not)."""
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
    report, into = os.pipe()
    wait_go, give_go = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: parse, send, keep, exit (never back into the command)
        os.close(report)
        os.close(give_go)
        _child(config, cache, netns, into, wait_go)
    os.close(into)
    os.close(wait_go)
    _CHILD.append((pid, began, report))
    if netns != NOT_SENT:
        _GO.append(give_go)
    else:  # it sends nothing, and waits for nothing
        os.close(give_go)
    return {"forked": True}


def go() -> None:
    """The command has read its arguments and is ``director run``: the child may send the
    table once it has parsed the file. A command that ends before (a mistyped option) never
    says so, and the child, seeing the pipe closed, sends nothing."""
    while _GO:
        fd = _GO.pop()
        try:
            os.write(fd, b"1")
        except OSError:  # the child has exited already (a fault in the file): nothing to send
            continue
        finally:
            os.close(fd)
        _GOES.append(True)


def sent() -> None:
    """Wait until the child that sends the table has sent it (or has failed): the command's
    own imports then wait, rather than take the other core from the child's parse and send
    (under the lab's emulation the two slowed each other by a third). Its report is kept for
    ``wait``. Nothing to wait for when no child sends one."""
    if not _CHILD or _SENT or not _GOES:
        return
    try:  # one write of under PIPE_BUF bytes, or nothing at all (the child's end closed)
        data = os.read(_CHILD[-1][2], 4096)
    except OSError:
        data = b""
    _SENT.append(_decoded(data))


def _holds(cache: str, key: str) -> bool:
    """The cache's header names this key (what ``director.schema.cache.load`` checks first)."""
    try:
        with open(cache, "rb") as handle:
            return handle.read(len(wanted := header(key))) == wanted
    except OSError:
        return False


def _child(config: str, cache: str, netns: str | None, report: int, go: int) -> None:
    status = 1
    try:
        import json
        import logging

        logging.disable(logging.CRITICAL)  # the command says what came of it, once
        from pathlib import Path

        from director.schema.reparse import Reparser

        reader = Reparser()
        settings = reader.load(config, Path(cache), later=True)  # its items cut at save
        # The table first, the cache after: the kernel is waiting. Only once the command has
        # read its arguments (a refused command leaves no table behind).
        if netns != NOT_SENT and os.read(go, 1) == b"1":
            from director.cli import early

            sent = early.send(settings, netns)
            os.write(report, json.dumps(sent).encode()[:4096])
        status = 0 if reader.save(Path(cache)) else 1
    except BaseException:  # a fault in the file: the command parses it and says where
        status = 1
    finally:
        os._exit(status)


def wait() -> dict[str, object]:
    """Wait for the child, if one was forked: what it did, how long the command waited for
    it beyond its own imports, and (``early``) what it sent of the table. Once."""
    if not _CHILD:
        return {}
    pid, began, report = _CHILD.pop()
    waited = time.monotonic()
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:  # reaped elsewhere: the cache says whether it was written
        os.close(report)
        _SENT.clear()
        _GOES.clear()
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
    sent = _SENT.pop() if _SENT else _decoded(_read_all(report))
    os.close(report)
    _GOES.clear()
    if sent is not None:
        figures["early"] = sent
    return figures


def _read_all(fd: int) -> bytes:
    """What is in the pipe (the child has exited: all of it, then the end)."""
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    except OSError:
        pass
    return b"".join(chunks)


def _decoded(data: bytes) -> dict[str, object] | None:
    """The child's report of its early table (nothing: it sent none)."""
    import json

    if not data:
        return None
    try:
        found = json.loads(data)
    except ValueError:
        return {"sent": False, "reason": "the child's report did not read"}
    return found if isinstance(found, dict) else None
