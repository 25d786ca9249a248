"""A process-local Prometheus registry: counters, histograms and scrape-time collectors,
rendered in the text exposition format (0.0.4).

Label sets are bounded (invariant 10): each metric keeps at most ``max_series`` label
combinations; past that, new combinations are counted under every label set to
``"other"`` (and a warning is logged once), so a bug that puts an unbounded value in a label
cannot grow memory or the scrape without limit. Callers label by tenant *class*, never by
tenant id."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

Labels = tuple[str, ...]
#: One scrape-time sample: metric name, label pairs, value. Collectors return these.
Sample = tuple[str, tuple[tuple[str, str], ...], float]
Collector = Callable[[], Iterable[Sample]]

MAX_SERIES = 1000
OVERFLOW = "other"

#: Seconds: from sub-millisecond platform work to multi-minute queue waits.
DEFAULT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 300.0)


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    return "{" + ",".join(f'{n}="{escape(v)}"' for n, v in zip(names, values, strict=True)) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


@dataclass(slots=True)
class _Metric:
    name: str
    help: str
    labelnames: tuple[str, ...]
    max_series: int = MAX_SERIES
    _warned: bool = field(default=False, init=False)

    def _key(self, values: Sequence[str], known: Mapping[Labels, object]) -> Labels:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {tuple(values)}")
        key = tuple(str(v) for v in values)
        if key in known or len(known) < self.max_series:
            return key
        if not self._warned:
            self._warned = True
            logger.warning("metric %s reached %d label sets; further ones are counted as %r",
                           self.name, self.max_series, OVERFLOW)
        return tuple(OVERFLOW for _ in self.labelnames)


@dataclass(slots=True)
class Counter(_Metric):
    _values: dict[Labels, float] = field(default_factory=dict, init=False)

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        key = self._key(labels, self._values)
        self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, *labels: str) -> float:
        return self._values.get(tuple(labels), 0.0)

    def series(self) -> dict[Labels, float]:
        """Every label set counted so far and its value (a copy): for the console's charts."""
        return dict(self._values)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        for key, value in sorted(self._values.items()):
            lines.append(f"{self.name}{_labels(self.labelnames, key)} {_number(value)}")
        return lines


@dataclass(slots=True)
class _Series:
    buckets: list[int]
    count: int = 0
    total: float = 0.0


@dataclass(slots=True)
class Histogram(_Metric):
    buckets: tuple[float, ...] = DEFAULT_BUCKETS
    _series: dict[Labels, _Series] = field(default_factory=dict, init=False)

    def observe(self, value: float, *labels: str) -> None:
        key = self._key(labels, self._series)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series([0] * len(self.buckets))
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                series.buckets[index] += 1
        series.count += 1
        series.total += value

    def count(self, *labels: str) -> int:
        series = self._series.get(tuple(labels))
        return series.count if series is not None else 0

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        names = (*self.labelnames, "le")
        for key, series in sorted(self._series.items()):
            for bound, hits in zip(self.buckets, series.buckets, strict=True):
                lines.append(f"{self.name}_bucket{_labels(names, (*key, _number(bound)))} {hits}")
            lines.append(f"{self.name}_bucket{_labels(names, (*key, '+Inf'))} {series.count}")
            lines.append(f"{self.name}_sum{_labels(self.labelnames, key)} "
                         f"{_number(round(series.total, 6))}")
            lines.append(f"{self.name}_count{_labels(self.labelnames, key)} {series.count}")
        return lines


@dataclass(frozen=True, slots=True)
class GaugeFamily:
    """A metric whose samples a collector reads at scrape time: a gauge, or a counter
    someone else keeps (a pool's claim count)."""

    name: str
    help: str
    type: str = "gauge"


class Registry:
    """Counters and histograms updated as work happens, plus gauges computed at scrape
    time by collectors (breaker states, pool sizes). Samples of one gauge with the same
    labels from several collectors (several worker loops in one process) are summed."""

    def __init__(self) -> None:
        self._metrics: list[Counter | Histogram] = []
        self._gauges: dict[str, GaugeFamily] = {}
        self._collectors: list[Collector] = []
        self._lock = threading.Lock()  # collectors come and go from other threads' loops

    def counter(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Counter:
        metric = Counter(name, help, tuple(labelnames))
        self._metrics.append(metric)
        return metric

    def histogram(self, name: str, help: str, labelnames: Sequence[str] = (),
                  buckets: tuple[float, ...] = DEFAULT_BUCKETS) -> Histogram:
        metric = Histogram(name, help, tuple(labelnames), buckets=buckets)
        self._metrics.append(metric)
        return metric

    def gauge(self, name: str, help: str, type: str = "gauge") -> GaugeFamily:
        family = self._gauges[name] = GaugeFamily(name, help, type)
        return family

    def add_collector(self, collector: Collector) -> Callable[[], None]:
        """Register a scrape-time collector; returns the function that removes it."""
        with self._lock:
            self._collectors.append(collector)

        def remove() -> None:
            with self._lock:
                if collector in self._collectors:
                    self._collectors.remove(collector)
        return remove

    def collect_gauges(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        with self._lock:
            collectors = list(self._collectors)
        samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {
            name: {} for name in self._gauges}
        for collector in collectors:
            try:
                collected = list(collector())
            except Exception:  # a broken collector must not break the scrape
                logger.exception("metrics collector failed")
                continue
            for name, labels, value in collected:
                series = samples.setdefault(name, {})
                series[labels] = series.get(labels, 0.0) + value
        return samples

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._metrics:
            lines += metric.render()
        for name, series in self.collect_gauges().items():
            family = self._gauges.get(name)
            if family is None:
                continue  # a collector's sample for a gauge nobody declared
            lines += [f"# HELP {name} {family.help}", f"# TYPE {name} {family.type}"]
            for labels, value in sorted(series.items()):
                names = [n for n, _ in labels]
                values = [v for _, v in labels]
                lines.append(f"{name}{_labels(names, values)} {_number(value)}")
        return "\n".join(lines) + "\n" if lines else ""


def merge(texts: Iterable[str]) -> str:
    """Several registries' renderings as one exposition: samples with the same name and
    labels are summed (several worker metrics objects in one process, as in tests)."""
    order: list[str] = []
    comments: set[str] = set()
    values: dict[str, float] = {}
    for text in texts:
        for line in text.splitlines():
            if not line:
                continue
            if line.startswith("#"):
                if line not in comments:
                    comments.add(line)
                    order.append(line)
                continue
            series, _, raw = line.rpartition(" ")
            if series not in values:
                order.append(series)
                values[series] = 0.0
            values[series] += float(raw)
    lines = [line if line.startswith("#") else f"{line} {_number(values[line])}"
             for line in order]
    return "\n".join(lines) + "\n" if lines else ""
