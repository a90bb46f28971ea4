"""``director run``'s runtime: its parts (made by ``director.daemon.wiring``) started, watched,
reloaded and stopped; the lease elector; the controller thread.

Kept apart from the CLI so tests, the demo and the benchmarks run exactly what operators
run, with the adapter of their choice (the kernel in a lab namespace, or the fake).

Every thread that keeps the director working is watched: should one ever end while the
director is not stopping (a bug that escaped every guard), ``on_fatal`` is called with the
reason, and ``director run`` exits non-zero so that systemd restarts it. A director that
looks alive but no longer follows the cluster is the one failure we never accept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from director.adapters.systemd import Notifier
from director.core.firewall import Firewall
from director.daemon import wiring
from director.daemon.served import Served, intakes
from director.daemon.token import read_token
from director.daemon.wiring import Daemons
from director.dataplane.interface import Ipvs
from director.engine import clusters
from director.engine.events import Leaving, Reloaded, Reply
from director.engine.hooks import Hooks
from director.engine.loop import Controller
from director.engine.reconcile import SyncReport
from director.engine.reload import restart_only
from director.logs import event
from director.schema.config import ConfigError, Settings
from director.schema.reparse import Reparser

if TYPE_CHECKING:
    from director.adapters.metrics.collector import Metrics

log = logging.getLogger("director.runtime")
RELOAD_WAIT = 120.0  # seconds the loop has to take a reloaded file (a 5,000-service table)


class Runtime:
    def __init__(
        self,
        settings: Settings,
        ipvs: Ipvs,
        *,
        dry_run: bool = False,
        state_file: Path | None = None,
        kubeconfig: str | None = None,
        observer: Callable[[str, SyncReport], None] | None = None,
        watch_seconds: int = 300,
        reader: Ipvs | None = None,
        netns: str | None = None,
        firewall: Firewall | None = None,
        on_fatal: Callable[[str], None] | None = None,
        metrics: bool | None = None,
        intake_processes: bool | None = None,
    ) -> None:
        """``reader``: a second adapter for the API's and the metrics' reads. ``firewall``: the
        source filter (nftables beside the kernel, the fake beside the fake). ``on_fatal
        (reason)``: a thread the director needs died. ``metrics``: keep the Prometheus figures
        (default: with ``api:``). ``intake_processes``: all lists in processes, none, or as is."""
        self.on_fatal, self.dry_run = on_fatal, dry_run
        self.failed: str | None = None  # why the director must stop, once it must
        self.metrics: Metrics | None = wiring.metrics(settings, metrics)
        recorder = self.metrics.recorder if self.metrics is not None else None
        made = wiring.clusters(settings, kubeconfig)  # each with its client and writer
        kept = intakes(settings, intake_processes)  # a fork server: before a second thread
        writers = None if dry_run else {one.name: one.writer for one in made}
        self.hooks = Hooks()  # every call out of the loop: who listens is set as parts are made
        self.controller = Controller(
            ipvs,
            settings,
            writer=writers,
            dry_run=dry_run,
            state_file=state_file,
            observer=observer,
            intents_file=Path(settings.api.intents_file) if settings.api else None,
            recorder=recorder,
            firewall=firewall or wiring.firewall(ipvs, netns, settings, dry_run),
            hooks=self.hooks,
        )
        scrape = (
            None
            if self.metrics is None
            else self.metrics.serve(
                self.controller.door(),
                reader,
                lambda: wiring.keepalived_counts(self._daemons()),
                frr=lambda: wiring.frr_figures(self._daemons()),
                conntrack=lambda: wiring.conntrack(self._daemons()),
                conntrackd=lambda: wiring.conntrackd_figures(self._daemons()),
                syn_guard=lambda: wiring.syn_guard_figures(
                    settings,
                    self.controller.parts.filter.guard,
                    self.controller.parts.filter.firewall,
                    netns or getattr(ipvs, "netns", None),
                ),
            )
        )
        self.served = Served(settings, made, self.controller, dry_run, watch_seconds, intakes=kept)
        self.token = wiring.admin_token(settings)  # a reload reads its file again
        self.api = wiring.api_server(
            settings,
            self.controller,
            self.token,
            writer=writers,
            scrape=scrape,
            reader=reader,
            peers=lambda: wiring.peers(self._daemons()),
        )
        self.checker = wiring.checker(settings, netns, self.controller, self.hooks, self.metrics)
        self.box = wiring.box_watch(settings, ipvs, netns, dry_run, self.controller)
        self.daemons = Daemons(
            wiring.vrrp(settings, dry_run, self.controller, self.hooks),  # + FIFO, conntrackd
            wiring.frr(
                settings, dry_run, netns, ipvs, controller=self.controller, hooks=self.hooks
            ),
            wiring.kernel_settings(settings, ipvs, netns, dry_run, self.controller.health.owned),
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self.controller.run, args=(self._stop,), name="controller", daemon=True
        )
        # systemd (Type=notify): ready once the first sync is applied; the watchdog is fed by
        # the control loop itself, so a loop that stops stepping gets the director restarted.
        self.notifier = Notifier()
        self.hooks.on_ready = self.notifier.ready
        self.hooks.on_step = self._stepped
        self._stopping = threading.Event()  # set first thing in stop(): threads may end
        self._watchdog = threading.Thread(target=self._watch, name="watchdog", daemon=True)

    def _daemons(self) -> Daemons | None:
        """The daemons, once made (the API and the metrics are made before them)."""
        return getattr(self, "daemons", None)

    def _stepped(self) -> None:
        """After each step of the control loop: systemd's watchdog, and (once the first sync
        is applied) the heartbeat keepalived's liveness check reads."""
        self.notifier.watchdog()
        sync = self.daemons.keepalived
        if (
            sync is not None
            and sync.heartbeat is not None
            and self.controller.health.first_sync_done
        ):
            sync.heartbeat.beat()

    def start(self) -> Runtime:
        """Start every part; on an error (ValueError: the API's address, the FIFO), what was
        started is stopped again before it is raised."""
        if self._thread.is_alive():
            return self
        try:
            self._start_parts()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_parts(self) -> None:
        if self.box is not None:
            self.box.start()
        if self.api is not None:
            self.api.start()
        if self.checker is not None:
            self.checker.start()
        if self.daemons.vrrp is not None:
            self.daemons.vrrp.fifo.start()
            self.daemons.vrrp.sync.start()
            if self.daemons.vrrp.conntrackd is not None:
                self.daemons.vrrp.conntrackd.start()
        if self.daemons.frr is not None:
            self.daemons.frr.start()
        if self.daemons.sysctls is not None:
            self.daemons.sysctls.start()
        self.served.start()
        self._thread.start()
        self._watchdog.start()

    def essential_threads(self) -> list[threading.Thread]:
        """The threads without which the director silently stops doing its job."""
        threads = [self._thread, *self.served.threads()]
        for outbox in self.controller.parts.reporter.outboxes.values():
            threads += outbox.threads
        parts = (
            self.checker,
            self.box,
            self.daemons.keepalived,
            self.daemons.fifo,
            self.daemons.conntrackd,
        )
        for part in (*parts, self.daemons.frr, self.daemons.sysctls, self.api):
            if part is not None:
                threads.append(part._thread)
        return threads

    def _watch(self) -> None:
        while not self._stopping.wait(0.5):
            dead = [t.name for t in self.essential_threads() if t.ident and not t.is_alive()]
            ended = [f"thread {', '.join(dead)} ended"] if dead else []
            zygote = self.served.zygote
            if zygote is not None and not zygote.alive():
                ended.append(f"the zygote that forks the list processes (pid {zygote.pid}) ended")
            if ended and not self._stopping.is_set():
                self.fail("; ".join(ended))
                return

    def fail(self, reason: str) -> None:
        """The director can no longer do its job: say so and have it stopped."""
        if self.failed is None:
            self.failed = reason
            event(
                log,
                "director.fatal",
                level=logging.CRITICAL,
                reason=reason,
                action="exiting so that systemd restarts the director",
            )
            if self.on_fatal is not None:
                self.on_fatal(reason)

    def reload(
        self, path: str, reader: Reparser | None = None, timeout: float = RELOAD_WAIT
    ) -> tuple[str, str]:
        """SIGHUP: read ``path`` again and apply its services, or change nothing and say why.
        Returns (result, detail): result ``applied``, ``invalid`` (the file fails
        validation), ``refused`` (a restart-only section changed, or a new static service
        collides with a Service) or ``failed`` (the loop did not take it in ``timeout``).
        ``reader``: the reader the running file was read with (it parses again only what
        changed)."""
        reader = reader or Reparser()
        started = time.monotonic()
        self.notifier.send("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")
        result, detail = self._reload(path, reader, timeout)
        seconds = round(time.monotonic() - started, 3)
        if self.metrics is not None:
            self.metrics.reloads.observe(result)
        if result == "applied":
            event(
                log,
                "config.reloaded",
                file=path,
                changes=detail,
                seconds=seconds,
                services_reused=reader.reused,
            )
        else:
            event(
                log,
                "config.reload_refused",
                level=logging.ERROR,
                file=path,
                result=result,
                reason=detail,
                effect="the running configuration is unchanged",
            )
        self.notifier.send("READY=1", f"STATUS=reload {result}: {detail[:200]}")
        return result, detail

    def _reload(self, path: str, reader: Reparser, timeout: float) -> tuple[str, str]:
        try:
            new = reader.load(path)
        except ConfigError as exc:
            return "invalid", str(exc)
        sections = restart_only(self.controller.settings, new)
        if sections:
            return "refused", (
                f"{', '.join(sections)} changed: only services, and whole clusters, can change "
                "on a reload; restart the director for the rest"
            )
        rotated = self._token(new)
        if rotated is not None:
            return "invalid", rotated
        added, removed = clusters.changed(self.controller.settings, new)
        try:  # the added clusters' credentials, loaded before the loop takes the file
            kept = [c for c in self.served.clusters if c.name not in removed]
            made = wiring.clusters(new, None, added, beside=kept) if added else []
        except ValueError as exc:
            return "refused", str(exc)
        writers = {} if self.dry_run else {one.name: one.writer for one in made}
        reply = Reply()
        self.controller.post(Reloaded(new, reply, writers))
        if not reply.wait(timeout):
            if made or removed:  # should the loop take the file later, its clusters follow
                threading.Thread(
                    target=self._late, args=(reply, new, made, removed), daemon=True
                ).start()
            return "failed", f"the control loop did not take the file within {timeout:.0f} s"
        if reply.ok and (made or removed):
            self.served.change(new, made, removed)
        return ("applied" if reply.ok else "refused"), reply.detail

    def _token(self, new: Settings) -> str | None:
        """The admin token read again from its file (an operator rotates it with a new file
        and a reload): the next request is checked against it. Why not, or None."""
        if self.token is None or new.api is None:
            return None
        try:
            value = read_token(new.api.token_file)
        except ValueError as exc:
            return str(exc)
        if self.token.set(value):
            event(log, "api.token_rotated", file=new.api.token_file)
        return None

    def _late(
        self, reply: Reply, new: Settings, made: list[wiring.Cluster], removed: list[str]
    ) -> None:
        """A reload the loop took after its caller stopped waiting: the clusters it adds
        are watched and their Leases sought, those it removes stopped, all the same."""
        while not reply.wait(5.0):
            if not self._thread.is_alive():
                return
        if reply.ok:
            event(log, "cluster.reload_taken_late", added=len(made), removed=len(removed))
            self.served.change(new, made, removed)

    def wait_ready(self, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.controller.health.synced:
                return True
            time.sleep(0.02)
        return False

    def leave(self, reason: str = "stopping") -> bool:
        """Withdraw every BGP route and give the routers ``bgp.leave_seconds`` to move the
        flows to the other directors; IPVS is kept, so connections already here carry on
        through them (sloppy TCP, the same Maglev table). True once FRR has withdrawn."""
        if self.daemons.frr is None or not self._thread.is_alive():
            return False
        self.controller.post(Leaving(reason))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            maintenance = self.controller.parts.exports.view.addressing.maintenance or ""
            if maintenance.startswith("the director is stopping"):
                break
            time.sleep(0.05)
        started = time.monotonic()
        # A reload in flight (the first after a start goes through frr-reload.py) ends
        # before the withdrawal can go out: wait for it, however slow the box. A text FRR
        # refused waits for a change, but its routes went out on what FRR runs: FRR itself
        # says whether anything is still announced.
        from director.adapters.frr.announce import RELOAD_SECONDS

        settled = self.daemons.frr.quiet(RELOAD_SECONDS + 30) and self.daemons.frr.withdrawn(
            timeout=10
        )
        effect = "-" if settled else "FRR may go on announcing the VIPs after the stop"
        event(
            log,
            "bgp.left",
            level=logging.INFO if settled else logging.ERROR,
            reason=reason,
            withdrawn=settled,
            seconds=round(time.monotonic() - started, 1),
            wait_seconds=self.daemons.frr.bgp.leave_seconds,
            effect=effect,
        )
        time.sleep(self.daemons.frr.bgp.leave_seconds)
        return settled

    def stop(self, leave: bool = True) -> None:
        """Stop every part. ``leave``: with BGP, withdraw the routes first (systemctl stop);
        without it the routers find out by BFD, as when the box dies."""
        if leave:
            self.leave()
        self._stopping.set()
        self.notifier.stopping()
        self.served.stop()
        if self.api is not None:
            self.api.stop()
        if self.checker is not None:
            self.checker.stop()
        if self.box is not None:
            self.box.stop()
        if self.daemons.vrrp is not None:
            self.daemons.vrrp.sync.stop()
            self.daemons.vrrp.fifo.stop()
            if self.daemons.vrrp.conntrackd is not None:
                self.daemons.vrrp.conntrackd.stop()
        if self.daemons.frr is not None:
            self.daemons.frr.stop()
        if self.daemons.sysctls is not None:
            self.daemons.sysctls.stop()
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> Runtime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
