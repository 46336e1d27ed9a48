"""The Prometheus exporter: one custom collector that renders the catalog.

It reads the board (latest results, run counts), the history's health and every telemetry
collector, and emits metric families exactly as the catalog defines them.  An unavailable
collector shows as ``sixdim_collector_up 0`` with its reason.  What a host exports is budgeted:
summary series for every suite, per-shape series only for suites that ask (see
:class:`SixdimCollector`).  The exposition cache (agent/http/exposition.py) renders it in the
background; a scrape never runs this code.
"""

from __future__ import annotations

import importlib.metadata
import logging
import platform
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector
from prometheus_client.utils import floatToGoString

from sixdim import __version__
from sixdim.collectors.base import Availability, Collector, Sample
from sixdim.core import catalog
from sixdim.core.results import RunRecord
from sixdim.http.board import Board
from sixdim.run.progress import SuiteProgress
from sixdim.store.history import History
from sixdim.verdicts.detector import IMPROVEMENT, RATES, REGRESSION, SUSPICIOUS, median
from sixdim.verdicts.live import Verdicts
from sixdim.verdicts.summary import summarize

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


def exported_name(metric: catalog.MetricDef) -> str:
    """A metric's name in the text format (a counter's ends in ``_total``, as prometheus_client writes it)."""
    return metric.name if metric.kind != "counter" or metric.name.endswith("_total") else metric.name + "_total"


def family_header(metric: catalog.MetricDef) -> str:
    """A family's ``# HELP`` and ``# TYPE`` lines, as prometheus_client's ``generate_latest`` writes them."""
    name = exported_name(metric)
    text = metric.help.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {text}\n# TYPE {name} {'counter' if metric.kind == 'counter' else 'gauge'}\n"


def _escape(value: str) -> str:
    """A label value in the text format."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')
    return value


PeerMember = tuple[RunRecord, dict[str, str], str, float]
"""(record, labels, the rate figure compared, its value)."""


def _peer_groups(metric: catalog.MetricDef,
                 results: list[tuple[RunRecord, dict, dict[str, str], frozenset[str]]]) -> list[list[PeerMember]]:
    """The GPUs of the same model on this host that have the same result (labels other than the GPU's
    equal; for summaries, means over the same shapes: a GPU whose big shape failed must not look slower
    for it), each group with at least two GPUs: the on-host half of the fleet-peer comparison."""
    groups: dict[tuple, list[PeerMember]] = {}
    for record, figures, labels, shapes in results:
        if record.device_type != "cuda":
            continue
        figure = next((f for f in RATES if isinstance(figures.get(f), (int, float)) and figures[f] > 0), None)
        if figure is None:
            continue
        # only the labels the metric has: a summary's record also carries its newest shape, which is
        # no part of what the summary stands for
        peers = tuple(sorted((k, v) for k, v in labels.items() if k not in _GPU_IDENTITY and k in metric.labels)
                      ) + (("figure", figure), ("shapes", shapes))
        groups.setdefault(peers, []).append((record, labels, figure, float(figures[figure])))
    return [members for members in groups.values() if len({labels[catalog.UUID] for _, labels, _, _ in members}) >= 2]


def _peer_ratios(metric: catalog.MetricDef,
                 results: list[tuple[RunRecord, dict, dict[str, str], frozenset[str]]]) -> Iterator[Sample]:
    """Each GPU's speed over the median of its peers' (:func:`_peer_groups`)."""
    for members in _peer_groups(metric, results):
        middle = median([value for _, _, _, value in members])
        for _, labels, figure, value in members:
            yield Sample(metric, {**labels, catalog.FIGURE: figure}, value / middle)


PEER_SLOW = 0.9
"""A per-shape result this far below the median of its peers on the host (10% slower, as the
SixdimSlowerThanPeers alert's default) gets its likely causes against theirs (``sixdim_peer_cause``)."""


def _peer_causes(verdicts: Verdicts, results: list[tuple[RunRecord, dict, dict[str, str], frozenset[str]]]
                 ) -> Iterator[Sample]:
    """The likely causes of a GPU being slower than its peers: its last runs' conditions against theirs."""
    for members in _peer_groups(catalog.PEER_RATIO, results):
        middle = median([value for _, _, _, value in members])
        for record, labels, _, value in members:
            if value / middle >= PEER_SLOW:
                continue
            peers = [other.key() for other, _, _, v in members if v / middle >= PEER_SLOW]
            for rank, finding in enumerate(verdicts.peer_causes(record.key(), peers)[:CAUSES_SHOWN], start=1):
                yield Sample(catalog.PEER_CAUSE, {**labels, catalog.CAUSE: finding.cause,
                                                  catalog.CAUSE_RANK: str(rank)}, 1.0)


_GPU_IDENTITY = frozenset({catalog.GPU, catalog.UUID, catalog.PCI_BUS_ID})
"""The labels that tell one GPU from its peers of the same model on a host."""

PARTS = ("all", "results", "live")

NOTEWORTHY = frozenset({SUSPICIOUS, REGRESSION, IMPROVEMENT})
CAUSES_SHOWN = 3
"""Causes exported per unhealthy series (``sixdim_regression_cause``), the most likely first."""
SECONDS_PER_DAY = 86400.0
"""Verdict states exported for every series, not only those exported per shape."""


class ReloadStatus:
    """How the last configuration load went: ``success`` and the time of the last good one."""

    def __init__(self) -> None:
        self.success = True
        self.last_success = time.time()

    def succeeded(self) -> None:
        self.success, self.last_success = True, time.time()

    def failed(self) -> None:
        self.success = False


class SixdimCollector(PromCollector):
    """The catalog's metrics, from the board (results) and the telemetry collectors (live).

    ``part`` selects what one instance renders, so the exposition cache can render the large
    results part only when the board changes and the small live part on its own timer:

    - ``results``: summary series of every suite; every metric per shape for the results of the
      suites in ``shape_suites`` (a suite's ``export = "shapes"``; ``""`` stands for ad-hoc
      ``sixdim run --workload`` runs); run counters per device, workload and status; interrupted suite
      runs, and the device time and energy the suites' cases spent, per device and suite;
    - ``live``: build info, collector availability and readings, the history's health, and the
      suites' progress (``progress``: running or not, cases done and in all, the workload running);
    - ``all``: both (tests, and tools that render once).

    It never reads the database: the board is caught up in the background (agent/http/exposition.py).
    """

    def __init__(self, board: Board, collectors: Iterable[Collector], hostname: str, dcgm_label_names: bool = False,
                 history: History | None = None, *, part: str = "all",
                 shape_suites: Iterable[str] | None = None, reloads: ReloadStatus | None = None,
                 progress: SuiteProgress | None = None, cannot_run: Callable[[], str | None] | None = None):
        if part not in PARTS:
            raise ValueError(f"part must be one of {PARTS}, not {part!r}")
        self._board = board
        self._history = history
        self._collectors = list(collectors)
        self._hostname = hostname
        self._dcgm = dcgm_label_names
        self._part = part
        self._shape_suites = None if shape_suites is None else frozenset(shape_suites)
        self._reloads = reloads
        self._progress = progress
        self._cannot_run = cannot_run
        """Why the agent cannot run its suites now, or None (``sixdim_agent_can_run``; live part)."""
        self._build_labels = build_info_labels(hostname)

    def set_shape_suites(self, shape_suites: Iterable[str]) -> None:
        """The suites exported per shape from now on (a reloaded configuration's)."""
        self._shape_suites = frozenset(shape_suites)

    def describe(self) -> list[Metric]:
        return []  # families vary with the hardware; no describe-time scrape

    def _shape_keys(self, by_suite: list[RunRecord]) -> set[tuple[str, ...]] | None:
        """The series exported per shape: those a shape-exporting suite has a result for (None: all)."""
        if self._shape_suites is None:
            return None
        return {record.key() for record in by_suite if record.suite in self._shape_suites}

    def _per_shape(self, by_suite: list[RunRecord]) -> list[RunRecord]:
        """The per-shape results exported: each shape-exporting suite's newest ok result of each series,
        labelled with its suite (two suites that run a shape are two series)."""
        return [r for r in by_suite if self._shape_suites is None or r.suite in self._shape_suites]

    def _samples(self) -> Iterator[Sample]:
        if self._part in ("all", "live"):
            yield from self._live()
        if self._part in ("all", "results"):
            yield from self._results()

    def _results(self) -> Iterator[Sample]:
        yield Sample(catalog.HISTORY_RESTORED, {catalog.HOSTNAME: self._hostname},
                     1.0 if self._board.restored() else 0.0)
        by_suite = self._board.latest_by_suite()
        shape_keys = self._shape_keys(by_suite)
        shown = [r for r in self._board.latest() if shape_keys is None or r.key() in shape_keys]
        for record in self._per_shape(by_suite):
            labels = {**record.result_labels(), catalog.SUITE: record.suite}
            for metric in catalog.RESULT_METRICS:
                if metric.figure_labels:
                    yield from _labelled_figures(metric, record.figures, labels)
                    continue
                value = record.value(metric.figure or "")
                if value is not None:
                    extra = {label: str(record.params.get(key, "")) for label, key in metric.extra_labels}
                    yield Sample(metric, {**labels, **extra} if extra else labels, value)
        summaries = summarize(by_suite)
        for summary in summaries:
            labels = {**summary.record.result_labels(), catalog.SUITE: summary.record.suite}
            for metric in catalog.SUMMARY_METRICS:
                value = float(summary.shapes) if metric.figure == "shapes" else summary.figures.get(metric.figure or "")
                if value is not None:
                    yield Sample(metric, labels, value)
        per_shape = [(r, r.figures, r.result_labels(), frozenset[str]()) for r in shown]
        yield from _peer_ratios(catalog.PEER_RATIO, per_shape)
        if self._board.verdicts is not None:
            yield from _peer_causes(self._board.verdicts, per_shape)
        yield from _peer_ratios(catalog.SUITE_PEER_RATIO, [
            (s.record, s.figures, {**s.record.result_labels(), catalog.SUITE: s.record.suite}, s.shape_names)
            for s in summaries])
        yield from self._run_counts()
        yield from self._verdicts(shape_keys)

    def _verdicts(self, shape_keys: set[tuple[str, ...]] | None) -> Iterator[Sample]:
        """Regression verdicts of the series exported per shape, and of any other series only while
        it is suspicious, regressed or improved: a full suite's thousands of shapes add series only
        when something happened to them (the series budget, docs/REGRESSIONS.md)."""
        verdicts = self._board.verdicts
        if verdicts is None:
            return
        for series in verdicts.snapshot():
            labels = series.record.result_labels()
            shown = shape_keys is None or series.record.key() in shape_keys
            for figure, verdict in series.verdicts.items():
                if not shown and verdict.state not in NOTEWORTHY and not verdict.drift:
                    continue
                at = {**labels, catalog.FIGURE: figure}
                yield Sample(catalog.REGRESSION_STATE, at, float(verdict.code))
                if verdict.ratio is not None:
                    yield Sample(catalog.REGRESSION_RATIO, at, verdict.ratio)
                if verdict.baseline is not None:
                    yield Sample(catalog.BASELINE_VALUE, at, verdict.baseline)
                yield Sample(catalog.DRIFT_STATE, at, float(verdict.drift))
                if verdict.drift and verdict.drift_per_day is not None:
                    yield Sample(catalog.DRIFT_RATE, at, verdict.drift_per_day / SECONDS_PER_DAY)
                if verdict.drift and verdict.drift_ratio is not None:
                    yield Sample(catalog.DRIFT_TOTAL_RATIO, at, verdict.drift_ratio)
            for rank, finding in enumerate(series.causes[:CAUSES_SHOWN], start=1):
                yield Sample(catalog.REGRESSION_CAUSE, {**labels, catalog.CAUSE: finding.cause,
                                                        catalog.CAUSE_RANK: str(rank)}, 1.0)
            for figure, change in series.changes.items():
                if change.ratio is None or (not shown and change.state != REGRESSION):
                    continue
                components = list(change.changes)
                yield Sample(catalog.VERSION_CHANGE_RATIO, {
                    **labels, catalog.FIGURE: figure, catalog.CHANGE_COMPONENT: "+".join(components),
                    catalog.CHANGE_FROM: ",".join(change.changes[c][0] for c in components),
                    catalog.CHANGE_TO: ",".join(change.changes[c][1] for c in components),
                    catalog.CHANGE_VERDICT: change.state}, change.ratio)

    def _run_counts(self) -> Iterator[Sample]:
        """Runs per device, workload and status (not per shape: a full suite has thousands); interrupted suite
        runs, and the device time and energy of each suite's cases since the agent started, per device and
        suite."""
        totals: dict[tuple[tuple[str, ...], str, str], list] = {}
        last_ok: dict[tuple[tuple[str, ...], str], list] = {}
        for record, count in self._board.counts():  # interrupted skips are not counted (agent/core/results.py)
            labels = record.workload_labels()
            device = tuple(labels[label] for label in catalog.DEVICE_LABELS)
            entry = totals.setdefault((device, record.workload, record.status), [labels, 0])
            entry[1] += count
            if record.status == "ok":
                newest = last_ok.setdefault((device, record.workload), [labels, record.ended_at])
                newest[1] = max(newest[1], record.ended_at)
        for (_, _workload, status), (labels, count) in totals.items():
            yield Sample(catalog.WORKLOAD_RUNS, {**labels, catalog.STATUS: status}, float(count))
        for labels, ended in last_ok.values():
            yield Sample(catalog.WORKLOAD_LAST_SUCCESS, labels, ended)
        for labels, count in self._board.interruptions():
            yield Sample(catalog.SUITE_INTERRUPTIONS, labels, float(count))
        costs = self._board.suite_costs()  # each family's samples together (the exposition groups them)
        for labels, seconds, _ in costs:
            yield Sample(catalog.SUITE_DEVICE_SECONDS, labels, seconds)
        for labels, _, joules in costs:
            if joules is not None:  # no case had a reading: absent, never 0 J
                yield Sample(catalog.SUITE_ENERGY, labels, joules)
        for kind, labels, what, value in self._board.since_start():
            if kind == "skips":
                yield Sample(catalog.WORKLOAD_SKIPS, {**labels, catalog.SKIP_REASON: what}, value)
            else:
                yield Sample(catalog.WORKLOAD_CASE_SECONDS, {**labels, catalog.STATUS: what}, value)

    def _suites(self) -> Iterator[Sample]:
        """Each suite's run on each device: running or not, its cases in all and ended by status, the
        workload running now (agent/run/progress.py)."""
        if self._progress is None:
            return
        for state in self._progress.snapshot():
            labels = {**state.labels, catalog.SUITE: state.suite}
            yield Sample(catalog.SUITE_RUNNING, labels, 1.0 if state.running else 0.0)
            yield Sample(catalog.SUITE_CASES, labels, float(state.cases))
            for status in catalog.RUN_STATUSES:
                yield Sample(catalog.SUITE_CASES_DONE, {**labels, catalog.STATUS: status},
                             float(state.done.get(status, 0)))
            if state.workload:
                yield Sample(catalog.SUITE_CURRENT_WORKLOAD, {**labels, catalog.WORKLOAD: state.workload}, 1.0)

    def _live(self) -> Iterator[Sample]:
        yield Sample(catalog.BUILD_INFO, self._build_labels, 1.0)
        yield from self._suites()
        if self._reloads is not None:
            host = {catalog.HOSTNAME: self._hostname}
            yield Sample(catalog.CONFIG_RELOAD_SUCCESS, host, 1.0 if self._reloads.success else 0.0)
            yield Sample(catalog.CONFIG_LAST_RELOAD, host, self._reloads.last_success)
        if self._cannot_run is not None:
            yield Sample(catalog.AGENT_CAN_RUN, {catalog.HOSTNAME: self._hostname},
                         0.0 if self._cannot_run() else 1.0)
        if self._history is not None:
            health = self._history.health()
            host = {catalog.HOSTNAME: self._hostname}
            yield Sample(catalog.HISTORY_UP, host, 1.0 if health.up else 0.0)
            yield Sample(catalog.HISTORY_PENDING, host, float(health.pending))
            for reason in ("locked", "disk_full", "read_only", "corrupt", "io", "other", "dropped"):
                yield Sample(catalog.HISTORY_WRITE_ERRORS, {**host, "reason": reason},
                             float(health.errors.get(reason, 0)))
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

    def render_lines(self) -> Iterator[tuple[catalog.MetricDef, str]]:
        """The same samples as :meth:`collect`, each as its line of the text format (exactly as
        prometheus_client's ``generate_latest`` writes it: labels sorted by name, values as Go prints
        them), without the metric families: the exposition (agent/http/exposition.py) groups the lines
        per family as it compresses them, so a host's 100,000 series never exist as Python objects at
        once.  Each family's ``# HELP``/``# TYPE`` lines come from :func:`family_header`."""
        formats: dict[str, tuple[str, list[tuple[str, str]]]] = {}
        last: tuple[object, object, str] = (None, None, "")
        for sample in self._samples():
            metric = sample.metric
            form = formats.get(metric.name)
            if form is None:
                form = formats[metric.name] = (
                    exported_name(metric), sorted((catalog.exported_label(label, self._dcgm), label)
                                                  for label in metric.labels))
            name, names = form
            labels = sample.labels
            if labels is last[0] and names is last[1]:  # the samples of one result share their labels
                text = last[2]
            else:
                text = ",".join(f'{exported}="{_escape(labels.get(label, ""))}"' for exported, label in names)
                text = f"{{{text}}}" if text else ""
                last = (labels, names, text)
            yield metric, f"{name}{text} {floatToGoString(sample.value)}\n"

    def collect(self) -> Iterator[Metric]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for sample in self._samples():
            metric = sample.metric
            family = families.get(metric.name)
            if family is None:
                names = [catalog.exported_label(label, self._dcgm) for label in metric.labels]
                kind = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
                family = families[metric.name] = kind(metric.name, metric.help, labels=names)
            family.add_metric([sample.labels.get(label, "") for label in metric.labels], sample.value)
        yield from families.values()
