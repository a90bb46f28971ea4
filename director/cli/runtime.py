"""Wiring for ``director run``: watchers, the lease elector, the controller thread.

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
from typing import TYPE_CHECKING, NamedTuple

from director.adapters.lease import Elector
from director.adapters.metrics import Metrics
from director.adapters.metrics_daemons import FrrFigures
from director.adapters.metrics_ipvs import Scrape
from director.adapters.prober import Checker
from director.adapters.systemd import Notifier
from director.cli.preflight import read_token
from director.core.announce import PeerState
from director.core.cluster_parse import node_from_json, service_from_json, slice_from_json
from director.core.firewall import FakeFirewall, Firewall
from director.core.model import Family
from director.core.owned import Ledger
from director.dataplane.fake import FakeIpvs
from director.dataplane.interface import Ipvs
from director.engine.events import (
    LeaseRefused,
    Leaving,
    Reloaded,
    Reply,
    TargetChecked,
    VrrpChanged,
)
from director.engine.loop import COMPONENT, Controller
from director.engine.reconcile import SyncReport
from director.engine.reload import restart_only
from director.logs import event
from director.schema.config import ConfigError, Settings
from director.schema.reparse import Reparser

if TYPE_CHECKING:  # each adapter is imported where the file asks for its part (a static
    # box without `kubernetes:` or `api:` loads neither the Kubernetes client nor flask)
    from director.adapters.conntrackd import ConntrackdFile
    from director.adapters.frr_sync import FrrSync
    from director.adapters.http import HttpServer as ApiServer
    from director.adapters.keepalived import KeepalivedSync
    from director.adapters.kube import Handler, KubeApi
    from director.adapters.kube_watch import Watcher
    from director.adapters.kube_write import KubeWriter
    from director.adapters.sysctl import Sysctls
    from director.adapters.vrrp import VrrpFifo

log = logging.getLogger("director.runtime")
# A director serves the middle of a connection that started on another (ECMP moved it):
# IPVS schedules a non-SYN packet only with these set.
SLOPPY = {
    name: ("1", "connections break when directors join or leave")
    for name in ("net.ipv4.vs.sloppy_tcp", "net.ipv4.vs.sloppy_sctp")
}
# Full NAT: IPVS's connections in conntrack, so the SNAT of their packets is undone on the
# replies (the IPv4 switch covers IPv6 too).
FULLNAT_SYSCTLS = {"net.ipv4.vs.conntrack": ("1", "full-NAT replies are not translated back")}
# With conntrackd in the pair: the middle of a connection this box has no entry for is not
# taken up (with a new SNAT port) but dropped until conntrackd's commit gives it its own.
STRICT_PICKUP = {
    "net.netfilter.nf_conntrack_tcp_loose": (
        "0",
        "a full-NAT connection taken over before conntrackd's commit gets a new SNAT port "
        "and breaks",
    )
}


class Vrrp(NamedTuple):
    """A pair's parts: keepalived's file, its state FIFO, and conntrackd's file."""

    sync: KeepalivedSync
    fifo: VrrpFifo
    conntrackd: ConntrackdFile | None


class Daemons(NamedTuple):
    """What the director keeps beside its table: the pair's files, FRR's, the kernel's
    parameters (each None when the file asks for none)."""

    vrrp: Vrrp | None
    frr: FrrSync | None
    sysctls: Sysctls | None

    @property
    def keepalived(self) -> KeepalivedSync | None:
        return self.vrrp.sync if self.vrrp else None

    @property
    def fifo(self) -> VrrpFifo | None:
        return self.vrrp.fifo if self.vrrp else None

    @property
    def conntrackd(self) -> ConntrackdFile | None:
        return self.vrrp.conntrackd if self.vrrp else None


RELOAD_WAIT = 120.0  # seconds the loop has to take a reloaded file (a 5,000-service table)


PARSERS = {
    "services": service_from_json,
    "endpointslices": slice_from_json,
    "nodes": node_from_json,
}


def _cluster(
    settings: Settings, kubeconfig: str | None
) -> tuple[KubeApi | None, KubeWriter | None]:
    """The Kubernetes client and writer (none without a ``kubernetes`` section)."""
    kube = settings.kubernetes
    if kube is None:
        return None, None
    from director.adapters.kube import KubeApi
    from director.adapters.kube_write import KubeWriter

    where = kubeconfig or kube.kubeconfig
    try:
        kube_api = KubeApi.connect(where)
    except Exception as exc:  # the client raises ConfigException, OSError, YAML errors
        raise ValueError(
            f"kubernetes: cannot load the cluster's credentials from "
            f"{where or 'the pod service account'}: {exc}"
        ) from None
    kube_api.api.configuration.retries = False  # the watchers have their own backoff
    return kube_api, KubeWriter(kube_api, COMPONENT, kube.identity)


def _watchers(kube_api: KubeApi | None, submit: Handler, watch_seconds: int) -> list[Watcher]:
    """One watcher per resource the director follows (none without a cluster)."""
    if kube_api is None:
        return []
    from director.adapters.kube import RESOURCES
    from director.adapters.kube_watch import Watcher

    return [
        Watcher(kube_api, resource, submit, PARSERS[resource.name], watch_seconds=watch_seconds)
        for resource in RESOURCES
    ]


def _kernel_settings(
    settings: Settings, ipvs: Ipvs, netns: str | None, dry_run: bool, ledger: Ledger
) -> Sysctls | None:
    """The kernel parameters full NAT and BGP need, kept (none beside the fake: the host is
    not touched)."""
    if dry_run or isinstance(ipvs, FakeIpvs):
        return None
    wanted = {**(FULLNAT_SYSCTLS if settings.snat else {}), **(SLOPPY if settings.bgp else {})}
    if settings.snat and settings.ha is not None and settings.ha.conntrackd is not None:
        wanted.update(STRICT_PICKUP)
    if not wanted:
        return None
    from director.adapters.sysctl import Sysctls

    return Sysctls(netns or getattr(ipvs, "netns", None), wanted, ledger=ledger)


def _firewall(ipvs: Ipvs, netns: str | None, settings: Settings, dry_run: bool) -> Firewall:
    """The source filter and full NAT: the fake beside the fake, nftables beside the
    kernel's IPVS (in its namespace). With full NAT, IPVS's connections are tracked, so that
    conntrack undoes the SNAT on the replies (``net.ipv4.vs.conntrack``)."""
    if isinstance(ipvs, FakeIpvs):
        return FakeFirewall()
    from director.dataplane.nft import NftFirewall

    where = netns or getattr(ipvs, "netns", None)
    snat_to: dict[Family, tuple[str, ...]] = {}
    for address in settings.snat.addresses if settings.snat else ():
        snat_to[Family.of(address)] = (*snat_to.get(Family.of(address), ()), address)
    ports = settings.snat.ports if settings.snat else None
    return NftFirewall(where, snat_to=snat_to, snat_ports=ports)


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
    ) -> None:
        """``reader``: a second adapter for the API's and the metrics' reads. ``firewall``:
        the source filter (by default nftables beside the kernel, the fake beside the fake).
        ``on_fatal(reason)``: a thread the director needs has died."""
        self.on_fatal = on_fatal
        self.failed: str | None = None  # why the director must stop, once it must
        self.metrics = Metrics()
        kube_api, writer = _cluster(settings, kubeconfig)
        self.controller = Controller(
            ipvs,
            settings,
            writer=None if dry_run else writer,
            dry_run=dry_run,
            state_file=state_file,
            observer=observer,
            intents_file=Path(settings.api.intents_file) if settings.api else None,
            recorder=self.metrics.recorder,
            firewall=firewall or _firewall(ipvs, netns, settings, dry_run),
        )
        scrape = self.metrics.serve(
            self.controller.door(),
            reader,
            self._keepalived_counts,
            self._frr_figures,
            self._conntrack,
        )
        self.watchers = _watchers(kube_api, self.controller.submit, watch_seconds)
        kube = settings.kubernetes
        self.elector = (
            Elector(
                writer,
                kube.lease_namespace,
                kube.lease_name,
                kube.lease_seconds,
                self.controller.set_leader,
                on_refused=lambda reason: self.controller.post(LeaseRefused(reason)),
                ledger=self.controller.health.owned,
            )
            if writer is not None and kube is not None and not dry_run
            else None
        )
        self.api = self._api(settings, None if dry_run else writer, scrape, reader)
        self.checker = self._checker(settings, netns)
        self.daemons = Daemons(
            self._keepalived(settings, dry_run),  # keepalived.conf, the FIFO, conntrackd.conf
            self._frr(settings, dry_run, netns, ipvs),
            _kernel_settings(settings, ipvs, netns, dry_run, self.controller.health.owned),
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self.controller.run, args=(self._stop,), name="controller", daemon=True
        )
        # systemd (Type=notify): ready once the first sync is applied; the watchdog is fed by
        # the control loop itself, so a loop that stops stepping gets the director restarted.
        self.notifier = Notifier()
        self.controller.exports.on_ready = self.notifier.ready
        self.controller.pace.on_step = self._stepped
        self._stopping = threading.Event()  # set first thing in stop(): threads may end
        self._watchdog = threading.Thread(target=self._watch, name="watchdog", daemon=True)

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

    def _api(
        self, settings: Settings, writer: KubeWriter | None, scrape: Scrape, reader: Ipvs | None
    ) -> ApiServer | None:
        if settings.api is None:
            return None
        from director.adapters.http import HttpServer as ApiServer
        from director.web.app import create_app, early_gate
        from director.web.bodies import MAX_BODY

        app = create_app(
            self.controller.door(),
            read_token(settings.api.token_file),
            writer=writer,
            metrics=scrape,
            reader=reader,
            public=settings.api.public,
            peers=self._peers,
        )
        api = settings.api
        token = read_token(api.token_file)
        return ApiServer(
            app,
            api.host,
            api.port,
            body_bytes=MAX_BODY,
            gate=early_gate(token, api.public),
            cert=api.tls_cert,
            key=api.tls_key,
        )

    def _peers(self) -> tuple[PeerState, ...]:
        daemons = getattr(self, "daemons", None)  # the API is made before FRR's part
        frr = daemons.frr if daemons is not None else None
        return frr.sessions if frr is not None else ()

    def _checker(self, settings: Settings, netns: str | None) -> Checker | None:
        """Active health checks, run from the director's own network namespace."""
        if settings.health is None:
            return None
        recorder = self.metrics.recorder
        checker = Checker(
            lambda target, health: self.controller.post(TargetChecked(target, health.up)),
            netns=netns,
            on_result=lambda _target, health: recorder.health.observe(health.last_seconds),
        )
        self.controller.gate.on_targets = checker.update
        return checker

    def _keepalived(self, settings: Settings, dry_run: bool) -> Vrrp | None:
        if settings.ha is None or dry_run:
            return None
        from director.adapters.keepalived import KeepalivedSync
        from director.adapters.vrrp import VrrpFifo

        owned = self.controller.health.owned
        sync = KeepalivedSync(settings.ha, settings.source, ledger=owned)
        self.controller.exports.vips.announce = sync.submit
        fifo = VrrpFifo(settings.ha.fifo, lambda state: self.controller.post(VrrpChanged(state)))
        conntrackd = None
        if settings.ha.conntrackd is not None:
            from director.adapters.conntrackd import ConntrackdFile

            conntrackd = ConntrackdFile(settings.ha.conntrackd, settings.source, ledger=owned)
        return Vrrp(sync, fifo, conntrackd)

    def _frr(
        self, settings: Settings, dry_run: bool, netns: str | None, ipvs: Ipvs
    ) -> FrrSync | None:
        """The BGP speaker's configuration (FRR), and the kernel's settings a director
        needs to take over the middle of a connection another director saw start."""
        if settings.bgp is None or dry_run:
            return None
        if isinstance(ipvs, FakeIpvs):  # nothing real to announce: the host is not touched
            event(log, "bgp.off", reason="the fake dataplane: routes are decided, not announced")
            return None
        from director.adapters.frr_sync import FrrSync

        sync = FrrSync(
            settings.bgp,
            settings.pools,
            settings.source,
            netns=netns,
            ledger=self.controller.health.owned,
        )
        self.controller.exports.vips.on_routes = sync.submit
        return sync

    def _frr_figures(self) -> FrrFigures | None:
        daemons = getattr(self, "daemons", None)  # a scrape may come before they are made
        sync = daemons.frr if daemons is not None else None
        if sync is None:
            return None
        return FrrFigures(sync.sessions, sync.frr.rejected, sync.frr.reloads)

    def _conntrack(self) -> dict[str, int] | None:
        """netfilter's counters where full NAT runs (None without it, or beside the fake)."""
        daemons = getattr(self, "daemons", None)  # a scrape may come before they are made
        keeper = daemons.sysctls if daemons is not None else None
        if keeper is None or "net.ipv4.vs.conntrack" not in keeper.effects:
            return None
        from director.dataplane.netns import conntrack_stats

        try:
            return conntrack_stats(keeper.netns)
        except OSError:
            return None

    def _keepalived_counts(self) -> tuple[int, int] | None:
        daemons = getattr(self, "daemons", None)  # a scrape may come before they are made
        sync = daemons.keepalived if daemons is not None else None
        if sync is None:
            return None
        return sync.keepalived.rejected, sync.keepalived.reloads

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
        if self.elector is not None:
            self.elector.start()
        for watcher in self.watchers:
            watcher.start()
        self._thread.start()
        self._watchdog.start()

    def essential_threads(self) -> list[threading.Thread]:
        """The threads without which the director silently stops doing its job."""
        threads = [self._thread, *(w._thread for w in self.watchers)]
        if self.controller.reporter.outbox is not None:
            threads += self.controller.reporter.outbox.threads
        parts = (
            self.elector,
            self.checker,
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
            if dead and not self._stopping.is_set():
                self.fail(f"thread {', '.join(dead)} ended")
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
                f"{', '.join(sections)} changed: only services can change on "
                "a reload; restart the director for the rest"
            )
        reply = Reply()
        self.controller.post(Reloaded(new, reply))
        if not reply.wait(timeout):
            return "failed", f"the control loop did not take the file within {timeout:.0f} s"
        return ("applied" if reply.ok else "refused"), reply.detail

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
            maintenance = self.controller.exports.view.addressing.maintenance or ""
            if maintenance.startswith("the director is stopping"):
                break
            time.sleep(0.05)
        started = time.monotonic()
        # A reload in flight (the first after a start goes through frr-reload.py) ends
        # before the withdrawal can go out: wait for it, however slow the box. A text FRR
        # refused waits for a change, but its routes went out on what FRR runs: FRR itself
        # says whether anything is still announced.
        from director.adapters.frr import RELOAD_SECONDS

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
        for watcher in self.watchers:
            watcher.stop()
        if self.elector is not None:
            self.elector.stop()
        if self.api is not None:
            self.api.stop()
        if self.checker is not None:
            self.checker.stop()
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
