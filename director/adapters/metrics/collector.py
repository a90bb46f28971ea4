"""Prometheus metrics: kernel counters read at scrape time, the loop's own figures.

IPVS counters come from the kernel when Prometheus scrapes (a custom collector, no polling
thread), labelled like node_exporter's ``node_ipvs_*`` (``local_address``, ``local_port``,
``remote_address``, ``remote_port``, ``proto``, ``local_mark``) plus the Kubernetes object
they serve (``namespace``, ``service``, ``port_name``): that text is
``ipvs``'s, with the scrape that serves it; the daemons' collectors (keepalived,
conntrackd, FRR) are ``daemons``'.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator, Mapping

from director.adapters.metrics.daemons import (
    ConntrackCollector,
    ConntrackdCollector,
    ConntrackdFigures,
    FrrCollector,
    FrrFigures,
    KeepalivedCollector,
    SynGuardCollector,
)
from director.adapters.metrics.ipvs import SERVICE_LABELS, IpvsExposition, Scrape, service_labels
from director.adapters.metrics.promtext import (
    CollectorRegistry,
    Counter,
    CounterMetricFamily,
    Gauge,
    GaugeMetricFamily,
    Histogram,
    Metric,
    ProcessCollector,
)
from director.core.firewall import counts
from director.dataplane.interface import Ipvs
from director.engine.ports import LoopPort
from director.engine.view import LoopStatus, LoopView

Registry = CollectorRegistry  # what the runtime hands to extra collectors
# kube-proxy's sync histogram: 1 ms doubling to ~16 s.
BUCKETS = tuple(0.001 * 2**i for i in range(15))
VRRP_STATES = ("MASTER", "BACKUP", "FAULT")


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
class DirectorCollector:
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
        yield self._limited(view)
        yield from self._state(view)
        yield from self._owned()
        yield from self._reads()

    def _reads(self) -> Iterator[Metric]:
        """How the resyncs read the table back (``director.dataplane.proctext``)."""
        counts = self.loop.ipvs.reads
        read = CounterMetricFamily(
            "director_resync_services_read",
            "Virtual services the resyncs read back, by how their real servers were read: "
            'through netlink (read="netlink"), or taken as the resync before read them '
            'because the kernel\'s text (/proc/net/ip_vs) shows them unchanged (read="text"; '
            "only past 1,000 services).",
            labels=["read"],
        )
        read.add_metric(["netlink"], counts.netlink)
        read.add_metric(["text"], counts.text)
        yield read
        yield GaugeMetricFamily(
            "director_resync_shares",
            "The shares the resyncs read the table in, as of the last one: each virtual "
            "service's real servers are read through netlink at least once in this many "
            "resyncs, so a change the kernel's text does not show (a threshold set by hand) "
            "is repaired within as many. 1: each resync reads them all.",
            value=counts.parts,
        )

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
                "1 when this director holds the status-writing Lease (of every cluster).",
                value=1 if view.status.leader else 0,
            )
            named = health.clusters_connected()
            if named:  # several clusters (clusters:): each one's
                leads = GaugeMetricFamily(
                    "director_cluster_leader",
                    "1 when this director holds the cluster's status-writing Lease.",
                    labels=["cluster"],
                )
                up = GaugeMetricFamily(
                    "director_cluster_connected",
                    "1 when every watch of the cluster's API is connected.",
                    labels=["cluster"],
                )
                for name, connected in sorted(named.items()):
                    leads.add_metric([name], 1 if health.leaders.get(name) else 0)
                    up.add_metric([name], 1 if connected else 0)
                yield leads
                yield up
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
        yield _write_errors(health)

    def _dropped(self, view: LoopView) -> Metric:
        dropped = CounterMetricFamily(
            "director_source_filter_dropped_packets",
            "Packets to a virtual service dropped because their source is outside the "
            "Service's loadBalancerSourceRanges.",
            labels=SERVICE_LABELS,
        )
        firewall = self.loop.firewall
        if view.filtered and firewall is not None:
            for key, packets in counts(firewall.dropped).items():
                origin = view.desired[key].origin if key in view.desired else ""
                dropped.add_metric(service_labels(key, origin), packets)
        return dropped

    def _limited(self, view: LoopView) -> Metric:
        over = CounterMetricFamily(
            "director_limit_dropped_attempts",
            "TCP connection attempts to a virtual service dropped by its rate limits: over one "
            "client address's rate (limit=client) or the service's (limit=service).",
            labels=[*SERVICE_LABELS, "limit"],
        )
        firewall = self.loop.firewall
        if view.limits and firewall is not None:
            for key, (client, service) in counts(firewall.limited).items():
                origin = view.desired[key].origin if key in view.desired else ""
                labels = service_labels(key, origin)
                over.add_metric([*labels, "client"], client)
                over.add_metric([*labels, "service"], service)
        return over

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
        *,
        frr: Callable[[], FrrFigures | None] = lambda: None,
        conntrack: Callable[[], Mapping[str, int] | None] = lambda: None,
        conntrackd: Callable[[], ConntrackdFigures | None] = lambda: None,
        syn_guard: Callable[[], Mapping[str, int] | None] = lambda: None,
    ) -> Scrape:
        self.registry.register(DirectorCollector(loop))
        self.registry.register(KeepalivedCollector(keepalived))
        self.registry.register(FrrCollector(frr))
        self.registry.register(ConntrackCollector(conntrack))
        self.registry.register(ConntrackdCollector(conntrackd))
        self.registry.register(SynGuardCollector(syn_guard))
        return Scrape(self.registry, IpvsExposition(loop, reader))


def _write_errors(health: LoopStatus) -> Metric:
    """Cluster writes that failed; a box with clusters: labels each cluster's, one with
    kubernetes: keeps the series it always had."""
    by_cluster = any(health.leaders) or any(key[0] for key in health.write_errors)
    writes = CounterMetricFamily(
        "director_cluster_write_errors",
        "Service status and Event writes the API server refused or did not answer, by "
        "HTTP status (unreachable: no answer). 400, 403, 404, 405, 410 and 422 drop the "
        "write; the others are retried. With clusters:, by cluster.",
        labels=["verb", "resource", "code", *(["cluster"] if by_cluster else [])],
    )
    for (cluster, verb, resource, code), count in sorted(health.write_errors.items()):
        writes.add_metric([verb, resource, code, *([cluster] if by_cluster else [])], count)
    return writes
