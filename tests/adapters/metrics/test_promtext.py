"""The director's own text format against ``prometheus_client``'s, byte for byte: the same
families, counters, gauges and histograms made with each (at the same frozen time) write the
same text, whatever the label values and numbers; and Prometheus's own parser reads it."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Any

import prometheus_client as reference
import pytest
from hypothesis import given, settings, strategies as st
from prometheus_client import core as reference_core
from prometheus_client.parser import text_string_to_metric_families

from director.adapters.metrics import promtext

NOW = 1_764_000_000.25
BUCKETS = tuple(0.001 * 2**i for i in range(15))


@pytest.fixture(autouse=True)
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both libraries stamp a series' ``_created`` with ``time.time()``."""
    monkeypatch.setattr(time, "time", lambda: NOW)


def both(build: Any) -> tuple[bytes, bytes]:
    """``build(library, registry)`` run with each library: (ours, theirs)."""
    ours = promtext.CollectorRegistry()
    build(promtext, ours)
    theirs = reference.CollectorRegistry()
    build(reference, theirs)
    return promtext.generate_latest(ours), reference.generate_latest(theirs)


def test_instruments_write_what_prometheus_client_writes() -> None:
    def build(lib: Any, registry: Any) -> None:
        sync = lib.Histogram(
            "director_sync_duration_seconds", "Sync.\nTwo lines, a \\.", ["kind"],
            buckets=BUCKETS, registry=registry,
        )  # fmt: skip
        for kind, seconds in (("full", 0.0004), ("service", 0.3), ("full", 40.0)):
            sync.labels(kind).observe(seconds)
        plain = lib.Histogram(
            "director_checks_seconds", "Checks.", buckets=BUCKETS, registry=registry
        )
        plain.observe(0.0015)
        plain.observe(0.001)  # on a bound: counted in it
        reloads = lib.Counter(
            "director_config_reloads_total", "Reloads.", ["result"], registry=registry
        )
        for result in ("applied", "invalid"):
            reloads.labels(result)
        reloads.labels("applied").inc()
        reloads.labels("applied").inc(2.5)
        ok = lib.Gauge("director_config_last_reload_successful", "Last.", registry=registry)
        ok.set(1)
        when = lib.Gauge("director_config_last_reload_success_timestamp_seconds", "When.",
                         registry=registry)  # fmt: skip
        when.set_to_current_time()

    ours, theirs = both(build)
    assert ours == theirs
    assert b'director_sync_duration_seconds_bucket{kind="full",le="+Inf"} 2.0' in ours


def test_families_write_what_prometheus_client_writes() -> None:
    class Families:
        def __init__(self, lib: Any) -> None:
            self.core = lib if lib is promtext else reference_core

        def collect(self) -> Iterable[Any]:
            yield self.core.GaugeMetricFamily("director_leader", "Leader.", value=1)
            yield self.core.CounterMetricFamily("director_loop_errors", "Errors.", value=3)
            yield self.core.CounterMetricFamily("director_x_total", "Named _total.", value=0)
            labelled = self.core.CounterMetricFamily(
                "director_cluster_write_errors", "Writes.", labels=["verb", "resource", "code"]
            )
            labelled.add_metric(["patch", "services", "503"], 2)
            labelled.add_metric(["create", 'ev"ents\\\n', "unreachable"], 1)
            yield labelled
            yield self.core.GaugeMetricFamily("director_empty", "No samples.", labels=["pool"])

    def build(lib: Any, registry: Any) -> None:
        registry.register(Families(lib))

    ours, theirs = both(build)
    assert ours == theirs


NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**62), max_value=2**62),
    st.sampled_from([0.1, 1e6, 1234567.0, 1e21, 5e-324, 12345678901.5]),
)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.tuples(st.text(max_size=12), NUMBERS), min_size=1, max_size=5),
    doc=st.text(max_size=30),
)
def test_any_label_value_and_number_is_written_alike(
    values: list[tuple[str, float]], doc: str
) -> None:
    class One:
        def __init__(self, lib: Any) -> None:
            self.core = lib if lib is promtext else reference_core

        def collect(self) -> Iterable[Any]:
            family = self.core.GaugeMetricFamily("director_g", doc, labels=["peer"])
            for label, value in values:
                family.add_metric([label], value)
            yield family

    def build(lib: Any, registry: Any) -> None:
        registry.register(One(lib))

    ours, theirs = both(build)
    assert ours == theirs
    parsed = {
        s.labels["peer"]: s.value
        for family in text_string_to_metric_families(ours.decode())
        for s in family.samples
    }
    for label, value in dict(values).items():
        read = parsed[label]
        assert read == float(value) or (math.isnan(read) and math.isnan(float(value)))


def test_the_process_figures_are_those_prometheus_client_reports() -> None:
    """Names, help and types alike; the start time and the limit equal; memory and
    descriptors as this process has them."""
    ours = {m.name: m for m in promtext.ProcessCollector().collect()}
    theirs = {m.name: m for m in reference.ProcessCollector(registry=None).collect()}
    assert (
        ours.keys()
        == theirs.keys()
        == {
            "process_virtual_memory_bytes",
            "process_resident_memory_bytes",
            "process_start_time_seconds",
            "process_cpu_seconds",
            "process_open_fds",
            "process_max_fds",
        }
    )
    for name, metric in ours.items():
        assert (metric.kind, metric.documentation) == (
            theirs[name].type,
            theirs[name].documentation,
        )
    value = {name: m.samples[0][2] for name, m in ours.items()}
    assert (
        value["process_start_time_seconds"] == theirs["process_start_time_seconds"].samples[0].value
    )
    assert value["process_max_fds"] == theirs["process_max_fds"].samples[0].value
    assert 5e6 < value["process_resident_memory_bytes"] < 2e9
    assert value["process_open_fds"] >= 3
