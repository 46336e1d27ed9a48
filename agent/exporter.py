"""The Prometheus exporter: one custom collector that renders the catalog.

At each scrape it reads the board (latest results, run counts) and every
telemetry collector, and emits metric families exactly as the catalog defines
them.  An unavailable collector shows as ``sixdim_collector_up 0`` with its reason.
"""

from __future__ import annotations

import importlib.metadata
import logging
import platform
from typing import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector

from agent import __version__, catalog
from agent.board import Board
from agent.history import History
from collectors.base import Availability, Collector, Sample

log = logging.getLogger(__name__)


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def build_info_labels(hostname: str) -> dict[str, str]:
    """Versions read from package metadata: the daemon never imports torch to learn its version."""
    return {catalog.HOSTNAME: hostname, "version": __version__, "python_version": platform.python_version(),
            catalog.TORCH_VERSION: _package_version("torch"),
            "prometheus_client_version": _package_version("prometheus-client")}


def _labelled_figures(metric: catalog.MetricDef, figures: dict[str, float], labels: dict[str, str]) -> Iterator[Sample]:
    """One sample per figure of a metric a run reports several times (each quality metric)."""
    for key, value in figures.items():
        extra = catalog.figure_label_values(metric, key)
        if extra is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            yield Sample(metric, {**labels, **extra}, float(value))


class SixdimCollector(PromCollector):
    def __init__(self, board: Board, collectors: Iterable[Collector], hostname: str, dcgm_label_names: bool = False,
                 history: History | None = None):
        self._board = board
        self._history = history
        self._collectors = list(collectors)
        self._hostname = hostname
        self._dcgm = dcgm_label_names
        self._build_labels = build_info_labels(hostname)

    def describe(self) -> list[Metric]:
        return []  # families vary with the hardware; no describe-time scrape

    def _samples(self) -> Iterator[Sample]:
        if self._history is not None:
            try:
                self._board.catch_up(self._history)  # runs recorded by other processes, e.g. `sixdim run`
            except Exception as exc:  # a locked or broken history must not fail the scrape
                log.warning("could not read new runs from the history: %s", exc)
        yield Sample(catalog.BUILD_INFO, self._build_labels, 1.0)
        for record in self._board.latest():
            labels = record.result_labels()
            for metric in catalog.RESULT_METRICS:
                if metric.figure_labels:
                    yield from _labelled_figures(metric, record.figures, labels)
                    continue
                value = record.value(metric.figure or "")
                if value is not None:
                    extra = {label: str(record.params.get(key, "")) for label, key in metric.extra_labels}
                    yield Sample(metric, {**labels, **extra} if extra else labels, value)
        for record, count in self._board.counts():
            yield Sample(catalog.WORKLOAD_RUNS, {**record.workload_labels(), catalog.STATUS: record.status},
                         float(count))
        for collector in self._collectors:
            availability = collector.availability()
            readings: list[Sample] = []
            if availability.available:
                try:
                    readings = collector.collect()
                except Exception as exc:  # a failing source must not fail the whole scrape
                    log.warning("collector %s failed: %s", collector.name, exc)
                    availability = Availability(False, f"collect failed: {type(exc).__name__}")
            yield Sample(catalog.COLLECTOR_UP, {catalog.HOSTNAME: self._hostname, "collector": collector.name,
                                                "reason": availability.reason}, 1.0 if availability.available else 0.0)
            yield from readings

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for sample in self._samples():
            metric = sample.metric
            family = families.get(metric.name)
            if family is None:
                names = [catalog.exported_label(label, self._dcgm) for label in metric.labels]
                kind = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
                family = families[metric.name] = kind(metric.name, metric.help, labels=names)
            family.add_metric([sample.labels.get(label, "") for label in metric.labels], sample.value)
        yield from families.values()
