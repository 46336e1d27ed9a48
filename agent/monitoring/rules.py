"""``sixdim rules``: the Prometheus alert rules, generated from the metric catalog.

Every metric and label name in the rules comes from :mod:`sixdim.core.catalog`, so a rename there
changes the rules too (and the committed ``deploy/prometheus/sixdim-rules.yml`` fails its
staleness test until it is regenerated).  The layout follows the monitoring mixins
(kubernetes-mixin, node-mixin): CamelCase alert names with the ``Sixdim`` prefix, a ``severity``
label (critical, warning or info) and ``summary``, ``description`` and ``runbook_url``
annotations, the runbook being a section of docs/ALERTS.md.

One alert per incident: the rules aggregate per GPU and workload, so a GPU that regressed on 40
shapes raises one ``SixdimRegression`` whose value (and description) is 40; the Alertmanager
example (deploy/alertmanager/alertmanager.yml) then groups by host and workload.

The YAML is written by a small emitter of our own (no YAML dependency), byte for byte
deterministic: the same options always give the same file.  ``--prometheus-rule FILE`` writes the
same groups as a prometheus-operator ``PrometheusRule`` object (``spec.groups``), committed as
``deploy/k8s/base/prometheusrule.yaml`` for the Kubernetes deployment; a test checks that its groups
are exactly those of ``deploy/prometheus/sixdim-rules.yml``.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, fields
from typing import Any

from sixdim.core import catalog
from sixdim.core.durations import format_duration, whole_seconds
from sixdim.core.files import write_atomically

EXIT_OK, EXIT_USAGE = 0, 2

COMMITTED = "deploy/prometheus/sixdim-rules.yml"
"""Where the rules generated with the default options are committed (a test keeps it current)."""
REGENERATE = f"sixdim rules --out {COMMITTED}"
COMMITTED_PROMETHEUS_RULE = "deploy/k8s/base/prometheusrule.yaml"
"""Where the same rules are committed as a prometheus-operator PrometheusRule (a test keeps it current)."""
REGENERATE_PROMETHEUS_RULE = f"sixdim rules --prometheus-rule {COMMITTED_PROMETHEUS_RULE}"
PROMETHEUS_RULE_API_VERSION = "monitoring.coreos.com/v1"
PROMETHEUS_RULE_NAME = "sixdim"

DEFAULT_RUNBOOK_BASE = "https://github.com/sixdim/sixdim/blob/main/docs/ALERTS.md"

REGRESSION = "regression"
_STATE = dict(catalog.REGRESSION_STATE_VALUES)
REGRESSION_CODE = _STATE[REGRESSION]
"""``sixdim_regression_state``'s value for a regression (3)."""

PROMETHEUS_UP = "up"
"""Prometheus's own per-target metric, one of the two metrics in the rules that are not sixdim's."""
PROCESS_START_TIME = "process_start_time_seconds"
"""prometheus_client's process metric, which the agent exports beside the catalog's: when the agent
process started, for counters that count since then."""
JOB, INSTANCE = "job", "instance"
"""The target labels Prometheus adds to every scraped series."""

SLOWDOWN_WINDOW = 3600
"""Seconds a thermal or hardware slowdown keeps its alert after the result that showed it was replaced."""
PEER_FOR = "1h"
AGENT_DOWN_FOR = "5m"
HISTORY_DOWN_FOR = "10m"
CONFIG_RELOAD_FAILED_FOR = "10m"
"""How long a failed configuration reload must last before it pages (a fix and another SIGHUP usually
follow within minutes)."""
HISTORY_LOSS_WINDOW = 3600
STALE_KEEP = 86400
"""A benchmark whose last-success series disappears (the agent down, a lost history) keeps its stale
alert this long past the stale threshold: the lookback is ``stale_after`` plus this.  The agent-down
alert looks as far back for the host name the target last reported, so that it can inhibit those
stale alerts of its host for as long as they last."""


# ----------------------------------------------------------------------------- options

@dataclass(frozen=True)
class Options:
    """What ``sixdim rules`` can tune; the defaults are what deploy/prometheus/sixdim-rules.yml holds."""

    stale_after: int = 2 * 3600
    """SixdimBenchmarkStale: seconds without an ok run of a workload on a device."""
    failures: int = 3
    """SixdimBenchmarkFailing: failed or timed-out runs (cases) within ``failure_window``."""
    failure_window: int = 6 * 3600
    incorrect_window: int = 86400
    """SixdimIncorrectResult fires while an incorrect result was recorded within this many seconds."""
    peer_ratio: float = 0.9
    """SixdimSlowerThanPeers: a GPU below this fraction of its peers' median."""
    min_peers: int = 3
    """GPUs (the one judged included) a peer group needs before it is compared."""
    job: str = "sixdim"
    """The scrape job of the agents (SixdimAgentDown)."""
    dcgm_label_names: bool = False
    """Use dcgm-exporter's ``modelName`` for the model label, as the agent's --dcgm-label-names does."""
    runbook_base: str = DEFAULT_RUNBOOK_BASE

    def validate(self) -> None:
        for name in ("stale_after", "failure_window", "incorrect_window"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ValueError(f"{name}: expected a positive number of seconds, got {getattr(self, name)!r}")
        if not isinstance(self.failures, int) or self.failures < 1:
            raise ValueError(f"failures: expected a whole number of at least 1, got {self.failures!r}")
        if not 0 < self.peer_ratio < 1:
            raise ValueError(f"peer_ratio: expected a ratio between 0 and 1, got {self.peer_ratio!r}")
        if not isinstance(self.min_peers, int) or self.min_peers < 2:
            raise ValueError(f"min_peers: expected a whole number of at least 2, got {self.min_peers!r}")
        if not self.job or any(ch in self.job for ch in "\"\\\n"):
            raise ValueError(f"job: expected a non-empty job name without quotes or backslashes, got {self.job!r}")
        if not re.match(r"^https?://\S+$", self.runbook_base) or "#" in self.runbook_base:
            raise ValueError(f"runbook_base: expected an http(s) URL without a #fragment, got {self.runbook_base!r}")

    def as_flags(self) -> str:
        """The options as ``sixdim rules`` flags, written into the file's header."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                if value:
                    out.append(flag)
            elif f.name in ("stale_after", "failure_window", "incorrect_window"):
                out.append(f"{flag} {format_duration(value)}")
            else:
                out.append(f"{flag} {value}")
        return " ".join(out)


# ----------------------------------------------------------------------------- PromQL pieces

def _label(metric: catalog.MetricDef, name: str) -> str:
    """A label of a catalog metric, checked against its definition."""
    if name not in metric.labels:
        raise KeyError(f"{metric.name} has no label {name!r} (labels: {', '.join(metric.labels)})")
    return name


def _status(name: str) -> str:
    if name not in catalog.RUN_STATUSES:
        raise KeyError(f"unknown run status {name!r}")
    return name


def _quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def covering_shapes(expr: str, shapes: str, peers: str) -> str:
    """``expr`` (summary series) where the summary covers as many shapes (``shapes``, the
    ``sixdim_suite_shapes`` selector) as the median of its peer group (``peers``, a label list): a
    geometric mean that lost a shape covers other shapes than its peers' and compares with nothing,
    and one with an extra shape leaves out itself, not the rest.  PromQL compares counts, not sets.
    SixdimSlowerThanPeers and the dashboards' fleet peer panels both use it."""
    return f"({expr} and ({shapes} == on ({peers}) group_left () quantile by ({peers}) (0.5, {shapes})))"


def _indent(text: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line if line else line for line in text.splitlines())


class _Rules:
    """The alerts for one set of options."""

    def __init__(self, options: Options) -> None:
        options.validate()
        self.o = options
        self.model = catalog.exported_label(catalog.MODEL_NAME, options.dcgm_label_names)
        self.device = tuple(catalog.exported_label(label, options.dcgm_label_names) for label in catalog.DEVICE_LABELS)
        self.versions = catalog.VERSION_LABELS

    # --- helpers
    def by(self, *labels: str) -> str:
        return ", ".join(labels)

    def lab(self, name: str) -> str:
        """A label's value in a template."""
        return "{{ $labels." + catalog.exported_label(name, self.o.dcgm_label_names) + " }}"

    def gpu_ref(self) -> str:
        """The GPU in words: GPU 3 (NVIDIA H100 80GB HBM3, GPU-...) on host-a."""
        return (f"GPU {self.lab(catalog.GPU)} ({self.lab(catalog.MODEL_NAME)}, {self.lab(catalog.UUID)}) "
                f"of {self.lab(catalog.HOSTNAME)}")

    def versions_in_labels(self) -> str:
        return (f"driver {self.lab(catalog.DRIVER_VERSION)}, CUDA {self.lab(catalog.CUDA_VERSION)}, "
                f"torch {self.lab(catalog.TORCH_VERSION)}")

    def versions_now(self) -> str:
        """For alerts whose series carry no versions: the driver and torch the agent reports now."""
        gpu_info = (f"{catalog.GPU_INFO.name}{{{_label(catalog.GPU_INFO, catalog.HOSTNAME)}=%q,"
                    f"{_label(catalog.GPU_INFO, catalog.UUID)}=%q}}")
        build_info = f"{catalog.BUILD_INFO.name}{{{_label(catalog.BUILD_INFO, catalog.HOSTNAME)}=%q}}"
        return ("Now running"
                f"{{{{ with query (printf `{gpu_info}` $labels.{catalog.HOSTNAME} $labels.{catalog.UUID}) }}}}"
                f" driver {{{{ . | first | label \"{_label(catalog.GPU_INFO, catalog.DRIVER_VERSION)}\" }}}}{{{{ end }}}}"
                f"{{{{ with query (printf `{build_info}` $labels.{catalog.HOSTNAME}) }}}}"
                f" with torch {{{{ . | first | label \"{_label(catalog.BUILD_INFO, catalog.TORCH_VERSION)}\" }}}}"
                "{{ end }}.")

    def runbook(self, alert: str) -> str:
        return f"{self.o.runbook_base}#{alert.lower()}"

    def alert(self, name: str, expr: str, severity: str, summary: str, description: str,
              for_: str | None = None) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": name, "expr": expr}
        if for_:
            rule["for"] = for_
        rule["labels"] = {"severity": severity}
        rule["annotations"] = {"summary": summary, "description": description, "runbook_url": self.runbook(name)}
        return rule

    def runs_added(self, statuses: tuple[str, ...], window: int) -> str:
        """Runs of the given statuses added to ``sixdim_workload_runs_total`` within the window, exactly.

        The counter comes from the history (it survives restarts and never goes down), so the runs
        added are its value minus its smallest value in the window.  A series that first appeared in
        the window (a device's first failed run creates its ``status="failed"`` series at 1) counts
        from 0, but only if it appeared while the agent was already being scraped (fewer samples
        than the host's ``sixdim_history_up``): an agent back after a long absence re-exports old
        counts as new series all at once, and those are not new runs."""
        runs = catalog.WORKLOAD_RUNS
        matcher = "|".join(_status(s) for s in statuses)
        op = "=~" if len(statuses) > 1 else "="
        x = f"{runs.name}{{{_label(runs, catalog.STATUS)}{op}{_quote(matcher)}}}"
        w = format_duration(window)
        host = _label(catalog.HISTORY_UP, catalog.HOSTNAME)
        return (f"(\n"
                f"    {x}\n"
                f"  unless\n"
                f"    {x} offset {w}\n"
                f")\n"
                f"and\n"
                f"(\n"
                f"    count_over_time({x}[{w}])\n"
                f"  < on ({host}) group_left ()\n"
                f"    max by ({host}) (count_over_time({catalog.HISTORY_UP.name}[{w}]))\n"
                f")\n"
                f"or\n"
                f"  {x}\n"
                f"-\n"
                f"  min_over_time({x}[{w}])")

    # --- the alerts
    def regression(self) -> dict[str, Any]:
        state = catalog.REGRESSION_STATE
        group = self.device + (_label(state, catalog.WORKLOAD), _label(state, catalog.PRECISION)) + self.versions
        case = group + (_label(state, catalog.SHAPE), _label(state, catalog.MODE), _label(state, catalog.PASS))
        expr = (f"count by ({self.by(*group)}) (\n"
                f"  count by ({self.by(*case)}) (\n"
                f"    {state.name} == {REGRESSION_CODE}\n"
                f"  )\n"
                f")")
        figure = _label(state, catalog.FIGURE)
        figures_query = (f"count by ({figure}) ({state.name}{{{catalog.HOSTNAME}=%q,{catalog.UUID}=%q,"
                         f"{catalog.WORKLOAD}=%q,{catalog.PRECISION}=%q}} == {REGRESSION_CODE})")
        figures = (f"{{{{ range $i, $s := query (printf `{figures_query}` $labels.{catalog.HOSTNAME} "
                   f"$labels.{catalog.UUID} $labels.{catalog.WORKLOAD} $labels.{catalog.PRECISION}) "
                   f"| sortByLabel \"{figure}\" }}}}{{{{ if $i }}}}, {{{{ end }}}}{{{{ $s.Labels.{figure} }}}}{{{{ end }}}}")
        return self.alert(
            "SixdimRegression", expr, "warning",
            f"{self.lab(catalog.WORKLOAD)} regressed on {self.lab(catalog.HOSTNAME)} GPU {self.lab(catalog.GPU)}",
            f"{self.lab(catalog.WORKLOAD)} {self.lab(catalog.PRECISION)} on {self.gpu_ref()} regressed on "
            f"{{{{ $value }}}} shape(s), counting each mode and pass (figures: {figures}), under "
            f"{self.versions_in_labels()}. The agent calls a regression only after it persisted over several "
            f"runs against the series' own baseline.")

    def incorrect(self) -> dict[str, Any]:
        runs = catalog.WORKLOAD_RUNS
        group = self.device + (_label(runs, catalog.WORKLOAD),)
        w = format_duration(self.o.incorrect_window)
        expr = (f"sum by ({self.by(*group)}) (\n"
                f"{_indent(self.runs_added(('incorrect',), self.o.incorrect_window), 2)}\n"
                f") > 0")
        return self.alert(
            "SixdimIncorrectResult", expr, "critical",
            f"Incorrect {self.lab(catalog.WORKLOAD)} results on {self.lab(catalog.HOSTNAME)} "
            f"GPU {self.lab(catalog.GPU)}",
            f"{self.lab(catalog.WORKLOAD)} on {self.gpu_ref()} produced {{{{ $value }}}} result(s) in the last {w} "
            f"whose output failed its check against a float64 reference: the GPU may be computing wrong "
            f"results silently. {self.versions_now()}")

    def stale(self) -> dict[str, Any]:
        last = catalog.WORKLOAD_LAST_SUCCESS
        group = self.device + (_label(last, catalog.WORKLOAD),)
        lookback = format_duration(self.o.stale_after + STALE_KEEP)
        expr = (f"time()\n"
                f"-\n"
                f"  max by ({self.by(*group)}) (\n"
                f"    last_over_time({last.name}[{lookback}])\n"
                f"  )\n"
                f"> {self.o.stale_after}")
        return self.alert(
            "SixdimBenchmarkStale", expr, "warning",
            f"No successful {self.lab(catalog.WORKLOAD)} run on {self.lab(catalog.HOSTNAME)} "
            f"GPU {self.lab(catalog.GPU)}",
            f"The newest ok run of {self.lab(catalog.WORKLOAD)} on {self.gpu_ref()} ended "
            f"{{{{ $value | humanizeDuration }}}} ago (threshold {format_duration(self.o.stale_after)}): its "
            f"results and verdicts are not current. {self.versions_now()}")

    def failing(self) -> dict[str, Any]:
        runs = catalog.WORKLOAD_RUNS
        group = self.device + (_label(runs, catalog.WORKLOAD),)
        w = format_duration(self.o.failure_window)
        expr = (f"sum by ({self.by(*group)}) (\n"
                f"{_indent(self.runs_added(('failed', 'timeout'), self.o.failure_window), 2)}\n"
                f") >= {self.o.failures}")
        return self.alert(
            "SixdimBenchmarkFailing", expr, "warning",
            f"{self.lab(catalog.WORKLOAD)} keeps failing on {self.lab(catalog.HOSTNAME)} GPU {self.lab(catalog.GPU)}",
            f"{{{{ $value }}}} run(s) of {self.lab(catalog.WORKLOAD)} on {self.gpu_ref()} failed or timed out in "
            f"the last {w} (threshold {self.o.failures}). {self.versions_now()}")

    def slowdown(self, name: str, metric: catalog.MetricDef, summary: catalog.MetricDef, what: str) -> dict[str, Any]:
        """Per-shape flags (suites exported per shape) or summary flags (every suite)."""
        group = self.device + self.versions
        w = format_duration(SLOWDOWN_WINDOW)
        expr = (f"count by ({self.by(*group)}) (\n"
                f"  max_over_time({metric.name}[{w}]) == 1\n"
                f"  or\n"
                f"  max_over_time({summary.name}[{w}]) == 1\n"
                f")")
        return self.alert(
            name, expr, "warning",
            f"{what.capitalize()} during benchmarks on {self.lab(catalog.HOSTNAME)} GPU {self.lab(catalog.GPU)}",
            f"A {what} held the clocks of {self.gpu_ref()} down during the measured window of "
            f"{{{{ $value }}}} benchmark result(s) in the last {w}, under {self.versions_in_labels()}. "
            f"Results measured under it understate the GPU.")

    def peers(self) -> dict[str, Any]:
        """Each GPU's summary speed against its peers' median, among the summaries that cover the
        group's shapes (:func:`covering_shapes`)."""
        arms = []
        for metric in (catalog.SUMMARY_FLOPS, catalog.SUMMARY_SAMPLES):
            peer = (self.model,) + tuple(_label(metric, label) for label in (
                catalog.DEVICE_TYPE, catalog.SUITE, catalog.WORKLOAD, catalog.PRECISION, catalog.MODE,
                catalog.PASS)) + self.versions
            full = covering_shapes(metric.name, catalog.SUMMARY_SHAPES.name, self.by(*peer))
            arms.append(f"(\n"
                        f"    {full}\n"
                        f"  / on ({self.by(*peer)}) group_left ()\n"
                        f"    quantile by ({self.by(*peer)}) (0.5, {full})\n"
                        f"  < {self.o.peer_ratio}\n"
                        f")\n"
                        f"and on ({self.by(*peer)})\n"
                        f"(\n"
                        f"  count by ({self.by(*peer)}) ({full}) >= {self.o.min_peers}\n"
                        f")")
        group = self.device + (catalog.WORKLOAD,) + self.versions
        expr = (f"min by ({self.by(*group)}) (\n"
                + _indent("\nor\n".join(arms), 2) + "\n)")
        return self.alert(
            "SixdimSlowerThanPeers", expr, "warning",
            f"{self.lab(catalog.WORKLOAD)} on {self.lab(catalog.HOSTNAME)} GPU {self.lab(catalog.GPU)} is slower "
            f"than its peers",
            f"{self.lab(catalog.WORKLOAD)} on {self.gpu_ref()} runs at {{{{ $value | humanizePercentage }}}} of the "
            f"median of its peers in its slowest suite, precision, mode and pass (FLOP/s or samples/s, "
            f"geometric mean over the suite's shapes; peers: every GPU of the same model with the same "
            f"suite, precision, mode, pass and versions whose mean covers as many shapes as most do, at least "
            f"{self.o.min_peers} GPUs; threshold "
            f"{self.o.peer_ratio:g}), under {self.versions_in_labels()}.", for_=PEER_FOR)

    def version_change(self) -> dict[str, Any]:
        change = catalog.VERSION_CHANGE_RATIO
        names = (catalog.WORKLOAD, catalog.FIGURE, catalog.CHANGE_COMPONENT, catalog.CHANGE_FROM, catalog.CHANGE_TO)
        group = self.device + tuple(_label(change, label) for label in names)
        verdict = f"{_label(change, catalog.CHANGE_VERDICT)}={_quote(REGRESSION)}"
        expr = (f"quantile by ({self.by(*group)}) (\n"
                f"  0.5, {change.name}{{{verdict}}}\n"
                f")")
        count_query = (f"count({change.name}{{{catalog.HOSTNAME}=%q,{catalog.UUID}=%q,{catalog.WORKLOAD}=%q,"
                       f"{catalog.FIGURE}=%q,{catalog.CHANGE_COMPONENT}=%q,{catalog.CHANGE_FROM}=%q,"
                       f"{catalog.CHANGE_TO}=%q,{verdict}}})")
        count = (f"{{{{ with query (printf `{count_query}` $labels.{catalog.HOSTNAME} $labels.{catalog.UUID} "
                 f"$labels.{catalog.WORKLOAD} $labels.{catalog.FIGURE} $labels.{catalog.CHANGE_COMPONENT} "
                 f"$labels.{catalog.CHANGE_FROM} $labels.{catalog.CHANGE_TO}) }}}}"
                 f"{{{{ . | first | value }}}}{{{{ end }}}}")
        return self.alert(
            "SixdimVersionChangeRegression", expr, "warning",
            f"{self.lab(catalog.CHANGE_COMPONENT)} {self.lab(catalog.CHANGE_FROM)} to {self.lab(catalog.CHANGE_TO)} "
            f"made {self.lab(catalog.WORKLOAD)} worse on {self.lab(catalog.HOSTNAME)}",
            f"After {self.lab(catalog.CHANGE_COMPONENT)} changed from {self.lab(catalog.CHANGE_FROM)} to "
            f"{self.lab(catalog.CHANGE_TO)} on {self.gpu_ref()}, {self.lab(catalog.WORKLOAD)}'s "
            f"{self.lab(catalog.FIGURE)} is {{{{ $value | humanizePercentage }}}} of its value before the change "
            f"(median over the {count} result series the agent judged worse).")

    def agent_down(self) -> dict[str, Any]:
        job = _quote(self.o.job)
        up = f"{PROMETHEUS_UP}{{{JOB}={job}}}"
        build = catalog.BUILD_INFO
        host = _label(build, catalog.HOSTNAME)
        lookback = format_duration(self.o.stale_after + STALE_KEEP)
        expr = (f"(\n"
                f"    ({up} == 0)\n"
                f"  * on ({JOB}, {INSTANCE}) group_left ({host})\n"
                f"    max by ({JOB}, {INSTANCE}, {host}) (\n"
                f"      topk by ({JOB}, {INSTANCE}) (1, last_over_time({build.name}{{{JOB}={job}}}[{lookback}]))\n"
                f"    )\n"
                f")\n"
                f"or on ({JOB}, {INSTANCE})\n"
                f"  {up} == 0")
        return self.alert(
            "SixdimAgentDown", expr, "warning",
            f"sixdim agent {{{{ $labels.{INSTANCE} }}}} is down",
            f"Prometheus cannot scrape the sixdim agent at {{{{ $labels.{INSTANCE} }}}} (job {{{{ $labels.{JOB} }}}}"
            f"{{{{ with $labels.{host} }}}}, host {{{{ . }}}}{{{{ end }}}}) for {AGENT_DOWN_FOR}: no benchmarks "
            f"are recorded or exported from it, and its other alerts cannot fire.", for_=AGENT_DOWN_FOR)

    def history_down(self) -> dict[str, Any]:
        host = _label(catalog.HISTORY_UP, catalog.HOSTNAME)
        pending = catalog.HISTORY_PENDING
        expr = (f"max by ({host}) ({pending.name})\n"
                f"and on ({host})\n"
                f"max by ({host}) ({catalog.HISTORY_UP.name}) == 0")
        return self.alert(
            "SixdimHistoryDown", expr, "warning",
            f"sixdim on {self.lab(catalog.HOSTNAME)} cannot write its history",
            f"The last write to the history database of the agent on {self.lab(catalog.HOSTNAME)} failed, and "
            f"writes have not recovered for {HISTORY_DOWN_FOR}; {{{{ $value }}}} result(s) wait in memory and in the "
            f"spool file. They are written once the database accepts writes again.", for_=HISTORY_DOWN_FOR)

    def history_loss(self) -> dict[str, Any]:
        """Dropped or corrupt history errors within the window.

        ``increase`` alone misses the usual corrupt case: a power loss, the host back after more
        than the window, the broken file found at start, so the counter's first sample is already
        1 and ``increase`` has nothing before it to compare with.  An agent process that started
        within the window counted all of its errors within the window, so for such a process its
        counter's value counts whole; the alert takes the larger of the two."""
        errors = catalog.HISTORY_WRITE_ERRORS
        host, reason = _label(errors, catalog.HOSTNAME), _label(errors, "reason")
        w = format_duration(HISTORY_LOSS_WINDOW)
        series = f"{errors.name}{{{reason}=~\"dropped|corrupt\"}}"
        increase = f"sum by ({host}, {reason}) (increase({series}[{w}]))"
        young = (f"sum by ({host}, {reason}) (\n"
                 f"    {series}\n"
                 f"  and on ({JOB}, {INSTANCE})\n"
                 f"    time() - {PROCESS_START_TIME} < {HISTORY_LOSS_WINDOW}\n"
                 f")")
        arms = (_indent(young, 4), "  >=", _indent(increase, 4), "  or", _indent(increase, 4), "  or", _indent(young, 4))
        expr = "(\n" + "\n".join(arms) + "\n) > 0"
        return self.alert(
            "SixdimHistoryDataLoss", expr, "warning",
            f"sixdim on {self.lab(catalog.HOSTNAME)} lost history data",
            f"The agent on {self.lab(catalog.HOSTNAME)} counted about {{{{ printf \"%.0f\" $value }}}} history write "
            f"error(s) of reason {{{{ $labels.{reason} }}}} in the last {w}: dropped means results waiting for the "
            f"database were dropped because too many waited; corrupt means a broken database file was moved "
            f"aside at start and a new one begun.")

    def config_reload_failed(self) -> dict[str, Any]:
        success, last = catalog.CONFIG_RELOAD_SUCCESS, catalog.CONFIG_LAST_RELOAD
        host = _label(success, catalog.HOSTNAME)
        expr = (f"time() - max by ({host}) ({last.name})\n"
                f"and on ({host})\n"
                f"max by ({host}) ({success.name}) == 0")
        return self.alert(
            "SixdimConfigReloadFailed", expr, "warning",
            f"sixdim on {self.lab(catalog.HOSTNAME)} runs an old configuration",
            f"The last configuration reload (SIGHUP) of the agent on {self.lab(catalog.HOSTNAME)} failed at least "
            f"{CONFIG_RELOAD_FAILED_FOR} ago: it still runs the configuration it loaded "
            f"{{{{ humanizeDuration $value }}}} ago, and would refuse the file on disk at its next restart.",
            for_=CONFIG_RELOAD_FAILED_FOR)

    def groups(self) -> list[dict[str, Any]]:
        return [
            {"name": "sixdim-results", "rules": [
                self.regression(),
                self.incorrect(),
                self.version_change(),
                self.slowdown("SixdimThermalSlowdown", catalog.WORKLOAD_THERMAL_SLOWDOWN,
                              catalog.SUMMARY_THERMAL_SLOWDOWN, "thermal slowdown"),
                self.slowdown("SixdimHardwareSlowdown", catalog.WORKLOAD_HARDWARE_SLOWDOWN,
                              catalog.SUMMARY_HARDWARE_SLOWDOWN, "hardware slowdown"),
            ]},
            {"name": "sixdim-fleet", "rules": [self.peers()]},
            {"name": "sixdim-runs", "rules": [self.stale(), self.failing()]},
            {"name": "sixdim-agent", "rules": [self.agent_down(), self.history_down(), self.history_loss(),
                                               self.config_reload_failed()]},
        ]


def groups(options: Options | None = None) -> list[dict[str, Any]]:
    """The rule groups as data (what :func:`render` writes)."""
    return _Rules(options or Options()).groups()


def alerts(options: Options | None = None) -> list[dict[str, Any]]:
    """Every alerting rule, in file order."""
    return [rule for group in groups(options) for rule in group["rules"]]


# ----------------------------------------------------------------------------- YAML

_PLAIN = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_.\-]*(?:/[A-Za-z0-9_.\-]+)*|\d+[a-z]+(?:\d+[a-z]+)*)$")
"""What is written unquoted: names, slash-separated names (``monitoring.coreos.com/v1``,
``app.kubernetes.io/name``) and Prometheus durations."""
_RESERVED = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "nan", "inf"}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED:
        return text
    if any(ch in text for ch in "\n\r\t") or not text.isprintable():
        raise ValueError(f"cannot write {text!r} as a single-line YAML string")
    return "'" + text.replace("'", "''") + "'"


def _emit(value: Any, indent: int, out: list[str]) -> None:
    pad = " " * indent
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                out.append(f"{pad}{_scalar(key)}:")
                _emit(item, indent + 2, out)
            elif isinstance(item, str) and "\n" in item:
                if item[:1].isspace():
                    raise ValueError(f"a block scalar must not start with a space: {item[:40]!r}")
                out.append(f"{pad}{_scalar(key)}: |-")
                for line in item.split("\n"):
                    if line != line.rstrip():
                        raise ValueError(f"trailing space in {line!r}")
                    out.append(f"{pad}  {line}" if line else "")
            else:
                out.append(f"{pad}{_scalar(key)}: {_scalar(item) if not isinstance(item, (dict, list)) else '[]'}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                inner: list[str] = []
                _emit(item, indent + 2, inner)
                out.append(f"{pad}- {inner[0][indent + 2:]}")
                out.extend(inner[1:])
            else:
                out.append(f"{pad}- {_scalar(item)}")
    else:
        raise TypeError(f"cannot write {type(value).__name__}")


def render(options: Options | None = None) -> str:
    """The rules file for the options (the defaults without any): deterministic YAML text."""
    options = options or Options()
    out = [
        "# Prometheus alert rules for the sixdim agents, generated from agent/core/catalog.py by `sixdim rules`.",
        "# Do not edit: change agent/monitoring/rules.py (or the options) and regenerate. The committed copy is",
        f"#   {REGENERATE}",
        f"# Options: {options.as_flags()}",
        "# Runbooks: docs/ALERTS.md. Alertmanager example: deploy/alertmanager/alertmanager.yml.",
    ]
    _emit({"groups": groups(options)}, 0, out)
    return "\n".join(out) + "\n"


def prometheus_rule(options: Options | None = None) -> str:
    """The same rules as a prometheus-operator ``PrometheusRule`` object: ``spec.groups`` holds exactly
    the groups :func:`render` writes, so the Kubernetes deployment's alerts never drift from the rules
    file.  No namespace: kustomize (or ``kubectl apply -n``) gives it one."""
    options = options or Options()
    out = [
        "# The sixdim alert rules as a prometheus-operator PrometheusRule, generated from agent/core/catalog.py by",
        "# `sixdim rules --prometheus-rule FILE`. Do not edit: change agent/monitoring/rules.py (or the options) and",
        "# regenerate. The committed copy is",
        f"#   {REGENERATE_PROMETHEUS_RULE}",
        f"# Options: {options.as_flags()}",
        f"# spec.groups are exactly the groups of {COMMITTED} (a test checks both files).",
        "# Runbooks: docs/ALERTS.md. Prometheus selects it by its ruleSelector (kube-prometheus-stack: the",
        "# release label, unless ruleSelectorNilUsesHelmValues is false).",
    ]
    _emit({
        "apiVersion": PROMETHEUS_RULE_API_VERSION,
        "kind": "PrometheusRule",
        "metadata": {
            "name": PROMETHEUS_RULE_NAME,
            "labels": {"app.kubernetes.io/name": "sixdim", "app.kubernetes.io/component": "alert-rules"},
        },
        "spec": {"groups": groups(options)},
    }, 0, out)
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- the command

def _arg(convert, what: str):
    def parse(text: str):
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc) if str(exc) else f"expected {what}, got {text!r}")
    parse.__name__ = what
    return parse


def _whole(low: int):
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"expected a whole number of at least {low}, got {text!r}") from None
        if value < low:
            raise ValueError(f"expected a whole number of at least {low}, got {text!r}")
        return value
    return convert


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise ValueError(f"expected a ratio between 0 and 1 (exclusive), such as 0.9, got {text!r}")
    return value


def _checked(field: str):
    def convert(text: str) -> str:
        try:
            Options(**{field: text}).validate()
        except ValueError as exc:
            raise ValueError(str(exc).removeprefix(f"{field}: ")) from None
        return text
    return convert


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``rules`` on the CLI's subcommands."""
    d = Options()
    rules = commands.add_parser(
        "rules", help="print the Prometheus alert rules generated from the metric catalog",
        description="Print (or write with --out) the Prometheus alerting rules for sixdim agents, generated from "
                    "the metric catalog, so their metric and label names always match what the agent exports. "
                    "--prometheus-rule writes the same groups as a prometheus-operator PrometheusRule object. "
                    f"The copies generated with the defaults are committed as {COMMITTED} and "
                    f"{COMMITTED_PROMETHEUS_RULE}. Each alert carries a "
                    "severity label and summary, description and runbook_url annotations; the runbooks are in "
                    "docs/ALERTS.md. Check the output with 'promtool check rules FILE'. Durations are "
                    "Prometheus durations such as 90m, 2h or 1d12h.",
        epilog="Exit codes: 0 ok; 2 a bad option value, or a file --out or --prometheus-rule cannot write.")
    rules.add_argument("--out", metavar="FILE",
                       help="write the rules to FILE (its folder is created if missing) instead of standard output")
    rules.add_argument("--prometheus-rule", metavar="FILE",
                       help="write the same rule groups as a prometheus-operator PrometheusRule "
                            "(monitoring.coreos.com/v1) to FILE, for Kubernetes (its folder is created if missing); "
                            "with --out too, both files are written, and with either nothing is printed")
    rules.add_argument("--stale-after", type=_arg(whole_seconds, "duration"), default=d.stale_after,
                       metavar="DURATION",
                       help="SixdimBenchmarkStale: fire when a workload has had no ok run on a device for this "
                            f"long; make it longer than your longest suite interval (default: "
                            f"{format_duration(d.stale_after)})")
    rules.add_argument("--failures", type=_arg(_whole(1), "count"), default=d.failures, metavar="N",
                       help="SixdimBenchmarkFailing: failed or timed-out runs (cases) of a workload on a device "
                            f"within --failure-window that fire it (default: {d.failures})")
    rules.add_argument("--failure-window", type=_arg(whole_seconds, "duration"), default=d.failure_window,
                       metavar="DURATION",
                       help=f"the window --failures counts in (default: {format_duration(d.failure_window)})")
    rules.add_argument("--incorrect-window", type=_arg(whole_seconds, "duration"), default=d.incorrect_window,
                       metavar="DURATION",
                       help="SixdimIncorrectResult fires while an incorrect result was recorded within this "
                            f"long (default: {format_duration(d.incorrect_window)})")
    rules.add_argument("--peer-ratio", type=_arg(_ratio, "ratio"), default=d.peer_ratio, metavar="RATIO",
                       help="SixdimSlowerThanPeers: fire when a GPU's summary FLOP/s or samples/s is below RATIO "
                            f"times the median of its peers (default: {d.peer_ratio})")
    rules.add_argument("--min-peers", type=_arg(_whole(2), "count"), default=d.min_peers, metavar="N",
                       help="compare only where at least N GPUs (the one judged included) of the same model have "
                            f"the same summary series (default: {d.min_peers})")
    rules.add_argument("--job", type=_arg(_checked("job"), "job name"), default=d.job, metavar="NAME",
                       help=f"the Prometheus scrape job of the agents, for SixdimAgentDown (default: {d.job})")
    rules.add_argument("--dcgm-label-names", action="store_true",
                       help="the agents run with --dcgm-label-names: use modelName for the model label "
                            "(default: model_name)")
    rules.add_argument("--runbook-base", type=_arg(_checked("runbook_base"), "URL"), default=d.runbook_base,
                       metavar="URL",
                       help="URL of docs/ALERTS.md; each runbook_url is URL#<alert name in lower case> "
                            f"(default: {d.runbook_base})")
    rules.set_defaults(handler=command_rules)


def options_from_args(args: argparse.Namespace) -> Options:
    return Options(stale_after=args.stale_after, failures=args.failures, failure_window=args.failure_window,
                   incorrect_window=args.incorrect_window, peer_ratio=args.peer_ratio, min_peers=args.min_peers,
                   job=args.job, dcgm_label_names=args.dcgm_label_names, runbook_base=args.runbook_base)


def command_rules(args: argparse.Namespace) -> int:
    try:
        options = options_from_args(args)
        text = render(options)
        crd_text = prometheus_rule(options) if args.prometheus_rule else ""
    except ValueError as exc:
        print(f"sixdim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not args.out and not args.prometheus_rule:
        sys.stdout.write(text)
        return EXIT_OK
    for flag, path, content in (("--out", args.out, text), ("--prometheus-rule", args.prometheus_rule, crd_text)):
        if not path:
            continue
        try:
            write_atomically(path, content)
        except OSError as exc:
            print(f"sixdim: error: cannot write {flag} {path}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_USAGE
    return EXIT_OK
