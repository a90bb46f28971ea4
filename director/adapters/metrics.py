"""Prometheus metrics: kernel counters read at scrape time, the loop's own figures.

IPVS counters come from the kernel when Prometheus scrapes (a custom collector, no polling
thread), labelled like node_exporter's ``node_ipvs_*`` (``local_address``, ``local_port``,
``remote_address``, ``remote_port``, ``proto``, ``local_mark``) plus the Kubernetes object
they serve (``namespace``, ``service``, ``port_name``).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from director.core.announce import PeerState
from director.core.counters import DEST_COUNTERS, SERVICE_COUNTERS
from director.core.model import ServiceKey
from director.core.owned import Failure
from director.dataplane.interface import Ipvs
from director.dataplane.memory import give_back_free_memory
from director.engine.ports import LoopPort
from director.engine.view import LoopView

Registry = CollectorRegistry  # what the runtime hands to extra collectors
# kube-proxy's sync histogram: 1 ms doubling to ~16 s.
BUCKETS = tuple(0.001 * 2**i for i in range(15))
SERVICE_LABELS = [
    "local_address",
    "local_port",
    "local_mark",
    "proto",
    "namespace",
    "service",
    "port_name",
]
VRRP_STATES = ("MASTER", "BACKUP", "FAULT")


def origin_labels(origin: str) -> tuple[str, str, str]:
    """("namespace", "service", "port_name") of an origin like ``shop/web:http``."""
    if origin.startswith("static/") or origin == "static":
        return "", origin.partition("/")[2], ""
    ref, _, port = origin.partition(":")
    namespace, _, name = ref.partition("/")
    return namespace, name, port


def service_labels(key: ServiceKey, origin: str) -> list[str]:
    proto = key.protocol.label if key.protocol is not None else ""
    mark = str(key.fwmark) if key.fwmark else ""
    port = str(key.port) if not key.fwmark else ""
    return [key.address, port, mark, proto, *origin_labels(origin)]


class Recorder:
    """The histograms the loop feeds."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.sync = Histogram(
            "director_sync_duration_seconds",
            "Time to bring the kernel to the desired state (full resyncs and per-Service syncs).",
            ["kind"],
            buckets=BUCKETS,
            registry=registry,
        )
        self.health = Histogram(
            "director_health_check_duration_seconds",
            "How long active health checks of real servers take (failures included).",
            buckets=BUCKETS,
            registry=registry,
        )
        self.programming = Histogram(
            "director_network_programming_duration_seconds",
            "From an EndpointSlice's last-change-trigger-time to its change applied in IPVS.",
            buckets=BUCKETS,
            registry=registry,
        )

    def observe_sync(self, kind: str, seconds: float) -> None:
        self.sync.labels(kind).observe(seconds)

    def observe_programming(self, trigger: str, now: dt.datetime) -> None:
        try:
            when = dt.datetime.fromisoformat(trigger.replace("Z", "+00:00"))
        except ValueError:
            return
        if when.tzinfo is None:  # no point in time (the parser keeps none such)
            return
        seconds = (now - when).total_seconds()
        if seconds >= 0:
            self.programming.observe(seconds)


# The per-service and per-real-server families: (name, help, type, column of the counters).
SERVICE_FAMILIES = (
    (
        "director_ipvs_service_connections_total",
        "Connections scheduled by the virtual service.",
        "counter",
        "connections",
    ),
    ("director_ipvs_service_incoming_packets_total", "Packets in.", "counter", "packets_in"),
    ("director_ipvs_service_outgoing_packets_total", "Packets out.", "counter", "packets_out"),
    ("director_ipvs_service_incoming_bytes_total", "Bytes in.", "counter", "bytes_in"),
    ("director_ipvs_service_outgoing_bytes_total", "Bytes out.", "counter", "bytes_out"),
)
BACKEND_FAMILIES = (
    (
        "director_ipvs_backend_connections_total",
        "Connections sent to the real server.",
        "counter",
        "connections",
    ),
    ("director_ipvs_backend_incoming_bytes_total", "Bytes in.", "counter", "bytes_in"),
    ("director_ipvs_backend_outgoing_bytes_total", "Bytes out.", "counter", "bytes_out"),
    (
        "director_ipvs_backend_connections_active",
        "Active (established) connections.",
        "gauge",
        "active",
    ),
    ("director_ipvs_backend_connections_inactive", "Inactive connections.", "gauge", "inactive"),
    ("director_ipvs_backend_weight", "Weight of the real server.", "gauge", "weight"),
    (
        "director_backend_up",
        "1 when the real server passes its active health checks, 0 when it fails them.",
        "gauge",
        "up",
    ),
)


def _label_text(names: list[str], values: list[str]) -> str:
    escaped = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for v in values)
    return "{" + ",".join(f'{n}="{v}"' for n, v in zip(names, escaped, strict=True)) + "}"


CHUNK_LINES = 4096  # lines per piece of the text: the whole text is never held


class IpvsExposition:
    """The kernel's counters per virtual service and per real server, straight to the text
    format. At 10,000 services of 10 real servers that is 700,000 series: the generic client
    library took ~8 s a scrape to format them, this takes a fraction. The text comes in
    pieces, built family by family from the kernel's counters read in columns
    (``Counters``): at that size the text is 140 MB, which a whole-text scrape held (and the
    heap kept after it), and the counters read as objects were ~70 MB more. A real server's
    label text is its service's plus its address and port, made as its line is; nothing is
    kept from one scrape to the next (a cache of label texts held one string per real
    server)."""

    def __init__(self, loop: LoopPort, reader: Ipvs | None = None) -> None:
        self.loop = loop
        self.reader = reader or loop.ipvs  # its own socket: scrapes never block writes

    def chunks(self) -> Iterator[bytes]:
        counters = self.reader.read_counters()
        view = self.loop.view
        origins = {key: vs.origin for key, vs in view.desired.items()}
        labels = [
            _label_text(SERVICE_LABELS, service_labels(key, origins.get(key, "")))
            for key in counters.services
        ]
        del origins
        lines: list[str] = []
        for name, text, kind, field in SERVICE_FAMILIES:
            lines.append(f"# HELP {name} {text}\n# TYPE {name} {kind}\n")
            column = SERVICE_COUNTERS.index(field)
            for index, label in enumerate(labels):
                lines.append(f"{name}{label} {counters.service_value(index, column)}\n")
                if len(lines) >= CHUNK_LINES:
                    yield "".join(lines).encode()
                    lines.clear()
        checks, unhealthy = view.checks, view.unhealthy_dest
        for name, text, kind, field in BACKEND_FAMILIES:
            lines.append(f"# HELP {name} {text}\n# TYPE {name} {kind}\n")
            column = DEST_COUNTERS.index(field) if field != "up" else -1
            for index, label in enumerate(labels):
                key = counters.services[index]
                checked = checks.get(key) if column < 0 else None
                if column < 0 and checked is None:
                    continue  # only a checked real server is up or down
                # SERVICE_LABELS, then remote_address and remote_port
                head = f'{name}{label[:-1]},remote_address="'
                hosts, ports = counters.hosts(index), counters.column(index, 0)
                if checked is None:
                    lines += [
                        f'{head}{host}",remote_port="{port}"}} {figure}\n'
                        for host, port, figure in zip(
                            hosts, ports, counters.column(index, column), strict=True
                        )
                    ]
                else:
                    lines += [
                        f'{head}{host}",remote_port="{port}"}} '
                        f"{int(not unhealthy(key, (host, port)))}\n"
                        for host, port in zip(hosts, ports, strict=True)
                        if (host, port) in checked
                    ]
                if len(lines) >= CHUNK_LINES:
                    yield "".join(lines).encode()
                    lines.clear()
        yield "".join(lines).encode()


class DirectorCollector(Collector):
    """The director's own figures (the kernel's counters are ``IpvsExposition``'s)."""

    def __init__(self, loop: LoopPort) -> None:
        self.loop = loop

    def collect(self) -> Iterator[Metric]:
        view = self.loop.view
        # Read from the loop itself, not its view: a stalled loop publishes no new view.
        yield GaugeMetricFamily(
            "director_loop_last_step_timestamp_seconds",
            "Unix time the control loop last completed a step (every 0.5 s when idle, up to "
            "5 s apart while steps fail; /healthz fails after 60 s without one).",
            value=time.time() - (time.monotonic() - self.loop.last_step),
        )
        yield from self._loop(view)
        yield self._dropped(view)
        yield from self._state(view)
        yield from self._owned()

    def _owned(self) -> Iterator[Metric]:
        """Each owned resource (read from the ledger: its keepers run on other threads)."""
        states = self.loop.view.status.owned.snapshot()
        in_sync = GaugeMetricFamily(
            "director_owned_in_sync",
            "1 when what the director wrote (the resource) reads back as it should; 0 while "
            "it is out of sync: drift found, or a write or read-back failing (retried).",
            labels=["resource"],
        )
        repairs = CounterMetricFamily(
            "director_owned_repairs",
            "Drift found and put right: the resource held something other than what the "
            "director wrote (flushed, removed, edited, a daemon restarted under it).",
            labels=["resource"],
        )
        failures = CounterMetricFamily(
            "director_owned_failures",
            "Writes and read-backs of the resource that failed (each retried: a transient "
            "failure with backoff, a refused input when it changes).",
            labels=["resource"],
        )
        for name, state in states.items():
            in_sync.add_metric([name], 1 if state.in_sync else 0)
            repairs.add_metric([name], state.repairs)
            failures.add_metric([name], state.failures)
        yield in_sync
        yield repairs
        yield failures

    @staticmethod
    def _loop(view: LoopView) -> Iterator[Metric]:
        health = view.status
        yield GaugeMetricFamily(
            "director_services_all_backends_down",
            "Virtual services whose every real server fails its checks (kept, not emptied).",
            value=view.all_down,
        )
        if health.connected:  # only a director that watches a cluster (its watches report)
            yield GaugeMetricFamily(
                "director_kubernetes_connected",
                "1 when every watch of the Kubernetes API is connected (0 during an outage).",
                value=1 if health.kubernetes_connected else 0,
            )
            yield GaugeMetricFamily(
                "director_leader",
                "1 when this director holds the status-writing Lease.",
                value=1 if view.status.leader else 0,
            )
        yield CounterMetricFamily(
            "director_reconcile_errors",
            "IPVS operations the kernel refused.",
            value=health.failed_ops,
        )
        yield CounterMetricFamily(
            "director_resync_repaired_operations",
            "IPVS operations a periodic full resync had to apply: the kernel held something "
            "other than what the director last programmed (another tool, a refused write).",
            value=health.drift_ops,
        )
        yield CounterMetricFamily(
            "director_loop_errors",
            "Unexpected errors in the control loop, survived (each is logged as event=loop.error "
            "with its traceback).",
            value=health.loop_errors,
        )
        rejected = CounterMetricFamily(
            "director_refused_inputs",
            "Cluster objects, or parts of them, refused as invalid (each also a Warning Event "
            "or a log line).",
            labels=["resource"],
        )
        for resource in ("services", "endpointslices", "nodes"):
            rejected.add_metric([resource], health.refused.get(resource, 0))
        yield rejected
        nft = health.owned.get("nftables")
        yield CounterMetricFamily(
            "director_firewall_errors",
            "Source-filter writes and read-backs that failed: nft refused a ruleset, or could "
            "not be run (the previous rules stayed in force; also counted in "
            'director_owned_failures{resource="nftables"}).',
            value=nft.failures if nft is not None else 0,
        )
        writes = CounterMetricFamily(
            "director_cluster_write_errors",
            "Service status and Event writes the API server refused or did not answer, by "
            "HTTP status (unreachable: no answer). 400, 403, 404, 405, 410 and 422 drop the "
            "write; the others are retried.",
            labels=["verb", "resource", "code"],
        )
        for (verb, resource, code), count in sorted(health.write_errors.items()):
            writes.add_metric([verb, resource, code], count)
        yield writes

    def _dropped(self, view: LoopView) -> Metric:
        dropped = CounterMetricFamily(
            "director_source_filter_dropped_packets",
            "Packets to a virtual service dropped because their source is outside the "
            "Service's loadBalancerSourceRanges.",
            labels=SERVICE_LABELS,
        )
        firewall = self.loop.firewall
        if view.filtered and firewall is not None:
            try:
                counts = firewall.dropped()
            except Failure:  # nft failing: logged where it is applied; no figures
                counts = {}
            for key, packets in counts.items():
                origin = view.desired[key].origin if key in view.desired else ""
                dropped.add_metric(service_labels(key, origin), packets)
        return dropped

    @staticmethod
    def _state(view: LoopView) -> Iterator[Metric]:
        if view.status.last_sync is not None:
            yield GaugeMetricFamily(
                "director_last_full_sync_timestamp_seconds",
                "Unix time of the last full resync.",
                value=view.status.last_sync,
            )
        role = GaugeMetricFamily(
            "director_vrrp_state", "1 for this director's VRRP state.", labels=["state"]
        )
        for name in VRRP_STATES:
            role.add_metric([name], 1 if view.status.vrrp_state == name else 0)
        yield role
        in_use = GaugeMetricFamily(
            "director_pool_addresses_in_use", "Addresses allocated from the pool.", labels=["pool"]
        )
        free = GaugeMetricFamily(
            "director_pool_addresses_free", "Addresses left in the pool.", labels=["pool"]
        )
        for pool in view.addressing.pools:
            in_use.add_metric([pool.name], pool.in_use)
            free.add_metric([pool.name], pool.size - pool.in_use)
        yield in_use
        yield free
        yield from DirectorCollector._routes(view)

    @staticmethod
    def _routes(view: LoopView) -> Iterator[Metric]:
        addressing = view.addressing
        if not addressing.routes and not addressing.transitions:
            return
        routes = GaugeMetricFamily(
            "director_bgp_routes",
            "VIPs of bgp pools, announced or withdrawn by this director.",
            labels=["pool", "state"],
        )
        counts: dict[tuple[str, str], int] = {}
        for route in addressing.routes.values():
            state = "announced" if route.announced else "withdrawn"
            counts[route.pool, state] = counts.get((route.pool, state), 0) + 1
        for (pool, state), count in sorted(counts.items()):
            routes.add_metric([pool, state], count)
        yield routes
        yield CounterMetricFamily(
            "director_bgp_route_transitions",
            "Routes that went from announced to withdrawn or back.",
            value=addressing.transitions,
        )
        yield GaugeMetricFamily(
            "director_bgp_maintenance",
            "1 while every route is withdrawn for maintenance.",
            value=1 if addressing.maintenance else 0,
        )


RELOAD_RESULTS = ("applied", "invalid", "refused", "failed")


class Reloads:
    """Reloads of the configuration file (SIGHUP), as Prometheus counts its own."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.total = Counter(
            "director_config_reloads_total",
            "Reloads of the configuration file (SIGHUP), by result: applied; invalid (the file "
            "fails validation); refused (a restart-only section changed, or a conflict); "
            "failed (the loop did not take it).",
            ["result"],
            registry=registry,
        )
        self.successful = Gauge(
            "director_config_last_reload_successful",
            "1 when the last reload was applied (or none was asked for), 0 when it failed.",
            registry=registry,
        )
        self.success_time = Gauge(
            "director_config_last_reload_success_timestamp_seconds",
            "When the configuration in force was loaded (start, or the last applied reload).",
            registry=registry,
        )
        for result in RELOAD_RESULTS:
            self.total.labels(result)
        self.successful.set(1)
        self.success_time.set_to_current_time()

    def observe(self, result: str) -> None:
        self.total.labels(result).inc()
        self.successful.set(1 if result == "applied" else 0)
        if result == "applied":
            self.success_time.set_to_current_time()


class Metrics:
    """The director's metrics, wired once: the registry with the loop's histograms, then
    (``serve``) the loop's figures, keepalived's, and the kernel's counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # process_start_time_seconds, process_resident_memory_bytes, open fds: a box that
        # keeps restarting, or grows, shows it (the alerts use the start time).
        ProcessCollector(registry=self.registry)
        self.recorder = Recorder(self.registry)
        self.reloads = Reloads(self.registry)

    def serve(
        self,
        loop: LoopPort,
        reader: Ipvs | None,
        keepalived: Callable[[], tuple[int, int] | None],
        frr: Callable[[], FrrFigures | None] = lambda: None,
        conntrack: Callable[[], Mapping[str, int] | None] = lambda: None,
    ) -> Scrape:
        self.registry.register(DirectorCollector(loop))
        self.registry.register(KeepalivedCollector(keepalived))
        self.registry.register(FrrCollector(frr))
        self.registry.register(ConntrackCollector(conntrack))
        return Scrape(self.registry, IpvsExposition(loop, reader))


class KeepalivedCollector(Collector):
    """keepalived's side of the metrics: configurations it refused, reloads.
    ``counts()``: (rejected, reloads), or None without keepalived."""

    def __init__(self, counts: Callable[[], tuple[int, int] | None]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        counts = self.counts()
        if counts is None:
            return
        rejected, reloads = counts
        yield CounterMetricFamily(
            "director_keepalived_config_rejected",
            "Rendered keepalived configurations that keepalived -t refused (never installed).",
            value=rejected,
        )
        yield CounterMetricFamily(
            "director_keepalived_reloads",
            "keepalived reloads after a new configuration.",
            value=reloads,
        )


class ConntrackCollector(Collector):
    """netfilter's connection table where full NAT runs (``figures()``: its counters, or
    None without full NAT): connections that could not be inserted, among them a full-NAT
    connection that found no free port of its SNAT address."""

    def __init__(self, figures: Callable[[], Mapping[str, int] | None]) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        figures = self.figures()
        if not figures:
            return
        yield CounterMetricFamily(
            "director_conntrack_insert_failed",
            "New connections conntrack could not insert in the director's namespace and "
            "dropped: with full NAT, one to a real server for which no port of the SNAT "
            "address was free (port exhaustion). node_exporter's "
            "node_nf_conntrack_stat_insert_failed is the host's own.",
            value=figures.get("insert_failed", 0),
        )
        yield GaugeMetricFamily(
            "director_conntrack_entries",
            "Entries in netfilter's connection table in the director's namespace (full NAT "
            "keeps one per connection).",
            value=figures.get("entries", 0),
        )


class FrrFigures(NamedTuple):
    sessions: tuple[PeerState, ...]
    rejected: int
    reloads: int


class FrrCollector(Collector):
    """FRR's side: each BGP session (and its BFD), configurations FRR refused, reloads."""

    def __init__(self, figures: Callable[[], FrrFigures | None]) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        figures = self.figures()
        if figures is None:
            return
        up = GaugeMetricFamily(
            "director_bgp_session_up",
            "1 while the BGP session to the peer is established.",
            labels=["peer"],
        )
        bfd = GaugeMetricFamily(
            "director_bgp_bfd_up",
            "1 while BFD to the peer is up (peers with BFD only).",
            labels=["peer"],
        )
        for peer in figures.sessions:
            up.add_metric([peer.address], 1 if peer.up else 0)
            if peer.bfd != "-":
                bfd.add_metric([peer.address], 1 if peer.bfd == "up" else 0)
        yield up
        yield bfd
        yield CounterMetricFamily(
            "director_frr_config_rejected",
            "Rendered FRR configurations that vtysh or frr-reload.py refused (never live).",
            value=figures.rejected,
        )
        yield CounterMetricFamily(
            "director_frr_reloads",
            "FRR configurations applied (frr-reload.py).",
            value=figures.reloads,
        )


class Scrape:
    """``/metrics`` made cheap to ask for: one scrape is built at a time, and a built one
    serves every request for a while (at least 1 s, and twice what it took to build), so
    many scrapers cost what one does and never hold many workers. A scrape is kept gzipped
    only (140 MB of text at 10,000 services is 3 MB so), compressed as it is written, and
    only while it serves: what Prometheus asks for is served as is, a plain request is
    unpacked as it is sent."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(
        self, registry: CollectorRegistry | None, exposition: IpvsExposition | None = None
    ) -> None:
        self.registry, self.exposition = registry, exposition
        self._lock = threading.Lock()
        self._gzipped = b""
        self._until = 0.0

    def gzipped(self) -> bytes:
        """The scrape, gzipped."""
        with self._lock:
            now = time.monotonic()
            if now >= self._until:
                self._gzipped = b""  # the last one is not kept while the next is built
                self._gzipped = self._build()
                took = time.monotonic() - now
                serves = max(1.0, 2 * took)
                self._until = time.monotonic() + serves
                # Let go once it can serve no more (between scrapes, not held for nothing).
                expiry = threading.Timer(serves + 0.1, self._expire)
                expiry.daemon = True
                expiry.start()
            return self._gzipped

    def _expire(self) -> None:
        with self._lock:
            if time.monotonic() >= self._until:
                self._gzipped = b""

    def plain(self) -> Iterator[bytes]:
        """The scrape as text, in pieces (built here, in the request's scrape slot; only
        the unpacking is left to the response)."""
        return _unpacked(self.gzipped())

    def _build(self) -> bytes:
        packer = zlib.compressobj(1, zlib.DEFLATED, GZIP_WBITS)
        if self.registry is None:
            return packer.flush()
        parts = [packer.compress(generate_latest(self.registry))]
        if self.exposition is not None:
            parts.extend(packer.compress(chunk) for chunk in self.exposition.chunks())
        parts.append(packer.flush())
        body = b"".join(parts)
        del parts
        give_back_free_memory()  # the table read and the text's pieces are garbage now
        return body


def _unpacked(gzipped: bytes) -> Iterator[bytes]:
    """The text, a bounded piece at a time (40 times the compressed bytes, unbounded)."""
    unpacker = zlib.decompressobj(GZIP_WBITS)
    pending = gzipped
    while pending:
        piece = unpacker.decompress(pending, UNPACK_BYTES)
        pending = unpacker.unconsumed_tail
        if piece:
            yield piece
    rest = unpacker.flush()
    if rest:
        yield rest


GZIP_WBITS = 31  # zlib's gzip container
UNPACK_BYTES = 256 * 1024  # text sent a piece at a time to a plain (not gzip) request
