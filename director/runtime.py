"""Wiring for ``director run``: watchers, the lease elector, the controller thread.

Kept apart from the CLI so tests, the demo and the benchmarks run exactly what operators
run, with the adapter of their choice (the kernel in a lab namespace, or the fake).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from director.api import create_app
from director.cluster import node_from_json, service_from_json, slice_from_json
from director.config import Settings
from director.controller import COMPONENT, Controller
from director.dataplane import Ipvs
from director.health import Checker
from director.keepalived import KeepalivedSync, VrrpFifo
from director.kube import RESOURCES, KubeApi, KubeWriter, Watcher, api_client
from director.logs import event
from director.metrics import DirectorCollector, Recorder
from director.reconcile import SyncReport

log = logging.getLogger("director.runtime")


class Elector:
    """Holds the Lease that decides which director of the pair writes Service status."""

    def __init__(
        self,
        writer: KubeWriter,
        namespace: str,
        name: str,
        seconds: int,
        on_change: Callable[[bool], None],
    ) -> None:
        self.writer, self.namespace, self.name, self.seconds = writer, namespace, name, seconds
        self.on_change = on_change
        self.leader = False
        self._last_renewal = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                held = self.writer.acquire_lease(self.namespace, self.name, self.seconds)
                if held:
                    self._last_renewal = time.monotonic()
            except Exception as exc:
                event(log, "lease.renew_failed", level=logging.WARNING, reason=str(exc)[:200])
                # Leadership lapses when the lease would have expired for the others too.
                held = self.leader and time.monotonic() - self._last_renewal < self.seconds
            if held != self.leader:
                self.leader = held
                self.on_change(held)
            self._stop.wait(max(0.2, self.seconds / 3))


class KeepalivedCollector(Collector):
    """keepalived's side of the metrics: configurations it refused, reloads."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        sync = self.runtime.keepalived
        if sync is None:
            return
        yield CounterMetricFamily(
            "director_keepalived_config_rejected",
            "Rendered keepalived configurations that keepalived -t refused (never installed).",
            value=sync.keepalived.rejected,
        )
        yield CounterMetricFamily(
            "director_keepalived_reloads", "keepalived reloads after a new configuration.",
            value=sync.keepalived.reloads,
        )  # fmt: skip


class ApiServer:
    """The admin API on a production WSGI server (cheroot), optionally with TLS."""

    def __init__(self, app: Any, host: str, port: int, cert: str | None, key: str | None):
        from cheroot import wsgi

        self.server = wsgi.Server((host, port), app, numthreads=8, server_name="director")
        if cert and key:
            from cheroot.ssl.builtin import BuiltinSSLAdapter

            self.server.ssl_adapter = BuiltinSSLAdapter(cert, key)
        self._thread = threading.Thread(target=self._serve, name="api", daemon=True)

    def _serve(self) -> None:
        self.server.serve()

    def start(self) -> None:
        self.server.prepare()  # binds now: a port in use fails at start, not later
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.server.bind_addr[1])

    def stop(self) -> None:
        self.server.stop()
        self._thread.join(timeout=10)


def read_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"api.token_file {path}: {exc.strerror or exc}") from None
    if len(token) < 16:
        raise ValueError(f"api.token_file {path}: the token must be at least 16 characters")
    return token


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
    ) -> None:
        """``reader``: a second adapter for the API's and the metrics' reads."""
        kube = settings.kubernetes
        self.registry = CollectorRegistry()
        recorder = Recorder(self.registry)
        writer: KubeWriter | None = None
        kube_api: KubeApi | None = None
        if kube is not None:
            kube_api = KubeApi(api_client(kubeconfig or kube.kubeconfig))
            kube_api.api.configuration.retries = False  # the watchers have their own backoff
            writer = KubeWriter(kube_api, COMPONENT, kube.identity)
        intents = Path(settings.api.intents_file) if settings.api else None
        self.controller = Controller(
            ipvs,
            settings,
            writer=None if dry_run else writer,
            dry_run=dry_run,
            state_file=state_file,
            observer=observer,
            intents_file=intents,
            recorder=recorder,
        )
        self.registry.register(DirectorCollector(self.controller, reader))
        parsers = {
            "services": service_from_json,
            "endpointslices": slice_from_json,
            "nodes": node_from_json,
        }
        self.watchers = (
            [
                Watcher(
                    kube_api,
                    resource,
                    self.controller.submit,
                    parsers[resource.name],
                    watch_seconds=watch_seconds,
                )
                for resource in RESOURCES
            ]
            if kube_api is not None
            else []
        )
        self.elector = (
            Elector(
                writer,
                kube.lease_namespace,
                kube.lease_name,
                kube.lease_seconds,
                self.controller.set_leader,
            )
            if writer is not None and kube is not None and not dry_run
            else None
        )
        self.api: ApiServer | None = None
        if settings.api is not None:
            app = create_app(
                self.controller,
                read_token(settings.api.token_file),
                writer=None if dry_run else writer,
                registry=self.registry,
                reader=reader,
            )
            self.api = ApiServer(
                app, settings.api.host, settings.api.port, settings.api.tls_cert,
                settings.api.tls_key,
            )  # fmt: skip
        self.checker: Checker | None = None
        if settings.health is not None:
            # Checks run from the director's own network namespace.
            self.checker = Checker(
                lambda target, health: self.controller.submit(
                    "health", "UP" if health.up else "DOWN", target
                ),
                netns=netns,
                on_result=lambda target, health: recorder.health.observe(health.last_seconds),
            )
            self.controller.on_targets = self.checker.update
        self.keepalived: KeepalivedSync | None = None
        self.fifo: VrrpFifo | None = None
        if settings.ha is not None and not dry_run:
            self.keepalived = KeepalivedSync(settings.ha, settings.source)
            self.controller.on_vips = self.keepalived.submit
            self.fifo = VrrpFifo(
                settings.ha.fifo, lambda state: self.controller.submit("vrrp", state, None)
            )
        self.registry.register(KeepalivedCollector(self))
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self.controller.run, args=(self._stop,), name="controller", daemon=True
        )

    def start(self) -> Runtime:
        if self._thread.is_alive():
            return self
        if self.api is not None:
            self.api.start()
        if self.checker is not None:
            self.checker.start()
        if self.keepalived is not None and self.fifo is not None:
            self.fifo.start()
            self.keepalived.start()
        if self.elector is not None:
            self.elector.start()
        for watcher in self.watchers:
            watcher.start()
        self._thread.start()
        return self

    def wait_ready(self, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.controller.health.synced:
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        for watcher in self.watchers:
            watcher.stop()
        if self.elector is not None:
            self.elector.stop()
        if self.api is not None:
            self.api.stop()
        if self.checker is not None:
            self.checker.stop()
        if self.keepalived is not None and self.fifo is not None:
            self.keepalived.stop()
            self.fifo.stop()
        self._stop.set()
        self._thread.join(timeout=10)

    def __enter__(self) -> Runtime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
