"""Prometheus' text format (version 0.0.4), written by the director itself.

The few parts of a metrics library the director uses: families a collector yields at scrape
time (``GaugeMetricFamily``, ``CounterMetricFamily``), the counters, gauges and histograms
the loop feeds, the process's own figures (``ProcessCollector``), a registry and the text
(``generate_latest``). Names and output are ``prometheus_client``'s, byte for byte
(``tests/adapters/metrics/test_promtext.py`` holds the two side by side): that package's import
pulls in its HTTP servers, urllib, the email package and ssl, 4 MB a box held for nothing.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Protocol

CONTENT_TYPE_LATEST = "text/plain; version=0.0.4; charset=utf-8"
Labels = tuple[tuple[str, str], ...]  # (name, value), as the series has them


def go_float(value: float) -> str:
    """A number as Prometheus (Go) writes it: ``1.0``, ``+Inf``, ``1.5e+07``."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _escaped(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Metric:
    """One family and its samples: (suffix, labels, value)."""

    kind = "untyped"
    suffix = ""  # of every sample added with add_metric

    def __init__(
        self,
        name: str,
        documentation: str,
        value: float | None = None,
        labels: Sequence[str] | None = None,
    ) -> None:
        # a counter's family is named without the ``_total`` its samples carry
        self.name = name.removesuffix("_total") if self.kind == "counter" else name
        self.documentation = documentation
        self.labels = tuple(labels or ())
        self.samples: list[tuple[str, Labels, float]] = []
        if value is not None:
            self.add_metric((), value)

    def add_metric(self, values: Sequence[str], value: float) -> None:
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name}: {len(self.labels)} label values, not {len(values)}")
        self.samples.append((self.suffix, tuple(zip(self.labels, values, strict=True)), value))


class GaugeMetricFamily(Metric):
    kind = "gauge"


class CounterMetricFamily(Metric):
    kind = "counter"
    suffix = "_total"


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class CollectorRegistry:
    def __init__(self) -> None:
        self._collectors: list[Collector] = []
        self._lock = threading.Lock()

    def register(self, collector: Collector) -> None:
        with self._lock:
            if collector in self._collectors:
                raise ValueError(f"{collector!r} is registered already")
            self._collectors.append(collector)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            collectors = list(self._collectors)
        for collector in collectors:
            yield from collector.collect()


def _line(name: str, labels: Labels, value: float) -> str:
    if not labels:
        return f"{name} {go_float(value)}\n"
    text = ",".join(f'{k}="{_escaped(v)}"' for k, v in sorted(labels))
    return f"{name}{{{text}}} {go_float(value)}\n"


def generate_latest(registry: CollectorRegistry) -> bytes:
    """Every family of the registry as text: a counter's ``_created`` series after its
    own, as a gauge family of their own (as ``prometheus_client`` writes them)."""
    out: list[str] = []
    for metric in registry.collect():
        shown = metric.name + ("_total" if metric.kind == "counter" else "")
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {shown} {doc}\n# TYPE {shown} {metric.kind}\n")
        created: list[str] = []
        for suffix, labels, value in metric.samples:
            line = _line(metric.name + suffix, labels, value)
            (created if suffix == "_created" else out).append(line)
        if created:
            out.append(f"# HELP {metric.name}_created {doc}\n")
            out.append(f"# TYPE {metric.name}_created gauge\n")
            out.extend(created)
    return "".join(out).encode()


# -- what the director feeds ----------------------------------------------------------------
class _Series:
    """One labelled series of an instrument: its figures, and when it was made."""

    def __init__(self, buckets: int) -> None:
        self.value = 0.0  # a counter's or gauge's value, a histogram's sum
        self.counts = [0] * buckets  # a histogram's observations by bucket
        self.created = time.time()


class _Instrument:
    kind = ""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: CollectorRegistry | None = None,
        buckets: Sequence[float] = (),
    ) -> None:
        self.name = name.removesuffix("_total") if self.kind == "counter" else name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(buckets)
        self._series: dict[tuple[str, ...], _Series] = {}
        self._lock = threading.Lock()
        if not self.labelnames:
            self._series[()] = _Series(len(self.bounds))
        if registry is not None:
            registry.register(self)

    def _child(self, values: Sequence[str]) -> _Series:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(self.labelnames)} label values")
        key = tuple(str(v) for v in values)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series(len(self.bounds))
            return series

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation)
        metric.kind = self.kind  # the name is the family's already
        with self._lock:
            for values, series in self._series.items():
                labels = tuple(zip(self.labelnames, values, strict=True))
                metric.samples.extend(self._samples(labels, series))
        return [metric]

    def _samples(self, labels: Labels, series: _Series) -> list[tuple[str, Labels, float]]:
        raise NotImplementedError


class Counter(_Instrument):
    kind = "counter"

    def labels(self, *values: str) -> CounterChild:
        return CounterChild(self, self._child(values))

    def _samples(self, labels: Labels, series: _Series) -> list[tuple[str, Labels, float]]:
        return [("_total", labels, series.value), ("_created", labels, series.created)]


class CounterChild:
    def __init__(self, parent: _Instrument, series: _Series) -> None:
        self._parent, self._series = parent, series

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        with self._parent._lock:
            self._series.value += amount


class Gauge(_Instrument):
    kind = "gauge"

    def set(self, value: float) -> None:
        with self._lock:
            self._series[()].value = float(value)

    def set_to_current_time(self) -> None:
        self.set(time.time())

    def _samples(self, labels: Labels, series: _Series) -> list[tuple[str, Labels, float]]:
        return [("", labels, series.value)]


class Histogram(_Instrument):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry | None = None,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        super().__init__(name, documentation, labelnames, registry=registry, buckets=bounds)

    def labels(self, *values: str) -> HistogramChild:
        return HistogramChild(self, self._child(values))

    def observe(self, amount: float) -> None:
        HistogramChild(self, self._child(())).observe(amount)

    def _samples(self, labels: Labels, series: _Series) -> list[tuple[str, Labels, float]]:
        out: list[tuple[str, Labels, float]] = []
        total = 0
        for bound, count in zip(self.bounds, series.counts, strict=True):
            total += count
            out.append(("_bucket", (*labels, ("le", go_float(bound))), float(total)))
        out.append(("_count", labels, float(total)))
        out.append(("_sum", labels, series.value))
        out.append(("_created", labels, series.created))
        return out


class HistogramChild:
    def __init__(self, parent: _Instrument, series: _Series) -> None:
        self._parent, self._series = parent, series

    def observe(self, amount: float) -> None:
        bounds = self._parent.bounds
        with self._parent._lock:
            self._series.value += amount
            for index, bound in enumerate(bounds):
                if amount <= bound:
                    self._series.counts[index] += 1
                    break


class ProcessCollector:
    """The process's CPU time, memory, start time and file descriptors (``process_*``), read
    from /proc at each scrape, as every Prometheus client library reports them."""

    def __init__(self, registry: CollectorRegistry | None = None, proc: str = "/proc") -> None:
        self.proc = proc
        self.ticks = float(os.sysconf("SC_CLK_TCK"))
        self.pagesize = os.sysconf("SC_PAGE_SIZE")
        self.boot = 0.0
        try:
            with open(os.path.join(proc, "stat"), "rb") as stat:
                self.boot = next(float(ln.split()[1]) for ln in stat if ln.startswith(b"btime "))
        except (OSError, StopIteration):
            pass
        if registry is not None:
            registry.register(self)

    def collect(self) -> Iterable[Metric]:
        if not self.boot:
            return []
        me = os.path.join(self.proc, "self")
        out: list[Metric] = []
        try:
            with open(os.path.join(me, "stat"), "rb") as stat:
                parts = stat.read().split(b")")[-1].split()
            out += [
                GaugeMetricFamily(
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes.",
                    value=float(parts[20]),
                ),
                GaugeMetricFamily(
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes.",
                    value=float(parts[21]) * self.pagesize,
                ),
                GaugeMetricFamily(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    value=float(parts[19]) / self.ticks + self.boot,
                ),
                CounterMetricFamily(
                    "process_cpu_seconds_total",
                    "Total user and system CPU time spent in seconds.",
                    value=float(parts[11]) / self.ticks + float(parts[12]) / self.ticks,
                ),
            ]
        except OSError:
            pass
        try:
            with open(os.path.join(me, "limits"), "rb") as limits:
                most = next(
                    float(ln.split()[3]) for ln in limits if ln.startswith(b"Max open file")
                )
            out.append(
                GaugeMetricFamily(
                    "process_open_fds",
                    "Number of open file descriptors.",
                    value=len(os.listdir(os.path.join(me, "fd"))),
                )
            )
            out.append(
                GaugeMetricFamily(
                    "process_max_fds", "Maximum number of open file descriptors.", value=most
                )
            )
        except (OSError, StopIteration):
            pass
        return out
