"""The daemons' collectors, scraped as Prometheus reads them: nothing while a daemon is not
there, its figures (and each BGP session by peer) once it is."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

from director.adapters.metrics.daemons import (
    ConntrackCollector,
    ConntrackdCollector,
    ConntrackdFigures,
    FrrCollector,
    FrrFigures,
    KeepalivedCollector,
)
from director.adapters.metrics.promtext import Collector, CollectorRegistry, generate_latest
from director.core.announce import PeerState


def scraped(collector: Collector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def test_a_daemon_that_is_not_there_says_nothing() -> None:
    assert scraped(KeepalivedCollector(lambda: None)) == {}
    assert scraped(ConntrackCollector(lambda: None)) == {}
    assert scraped(FrrCollector(lambda: None)) == {}
    assert scraped(ConntrackdCollector(lambda: None)) == {}


def test_keepalived_and_conntrack_figures_are_what_was_counted() -> None:
    assert scraped(KeepalivedCollector(lambda: (2, 7))) == {
        ("director_keepalived_config_rejected_total", ()): 2,
        ("director_keepalived_reloads_total", ()): 7,
    }
    figures: Mapping[str, int] = {"insert_failed": 3, "entries": 41}
    assert scraped(ConntrackCollector(lambda: figures)) == {
        ("director_conntrack_insert_failed_total", ()): 3,
        ("director_conntrack_entries", ()): 41,
        ("director_conntrack_dropped_total", ()): 0,
    }
    # the table's ceiling, and what was dropped for want of room (drop + early_drop)
    full: Mapping[str, int] = {"entries": 262144, "max": 262144, "drop": 5, "early_drop": 2}
    assert scraped(ConntrackCollector(lambda: full)) == {
        ("director_conntrack_insert_failed_total", ()): 0,
        ("director_conntrack_entries", ()): 262144,
        ("director_conntrack_max", ()): 262144,
        ("director_conntrack_dropped_total", ()): 7,
    }


def test_conntrackd_down_is_said_as_down_and_its_losses_as_counters() -> None:
    """A conntrackd that does not answer shows as down, with no figures that would read as
    "nothing lost"; one that answers shows its cache and what its sync lost."""
    assert scraped(ConntrackdCollector(lambda: ConntrackdFigures(up=False))) == {
        ("director_conntrackd_up", ()): 0
    }
    figures = ConntrackdFigures(True, 7, 1, 3, 4, 1, 2, 6)
    assert scraped(ConntrackdCollector(lambda: figures)) == {
        ("director_conntrackd_up", ()): 1,
        ("director_conntrackd_internal_entries", ()): 7,
        ("director_conntrackd_cache_failed_total", ()): 1,
        ("director_conntrackd_inject_failed_total", ()): 3,
        ("director_conntrackd_sync_errors_total", (("direction", "send"),)): 4,
        ("director_conntrackd_sync_errors_total", (("direction", "recv"),)): 1,
        ("director_conntrackd_sync_malformed_total", ()): 2,
        ("director_conntrackd_sync_lost_total", ()): 6,
    }


def test_each_bgp_session_and_its_bfd_are_shown_by_peer() -> None:
    sessions = (
        PeerState("198.18.0.1", 64500, "Established", 12.0, 3, "up"),
        PeerState("198.18.0.2", 64500, "Active", 0.0, 0, "down"),
        PeerState("198.18.0.3", 64500, "unknown"),  # no BFD configured: no bfd sample
    )
    got = scraped(FrrCollector(lambda: FrrFigures(sessions, 1, 4)))
    assert got == {
        ("director_bgp_session_up", (("peer", "198.18.0.1"),)): 1,
        ("director_bgp_session_up", (("peer", "198.18.0.2"),)): 0,
        ("director_bgp_session_up", (("peer", "198.18.0.3"),)): 0,
        ("director_bgp_bfd_up", (("peer", "198.18.0.1"),)): 1,
        ("director_bgp_bfd_up", (("peer", "198.18.0.2"),)): 0,
        ("director_frr_config_rejected_total", ()): 1,
        ("director_frr_reloads_total", ()): 4,
    }
