"""``director run``: the appliance, until SIGTERM/SIGINT; SIGHUP reloads the file.

One way in and one way to the kernel: the settings are read and validated, the dataplane
and the engine are made, the first sync goes through the ``Ipvs`` port (the configuration's
own services first), the director says READY, and the rest follows from the loop. Nothing
is sent to the kernel before the arguments are parsed and the file is valid, and nothing
the director left on disk is read back at start but the state and intents files (plain
JSON, validated as any input). Where the start's time went is said once the first sync is
applied (``event=startup.timing``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from director import logs
from director.daemon import runlock
from director.daemon.wiring import open_ipvs
from director.dataplane.interface import IpvsUnavailable

if TYPE_CHECKING:
    from director.daemon.runtime import Runtime
    from director.dataplane.interface import Ipvs
    from director.schema.config import Settings
    from director.schema.reparse import Reparser

_log = logging.getLogger("director.cli")
EXIT_FATAL = 4  # a thread the director needs died: systemd restarts it


class Phases:
    """Where a start's time went: seconds since the command began, by phase."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.marks: dict[str, float] = {}

    def mark(self, phase: str) -> None:
        self.marks[phase] = round(time.monotonic() - self.started, 3)


def cmd_run(args: argparse.Namespace) -> int:
    """The appliance: follow the cluster until SIGTERM/SIGINT; SIGHUP reloads the file."""
    from director.dataplane.fake import FakeIpvs
    from director.schema.notes import bgp_notes, snat_notes
    from director.schema.reparse import Reparser

    phases = Phases()
    # The reader reads the file again, on SIGHUP, at the cost of the edit.
    config_reader = Reparser()
    settings = config_reader.load(args.config)
    phases.mark("config")
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
    try:
        return _serve(args, settings, ipvs, config_reader=config_reader, phases=phases)
    finally:
        ipvs.close()


def _serve(
    args: argparse.Namespace,
    settings: Settings,
    ipvs: Ipvs,
    *,
    config_reader: Reparser,
    phases: Phases,
) -> int:
    """The director until it is asked to stop (or fails); its exit status."""
    import signal

    from director.daemon.runtime import Runtime
    from director.dataplane.fake import FakeIpvs
    from director.dataplane.memory import one_heap
    from director.schema.config import ConfigError

    one_heap()  # before the director has a second thread: one C heap for all of them
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
        phases.mark("start")
        runtime.hooks.on_ready = _timed_ready(runtime, runtime.hooks.on_ready, phases)
        runtime.start()
    except ValueError as exc:  # a token file, a kubeconfig, the API's address, the FIFO
        raise ConfigError(settings.source, 0, "", str(exc)) from None
    try:
        while "stop" not in asked:
            wake.wait()
            if "reload" in asked and "stop" not in asked:
                asked.discard("reload")
                runtime.reload(args.config, config_reader)
    finally:
        runtime.stop()
        wake.close()
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


def _timed_ready(
    runtime: Runtime, ready: Callable[[str], None] | None, phases: Phases
) -> Callable[[str], None]:
    """``ready``, and then (the loop's own thread, once the first sync is applied) where the
    start's time went: ``config`` (the file read and validated), ``start`` (the director's
    parts made), ``first_sync`` (the kernel holds the table) with its own parts, in seconds
    since the command began."""

    def timed(message: str) -> None:
        if ready is not None:
            ready(message)
        phases.mark("first_sync")
        first_sync = runtime.controller.programmer.first_sync_phases
        figures = {**phases.marks, **{f"first_sync_{name}": s for name, s in first_sync}}
        logs.event(_log, "startup.timing", fields={k: f"{v:.3f}" for k, v in figures.items()})

    return timed
