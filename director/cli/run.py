"""``director run``: the appliance, until SIGTERM/SIGINT; SIGHUP reloads the file. Its start
is timed (``director.cli.startup``) and the file's parse kept for the next start."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from director import logs
from director.cli import ahead, classcode, runlock
from director.cli.plans import EXIT_FATAL, open_ipvs
from director.cli.startup import AHEAD, EARLY, HELD, PARSED as STARTUP_PARSED, REPLAY, STARTUP
from director.dataplane.interface import IpvsUnavailable

if TYPE_CHECKING:
    from director.cli.runtime import Runtime
    from director.cli.startcache import StartCaches
    from director.dataplane.interface import Ipvs
    from director.schema.config import Settings
    from director.schema.reparse import Reparser

_log = logging.getLogger("director.cli")


def cmd_run(args: argparse.Namespace) -> int:
    """The appliance: follow the cluster until SIGTERM/SIGINT; SIGHUP reloads the file."""
    ahead.go()  # the arguments are read: the child parsing the file may send its table
    ahead.sent()  # and the imports below wait until it has (both cores for its parse)
    cache = _config_cache(args.config_cache, args.config)
    parsed = _parsed(args.config, cache)  # read already by the first moments (boot)
    if parsed is not None and not args.dry_run and not REPLAY.get("replayed"):
        from director.cli.early import send

        EARLY.update(send(parsed[1], args.netns))
        STARTUP.mark("sent")
    import director.cli.runtime  # noqa: F401  (the runtime's imports: the "imports" phase)
    from director.dataplane.fake import FakeIpvs
    from director.schema.notes import bgp_notes, snat_notes
    from director.schema.reparse import Reparser

    STARTUP.mark("imports")
    _first_moments()
    # The reader reads the file again, on SIGHUP, at the cost of the edit.
    config_reader, settings = parsed or _read(Reparser(), args.config, cache)
    config_reader.settle()  # the first moments' parse left its items for after the table
    STARTUP.mark("config")
    sent_early = bool(EARLY.get("sent") or REPLAY.get("replayed"))

    for note in bgp_notes(settings) + snat_notes(settings):
        logs.event(_log, "config.note", level=logging.WARNING, note=note)
    # held until the process ends: decommission finds a running director by it
    held = None if args.dry_run else runlock.hold(args.config)
    if held is None and not args.dry_run:
        logs.event(
            _log,
            "run.lock_unavailable",
            level=logging.WARNING,
            file=str(runlock.path_for(args.config)),
            effect="director decommission cannot tell that this director runs",
        )
    try:
        ipvs = open_ipvs(args.netns)
    except IpvsUnavailable as exc:
        if not args.dry_run:
            raise
        # A shadow on a host without IPVS plans against an empty table.
        logs.event(_log, "ipvs.unavailable_shadow", reason=str(exc))
        ipvs = FakeIpvs()
    served: list[Runtime] = []  # the runtime, once made
    try:
        code = _serve(args, settings, ipvs, config_reader=config_reader, cache=cache, served=served)
    except BaseException:
        code = EXIT_FATAL
        raise
    finally:
        # Refused, or failed, after its first moments sent a table, before it kept it.
        if code != 0 and sent_early and not _kept(served):
            _withdraw(settings, ipvs)
        ipvs.close()
    return code


def _serve(
    args: argparse.Namespace,
    settings: Settings,
    ipvs: Ipvs,
    *,
    config_reader: Reparser,
    cache: Path | None,
    served: list[Runtime],
) -> int:
    """The director until it is asked to stop (or fails); its exit status. The runtime is
    put in ``served`` once made."""
    import signal

    from director.cli.runtime import Runtime
    from director.dataplane.fake import FakeIpvs
    from director.schema.config import ConfigError

    # The main thread sleeps until a signal (or a fatal fault) wakes it: SIGTERM/SIGINT stop,
    # SIGHUP reloads (systemctl reload: ExecReload=kill -HUP), without polling.
    asked, wake = set[str](), Wake()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: asked.add("stop"))
    signal.signal(signal.SIGHUP, lambda *_: asked.add("reload"))
    # The API and the metrics read through their own socket (no waiting on the loop's).
    reader = (
        open_ipvs(args.netns)
        if settings.api is not None and not isinstance(ipvs, FakeIpvs)
        else None
    )
    try:
        runtime = Runtime(
            settings,
            ipvs,
            reader=reader,
            dry_run=args.dry_run,
            state_file=Path(args.state_file) if args.state_file else None,
            kubeconfig=args.kubeconfig,
            netns=args.netns,
            on_fatal=lambda _reason: wake.ask(asked, "stop"),
        )
        served.append(runtime)
        STARTUP.mark("start")
        runtime.hooks.on_ready = _timed_ready(runtime, runtime.hooks.on_ready)
        caches = _start_caches(runtime, ipvs, config_reader, cache, dry_run=args.dry_run)
        runtime.start()
    except ValueError as exc:  # a token file, a kubeconfig, the API's address, the FIFO
        raise ConfigError(settings.source, 0, "", str(exc)) from None
    try:
        while "stop" not in asked:
            wake.wait()
            if "reload" in asked and "stop" not in asked:
                asked.discard("reload")
                runtime.reload(args.config, config_reader)
                if caches is not None:  # the file just read, kept for the next start
                    caches.due()
    finally:
        runtime.stop()
        wake.close()
        if reader is not None:
            reader.close()
    if runtime.failed is not None:
        print(f"director: stopped: {runtime.failed}", file=sys.stderr)
        return EXIT_FATAL
    return 0


def _parsed(config: str, cache: Path | None) -> tuple[Reparser, Settings] | None:
    """The file as the first moments read it, if they read this one (for this cache)."""
    for given, kept, reader, settings in STARTUP_PARSED:
        if given == config and kept == cache:
            STARTUP_PARSED.clear()  # the parse is the command's now
            return reader, settings  # type: ignore[return-value]
    STARTUP_PARSED.clear()
    return None


def _kept(served: list[Runtime]) -> bool:
    """The runtime applied its first sync: the table is the director's own from then on."""
    return bool(served) and served[0].controller.health.first_sync_done


def _read(reader: Reparser, config: str, cache: Path | None) -> tuple[Reparser, Settings]:
    return reader, reader.load(config, cache)


def _withdraw(settings: Settings, ipvs: Ipvs) -> None:
    """The static services the first moments sent (a replay, an early table) removed: the
    start failed before its first sync, and no director keeps them."""
    from director.cli.early import withdraw

    try:
        removed = withdraw(settings, ipvs)
    except Exception as exc:  # the start's own failure is the one to report
        logs.event(_log, "startup.withdraw_failed", level=logging.ERROR, reason=repr(exc))
        return
    logs.event(_log, "startup.withdrawn", level=logging.WARNING, services=removed)


class Wake:
    """What wakes ``director run``'s main thread: a signal (the kernel's wakeup byte through
    Python's wakeup fd; the handler itself only notes what was asked, and so never waits on
    a lock the interrupted main thread holds, as ``Event.set()`` in a handler can: that
    deadlock left a SIGTERM unanswered), or another thread's ``ask``."""

    def __init__(self) -> None:
        import signal

        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous = signal.set_wakeup_fd(self._write)

    def wait(self) -> None:
        """Until a signal or an ``ask`` (the caller looks at what was asked)."""
        os.read(self._read, 512)

    def ask(self, asked: set[str], what: str) -> None:
        asked.add(what)
        with contextlib.suppress(BlockingIOError):  # full: it will wake anyway
            os.write(self._write, b"\0")

    def close(self) -> None:
        import signal

        signal.set_wakeup_fd(self._previous)
        os.close(self._read)
        os.close(self._write)


def _first_moments() -> None:
    """Say what the command's first moments did (:mod:`director.cli.boot`) with a kept
    table and with the dataclasses' kept code (``classcode``: given back, and written now
    that the imports are done), and wait for the child that parses the file into the cache
    while this imports, if one was forked (:mod:`director.cli.ahead`), and say what came of
    it. Before the director has a second thread: one C heap for all of them (``one_heap``)."""
    from director.dataplane.memory import one_heap

    one_heap()
    for record in HELD:  # what the first moments' parse said, said now that logging is up
        assert isinstance(record, logging.LogRecord)
        logging.getLogger(record.name).handle(record)
    HELD.clear()
    code = classcode.keep()
    if code:
        logs.event(_log, "startup.class_code", fields=code)
    if REPLAY:
        logs.event(_log, "startup.replay", fields=REPLAY)
    if AHEAD:
        done = ahead.wait()
        EARLY.update(done.pop("early", None) or {})  # type: ignore[call-overload]
        logs.event(_log, "startup.parse_ahead", fields={**AHEAD, **done})
    if EARLY:
        logs.event(_log, "startup.early", fields=EARLY)


def _config_cache(given: str | None, config: str | None = None) -> Path | None:
    """``--config-cache``: a path, '' for none, unset for systemd's state directory's. A
    cache that would be written over the configuration file is refused (ConfigError)."""
    from director.schema.cache import default_path
    from director.schema.config import ConfigError

    if given is None:
        return default_path()
    if given and config and os.path.realpath(given) == os.path.realpath(config):
        raise ConfigError(config, 0, "", f"--config-cache {given} is the configuration file itself")
    return Path(given) if given else None


def _start_caches(
    runtime: Runtime, ipvs: object, reader: Reparser, cache: Path | None, *, dry_run: bool
) -> StartCaches | None:
    """What keeps the next start's caches (:mod:`director.cli.startcache`): the file's
    parse, and a static box's table beside it for a replay (not by a shadow, which writes
    nothing to the kernel, nor beside the fake); nothing without a cache. Looked at after
    each step of the loop, once the first sync is applied."""
    from director.cli.startcache import Encoder, StartCaches, chained
    from director.dataplane.kernel import KernelIpvs

    if cache is None:
        return None
    loop = runtime.controller
    encoder = (
        Encoder(ipvs.encoded, ipvs.family) if isinstance(ipvs, KernelIpvs) and not dry_run else None
    )
    caches = StartCaches(
        reader,
        cache,
        intents=lambda: loop.store.current,
        ready=lambda: loop.health.first_sync_done,
        encoder=encoder,
        ledger=loop.health.owned,
    )
    runtime.hooks.on_step = chained(runtime.hooks.on_step, caches.check)
    return caches


def _timed_ready(runtime: Runtime, ready: Callable[[str], None] | None) -> Callable[[str], None]:
    """``ready``, and then (the loop's own thread, once the first sync is applied) where the
    start's time went, since exec."""

    def timed(message: str) -> None:
        if ready is not None:
            ready(message)
        STARTUP.mark("first_sync")
        first_sync = runtime.controller.programmer.first_sync_phases
        phases = {f"first_sync_{name}": seconds for name, seconds in first_sync}
        logs.event(_log, "startup.timing", fields=STARTUP.figures(**phases))

    return timed
