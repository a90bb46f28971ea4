"""The ``director`` command's first moments. For ``director run`` of a static box, its table
back in the kernel before the rest of the director loads (:mod:`director.dataplane.replay`);
or, with no kept table to replay, its file read and its table sent at once
(:mod:`director.cli.early`), by the child process that parses the file into the cache while
the rest loads (:mod:`director.cli.ahead`) or here; then the command itself
(:mod:`director.cli.main`).

Only what the replay needs is loaded here, and only the arguments it needs are read (the
command's own parser reads them all again, and refuses what it refuses): ``--config``,
``--config-cache`` (or systemd's state directory), ``--netns``; ``--dry-run`` writes nothing,
so it replays nothing. What the replay did is logged once logging is up
(``event=startup.replay``)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

from director.cli import startup
from director.cli.argv import options, subcommand

# The commands that run for long or change the kernel or files themselves: their process ends
# the usual way (atexit handlers, every module torn down). The others, which read and print
# (check, plan, ctl, status, schema, ...), end as soon as their output is out (end_now).
ENDED_THE_USUAL_WAY = frozenset({"run", "apply", "decommission", "bundle"})


# ``director run``'s options, as its parser spells them: the first moments act on none but
# these, written out whole (a prefix, ``--dry`` or ``--net``, is refused by the parser after
# them, and must not have sent a table first).
RUN_OPTIONS = frozenset(
    {"--config", "--netns", "--kubeconfig", "--dry-run", "--state-file", "--config-cache"}
    | {"--log-level", "--log-format"}
)


def whole(args: Sequence[str]) -> bool:
    """Whether every option of ``args`` is one of RUN_OPTIONS written out whole (the values
    after valued options are not options)."""
    valued = RUN_OPTIONS - {"--dry-run"}
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name, equals, _ = arg.partition("=")
        if arg.startswith("-"):
            if name not in RUN_OPTIONS:
                return False
            skip = name in valued and not equals
    return True


def main(argv: Sequence[str] | None = None) -> int:
    command, rest = subcommand(list(sys.argv[1:] if argv is None else argv))
    if command == "run" and not whole(rest):
        command = None  # the parser says what is wrong; nothing is sent before it
    if command == "run":
        try:
            done = replay_for(rest)
        except Exception as exc:  # a start is never refused for its accelerator's sake
            done = {"replayed": False, "reason": f"failed: {exc!r}"[:300]}
        startup.REPLAY.update(done)
        startup.STARTUP.mark("replay")
    from director.cli import classcode  # after the replay: it loads dataclasses

    classcode.install()
    if command == "run":
        # A static box's table sent once its file is read, if no kept one was replayed
        # (director.cli.early): by the child that parses the file into the cache, or by the
        # command once it has read its arguments, from the parse made here.
        send = "--dry-run" not in rest and not startup.REPLAY.get("replayed")
        try:
            ahead = parse_ahead(rest, send=send)
        except Exception as exc:  # nor for the parse's
            ahead = {"forked": False, "reason": f"failed: {exc!r}"[:300]}
        startup.AHEAD.update(ahead)
        if not ahead.get("forked"):
            try:
                parse_here(rest)
            except Exception as exc:  # nor for the early table's
                startup.EARLY.update({"sent": False, "reason": f"failed: {exc!r}"[:300]})
        startup.STARTUP.mark("parse")
    from director.cli.main import main as director

    code = director(argv)
    classcode.keep()  # a command's (``director run`` keeps after its imports)
    if argv is None and command not in ENDED_THE_USUAL_WAY:
        end_now(code)
    return code


def end_now(code: int) -> int:
    """The process of a command that has said all it has to say ends at once: Python's own
    teardown (every module emptied, the collector run over what is left) took 20-30 ms
    after ``director check`` had printed its verdict, a tenth of the whole command at 1,000
    services. Everything written is flushed first; if that fails (a closed pipe), the
    interpreter's own exit reports it, as it would have."""
    try:
        if "logging" in sys.modules:
            sys.modules["logging"].shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # the usual exit says it (BrokenPipeError: exit status 120)
        return code
    os._exit(code)


def replay_for(args: Sequence[str]) -> dict[str, object]:
    """The replay ``director run ARGS`` asks for, done (or why not)."""
    given = options(args, ("--config", "--config-cache", "--netns"))
    if "--dry-run" in args or "-h" in args or "--help" in args:
        return {"replayed": False, "reason": "not asked (--dry-run or --help)"}
    from director.schema.stamp import default_cache

    config, cache = given.get("--config"), given.get("--config-cache", default_cache())
    if not config or not cache:
        return {"replayed": False, "reason": "no file, or no cache (--config-cache '')"}
    from director.dataplane import replay

    table = replay.path_beside(cache)
    key = replay.stored_key(table)
    if key is None:
        return {"replayed": False, "reason": "none kept yet"}
    from director.schema.stamp import key_of_file

    try:
        wanted = key_of_file(config)
    except OSError as exc:
        return {"replayed": False, "reason": f"the file: {exc.strerror or exc}"}
    return replay.replay(table, wanted, given.get("--netns"))


def parse_ahead(args: Sequence[str], *, send: bool) -> dict[str, object]:
    """The file of ``director run ARGS`` parsed into its cache by a child process, while
    this one imports the rest (:mod:`director.cli.ahead`), its static table sent by it if
    ``send``; what was done, or why not."""
    # What the child needs, loaded once here before it is forked (it would load it again
    # beside the command's own imports, on the other core: twice the work, and its table
    # later); the command needs all of it too.
    import director.schema.reparse
    from director.cli import ahead
    from director.schema.stamp import default_cache

    if send:
        import director.cli.early  # noqa: F401

    given = options(args, ("--config", "--config-cache", "--netns"))
    return ahead.start(
        given.get("--config"),
        given.get("--config-cache", default_cache()),
        args,
        netns=given.get("--netns") if send else ahead.NOT_SENT,
    )


def parse_here(args: Sequence[str]) -> None:
    """The file of ``director run ARGS`` read here (from the cache when it holds it) and
    kept for the command (``startup.PARSED``), which sends its table once it has read its
    arguments (:mod:`director.cli.early`). A file that does not parse is left to the
    command, which reads it again and says where its fault is."""
    if "-h" in args or "--help" in args:
        return
    from pathlib import Path

    from director.schema.stamp import default_cache

    given = options(args, ("--config", "--config-cache"))
    config, named = given.get("--config"), given.get("--config-cache", default_cache())
    if not config:
        return
    from director.schema.reparse import Reparser

    cache = Path(named) if named else None
    reader = Reparser()
    with _held_logs():  # what the reader says (the cache used, or why not), said later
        try:
            settings = reader.load(config, cache, later=True)  # the table first
        except Exception:  # the command reads it again and reports the fault with its line
            startup.EARLY.update({"sent": False, "reason": "the file did not read"})
            return
    startup.PARSED.append((config, cache, reader, settings))


@contextlib.contextmanager
def _held_logs() -> Iterator[None]:
    """Log records at INFO and above kept in ``startup.HELD`` (logging is not set up yet:
    ``director run`` hands them to its handlers once it is)."""
    import logging

    class Held(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            startup.HELD.append(record)

    root, held = logging.getLogger(), Held()
    level = root.level
    root.addHandler(held)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(held)
        root.setLevel(level)
