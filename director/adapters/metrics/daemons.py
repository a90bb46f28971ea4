"""Collectors of the daemons beside the director: keepalived's VRRP figures, conntrackd's
cache and FRR's sessions and routes, each read at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from director.adapters.metrics.promtext import CounterMetricFamily, GaugeMetricFamily, Metric
from director.core.announce import PeerState


class KeepalivedCollector:
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


class ConntrackCollector:
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
        if "max" in figures:
            yield GaugeMetricFamily(
                "director_conntrack_max",
                "The most entries netfilter's connection table may hold "
                "(net.netfilter.nf_conntrack_max): past it new connections are dropped.",
                value=figures["max"],
            )
        yield CounterMetricFamily(
            "director_conntrack_dropped",
            "New connections conntrack dropped because its table was full (its drop and "
            "early_drop counters): raise nf_conntrack_max, or the box's memory.",
            value=figures.get("drop", 0) + figures.get("early_drop", 0),
        )


class SynGuardCollector:
    """The SYN guard where the box runs it (``figures()``: synproxy's counters and the
    guard's drops, or None where nothing is guarded): how many SYNs the box answered
    itself, how many clients came back with a valid cookie, and what was dropped."""

    def __init__(self, figures: Callable[[], Mapping[str, int] | None]) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        figures = self.figures()
        if figures is None:
            return
        yield GaugeMetricFamily(
            "director_syn_guard_services",
            "Virtual services whose SYNs the box answers with cookies (guard.syn).",
            value=figures.get("services", 0),
        )
        yield CounterMetricFamily(
            "director_syn_guard_cookies_sent",
            "SYNs to a guarded service the box answered with a SYN cookie (synproxy's "
            "syn_received): under a flood, the flood's rate.",
            value=figures.get("syn_received", 0),
        )
        yield CounterMetricFamily(
            "director_syn_guard_cookies_valid",
            "Clients that came back with a valid cookie and were let through to IPVS.",
            value=figures.get("cookie_valid", 0),
        )
        yield CounterMetricFamily(
            "director_syn_guard_cookies_invalid",
            "ACKs to a guarded service whose cookie was wrong or stale (dropped).",
            value=figures.get("cookie_invalid", 0),
        )
        yield CounterMetricFamily(
            "director_syn_guard_dropped_packets",
            "Packets to a guarded service that were neither a valid cookie nor part of a "
            "connection (dropped by the guard).",
            value=figures.get("dropped", 0),
        )


class ConntrackdFigures(NamedTuple):
    """What conntrackd said of itself (``up`` False: it did not answer; the rest 0)."""

    up: bool
    internal: int = 0
    cache_failed: int = 0
    inject_failed: int = 0
    send_errors: int = 0
    recv_errors: int = 0
    malformed: int = 0
    lost: int = 0


class ConntrackdCollector:
    """conntrackd beside full NAT in a pair (``figures()``: None where the director does not
    run it): whether it answers, its caches, and what its sync channel lost."""

    def __init__(self, figures: Callable[[], ConntrackdFigures | None]) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        figures = self.figures()
        if figures is None:
            return
        yield GaugeMetricFamily(
            "director_conntrackd_up",
            "1 while conntrackd answers on its socket (conntrackd -s): without it a takeover "
            "finds no full-NAT mapping of the peer's connections.",
            value=1 if figures.up else 0,
        )
        if not figures.up:
            return
        yield GaugeMetricFamily(
            "director_conntrackd_internal_entries",
            "This box's connections in conntrackd's internal cache (what it sends the peer): "
            "on a healthy pair close to director_conntrack_entries of the box.",
            value=figures.internal,
        )
        yield CounterMetricFamily(
            "director_conntrackd_cache_failed",
            "Internal cache creations, updates and removals conntrackd could not make (a full "
            "cache among them): those connections never reach the peer.",
            value=figures.cache_failed,
        )
        yield CounterMetricFamily(
            "director_conntrackd_inject_failed",
            "The peer's connections this box's kernel refused to take from conntrackd (its "
            "conntrack table full, among the causes): lost at a takeover.",
            value=figures.inject_failed,
        )
        errors = CounterMetricFamily(
            "director_conntrackd_sync_errors",
            "Sync messages conntrackd failed to send or to receive on its channel.",
            labels=["direction"],
        )
        errors.add_metric(["send"], figures.send_errors)
        errors.add_metric(["recv"], figures.recv_errors)
        yield errors
        yield CounterMetricFamily(
            "director_conntrackd_sync_lost",
            "Sync messages from the peer that never arrived (gaps in their sequence): the "
            "entries they carried are missing here until the next resync.",
            value=figures.lost,
        )
        yield CounterMetricFamily(
            "director_conntrackd_sync_malformed",
            "Sync messages from the peer conntrackd could not read.",
            value=figures.malformed,
        )


class FrrFigures(NamedTuple):
    sessions: tuple[PeerState, ...]
    rejected: int
    reloads: int


class FrrCollector:
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
