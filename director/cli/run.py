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
from director.cli import ahead, classcode
from director.cli.plans import EXIT_FATAL, open_ipvs
from director.cli.startup import AHEAD, REPLAY, STARTUP
from director.dataplane.interface import IpvsUnavailable

if TYPE_CHECKING:
    from director.cli.runtime import Runtime
    from director.core.ownership import Ownership
    from director.core.services import Table
    from director.dataplane.kernel import KernelIpvs
    from director.schema.config import Settings
    from director.schema.reparse import Reparser

_log = logging.getLogger("director.cli")


def cmd_run(args: argparse.Namespace) -> int:
    """The appliance: follow the cluster until SIGTERM/SIGINT; SIGHUP reloads the file."""
    import signal

    from director.cli.runtime import Runtime
    from director.dataplane.fake import FakeIpvs
    from director.schema.config import ConfigError
    from director.schema.notes import bgp_notes, snat_notes
    from director.schema.reparse import Reparser

    STARTUP.mark("imports")
    _first_moments()
    config_reader = Reparser()  # reads the file again, on SIGHUP, at the cost of the edit
    cache = _config_cache(args.config_cache)
    settings = config_reader.load(args.config, cache)
    STARTUP.mark("config")

    for note in bgp_notes(settings) + snat_notes(settings):
        logs.event(_log, "config.note", level=logging.WARNING, note=note)
    try:
        ipvs = open_ipvs(args.netns)
    except IpvsUnavailable as exc:
        if not args.dry_run:
            raise
        # A shadow on a host without IPVS plans against an empty table.
        logs.event(_log, "ipvs.unavailable_shadow", reason=str(exc))
        ipvs = FakeIpvs()
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
        STARTUP.mark("start")
        keep_table = _table_keeper(
            runtime, settings, ipvs, config_reader, None if args.dry_run else cache
        )
        runtime.hooks.on_ready = _timed_ready(
            runtime, runtime.hooks.on_ready, _keeper(config_reader, cache, keep_table)
        )
        runtime.start()
    except ValueError as exc:  # a token file, a kubeconfig, the API's address, the FIFO
        raise ConfigError(settings.source, 0, "", str(exc)) from None
    try:
        while "stop" not in asked:
            wake.wait()
            if "reload" in asked and "stop" not in asked:
                asked.discard("reload")
                runtime.reload(args.config, config_reader)
                _keeper(config_reader, cache)()  # the parse of the file now running
    finally:
        runtime.stop()
        wake.close()
        ipvs.close()
        if reader is not None:
            reader.close()
    if runtime.failed is not None:
        print(f"director: stopped: {runtime.failed}", file=sys.stderr)
        return EXIT_FATAL
    return 0


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
    code = classcode.keep()
    if code:
        logs.event(_log, "startup.class_code", fields=code)
    if REPLAY:
        logs.event(_log, "startup.replay", fields=REPLAY)
    if AHEAD:
        logs.event(_log, "startup.parse_ahead", fields={**AHEAD, **ahead.wait()})


def _config_cache(given: str | None) -> Path | None:
    """``--config-cache``: a path, '' for none, unset for systemd's state directory's."""
    from director.schema.cache import default_path

    if given is None:
        return default_path()
    return Path(given) if given else None


def _keeper(
    reader: Reparser, cache: Path | None, then: Callable[[], None] = lambda: None
) -> Callable[[], None]:
    """What keeps the file's parse for the next start: a write on a thread of its own (the
    loop and the reload go on meanwhile); nothing without a cache. And ``then``."""
    import threading

    def keep() -> None:
        if cache is not None:
            threading.Thread(
                target=reader.save, args=(cache,), name="config-cache", daemon=True
            ).start()
        then()

    return keep


def _table_keeper(
    runtime: Runtime, settings: Settings, ipvs: object, reader: Reparser, cache: Path | None
) -> Callable[[], None]:
    """What keeps a static box's table for its next start's replay (``table.cache`` beside
    the parse's, :mod:`director.dataplane.replay`): once the first sync is applied, the
    static services as programmed then, planned from an empty kernel and encoded on a thread
    of its own, with the API's files as they were (the intents, the token, the TLS pair: a
    replay needs them unchanged); nothing when the cache already holds this file's. Not
    kept: a box with the cluster's Services (its table is not the file's alone), a full-NAT
    service (its SNAT rule must be in force first), a shadow (it writes nothing), no cache."""
    import threading

    from director.dataplane.kernel import KernelIpvs
    from director.engine.view import STATIC

    if cache is None or settings.in_cluster or not isinstance(ipvs, KernelIpvs):
        return lambda: None
    api = settings.api

    def keep() -> None:  # the loop's thread: the table as the first sync left it
        from director.dataplane.replay import digest

        table = runtime.controller.table
        wanted = {
            key: vs
            for key, vs in table.desired.items()
            if table.owner.get(key) == STATIC and key not in settings.static_snat
        }
        # The intents the first sync applied, as they are now (an API call is the loop's), and
        # the files the start read and would refuse: the token, the TLS pair. A replay runs
        # before they are read again; as they were, they pass again.
        files = (
            [api.intents_file, api.token_file, api.tls_cert, api.tls_key] if api is not None else []
        )
        try:
            depends = {name: digest(name) for name in files if name}
        except OSError as exc:  # unreadable now: no table kept, the start reads them anew
            logs.event(_log, "table.not_kept", level=logging.WARNING, reason=str(exc))
            return
        key = reader.last_key()
        if key is not None:
            threading.Thread(
                target=_keep_table,
                args=(ipvs, wanted),
                kwargs={
                    "ownership": settings.ownership,
                    "key": key,
                    "cache": cache,
                    "depends": depends,
                },
                name="table-cache",
                daemon=True,
            ).start()

    return keep


def _keep_table(
    ipvs: KernelIpvs,
    wanted: Table,
    *,
    ownership: Ownership,
    key: str,
    cache: Path,
    depends: dict[str, str],
) -> None:
    import time

    from director.core.added import OpChain
    from director.core.plan import outline, outlined_ops
    from director.dataplane import replay
    from director.dataplane.memory import give_back_free_memory

    path = replay.path_beside(str(cache))
    if replay.kept_for(path, key):
        return  # kept already, by a start with this very file, code and intents
    started = time.monotonic()
    # Encoded a datagram at a time, spooled to disk as made: the 55,000 operations of a
    # 5,000-service table (7.5 MB of datagrams) never live at once (an added service's real
    # servers are packed from their rows, as the first sync sent them).
    shape = outline(wanted, {}, ownership)
    ops = OpChain(planned for _key, planned in outlined_ops(shape, wanted, {}))
    try:
        kept, size = replay.store(
            path, key, ipvs.family, ipvs.encoded(ops), services=len(wanted), depends=depends
        )
    except OSError as exc:
        logs.event(_log, "table.not_kept", level=logging.WARNING, path=path, reason=str(exc))
        return
    finally:  # this thread's heap: its free pages back to the system
        give_back_free_memory()
    logs.event(
        _log,
        "table.kept",
        path=path,
        services=len(wanted),
        ops=kept,
        bytes=size,
        seconds=f"{time.monotonic() - started:.3f}",
    )


def _timed_ready(
    runtime: Runtime, ready: Callable[[str], None] | None, then: Callable[[], None]
) -> Callable[[str], None]:
    """``ready``, and then (the loop's own thread, once the first sync is applied) where the
    start's time went, since exec, and ``then``."""

    def timed(message: str) -> None:
        if ready is not None:
            ready(message)
        STARTUP.mark("first_sync")
        first_sync = runtime.controller.programmer.first_sync_phases
        phases = {f"first_sync_{name}": seconds for name, seconds in first_sync}
        logs.event(_log, "startup.timing", fields=STARTUP.figures(**phases))
        then()

    return timed
