"""The six sixdim dashboards, generated with grafanalib from the metric catalog.

``dashboards(Options())`` gives each dashboard's JSON data by file name; ``sixdim dashboards --out
DIR`` writes them (dashboards/command.py) and the copies generated with the defaults are committed
in dashboards/json/.  What each dashboard answers and how to install it: docs/DASHBOARDS.md.

Every dashboard has the same variables (datasource; cluster; hostname, model, GPU, workload and precision, each
read from a series every host exports, a CPU-only one included; the agent health dashboard the scrape target's
job and instance too, after the cluster), every series selector filtered by the cluster (and there by the job
and instance), the same links to the others, and
panels whose descriptions start with a marker when they can legitimately be empty on a host running
the default configuration or the README's example (``GPU-only: ...``, ``May be empty: ...``), when they
read series exported per shape only and so need a suite with ``export = "shapes"`` (``Per-shape: ...``),
or when a query shows only the summaries of workloads no suite exports per shape (``Summary-only``); see
dashboards/grafana.py and tests/dashboard_queries.py.  Every metric an alert rule or its runbook reads is
on a panel (tests/test_dashboards_coverage.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grafanalib import core as G

from sixdim.core import catalog, conditions
from sixdim.core.catalog import grafana_unit as u  # a figure's unit in Grafana, from the catalog's FIGURES
from sixdim.core.durations import format_duration
from sixdim.dashboards import grafana as gf
from sixdim.dashboards.grafana import Q, Row
from sixdim.dashboards.promql import (
    CLUSTER_VARIABLE,
    GPU_VAR,
    HOST_VAR,
    INTERVAL,
    MODEL_VAR,
    PRECISION_VAR,
    PROCESS_CPU_SECONDS,
    PROCESS_MAX_FDS,
    PROCESS_OPEN_FDS,
    PROCESS_RESIDENT_MEMORY,
    PROCESS_START_TIME,
    RANGE,
    STATES,
    TARGET_LABELS,
    TARGET_VARIABLES,
    UP,
    WORKLOAD_VAR,
    PromQL,
    quote,
)
from sixdim.dashboards.uids import AGENT, CORRECTNESS, FLEET, GPU_DETAIL, SCALING, UIDS, VERSIONS  # noqa: F401
from sixdim.monitoring import alerts, recording
from sixdim.monitoring.options import Options
from sixdim.monitoring.promql import REGRESSION

TAG = "sixdim"


VERSION_POINTS = 500
"""The Versions tables read each series at most this many times over the time range (a subquery at
``$__interval``, which Grafana sizes to the range over the panel's maxDataPoints): a month of a large
fleet stays within Prometheus's sample limit, where the raw samples of the range would not."""

CHANGE_WINDOW = "30m"
"""How long a version-change annotation lasts after the first result under the new versions."""

# Why a panel (or one of its queries) may have no data on a host that runs the default configuration or the
# README's example (GPU-only, May be empty), and what a query of per-shape series needs (Per-shape).
GPU_TELEMETRY = "live NVML telemetry, exported only by a host with a GPU; empty on a CPU host"
GPU_HEALTH = ("NVML health and settings, exported only by a host with a GPU and only where its GPU answers "
              "(no row remapping before Ampere, no NVLink on most PCIe cards, no ECC counts while ECC is off); "
              "empty on a CPU host")
CLOCK_EVENTS = "NVML clock-event reasons, read only on a GPU; empty on a CPU host"
GPU_MEMORY = "torch's CUDA allocator and NVML's device memory exist only on a GPU; empty on a CPU host"
GPU_INFO = f"{catalog.GPU_INFO.name} describes GPUs; empty on a CPU host"
PEERS_ON_HOST = "needs two GPUs of one model on a host; empty on a CPU host"
ENERGY = "needs an energy counter: a GPU's, or RAPL on a CPU host"
RAPL = "needs RAPL (powercap) energy counters the agent can read"
PEAK = "only for GPUs in the published peak table (agent/core/peaks.toml), never for a CPU"
MODELS = ("samples/s comes from the model, convergence, linearity and training-command workloads (the training "
          "suite), which neither the default quick suite nor the README's example runs")
TOKENS = "tokens/s comes from the sequence models (BERT-large layers, the GPT decoder) of the model workload"
TRAINING = ("the convergence and training-command workloads (the training suite), which neither the default quick "
            "suite nor the README's example runs")
LINEARITY = ("the linearity workload (the training suite), which neither the default quick suite nor the README's "
             "example runs")
INFERENCE = ("latency percentiles come from the inference suite and MLPerf Inference logs, not the quick suite or "
             "the README's example")
NO_REGRESSION = "nothing is suspicious or regressed"
NO_DRIFT = "no series drifts"
NO_CHANGE = "no driver, CUDA, cuDNN, NCCL, torch or VBIOS change among the series' recent runs"
BASELINE = "a series has a baseline only after 10 runs (2.5 hours of the default quick suite)"
NO_INCORRECT = "no incorrect result was ever recorded on these devices (the series appears with the first)"
NO_FAILURE = ("no case failed, was incorrect or timed out in the time range (a status's series appears with its "
              "first case)")
ALL_RAN = ("every case ran (none unsupported or skipped) and no suite run was interrupted in the time range (a "
           "status's series appears with its first case, the interruptions' with the first)")
NO_INTERRUPTION = "no suite run was interrupted (the series appears with the first interruption)"
NO_SUITE_RAN = "no suite ran within the time range"
NO_GPU_VALUES = "a CPU host has no GPU: its gpu label is empty, which All (.*) matches"
ROLLOUT_SIDES = ("a version is compared only where enough hosts run it (--rollout-min-hosts), and only a fleet with "
                 "two versions of a GPU model and case has a ratio below 1")
NO_CLUSTER_VALUES = ("a Prometheus that holds one cluster needs no cluster label, and a scrape that adds none leaves "
                     "the series without it, which All (.*) matches")
GPU_ENERGY_COUNTER = ("the share is over the GPU's own energy counter (NVML, live telemetry), exported only by a "
                      "host with a GPU; empty on a CPU host")

EXPORT_SHAPES = 'export = "shapes"'


def needs_shapes(what: str = "the workloads selected") -> str:
    """A Per-shape marker's text: the series a query reads are exported per shape only by a suite with
    ``export = "shapes"``; a suite of one's own exports only its summaries (sixdim.config.Suite.export)."""
    return (f"needs a suite with {EXPORT_SHAPES} that runs {what}; a suite of your own exports only its summaries "
            f"(one geometric mean over its shapes per workload, precision, mode and pass) unless it says "
            f"{EXPORT_SHAPES}, as the embedded quick suite does")


SHAPES = needs_shapes()
COPIES = needs_shapes("memory_bandwidth")
ALLREDUCE = needs_shapes("allreduce")
COPIES_OR_ALLREDUCE = needs_shapes("memory_bandwidth or allreduce")
SPARSE = needs_shapes("sparse_gemm")
LINEARITY_SHAPES = needs_shapes("linearity")
TRAINING_SHAPES = needs_shapes("convergence or a training command")
MODELS_SHAPES = needs_shapes("a model, convergence or a training command")
VERDICT_SHAPES = (f"needs a suite with {EXPORT_SHAPES} for every series; a series of a suite that exports only its "
                  "summaries has a verdict here only while it is suspicious, regressed, improved or drifting")
SUMMARY_FALLBACK = (f"the suite's geometric mean over its shapes, for the workloads no suite exports per shape (a "
                    f"suite of your own without {EXPORT_SHAPES}); empty where every workload selected is exported "
                    "per shape, as with the default quick suite")

SUITES_ROW = "Suite progress"
"""The agent health dashboard's row of each suite's run as it goes (catalog.SUITE_RUN_METRICS)."""
COST_ROW = "What benchmarking costs the devices"
"""The agent health dashboard's row of the device time and energy the suites spent (catalog.SUITE_COST_METRICS)."""
SECONDS_PER_HOUR = 3600
COST_CALCS = ("mean", "max", "lastNotNull")
"""The cost panels' legend: the mean over the time range first, the share a schedule costs."""
HEALTH_ROW = "GPU health"
"""The GPU detail dashboard's row of NVML health and settings (and the throttling of the results)."""
CAUSES_TITLE = "Likely causes of open regressions"
"""The table of the likely causes (catalog.REGRESSION_CAUSE) on the fleet overview and the GPU detail."""

ANNOTATION_MAY_BE_EMPTY = {
    "Software versions changed": "a host's driver, CUDA runtime or torch changed within the time range",
    "Version-change verdicts": "a verdict on a software change appeared or changed within the time range",
}
"""Annotations are events: each may be empty, and says when it is not (tests/dashboard_queries.py runs them
against a real Prometheus)."""


# ----------------------------------------------------------------------------- common parts

_MAPPING_YES_NO = [{"type": "value", "options": {
    "0": {"text": "no", "color": "green", "index": 0},
    "1": {"text": "yes", "color": "red", "index": 1}}}]
_MAPPING_UP = [{"type": "value", "options": {
    "0": {"text": "down", "color": "red", "index": 0},
    "1": {"text": "up", "color": "green", "index": 1}}}]
_MAPPING_ON_OFF = [{"type": "value", "options": {
    "0": {"text": "off", "color": "blue", "index": 0},
    "1": {"text": "on", "color": "green", "index": 1}}}]
_MAPPING_CAUSES = [{"type": "value", "options": {
    cause.name: {"text": cause.title, "index": i} for i, cause in enumerate(conditions.CAUSES)}}]
"""A cause's title in its cell ("power limit lowered"), from agent/core/conditions.py."""
_MAPPING_STATES = [{"type": "value", "options": {
    str(state.code): {"text": state.name, "color": state.colour, "index": i}
    for i, state in enumerate(catalog.VERDICT_STATES)}}]
_MAPPING_DRIFT = [{"type": "value", "options": {
    "1": {"text": "worse", "color": "red", "index": 0},
    "-1": {"text": "better", "color": "blue", "index": 1}}}]
_MAPPING_RUNNING = [{"type": "value", "options": {
    "0": {"text": "idle", "color": "text", "index": 0},
    "1": {"text": "running", "color": "green", "index": 1}}}]
_MAPPING_CURRENT = [{"type": "value", "options": {"1": {"text": "running", "color": "green", "index": 0}}}]

SECONDS_PER_DAY = 86400
FAILED_OR_TIMED_OUT = tuple(status for status in catalog.FAILURE_STATUSES if status != "incorrect")
"""The failures SixdimBenchmarkFailing counts; incorrect results have an alert of their own."""


def _table_mappings(index: int, mappings: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Value mappings for one column of a table, the ``index``-th query's (A, B, ...), by its field name, so
    that another column's value that happens to equal a mapped one (a ratio of exactly 1) keeps its number."""
    return {"matcher": {"id": "byName", "options": f"Value #{chr(ord('A') + index)}"},
            "properties": [{"id": "mappings", "value": list(mappings)}]}

_HIDDEN = ("__name__", catalog.UUID, catalog.PCI_BUS_ID) + TARGET_LABELS

PER_SHAPE_METRICS: tuple[catalog.MetricDef, ...] = catalog.RESULT_METRICS + (catalog.PEER_RATIO, catalog.PEER_CAUSE)
"""What the agent exports per shape, only for the suites with ``export = "shapes"`` (sixdim.http.exporter); a
query reading only these is marked Per-shape."""
_PER_SHAPE_NAMES = frozenset(m.name for m in PER_SHAPE_METRICS)


class _Dashboards:
    def __init__(self, options: Options, *, targets: bool = False) -> None:
        """``targets``: for a dashboard about the agents themselves, with the scrape target's variables."""
        options.validate()
        self.o = options
        self.q = PromQL(options.dcgm_label_names, options.cluster_label, targets)
        self.rules = options
        """The alert rules' options: panels that explain an alert use its thresholds."""

    # --- labels and legends
    @property
    def dev(self) -> tuple[str, ...]:
        """A device in aggregations: host, device type, GPU index and model."""
        return (catalog.HOSTNAME, catalog.DEVICE_TYPE, catalog.GPU, catalog.MODEL_NAME)

    def dev_legend(self, *more: str, text: str = "") -> str:
        """``host cuda0 ...`` on a GPU, ``host cpu ...`` on a CPU host."""
        q = self.q
        return " ".join([f"{{{{{q.lab(catalog.HOSTNAME)}}}}} {{{{{catalog.DEVICE_TYPE}}}}}{{{{{catalog.GPU}}}}}",
                         q.legend(*more, text=text)]).strip()

    def shape_legend(self, *more: str) -> str:
        return self.dev_legend(catalog.WORKLOAD, catalog.PRECISION, catalog.SHAPE, catalog.PASS, catalog.SUITE, *more)

    def gpu_legend(self, *more: str) -> str:
        """Live GPU telemetry has no device type: ``host GPU 3``."""
        q = self.q
        return " ".join([f"{{{{{q.lab(catalog.HOSTNAME)}}}}} GPU {{{{{catalog.GPU}}}}}", q.legend(*more)]).strip()

    def gpu_link(self) -> list[dict[str, Any]]:
        """From a row of a table to the GPU detail dashboard of that host and GPU, in the clusters selected."""
        h, g = self.q.lab(catalog.HOSTNAME), catalog.GPU
        return [{"title": "GPU detail", "targetBlank": False,
                 "url": f"/d/{GPU_DETAIL}/?${{__url_time_range}}&${{datasource:queryparam}}"
                        f"&${{{CLUSTER_VARIABLE}:queryparam}}"
                        f"&var-{HOST_VAR.name}=${{__data.fields.{h}}}&var-{GPU_VAR.name}=${{__data.fields.{g}}}"}]

    def hidden(self) -> tuple[str, ...]:
        return _HIDDEN

    def summaries_unless_shapes(self, summary: catalog.MetricDef, shapes: catalog.MetricDef) -> str:
        """The suite summaries of the workloads without a per-shape series of ``shapes`` on the device: what a
        suite exported as summaries only (its own, without ``export = "shapes"``) shows in a per-shape panel."""
        q, c = self.q, catalog
        key = q.by(c.HOSTNAME, c.UUID, c.WORKLOAD, c.PRECISION, c.MODE, c.PASS)
        return q.without_versions(f"{q.sel(summary)} unless on ({key}) {q.sel(shapes)}")

    def summary_legend(self) -> str:
        """``host cpu gemm fp32 forward nightly (suite mean)``."""
        c = catalog
        return self.dev_legend(c.WORKLOAD, c.PRECISION, c.PASS, c.SUITE, text="(suite mean)")

    def per_shape_with_summaries(self, shapes: catalog.MetricDef, summary: catalog.MetricDef, *,
                                 needs: str = SHAPES, may_be_empty: str | None = None) -> list[Q]:
        """A per-shape figure (query A) and, for the workloads no suite exports per shape, the suite's
        geometric mean of it (query B)."""
        return [Q(self.q.without_versions(self.q.sel(shapes)), self.shape_legend(), name="per shape",
                  per_shape=needs, may_be_empty=may_be_empty),
                Q(self.summaries_unless_shapes(summary, shapes), self.summary_legend(), name="suite mean",
                  summary_only=SUMMARY_FALLBACK, may_be_empty=may_be_empty)]

    # --- variables
    def variables(self) -> list[G.Template]:
        """The cluster first (and the scrape target's job and instance, where the dashboard has them), then the
        host, model, GPU, workload and precision, each listing the values of the ones before it."""
        q = self.q
        runs, shapes, build = catalog.WORKLOAD_RUNS, catalog.SUMMARY_SHAPES, catalog.BUILD_INFO
        f = lambda metric, *keep: q.sel(metric, skip=[v.label for v in (  # noqa: E731
            HOST_VAR, MODEL_VAR, GPU_VAR, WORKLOAD_VAR, PRECISION_VAR) if v.label not in keep])
        targets = list(TARGET_VARIABLES) if q.targets else []
        scope = [gf.Variable(CLUSTER_VARIABLE, q.cluster, "Cluster", build.name,
                             f"Clusters, by the {q.cluster} label the scrape (or Thanos) adds to their series "
                             f"({build.name}: every agent from its start); a host name found in two is two hosts.",
                             may_be_empty=NO_CLUSTER_VALUES)]
        scope += [gf.Variable(name, name, name.capitalize(), q.sel(build, skip=[HOST_VAR.label, *targets[i:]]),
                              f"The scrape target's {name} of the agents in the clusters selected ({build.name}).")
                  for i, name in enumerate(targets)]
        return [gf.datasource_variable()] + [v.template() for v in (
            *scope,
            gf.Variable(HOST_VAR.name, q.lab(catalog.HOSTNAME), "Host", f(build),
                        f"Hosts with a sixdim agent ({build.name}: every agent from its start) in the clusters "
                        "selected."),
            gf.Variable(MODEL_VAR.name, q.model, "Model", f(runs, catalog.HOSTNAME),
                        "GPU or CPU models benchmarked on the hosts selected."),
            gf.Variable(GPU_VAR.name, catalog.GPU, "GPU", f(runs, catalog.HOSTNAME, catalog.MODEL_NAME),
                        "GPU indexes (NVML order) of the models selected.", numeric_sort=True,
                        may_be_empty=NO_GPU_VALUES),
            gf.Variable(WORKLOAD_VAR.name, catalog.WORKLOAD, "Workload",
                        f(runs, catalog.HOSTNAME, catalog.MODEL_NAME, catalog.GPU),
                        "Workloads run on the devices selected."),
            gf.Variable(PRECISION_VAR.name, catalog.PRECISION, "Precision",
                        f(shapes, catalog.HOSTNAME, catalog.MODEL_NAME, catalog.GPU, catalog.WORKLOAD),
                        f"Precisions of the workloads selected ({shapes.name}: every suite's summaries)."),
        )]

    def annotations(self, verdicts: bool = True) -> list[dict[str, Any]]:
        q = self.q
        out = [gf.BUILT_IN_ANNOTATION, gf.annotation(
            "Software versions changed", q.version_changes(CHANGE_WINDOW),
            title=f"{q.legend(catalog.HOSTNAME)}: new software versions",
            text=(f"driver {q.legend(catalog.DRIVER_VERSION)}, CUDA {q.legend(catalog.CUDA_VERSION)}, "
                  f"torch {q.legend(catalog.TORCH_VERSION)}: the first results under these versions "
                  f"(the mark lasts {CHANGE_WINDOW})"),
            tags=(q.lab(catalog.HOSTNAME), catalog.DRIVER_VERSION, catalog.CUDA_VERSION, catalog.TORCH_VERSION),
            color="purple")]
        if verdicts:
            out.append(gf.annotation(
                "Version-change verdicts", q.new_change_verdicts(CHANGE_WINDOW),
                title=(f"{q.legend(catalog.WORKLOAD)} on {q.legend(catalog.HOSTNAME)} GPU {q.legend(catalog.GPU)}: "
                       f"{q.legend(catalog.CHANGE_COMPONENT)} {q.legend(catalog.CHANGE_FROM)} to "
                       f"{q.legend(catalog.CHANGE_TO)}"),
                text=f"verdict {q.legend(catalog.CHANGE_VERDICT)} on {q.legend(catalog.FIGURE)}",
                tags=(q.lab(catalog.HOSTNAME), catalog.WORKLOAD, catalog.CHANGE_COMPONENT, catalog.CHANGE_VERDICT),
                color="orange"))
        return out

    def dashboard(self, uid: str, title: str, description: str, rows: Sequence[Row], *, time_from: str,
                  refresh: str, verdict_annotations: bool = True) -> dict[str, Any]:
        board = G.Dashboard(
            title=title, uid=gf.check_uid(uid), description=description, tags=[TAG], timezone="browser",
            schemaVersion=gf.SCHEMA_VERSION, editable=True, graphTooltip=G.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
            refresh=refresh, time=G.Time(time_from, "now"), panels=gf.layout(rows),
            templating=G.Templating(list=self.variables()),
            annotations=G.Annotations(list=self.annotations(verdict_annotations)),
            links=gf.dashboard_links(TAG), version=1)
        return gf.render(board)

    # ------------------------------------------------------------------------- fleet overview
    def fleet(self) -> dict[str, Any]:
        q, c = self.q, catalog
        runs, state = c.WORKLOAD_RUNS, c.REGRESSION_STATE
        case = (c.HOSTNAME, c.UUID, c.WORKLOAD, c.PRECISION)
        stale = self.rules.stale_after
        counts = [
            gf.stat("Hosts reporting", "Hosts whose agent Prometheus scrapes now.",
                    [Q(f"count(count by ({q.by(c.HOSTNAME)}) ({q.sel(c.BUILD_INFO)}))", "hosts")], "none", w=3),
            gf.stat("Devices with results", "GPUs (or CPUs, on hosts without a GPU) with results now.",
                    [Q(f"count(count by ({q.by(c.HOSTNAME, c.UUID, c.GPU)}) ({q.sel(c.SUMMARY_SHAPES)}))", "devices")],
                    "none", w=3),
            gf.stat("Open regressions", "Workload and precision pairs of a device with at least one figure in "
                    f"the regression state ({state.name} = {STATES['regression']}): persisted over several runs "
                    "against the series' own baseline, or an incorrect result.",
                    [Q(f"count(count by ({q.by(*case)}) ({q.sel(state)} == {STATES['regression']})) or vector(0)",
                       "regressed")], "none", w=3, thresholds=((None, "green"), (1, "red"))),
            gf.stat("Suspicious", "Workload and precision pairs of a device with a suspicious figure: a shift "
                    "not yet persistent enough for a regression.",
                    [Q(f"count(count by ({q.by(*case)}) ({q.sel(state)} == {STATES['suspicious']})) or vector(0)",
                       "suspicious")], "none", w=3, thresholds=((None, "green"), (1, "orange"))),
            gf.stat("Software changes judged worse", "Devices and workloads whose latest driver, CUDA, cuDNN, "
                    f"NCCL, torch or VBIOS change made a figure worse ({c.VERSION_CHANGE_RATIO.name}, verdict "
                    "regression).",
                    [Q(f"count(count by ({q.by(c.HOSTNAME, c.UUID, c.WORKLOAD, c.CHANGE_COMPONENT)}) "
                       f"({q.sel(c.VERSION_CHANGE_RATIO, verdict=('=', REGRESSION))})) or vector(0)",
                       "worse after a change")], "none", w=3, thresholds=((None, "green"), (1, "red"))),
            gf.stat("Slower than same-model peers", f"Devices whose suite FLOP/s or samples/s is below "
                    f"{self.rules.peer_ratio:g} of the median of every device of the same model, suite, precision, "
                    f"mode, pass and versions in the fleet (at least {self.rules.min_peers} of them, each "
                    f"covering the group's median number of shapes), as SixdimSlowerThanPeers judges it.",
                    [Q(f"count(count by ({q.by(c.HOSTNAME, c.UUID)}) ("
                       + " or ".join(f"(({q.fleet_peer_ratio(m)}) < {self.rules.peer_ratio} and on "
                                     f"({q.by(*q.peer_group())}) ({q.enough_peers(m, self.rules.min_peers)}))"
                                     for m in (c.SUMMARY_FLOPS, c.SUMMARY_SAMPLES))
                       + ")) or vector(0)", "slower")], "none", w=3, thresholds=((None, "green"), (1, "orange"))),
            gf.stat("Failed or timed out", "Runs (cases) that failed or timed out within the time range (failures, "
                    "as SixdimBenchmarkFailing counts them; incorrect results are the next figure; cases not run "
                    "and interrupted suite runs are never failures: see Cases not run and interrupted suite runs).",
                    [Q(f"sum({q.increase(q.sel(runs, status=q.statuses(*FAILED_OR_TIMED_OUT)), RANGE)}) or vector(0)",
                       "failed or timed out")], "none", w=3, thresholds=((None, "green"), (1, "orange"))),
            gf.stat("Incorrect results", "Runs whose output failed its check against a float64 reference within "
                    "the time range: the GPU may compute wrong results silently.",
                    [Q(f"sum({q.increase(q.sel(runs, status=q.statuses('incorrect')), RANGE)}) or vector(0)",
                       "incorrect")], "none", w=3, thresholds=((None, "green"), (1, "red"))),
        ]
        by = self.dev + (c.WORKLOAD, c.PRECISION)
        six = gf.table(
            "Six dimensions now, per device and workload",
            "DeepSpark's six dimensions from the latest results: speed (FLOP/s, samples/s and bytes/s: geometric "
            "means of the suite summaries over their modes and passes), fraction of the published peak, power, "
            "memory, accuracy, linearity and stability. A blank cell is a figure the workload does not have, or "
            f"one that only a suite with {EXPORT_SHAPES} exports (power, memory, accuracy, linearity, stability: "
            "per shape, with no summary). Click a row for its GPU detail.",
            [Q(q.geomean(by, q.sel(c.SUMMARY_FLOPS)), name="FLOP/s", unit=u(c.SUMMARY_FLOPS)),
             Q(q.geomean(by, q.sel(c.SUMMARY_SAMPLES)), name="samples/s",
               unit=u(c.SUMMARY_SAMPLES), may_be_empty=MODELS),
             Q(q.geomean(by, q.sel(c.SUMMARY_BANDWIDTH)), name="bytes/s", unit=u(c.SUMMARY_BANDWIDTH)),
             Q(q.geomean(by, q.sel(c.SUMMARY_PEAK_RATIO)), name="of peak",
               unit=u(c.SUMMARY_PEAK_RATIO), may_be_empty=PEAK),
             Q(f"avg by ({q.by(*by)}) ({q.sel(c.WORKLOAD_POWER)})", name="power",
               unit=u(c.WORKLOAD_POWER), may_be_empty=ENERGY, per_shape=SHAPES),
             Q(f"max by ({q.by(*by)}) ({q.sel(c.WORKLOAD_MEMORY)})", name="peak memory", unit=u(c.WORKLOAD_MEMORY),
               per_shape=SHAPES),
             Q(f"max by ({q.by(*by)}) ({q.sel(c.WORKLOAD_ACCURACY)})", name="accuracy", unit=u(c.WORKLOAD_ACCURACY),
               may_be_empty=TRAINING, per_shape=TRAINING_SHAPES),
             Q(f"min by ({q.by(*by)}) ({q.sel(c.WORKLOAD_LINEARITY)})", name="linearity", unit=u(c.WORKLOAD_LINEARITY),
               may_be_empty=LINEARITY, per_shape=LINEARITY_SHAPES),
             Q(f"min by ({q.by(*by)}) ({q.sel(c.WORKLOAD_STABILITY)})", name="stability", unit=u(c.WORKLOAD_STABILITY),
               may_be_empty=TRAINING, per_shape=TRAINING_SHAPES)],
            "none", h=10, links=self.gpu_link(), hide=self.hidden(), sort_by=q.lab(c.HOSTNAME))
        verdict_labels = self.dev + (c.WORKLOAD, c.PRECISION, c.SHAPE, c.MODE, c.PASS, c.FIGURE) + c.VERSION_LABELS
        open_state = f"{q.sel(state)} >= {STATES['suspicious']}"
        regressions = gf.table(
            "Open regressions and suspicious series",
            "Every figure of a result series whose verdict is suspicious or regression now, with its current value "
            "over its baseline (above 1 is worse for time, power and memory; below 1 for rates, efficiency and "
            "accuracy), and the baseline itself in the figure's own base unit (seconds, FLOP/s, watts, bytes, ...). "
            "See docs/REGRESSIONS.md and, for each alert, docs/ALERTS.md.",
            [Q(f"max by ({q.by(*verdict_labels)}) ({open_state})", name="verdict"),
             Q(f"max by ({q.by(*verdict_labels)}) ({q.sel(c.REGRESSION_RATIO)} and on ({q.result_key()}, "
               f"{c.FIGURE}) ({open_state}))", name="ratio to baseline", unit="percentunit", may_be_empty=BASELINE),
             Q(f"max by ({q.by(*verdict_labels)}) ({q.sel(c.BASELINE_VALUE)} and on ({q.result_key()}, "
               f"{c.FIGURE}) ({open_state}))", name="baseline", unit="short", may_be_empty=BASELINE)],
            "none", w=24, h=8, may_be_empty=NO_REGRESSION, hide=self.hidden(), links=self.gpu_link(),
            sort_by="verdict", descending=True, overrides=[_table_mappings(0, _MAPPING_STATES)])
        drifts = gf.table(
            "Drifting series",
            "Every figure of a result series that drifts now (a steady slope over its last runs that a line fits "
            "better than a step: SixdimDrift): which way (worse or better), how fast (the relative change per day "
            "along the fitted line, in the figure's own sign: a rate falling is negative) and how much so far (the "
            "fitted level now over the fitted level at the first run of the fit). See docs/REGRESSIONS.md.",
            [Q(f"max by ({q.by(*verdict_labels)}) ({q.sel(c.DRIFT_STATE)} != 0)", name="drift"),
             Q(f"max by ({q.by(*verdict_labels)}) ({q.sel(c.DRIFT_RATE)} * {SECONDS_PER_DAY})", name="per day",
               unit="percentunit"),
             Q(f"max by ({q.by(*verdict_labels)}) ({q.sel(c.DRIFT_TOTAL_RATIO)})", name="now / at the fit's start",
               unit="percentunit")],
            "none", w=24, h=8, may_be_empty=NO_DRIFT, hide=self.hidden(), links=self.gpu_link(), sort_by="drift",
            descending=True, overrides=[_table_mappings(0, _MAPPING_DRIFT)])
        change_labels = self.dev + (c.WORKLOAD, c.FIGURE, c.CHANGE_COMPONENT, c.CHANGE_FROM, c.CHANGE_TO,
                                    c.CHANGE_VERDICT)
        changes = self.changes_table(change_labels)
        slowest = gf.bargauge(
            "Slowest devices against their same-model peers (fleet)",
            "Each device's suite FLOP/s or samples/s over the median of every device of the same model, suite, "
            "precision, mode, pass and versions in the fleet (those covering the group's median number of shapes), "
            "its slowest workload first; 100% is the median. "
            f"Below {self.rules.peer_ratio:g} (red) is what SixdimSlowerThanPeers alerts on.",
            [Q(f"bottomk(20, min by ({q.by(*self.dev, c.WORKLOAD)}) ("
               f"{q.fleet_peer_ratio(c.SUMMARY_FLOPS)} or {q.fleet_peer_ratio(c.SUMMARY_SAMPLES)}))",
               self.dev_legend(c.WORKLOAD))],
            "percentunit", minimum=0.5, maximum=1.2,
            thresholds=((None, "red"), (self.rules.peer_ratio, "yellow"), (0.97, "green")))
        on_host = gf.bargauge(
            "Slowest GPUs against the other GPUs of their host",
            f"{c.SUITE_PEER_RATIO.name}: each GPU's suite speed over the median of the GPUs of the same model on its "
            "host whose means cover the same shapes, computed by the agent; 100% is the median.",
            [Q(f"bottomk(20, min by ({q.by(*self.dev, c.WORKLOAD)}) ({q.sel(c.SUITE_PEER_RATIO)}))",
               self.dev_legend(c.WORKLOAD))],
            "percentunit", minimum=0.5, maximum=1.2, gpu_only=PEERS_ON_HOST,
            thresholds=((None, "red"), (self.rules.peer_ratio, "yellow"), (0.97, "green")))
        failures = q.sel(runs, status=q.statuses(*c.FAILURE_STATUSES))
        not_run = q.sel(runs, status=q.statuses(*c.NOT_RUN_STATUSES))
        interrupted = q.sel(c.SUITE_INTERRUPTIONS)
        failed = gf.timeseries(
            "Failures, by status",
            f"Cases that failed ({', '.join(c.FAILURE_STATUSES)}: the case ran and something is wrong: it raised or "
            "its worker died, its output failed its check against the reference, it outlasted its timeout), per "
            "interval. Their reasons are in the history (sixdim run --json, sixdim report, the agent's log); the "
            "counter has no reason label. Cases not run and interrupted suite runs are never failures: they are "
            "in the next panel.",
            [Q(f"sum by ({q.by(*self.dev, c.WORKLOAD, c.STATUS)}) ({q.increase(failures)})",
               self.dev_legend(c.WORKLOAD, c.STATUS))],
            "none", bars=True, stack=True, w=12, may_be_empty=NO_FAILURE)
        not_run_panel = gf.timeseries(
            "Cases not run and interrupted suite runs",
            f"Cases that did not run, never failures ({', '.join(c.NOT_RUN_STATUSES)}: the device lacks what the "
            "case needs, such as a precision or a second GPU; or the case was not started on it: a busy GPU, MIG; "
            "query A), and suite runs an interruption ended before every case had run (a shutdown, Ctrl-C, the "
            "agent's death: one per suite run, whatever the number of cases it left; query B), per interval.",
            [Q(f"sum by ({q.by(*self.dev, c.WORKLOAD, c.STATUS)}) ({q.increase(not_run)})",
               self.dev_legend(c.WORKLOAD, c.STATUS), name="not run"),
             Q(f"sum by ({q.by(*self.dev, c.SUITE)}) ({q.increase(interrupted)})",
               self.dev_legend(c.SUITE, text="interrupted"), name="interrupted", may_be_empty=NO_INTERRUPTION)],
            "none", bars=True, stack=True, w=12, may_be_empty=ALL_RAN)
        failed_table = gf.table(
            "Failures in the time range",
            f"Cases per device, workload and status that failed ({', '.join(c.FAILURE_STATUSES)}) within the time "
            "range.",
            [Q(f"sum by ({q.by(*self.dev, c.WORKLOAD, c.STATUS)}) ({q.increase(failures, RANGE)}) > 0",
               name="cases")],
            "none", w=12, h=8, may_be_empty=NO_FAILURE, hide=self.hidden(), sort_by="cases", descending=True,
            links=self.gpu_link())
        not_run_table = gf.table(
            "Cases not run and interrupted suite runs in the time range",
            f"Cases per device, workload and status not run ({', '.join(c.NOT_RUN_STATUSES)}; query A), and suite "
            "runs interrupted per device and suite (query B), within the time range.",
            [Q(f"sum by ({q.by(*self.dev, c.WORKLOAD, c.STATUS)}) ({q.increase(not_run, RANGE)}) > 0",
               name="cases not run"),
             Q(f"sum by ({q.by(*self.dev, c.SUITE)}) ({q.increase(interrupted, RANGE)}) > 0",
               name="suite runs interrupted", may_be_empty=NO_INTERRUPTION)],
            "none", w=12, h=8, may_be_empty=ALL_RAN, hide=self.hidden(), links=self.gpu_link())
        stale_table = gf.table(
            "Time since the last ok run",
            f"Per device and workload, how long ago its newest ok run ended; past {stale // 3600} h "
            "SixdimBenchmarkStale fires (red).",
            [Q(f"time() - max by ({q.by(*self.dev, c.WORKLOAD)}) ({q.sel(c.WORKLOAD_LAST_SUCCESS)})", name="age")],
            "s", w=12, h=8, hide=self.hidden(), sort_by="age", descending=True, cell="color-text",
            thresholds=((None, "green"), (stale / 2, "yellow"), (stale, "red")), links=self.gpu_link())
        rows = [
            Row("Fleet now", counts),
            Row("The six dimensions, per device", [six]),
            Row("What changed: verdicts now open", [regressions, self.causes_table(), drifts, changes]),
            Row("Outliers among peers", [slowest, on_host, self.peer_causes_table()]),
            Row("Runs that did not succeed", [failed, not_run_panel, failed_table, not_run_table, stale_table]),
        ]
        return self.dashboard(
            FLEET, "sixdim / Fleet overview",
            "How each GPU does on the six dimensions now, what regressed or changed and its likely cause, which "
            "GPUs are slower than their peers, and which runs fail.", rows, time_from="now-24h", refresh="5m")

    def changes_table(self, labels: Sequence[str]) -> gf.PanelSpec:
        q, c = self.q, catalog
        return gf.table(
            "Software changes and their verdicts",
            "The latest software change among each series' recent runs: what changed (driver, cuda_runtime, cudnn, "
            "nccl, torch, vbios; onnxruntime for the onnx workload), from and to which versions, the median over the "
            "workload's shapes of the ratio of "
            "the first runs after it to the last runs before it, and the verdict (regression, improvement, ok, "
            "insufficient_data).",
            [Q(f"quantile by ({q.by(*labels)}) (0.5, {q.sel(c.VERSION_CHANGE_RATIO)})", name="after / before")],
            "percentunit", w=24, h=8, may_be_empty=NO_CHANGE, hide=self.hidden(), sort_by="after / before",
            links=self.gpu_link(),
            overrides=[{"matcher": {"id": "byName", "options": c.CHANGE_VERDICT}, "properties": [
                {"id": "mappings", "value": [{"type": "value", "options": {
                    "regression": {"color": "red", "index": 0}, "improvement": {"color": "blue", "index": 1},
                    "ok": {"color": "green", "index": 2}}}]},
                {"id": "custom.cellOptions", "value": {"type": "color-text"}}]}])

    def causes_table(self) -> gf.PanelSpec:
        q, c = self.q, catalog
        labels = self.dev + (c.WORKLOAD, c.PRECISION, c.SHAPE, c.MODE, c.PASS, c.CAUSE, c.CAUSE_RANK)
        return gf.table(
            CAUSES_TITLE,
            f"{c.REGRESSION_CAUSE.name}: why each suspicious or regressed series (or one whose latest software "
            "change regressed) is likely worse, from the conditions recorded with its runs: a setting changed "
            "(power limit, clocks, ECC or MIG mode), a fault (memory errors, a PCIe link trained down, a hardware "
            "slowdown), throttling, contention (other processes, host load, CPU quota or frequency, memory "
            "pressure) or a software version; at most 3 causes per series, rank 1 the most likely; \"no recorded "
            "condition changed\" when nothing differs. What to do about each: docs/CAUSES.md.",
            [Q(f"max by ({q.by(*labels)}) ({q.sel(c.REGRESSION_CAUSE)})")], "none", w=24, h=8,
            may_be_empty=NO_REGRESSION, hide=self.hidden() + ("Value",), links=self.gpu_link(),
            sort_by=c.CAUSE_RANK,
            overrides=[{"matcher": {"id": "byName", "options": c.CAUSE}, "properties": [
                {"id": "mappings", "value": _MAPPING_CAUSES}]}])

    def peer_causes_table(self) -> gf.PanelSpec:
        q, c = self.q, catalog
        labels = self.dev + (c.WORKLOAD, c.PRECISION, c.SHAPE, c.MODE, c.PASS, c.CAUSE, c.CAUSE_RANK)
        return gf.table(
            "Likely causes of GPUs slower than their host peers",
            f"{c.PEER_CAUSE.name}: why a per-shape result is at least 10% slower than the median of the same result "
            "on the other GPUs of its model on the host, from its last runs' recorded conditions against theirs "
            "(power limit, clocks, throttling, PCIe link, memory errors, other processes, ...); at most 3 causes, "
            "rank 1 the most likely; \"no recorded condition changed\" when nothing differs. Where the whole fleet "
            "is the peer group (SixdimSlowerThanPeers) compare the conditions with the GPU detail dashboard; what to "
            "do about each cause: docs/CAUSES.md.",
            [Q(f"max by ({q.by(*labels)}) ({q.sel(c.PEER_CAUSE)})")], "none", w=24, h=8,
            gpu_only=PEERS_ON_HOST, may_be_empty="no GPU is 10% slower than its peers on the host", per_shape=SHAPES,
            hide=self.hidden() + ("Value",), links=self.gpu_link(), sort_by=c.CAUSE_RANK,
            overrides=[{"matcher": {"id": "byName", "options": c.CAUSE}, "properties": [
                {"id": "mappings", "value": _MAPPING_CAUSES}]}])

    def health(self) -> list[gf.PanelSpec]:
        """The GPU health row: NVML's settings and health now, and the share of the results throttled."""
        q, c = self.q, catalog
        leg = self.gpu_legend
        flags = f"max by ({q.by(c.HOSTNAME, c.GPU)})"
        throttled = [(c.WORKLOAD_POWER_CAPPED, "power cap"), (c.WORKLOAD_THERMAL_SLOWDOWN, "thermal"),
                     (c.WORKLOAD_HARDWARE_SLOWDOWN, "hardware")]
        return [
            gf.timeseries("Power limit and its default", "The power limit each GPU enforces now, and its default: a "
                          "limit below the default caps the clocks of large kernels (the power_limit cause of a "
                          "regression; nvidia-smi -pl, or a power-capping service).",
                          [Q(q.sel(c.GPU_POWER_LIMIT), leg() + " enforced", name="enforced"),
                           Q(q.sel(c.GPU_POWER_LIMIT_DEFAULT), leg() + " default", name="default")], "watt", w=8,
                          gpu_only=GPU_HEALTH),
            gf.timeseries("PCIe link generation, now and maximum", "The PCIe generation each GPU's link runs at "
                          "now, and the highest the GPU and its slot support. An idle GPU trains its link down to "
                          "save power, so a lower generation at idle is normal; below the maximum while the GPU is "
                          "busy, the link is degraded (a riser, the slot, ASPM): host-device copies slow first.",
                          [Q(q.sel(c.GPU_PCIE_GENERATION), leg() + " now", name="now"),
                           Q(q.sel(c.GPU_PCIE_GENERATION_MAX), leg() + " maximum", name="maximum")], "none", w=8,
                          gpu_only=GPU_HEALTH),
            gf.timeseries("PCIe link width, now and maximum", "The lanes each GPU's PCIe link uses now, and the "
                          "most the GPU and its slot support: fewer lanes than the maximum is a link trained down "
                          "(reseat the card or riser).",
                          [Q(q.sel(c.GPU_PCIE_WIDTH), leg() + " now", name="now"),
                           Q(q.sel(c.GPU_PCIE_WIDTH_MAX), leg() + " maximum", name="maximum")], "none", w=8,
                          gpu_only=GPU_HEALTH),
            gf.timeseries("ECC errors since the driver loaded", "Corrected and uncorrected ECC errors, NVML's "
                          "volatile counts: they return to 0 when the driver reloads or the GPU resets. Corrected "
                          "errors are repaired; uncorrected ones are the memory_errors cause (drain and reset the "
                          "GPU; repeated ones mean service). None while ECC is off (see ECC mode).",
                          [Q(q.sel(c.GPU_ECC_ERRORS), leg(c.ECC_ERROR_TYPE))], "none", w=8, gpu_only=GPU_HEALTH),
            gf.timeseries("Rows remapped", "Memory rows the GPU has remapped over its life for corrected and "
                          "uncorrected errors (Ampere and later; older GPUs retire pages instead).",
                          [Q(q.sel(c.GPU_REMAPPED_ROWS), leg())], "none", w=8, gpu_only=GPU_HEALTH),
            gf.timeseries("NVLink links up", "NVLink links up on each GPU: fewer than the GPU has (18 on an H100 "
                          "SXM) slows all-reduce and peer copies. None on a GPU without NVLink.",
                          [Q(q.sel(c.GPU_NVLINK_LINKS_ACTIVE), leg())], "none", w=8, gpu_only=GPU_HEALTH),
            gf.state_timeline("ECC mode, row remapping and page retirement", "Whether a row remapping waits for a "
                              "GPU reset, a remapping failed (the GPU needs service), pages wait to be retired at "
                              "the next reset (before Ampere), and whether ECC is on.",
                              [Q(f"{flags} ({q.sel(c.GPU_REMAPPED_ROWS_PENDING)})", leg() + " remap pending",
                                 name="remap pending"),
                               Q(f"{flags} ({q.sel(c.GPU_REMAPPED_ROWS_FAILED)})", leg() + " remap failed",
                                 name="remap failed"),
                               Q(f"{flags} ({q.sel(c.GPU_RETIRED_PAGES_PENDING)})", leg() + " pages pending",
                                 name="pages pending"),
                               Q(f"{flags} ({q.sel(c.GPU_ECC_ENABLED)})", leg() + " ECC", name="ECC")],
                              mappings=_MAPPING_YES_NO, overrides=[gf.query_mappings(3, _MAPPING_ON_OFF)],
                              gpu_only=GPU_HEALTH, w=12),
            gf.timeseries("Share of results throttled, per GPU", "Of each GPU's latest results (the workloads and "
                          "shapes selected), the share whose measured window the power cap (normal for large "
                          "kernels on SXM GPUs), a thermal slowdown or a hardware or power-brake slowdown held "
                          "down; each result's own flags are in Clock limits during the measurements.",
                          [Q(f"avg by ({q.by(*self.dev)}) ({q.sel(metric)})", self.dev_legend(text=what), name=what)
                           for metric, what in throttled], "percentunit", w=12, results=True,
                          gpu_only=CLOCK_EVENTS, per_shape=SHAPES),
        ]

    def slowdown_alerts(self) -> gf.PanelSpec:
        """What SixdimThermalSlowdown and SixdimHardwareSlowdown evaluate, per device."""
        q, c = self.q, catalog
        w = format_duration(alerts.SLOWDOWN_WINDOW)

        def flags(shape: catalog.MetricDef, summary: catalog.MetricDef, what: str) -> Q:
            return Q(f"max by ({q.by(*self.dev)}) (max_over_time({q.sel(shape)}[{w}]) or "
                     f"max_over_time({q.sel(summary)}[{w}]))", self.dev_legend(text=what), name=what)

        return gf.state_timeline(
            "Slowdowns the alerts see, per device", "Yes while SixdimThermalSlowdown (thermal) or "
            f"SixdimHardwareSlowdown (hardware) fires for the device: a result of the last {w} was held down by the "
            f"slowdown, per shape ({c.WORKLOAD_THERMAL_SLOWDOWN.name}, {c.WORKLOAD_HARDWARE_SLOWDOWN.name}: suites "
            f"with {EXPORT_SHAPES}) or in any suite's summary ({c.SUMMARY_THERMAL_SLOWDOWN.name}, "
            f"{c.SUMMARY_HARDWARE_SLOWDOWN.name}: every suite), as the alerts read them. Which workload: Clock "
            "limits during the measurements; the clock-event reasons: Live clock throttle reasons.",
            [flags(c.WORKLOAD_THERMAL_SLOWDOWN, c.SUMMARY_THERMAL_SLOWDOWN, "thermal"),
             flags(c.WORKLOAD_HARDWARE_SLOWDOWN, c.SUMMARY_HARDWARE_SLOWDOWN, "hardware")],
            mappings=_MAPPING_YES_NO, gpu_only=CLOCK_EVENTS, w=12)

    # ------------------------------------------------------------------------- GPU detail
    def gpu_detail(self) -> dict[str, Any]:
        q, c = self.q, catalog
        per_shape = lambda metric: q.without_versions(q.sel(metric))  # noqa: E731
        leg = self.shape_legend()
        speed = [
            gf.timeseries("FLOP/s per shape", "Achieved floating-point operations per second of each shape (integer "
                          "OP/s for int8): a step at each run; a workload no suite exports per shape shows its "
                          "suite's geometric mean over its shapes instead.",
                          self.per_shape_with_summaries(c.WORKLOAD_FLOPS, c.SUMMARY_FLOPS), u(c.WORKLOAD_FLOPS),
                          results=True),
            gf.timeseries("Samples/s per shape", "Training or inference throughput of the models (DeepSpark speed), "
                          "or the suite's geometric mean of a workload no suite exports per shape, and the tokens/s "
                          "of the sequence models.",
                          self.per_shape_with_summaries(c.WORKLOAD_SAMPLES, c.SUMMARY_SAMPLES, needs=MODELS_SHAPES,
                                                        may_be_empty=MODELS)
                          + [Q(per_shape(c.WORKLOAD_TOKENS), leg + " tokens", name="tokens/s",
                               unit=u(c.WORKLOAD_TOKENS), per_shape=MODELS_SHAPES, may_be_empty=TOKENS)],
                          u(c.WORKLOAD_SAMPLES), results=True),
            gf.timeseries("Time per operation", "Time of one operation of each shape (DeepSpark rule: mean of the "
                          "middle 3 of 5 rounds); launch latency included; a workload no suite exports per shape "
                          "shows its suite's geometric mean over its shapes instead.",
                          self.per_shape_with_summaries(c.WORKLOAD_SECONDS, c.SUMMARY_SECONDS), "s", results=True,
                          log=True),
            gf.timeseries("Bytes per second", "Copy bandwidth, and the algorithm bandwidth of all-reduce, per size; "
                          "a workload no suite exports per shape shows its suite's geometric mean over its sizes "
                          "instead.", self.per_shape_with_summaries(
                              c.WORKLOAD_BANDWIDTH, c.SUMMARY_BANDWIDTH, needs=COPIES_OR_ALLREDUCE),
                          u(c.WORKLOAD_BANDWIDTH), results=True),
            gf.timeseries("Fraction of the published peak", "Achieved FLOP/s (or bytes/s) over the GPU's published "
                          "dense peak for the precision, per shape, or the suite's geometric mean of a workload no "
                          "suite exports per shape.",
                          self.per_shape_with_summaries(c.WORKLOAD_PEAK_RATIO, c.SUMMARY_PEAK_RATIO),
                          u(c.WORKLOAD_PEAK_RATIO), results=True, may_be_empty=PEAK),
            gf.timeseries("Inference latency, p50, p90 and p99",
                          "Latency percentiles of single synchronized calls (p90: the onnx workload only).",
                          [Q(per_shape(c.WORKLOAD_LATENCY_P50), self.shape_legend() + " p50"),
                           Q(per_shape(c.WORKLOAD_LATENCY_P90), self.shape_legend() + " p90"),
                           Q(per_shape(c.WORKLOAD_LATENCY_P99), self.shape_legend() + " p99")], "s", results=True,
                          may_be_empty=INFERENCE, per_shape=needs_shapes("the inference suite's workloads")),
            gf.timeseries("Sparse GEMM speedup over dense", "Time of the same GEMM dense over its 2:4-sparse time, "
                          "per shape (100% = as fast as dense): what the sparse tensor cores buy.",
                          [Q(per_shape(c.WORKLOAD_SPEEDUP), leg)], "percentunit", results=True, per_shape=SPARSE),
        ]
        power = [
            gf.timeseries("Power during the measurement", "Average device power over each case's power phase (3 s "
                          "of back-to-back work), from the energy counter.", [Q(per_shape(c.WORKLOAD_POWER), leg)],
                          "watt", results=True, may_be_empty=ENERGY, per_shape=SHAPES),
            gf.timeseries("Energy of the power phase", "Device energy consumed over each case's power phase.",
                          [Q(per_shape(c.WORKLOAD_ENERGY), leg)],
                          u(c.WORKLOAD_ENERGY), results=True, may_be_empty=ENERGY, per_shape=SHAPES),
            gf.timeseries("Work per joule", "Floating-point operations per joule (kernels) and samples per joule "
                          "(models), over the power phase.",
                          [Q(per_shape(c.WORKLOAD_FLOP_PER_JOULE), leg, name="FLOP/J",
                             unit=u(c.WORKLOAD_FLOP_PER_JOULE)),
                           Q(per_shape(c.WORKLOAD_SAMPLES_PER_JOULE), leg, name="samples/J",
                             unit=u(c.WORKLOAD_SAMPLES_PER_JOULE), may_be_empty=MODELS)], "si:FLOP/J", results=True,
                          may_be_empty=ENERGY, per_shape=SHAPES),
            gf.timeseries("Live GPU power", "GPU power draw now, read by the agent at each scrape (a level in watts, "
                          "never summed over the time range), and the average power over each interval from the "
                          "GPU's energy counter (its rate: a spike between two scrapes counts there).",
                          [Q(q.sel(c.GPU_POWER), self.gpu_legend(), name="now"),
                           Q(q.rate(q.sel(c.GPU_ENERGY)), self.gpu_legend() + " average", name="average")], "watt",
                          gpu_only=GPU_TELEMETRY),
        ]
        memory = [
            gf.timeseries("Peak memory of the workload", "torch's allocator peak of each case on a GPU (no CUDA "
                          "context, nothing of earlier cases); the worker's peak resident memory on a CPU.",
                          [Q(per_shape(c.WORKLOAD_MEMORY), leg)], u(c.WORKLOAD_MEMORY), results=True,
                          per_shape=SHAPES),
            gf.timeseries("Reserved and device-wide memory", "Peak memory torch's caching allocator reserved, and "
                          "peak device-wide memory in use as NVML sees it (CUDA context and other processes included).",
                          [Q(per_shape(c.WORKLOAD_MEMORY_RESERVED), leg + " reserved", name="reserved"),
                           Q(per_shape(c.WORKLOAD_DEVICE_MEMORY), leg + " device", name="device-wide")], "bytes",
                          results=True, gpu_only=GPU_MEMORY, per_shape=SHAPES),
            gf.timeseries("Live GPU memory", "GPU memory in use and installed, now.",
                          [Q(q.sel(c.GPU_MEMORY_USED), self.gpu_legend() + " used", name="used"),
                           Q(q.sel(c.GPU_MEMORY_TOTAL), self.gpu_legend() + " installed", name="installed")],
                          "bytes", gpu_only=GPU_TELEMETRY),
        ]
        by_case = self.dev + (c.WORKLOAD, c.PRECISION)
        flag = lambda metric, what: Q(  # noqa: E731
            f"max by ({q.by(*by_case)}) ({q.sel(metric)})", self.dev_legend(c.WORKLOAD, c.PRECISION, text=what),
            name=what, per_shape=SHAPES if metric.name in _PER_SHAPE_NAMES else None)
        limits = [
            gf.timeseries("Clock during the measurement", "Average SM clock over each case's measured window (the "
                          "core clock on a CPU).", [Q(per_shape(c.WORKLOAD_SM_CLOCK), leg)],
                          u(c.WORKLOAD_SM_CLOCK), results=True, per_shape=SHAPES),
            gf.timeseries("Live SM and memory clocks", "GPU clocks now.",
                          [Q(q.sel(c.GPU_SM_CLOCK), self.gpu_legend() + " SM", name="SM"),
                           Q(q.sel(c.GPU_MEMORY_CLOCK), self.gpu_legend() + " memory", name="memory")], "hertz",
                          gpu_only=GPU_TELEMETRY),
            gf.state_timeline("Clock limits during the measurements", "Whether the power cap (normal for large "
                              "kernels on SXM GPUs), a thermal slowdown or a hardware or power-brake slowdown held the "
                              "clocks down during any case of the workload and precision: per shape (queries A to "
                              "C) and, for every suite, its summaries' flags (any of its shapes; queries D and E).",
                              [flag(c.WORKLOAD_POWER_CAPPED, "power cap"), flag(c.WORKLOAD_THERMAL_SLOWDOWN, "thermal"),
                               flag(c.WORKLOAD_HARDWARE_SLOWDOWN, "hardware"),
                               flag(c.SUMMARY_THERMAL_SLOWDOWN, "thermal (suite)"),
                               flag(c.SUMMARY_HARDWARE_SLOWDOWN, "hardware (suite)")],
                              mappings=_MAPPING_YES_NO, gpu_only=CLOCK_EVENTS, w=12),
            self.slowdown_alerts(),
            gf.state_timeline("Live clock throttle reasons", "Clock-event (throttle) reasons active now, per GPU.",
                              [Q(f"max by ({q.by(c.HOSTNAME, c.GPU, 'reason')}) ({q.sel(c.GPU_THROTTLE)})",
                                 self.gpu_legend("reason"))],
                              mappings=_MAPPING_YES_NO, gpu_only=GPU_TELEMETRY, w=12),
            gf.timeseries("GPU temperature", "GPU core temperature now.",
                          [Q(q.sel(c.GPU_TEMPERATURE), self.gpu_legend())], "celsius", gpu_only=GPU_TELEMETRY),
            gf.timeseries("GPU utilization", "Fraction of time a kernel ran on the GPU: sixdim's own runs, or "
                          "someone else's work the idle guard would skip a run for.",
                          [Q(q.sel(c.GPU_UTILIZATION), self.gpu_legend())], "percentunit", gpu_only=GPU_TELEMETRY),
            gf.timeseries("Processes on the GPU", "Processes NVML lists on each GPU now (compute, and OpenGL or "
                          "Vulkan ones): while another process holds a GPU, the idle guard skips its cases "
                          "(busy_process in Skips by reason, on the agent health dashboard). Absent, never 0, where "
                          "NVML cannot list them.",
                          [Q(q.sel(c.GPU_PROCESSES), self.gpu_legend())], "none", gpu_only=GPU_TELEMETRY),
        ]
        verdicts = [
            gf.state_timeline("Regression verdict per workload and precision", "The worst verdict over the shapes "
                              "and figures of each workload and precision: improvement, ok, insufficient_data, "
                              "suspicious, regression.",
                              [Q(f"max by ({q.by(*by_case)}) ({q.sel(c.REGRESSION_STATE)})",
                                 self.dev_legend(c.WORKLOAD, c.PRECISION))], mappings=_MAPPING_STATES, w=24,
                              per_shape=VERDICT_SHAPES),
            self.causes_table(),
            gf.heatmap("Ratio to baseline, every watched figure", "How the figures of all the series selected stand "
                       "against their baselines over time (1 = at the baseline).",
                       [Q(q.sel(c.REGRESSION_RATIO), self.shape_legend(c.FIGURE))], "percentunit",
                       may_be_empty=BASELINE, per_shape=VERDICT_SHAPES),
            gf.timeseries("Spread of the timed rounds", "Interquartile range over the median of each case's timed "
                          "rounds: a noisy measurement is a weak one.", [Q(per_shape(c.WORKLOAD_SPREAD), leg)],
                          "percentunit", results=True, per_shape=SHAPES),
        ]
        rows = [Row("Speed", speed), Row("Power and work per joule", power), Row("Memory", memory),
                Row("Clocks and throttling", limits), Row(HEALTH_ROW, self.health()),
                Row("Verdicts and measurement quality", verdicts)]
        return self.dashboard(
            GPU_DETAIL, "sixdim / GPU detail",
            "Per workload and shape over time: time, FLOP/s or samples/s, power, work per joule, memory, clocks "
            "and throttle reasons; the GPU's health (power limit, PCIe link, ECC, row remapping, NVLink) and the "
            "likely causes of its regressions; annotations where the driver, CUDA or torch changed.", rows,
            time_from="now-7d", refresh="5m")

    # ------------------------------------------------------------------------- versions
    def by_version(self, title: str, metric: catalog.MetricDef, version: str, unit: str,
                   may_be_empty: str | None, what: str, per_shape: str | None = None) -> gf.PanelSpec:
        """A table with one column per version: the median over the time range of each series, then
        the median over the devices of a model, one row per model, workload, precision, mode and pass (and
        cluster: each cluster's devices are their own, where several share the Prometheus)."""
        q, c = self.q, catalog
        rows = (c.MODEL_NAME, c.WORKLOAD, c.PRECISION, c.MODE, c.PASS)
        v = q.lab(version)
        median = (f"quantile by ({q.by(*rows, version)}) (0.5, "
                  f"quantile_over_time(0.5, {q.sel(metric)}[{RANGE}:{INTERVAL}]))")
        expr = (f"label_join(label_replace({median}, {quote(v)}, \"none\", {quote(v)}, \"\"), "
                f"\"series\", \" \", {', '.join(quote(q.lab(r)) for r in rows)}, {quote(q.cluster)})")
        return gf.table(
            title, f"{what}: the median over the time range of each series (read at up to {VERSION_POINTS} points), "
            f"then over the devices of the model, one column per {version.replace('_', ' ')} (\"none\" on a CPU "
            "host). A version appears only if results under it fall in the time range: widen the range to compare "
            "across an older upgrade.",
            [Q(expr)], unit, w=8, h=9, may_be_empty=may_be_empty, per_shape=per_shape, merge=False,
            max_points=VERSION_POINTS,
            transformations=[{"id": "groupingToMatrix", "options": {
                "columnField": v, "rowField": "series", "valueField": "Value", "emptyValue": "null"}}],
            rename={"series\\" + v: f"model workload precision mode pass {q.cluster}"})

    def over_time(self, title: str, metric: catalog.MetricDef, version: str, unit: str) -> gf.PanelSpec:
        q, c = self.q, catalog
        labels = (c.MODEL_NAME, c.WORKLOAD, c.PRECISION, version)
        return gf.timeseries(
            title, f"Geometric mean over the devices selected and the suite's modes and passes, one line per "
                   f"{version.replace('_', ' ')}: an upgrade ends one line and starts another.",
            [Q(q.geomean(labels, q.sel(metric)), q.legend(c.MODEL_NAME, c.WORKLOAD, c.PRECISION, version))],
            unit, w=8, results=True)

    def versions(self) -> dict[str, Any]:
        q, c = self.q, catalog
        versions = ((c.DRIVER_VERSION, "driver"), (c.CUDA_VERSION, "CUDA"), (c.TORCH_VERSION, "torch"))
        figures = ((c.SUMMARY_FLOPS, "FLOP/s", None), (c.SUMMARY_SAMPLES, "samples/s", MODELS),
                   (c.SUMMARY_BANDWIDTH, "bytes/s", None))
        rows = [Row(f"{what[0].upper()}{what[1:]} by driver, CUDA and torch version (suite geometric means)", [
            self.by_version(f"{what} by {name}", metric, version, u(metric), empty, f"Suite {what}")
            for version, name in versions]) for metric, what, empty in figures]
        rows.append(Row("Power and work per joule by driver, CUDA and torch version (per-shape results)", [
            self.by_version(f"Power by {name}", c.WORKLOAD_POWER, version, u(c.WORKLOAD_POWER), ENERGY, "Power",
                            SHAPES) for version, name in versions] + [
            self.by_version(f"FLOP per joule by {name}", c.WORKLOAD_FLOP_PER_JOULE, version,
                            u(c.WORKLOAD_FLOP_PER_JOULE), ENERGY, "FLOP/J", SHAPES) for version, name in versions],
            collapsed=False))
        rows.append(Row("FLOP/s over time, by version", [
            self.over_time(f"FLOP/s over time by {name}", c.SUMMARY_FLOPS, version, u(c.SUMMARY_FLOPS))
            for version, name in versions]))
        change_labels = self.dev + (c.WORKLOAD, c.FIGURE, c.CHANGE_COMPONENT, c.CHANGE_FROM, c.CHANGE_TO,
                                    c.CHANGE_VERDICT)
        software = [
            self.changes_table(change_labels),
            gf.table("GPU software now", "Driver, CUDA driver API and VBIOS version of each GPU, as NVML reports "
                     "them now.", [Q(f"max by ({q.by(*c.GPU_INFO.labels)}) ({q.sel(c.GPU_INFO)})")], "none", w=12,
                     h=8, gpu_only=GPU_INFO, hide=self.hidden() + ("Value",)),
            gf.table("Agent software now", "The sixdim, Python, torch and prometheus-client versions of each agent.",
                     [Q(f"max by ({q.by(*c.BUILD_INFO.labels)}) ({q.sel(c.BUILD_INFO)})")], "none", w=12, h=8,
                     hide=self.hidden() + ("Value",)),
        ]
        rows.append(Row("Did the last upgrade help or hurt?", software))
        rows.append(Row("Rollout: each version of the fleet against the fastest, per GPU model and case",
                        self.rollout(), collapsed=False))
        return self.dashboard(
            VERSIONS, "sixdim / Versions",
            "The same figures grouped by driver, by CUDA and by torch version, side by side: the view across driver "
            "and SDK versions, and the verdicts on the latest change of each series.", rows,
            time_from="now-30d", refresh="15m")

    def rollout(self) -> list[gf.PanelSpec]:
        """Old against new side by side during a rollout: the recorded medians, host counts and ratios to the
        fastest version (:func:`sixdim.monitoring.recording.rollout_rules`), what SixdimRolloutSlower fires on."""
        q, c = self.q, catalog
        group = recording.ROLLOUT_GROUP
        sides = group + c.VERSION_LABELS
        legend = q.legend(c.MODEL_NAME, c.SUITE, c.WORKLOAD, c.PRECISION, c.MODE, c.PASS, c.DRIVER_VERSION,
                          c.CUDA_VERSION, c.CUDNN_VERSION, c.NCCL_VERSION, c.TORCH_VERSION)

        def each(make: Any) -> str:
            return " or ".join(q.sel(make(metric)) for metric in recording.ROLLOUT_METRICS)
        limit = 1 - self.rules.rollout_threshold
        colours = ((None, "red"), (limit, "green"))
        hide = tuple(label for label in (c.DEVICE_TYPE,))
        ratio = gf.table(
            "Rollout: each version against the fastest, now",
            "Per GPU model and case (suite, workload, precision, mode, pass), each set of versions run by at least "
            f"{self.rules.rollout_min_hosts} hosts: its median over the GPUs (suite FLOP/s, samples/s or bytes/s) over "
            f"the fastest version's (100%), and how many hosts run it. Below {limit:.0%} (red) is what "
            "SixdimRolloutSlower alerts on. A median over GPUs: 'sixdim fleet' judges the same with hosts as the "
            "unit, a confidence interval and the same hosts before and after they upgraded (docs/FLEET.md).",
            [Q(f"min by ({q.by(*sides)}) ({each(recording.rollout_ratio)})", name="ratio to the fastest"),
             Q(f"max by ({q.by(*sides)}) ({each(recording.rollout_hosts)})", name="hosts", unit="none")],
            "percentunit", w=24, h=9, may_be_empty=ROLLOUT_SIDES, hide=hide, sort_by="ratio to the fastest",
            thresholds=colours, cell="color-background")
        over_time = gf.timeseries(
            "Rollout: ratio to the fastest version over time",
            f"Each version's median over the fastest version's, per GPU model and case; below {limit:.0%} fires "
            "SixdimRolloutSlower (after 30 minutes).",
            [Q(f"min by ({q.by(*sides)}) ({each(recording.rollout_ratio)})", legend)], "percentunit", w=12,
            may_be_empty=ROLLOUT_SIDES, soft_max=1)
        hosts = gf.timeseries(
            "Rollout: hosts on each version",
            "How many hosts run each set of versions, per GPU model and case: the rollout's progress.",
            [Q(f"max by ({q.by(*sides)}) ({each(recording.rollout_hosts)})", legend)], "none", w=12, results=True)
        medians = gf.timeseries(
            "Rollout: each version's median, side by side",
            "The median over every GPU of the model under each set of versions (suite FLOP/s, samples/s or bytes/s "
            "geometric means): old and new versions of the same case as lines next to each other.",
            [Q(f"max by ({q.by(*sides)}) ({each(recording.rollout_median)})", legend)], "short", w=24,
            results=True)
        return [ratio, over_time, hosts, medians]

    # ------------------------------------------------------------------------- scaling
    def scaling(self) -> dict[str, Any]:
        q, c = self.q, catalog
        per_shape = lambda metric: q.without_versions(q.sel(metric))  # noqa: E731
        bus = q.sel(c.WORKLOAD_BUS_BANDWIDTH)
        key = q.result_key()
        linearity = [
            gf.timeseries("Card and node linearity", "DeepSpark linearity: (throughput on count cards or nodes / "
                          "count) over the throughput on one; 100% is perfect scaling.",
                          [Q(per_shape(c.WORKLOAD_LINEARITY), self.shape_legend() + " x{{count}}")],
                          u(c.WORKLOAD_LINEARITY),
                          results=True, may_be_empty=LINEARITY, per_shape=LINEARITY_SHAPES),
            gf.bargauge("Linearity now", "The latest linearity of each device, workload and card or node count.",
                        [Q(per_shape(c.WORKLOAD_LINEARITY), self.shape_legend() + " x{{count}}")],
                        u(c.WORKLOAD_LINEARITY),
                        minimum=0, maximum=1, thresholds=((None, "red"), (0.8, "yellow"), (0.9, "green")),
                        may_be_empty=LINEARITY, per_shape=LINEARITY_SHAPES),
        ]
        leg = self.shape_legend()
        allreduce = [
            gf.timeseries("All-reduce bus bandwidth per size", "nccl-tests' bus bandwidth (algbw x 2(n-1)/n) of each "
                          "message size and rank count (gloo on a CPU host).", [Q(q.without_versions(bus), leg)],
                          "Bps", results=True, per_shape=ALLREDUCE),
            gf.bargauge("All-reduce bus bandwidth now", "The latest bus bandwidth of each message size.",
                        [Q(q.without_versions(bus), leg)], "Bps", per_shape=ALLREDUCE),
            gf.timeseries("All-reduce algorithm bandwidth", "Bytes over time of each all-reduce (algbw).",
                          [Q(q.without_versions(f"{q.sel(c.WORKLOAD_BANDWIDTH)} and on ({key}) {bus}"), leg)], "Bps",
                          results=True, per_shape=ALLREDUCE),
            gf.timeseries("All-reduce time per size", "Time of one all-reduce of each message size.",
                          [Q(q.without_versions(f"{q.sel(c.WORKLOAD_SECONDS)} and on ({key}) {bus}"), leg)], "s",
                          results=True, log=True, per_shape=ALLREDUCE),
        ]
        copies = f"{q.sel(c.WORKLOAD_BANDWIDTH)} unless on ({key}) {bus}"
        memory = [
            gf.timeseries("Copy bandwidth", "Device-to-device, host-to-device and device-to-host copies (a CPU "
                          "host copies in memory only).", [Q(q.without_versions(copies), leg)], "Bps", results=True,
                          per_shape=COPIES),
            gf.timeseries("Copy bandwidth, fraction of the published peak", "Device-to-device copy bandwidth over "
                          "the GPU's published memory bandwidth.",
                          [Q(q.without_versions(f"{q.sel(c.WORKLOAD_PEAK_RATIO)} and on ({key}) ({copies})"), leg)],
                          "percentunit", results=True, may_be_empty=PEAK, per_shape=COPIES),
            gf.timeseries("Speed against the other GPUs of the host, per shape", f"{c.PEER_RATIO.name}: each result's "
                          "speed over the median of the same result on the GPUs of the same model on its host.",
                          [Q(q.sel(c.PEER_RATIO), self.shape_legend(c.FIGURE))], "percentunit", w=24, results=True,
                          gpu_only=PEERS_ON_HOST, per_shape=SHAPES),
        ]
        rows = [Row("Linearity across cards and nodes", linearity), Row("Collective communication", allreduce),
                Row("Memory copies and peers", memory)]
        return self.dashboard(
            SCALING, "sixdim / Scaling and communication",
            "Card and node linearity; all-reduce bus bandwidth per message size; copy bandwidth; on-host peers.",
            rows, time_from="now-7d", refresh="5m")

    # ------------------------------------------------------------------------- correctness and stability
    def correctness(self) -> dict[str, Any]:
        q, c = self.q, catalog
        runs = c.WORKLOAD_RUNS
        per_shape = lambda metric: q.without_versions(q.sel(metric))  # noqa: E731
        leg = self.shape_legend()
        incorrect = q.sel(runs, status=q.statuses("incorrect"))
        checks = [
            gf.stat("Incorrect results in the time range", "Runs whose sampled output failed its check against a "
                    "float64 reference: the worst regression, since the GPU may compute wrong results silently.",
                    [Q(f"sum({q.increase(incorrect, RANGE)}) or vector(0)", "incorrect")], "none", w=6, h=8,
                    thresholds=((None, "green"), (1, "red")), color_mode="background"),
            gf.timeseries("Incorrect runs", "Incorrect results per interval, per device and workload.",
                          [Q(f"sum by ({q.by(*self.dev, c.WORKLOAD)}) ({q.increase(incorrect)})",
                             self.dev_legend(c.WORKLOAD))], "none", w=18, bars=True, may_be_empty=NO_INCORRECT),
            gf.timeseries("Largest relative error against the reference", "Largest error of the output against "
                          "its reference, relative to the reference's magnitude, per shape: a sample of a kernel's "
                          "output against float64, a copy's bytes against its source, an all-reduce's sums "
                          "against the exact ones.",
                          [Q(per_shape(c.WORKLOAD_ERROR), leg)], u(c.WORKLOAD_ERROR), log=True, results=True,
                          per_shape=SHAPES),
            gf.table("Largest relative error now", "Per device, workload and precision, the largest relative error "
                     "among the latest results of its shapes.",
                     [Q(f"max by ({q.by(*self.dev, c.WORKLOAD, c.PRECISION)}) ({q.sel(c.WORKLOAD_ERROR)})",
                        name="max relative error")], "sci", w=12, h=8, hide=self.hidden(),
                     sort_by="max relative error", descending=True, per_shape=SHAPES),
        ]
        stability = [
            gf.timeseries("Spread of the timed rounds", "Interquartile range over the median of each case's timed "
                          "rounds.", [Q(per_shape(c.WORKLOAD_SPREAD), leg)], u(c.WORKLOAD_SPREAD), results=True,
                          per_shape=SHAPES),
            gf.heatmap("Spread of the timed rounds, all series", "How many series have each spread, over time: a "
                       "band moving up is a noisier machine.", [Q(q.sel(c.WORKLOAD_SPREAD), leg)], "percentunit",
                       log=True, per_shape=SHAPES),
            gf.timeseries("Stability over complete runs", "DeepSpark stability: 1 minus 0.2 per complete run "
                          "outside 1% of the median.", [Q(per_shape(c.WORKLOAD_STABILITY), leg)],
                          u(c.WORKLOAD_STABILITY),
                          results=True, may_be_empty=TRAINING, per_shape=TRAINING_SHAPES),
        ]
        accuracy = [
            gf.timeseries("Accuracy reached", "Accuracy at convergence (the runs' median), or a training command's "
                          "final evaluation when it is a ratio.", [Q(per_shape(c.WORKLOAD_ACCURACY), leg)],
                          "percentunit", results=True, may_be_empty=TRAINING, per_shape=TRAINING_SHAPES),
            gf.timeseries("Quality metrics of training runs", "Final value of each quality metric (top-1, WER, loss, "
                          "FID, ...), with whether higher or lower is better.",
                          [Q(per_shape(c.WORKLOAD_QUALITY), self.shape_legend(c.QUALITY_METRIC, c.QUALITY_DIRECTION))],
                          "none", results=True, may_be_empty=TRAINING, per_shape=TRAINING_SHAPES),
            gf.timeseries("Time to train", "AI-Rank Time2train: time from the start of training until the target "
                          "accuracy was reached (or MLPerf's run_stop - run_start).",
                          [Q(per_shape(c.WORKLOAD_TIME_TO_TRAIN), leg)],
                          u(c.WORKLOAD_TIME_TO_TRAIN), results=True, may_be_empty=TRAINING,
                          per_shape=TRAINING_SHAPES),
        ]
        rows = [Row("Correctness against float64", checks), Row("Stability", stability),
                Row("Accuracy and time to train", accuracy)]
        return self.dashboard(
            CORRECTNESS, "sixdim / Correctness and stability",
            "Correctness failures and errors against float64, the stability of the measurements and of training, "
            "accuracy and time to train.", rows, time_from="now-7d", refresh="5m")

    # ------------------------------------------------------------------------- agent health
    def suite_progress(self) -> list[gf.PanelSpec]:
        """Each suite's run on each device as it goes: running or not, its cases done by status out of all,
        the workload running."""
        q, c = self.q, catalog
        by = self.dev + (c.SUITE,)
        done, cases = q.sel(c.SUITE_CASES_DONE), q.sel(c.SUITE_CASES)
        count = lambda statuses: (  # noqa: E731
            f"sum by ({q.by(*by)}) ({q.sel(c.SUITE_CASES_DONE, status=q.statuses(*statuses))})")
        progress = gf.table(
            "Suite progress now", f"Each suite's run on each device: running or idle ({c.SUITE_RUNNING.name}), "
            f"its cases ended ({c.SUITE_CASES_DONE.name}, by status) out of all its cases ({c.SUITE_CASES.name}), "
            f"the share done, the failures among them ({', '.join(c.FAILURE_STATUSES)}) and the cases not run "
            f"({', '.join(c.NOT_RUN_STATUSES)}, never failures). A suite that is not running shows its last run "
            "(0 of 0 before its first). Each ended case is in the history at once.",
            [Q(f"max by ({q.by(*by)}) ({q.sel(c.SUITE_RUNNING)})", name="state"),
             Q(f"sum by ({q.by(*by)}) ({done})", name="cases ended"),
             Q(f"max by ({q.by(*by)}) ({cases})", name="cases"),
             Q(f"sum by ({q.by(*by)}) ({done}) / (max by ({q.by(*by)}) ({cases}) > 0)", name="done",
               unit="percentunit"),
             Q(count(c.FAILURE_STATUSES), name="failures"),
             Q(count(c.NOT_RUN_STATUSES), name="not run")],
            "none", w=24, h=7, hide=self.hidden(), sort_by=q.lab(c.HOSTNAME),
            overrides=[_table_mappings(0, _MAPPING_RUNNING)])
        running = gf.state_timeline(
            "Suites running", f"When each suite ran on each device ({c.SUITE_RUNNING.name}): from taking the "
            "device to its last case.", [Q(f"max by ({q.by(*by)}) ({q.sel(c.SUITE_RUNNING)})",
                                           self.dev_legend(c.SUITE))],
            mappings=_MAPPING_RUNNING, w=12, h=7)
        workloads = gf.state_timeline(
            "Workload running, per suite", f"Which workload each suite's run was running, over time "
            f"({c.SUITE_CURRENT_WORKLOAD.name}, read at each scrape: a workload shorter than the scrape interval "
            "may not show).", [Q(f"max by ({q.by(*by, c.WORKLOAD)}) ({q.sel(c.SUITE_CURRENT_WORKLOAD)})",
                                 self.dev_legend(c.SUITE, c.WORKLOAD))],
            mappings=_MAPPING_CURRENT, w=12, h=7, may_be_empty=NO_SUITE_RAN)
        return [progress, running, workloads]

    def suite_costs(self) -> list[gf.PanelSpec]:
        """The share of each device's time and energy the suites' cases take (catalog.SUITE_COST_METRICS)."""
        q, c = self.q, catalog
        seconds, energy = c.SUITE_DEVICE_SECONDS, c.SUITE_ENERGY
        spans = ("the counters grow as each case ends, by its whole span (set-up, warm-up, timed rounds, power "
                 "phase, check; the worker's start-up is not counted), so over a window shorter than a case a point "
                 "can pass 100%: the legend's mean is the share over the time range")
        gpu = (c.HOSTNAME, c.GPU, c.UUID, c.MODEL_NAME)
        share_time = gf.timeseries(
            "Benchmark share of device time",
            f"The share of each device's time its suites' cases took ({seconds.name}, summed over the suites, per "
            f"second): 1% is 36 s of the device's every hour. {spans[0].upper()}{spans[1:]}. Counted since the "
            "agent started; a case skipped before it started adds nothing.",
            [Q(f"sum by ({q.by(*self.dev)}) ({q.rate(q.sel(seconds))})", self.dev_legend())],
            "percentunit", w=12, calcs=COST_CALCS)
        share_energy = gf.timeseries(
            "Benchmark share of GPU energy",
            f"The share of each GPU's energy spent over its suites' cases: the energy counter's difference over "
            f"each case's span ({energy.name}, summed over the suites) over the GPU's whole energy "
            f"({c.GPU_ENERGY.name}), per second. A case whose energy could not be read adds none (a host-wide "
            f"case, all-reduce or card linearity, reads its GPUs as one sum: the details of its record say so). "
            f"{spans[0].upper()}{spans[1:]}.",
            [Q(f"sum by ({q.by(*gpu)}) ({q.rate(q.sel(energy, **{c.DEVICE_TYPE: ('=', 'cuda')}))})\n/\n"
               f"sum by ({q.by(*gpu)}) ({q.rate(q.sel(c.GPU_ENERGY))})", self.gpu_legend())],
            "percentunit", w=12, calcs=COST_CALCS, gpu_only=GPU_ENERGY_COUNTER)
        per_suite = gf.timeseries(
            "Benchmark device time per hour, by suite",
            f"The device time each suite's cases took, in seconds per hour of the device ({seconds.name}): which "
            f"tier of the schedule the time goes to (36 s per hour is 1%). {spans[0].upper()}{spans[1:]}.",
            [Q(f"sum by ({q.by(*self.dev, c.SUITE)}) ({q.rate(q.sel(seconds))}) * {SECONDS_PER_HOUR}",
               self.dev_legend(c.SUITE))],
            "s", w=12, calcs=COST_CALCS)
        totals = gf.table(
            "Benchmark cost in the time range, by suite",
            f"The device time ({seconds.name}) and the device energy ({energy.name}) each suite's cases spent "
            "within the time range, per device (the increase of counters kept since the agent started: a case "
            "recorded before a series' first scrape is not seen).",
            [Q(f"sum by ({q.by(*self.dev, c.SUITE)}) ({q.increase(q.sel(seconds), RANGE)})", name="device time",
               unit="s"),
             Q(f"sum by ({q.by(*self.dev, c.SUITE)}) ({q.increase(q.sel(energy), RANGE)})", name="energy",
               unit="joule", may_be_empty=ENERGY)],
            "none", w=12, h=8, hide=self.hidden(), sort_by="device time", descending=True)
        return [share_time, share_energy, per_suite, totals]

    def agent(self) -> dict[str, Any]:
        q, c = self.q, catalog
        runs, build = c.WORKLOAD_RUNS, c.BUILD_INFO
        host, hosts = q.lab(c.HOSTNAME), q.by(c.HOSTNAME)
        target = q.by(*TARGET_LABELS)
        scraped = (f"max by ({hosts}) ({q.series(UP)} * on ({target}) group_left ({host}) "
                   f"{q.sel(recording.TARGET_HOSTNAME)})")
        memory, cpu, start = (q.series(name) for name in (PROCESS_RESIDENT_MEMORY, PROCESS_CPU_SECONDS,
                                                           PROCESS_START_TIME))
        fds = f"{q.series(PROCESS_OPEN_FDS)} / {q.series(PROCESS_MAX_FDS)}"
        agent = [
            gf.state_timeline("Agent scraped", "Whether Prometheus scrapes each agent (up), with the host name the "
                              "agent last reported, which the rules remember while it is down "
                              f"({recording.TARGET_HOSTNAME.name}, a recording rule: load the rules file in this "
                              "Prometheus).", [Q(scraped, q.legend(c.HOSTNAME))],
                              mappings=_MAPPING_UP, w=12, h=5),
            gf.state_timeline("Agent can run its suites", "Whether each agent can run its suites "
                              f"({c.AGENT_CAN_RUN.name}): cannot run means a suite run could not start or failed "
                              "unexpectedly (its device's lock file in a full or read-only state folder could not be "
                              "written) and "
                              "no later run of that suite has worked yet; the agent's /healthz answers 503 with the "
                              "reason, and its log names the file.",
                              [Q(f"min by ({hosts}) ({q.sel(c.AGENT_CAN_RUN)})", q.legend(c.HOSTNAME))],
                              mappings=[{"type": "value", "options": {
                                  "0": {"text": "cannot run", "color": "red", "index": 0},
                                  "1": {"text": "ok", "color": "green", "index": 1}}}], w=12, h=5),
            gf.timeseries("Agent resident memory", "The daemon's resident memory (the worker that runs benchmarks "
                          "is a separate process).",
                          [Q(f"max by ({hosts}) ({q.with_host(memory)})", q.legend(c.HOSTNAME))],
                          "bytes", w=8),
            gf.timeseries("Agent CPU", "CPU time the daemon uses per second (1 = one core).",
                          [Q(f"max by ({hosts}) ({q.with_host(q.rate(cpu))})", q.legend(c.HOSTNAME))],
                          "percentunit", w=8),
            gf.timeseries("Agent file descriptors", "Open file descriptors over the process limit.",
                          [Q(f"max by ({hosts}) ({q.with_host(fds)})",
                             q.legend(c.HOSTNAME))], "percentunit", w=8),
            gf.stat("Agent uptime", "Time since each daemon started.",
                    [Q(f"min by ({hosts}) (time() - {q.with_host(start)})", q.legend(c.HOSTNAME))], "s",
                    w=8, h=6),
            gf.table("Agent builds", "The sixdim, Python, torch and prometheus-client versions of each agent.",
                     [Q(f"max by ({q.by(*build.labels)}) ({q.sel(build)})")], "none", w=16, h=6,
                     hide=self.hidden() + ("Value",)),
        ]
        statuses = gf.timeseries(
            "Runs by status", "Cases recorded per interval, per device and status (ok, failed, timeout, skipped, "
            "unsupported, incorrect).",
            [Q(f"sum by ({q.by(*self.dev, c.STATUS)}) ({q.increase(q.sel(runs))})", self.dev_legend(c.STATUS))],
            "none", bars=True, stack=True, w=12)
        skips = gf.timeseries(
            "Failures and cases not run, by workload", "Why cases did not give a result, failures apart from the "
            f"cases not run: failed, incorrect or timed out (query A: {', '.join(c.FAILURE_STATUSES)}); not run "
            f"(query B: {', '.join(c.NOT_RUN_STATUSES)}: the device lacks a precision or a second GPU, another "
            "process on the GPU, MIG); and suite runs an interruption (the agent stopping, Ctrl-C) ended before "
            "every case had run (query C), which are neither failures nor cases not run. Skips by reason class are "
            "in the next panel; every reason in full is in the history and the agent's log.",
            [Q(f"sum by ({q.by(*self.dev, c.WORKLOAD, c.STATUS)}) ("
               f"{q.increase(q.sel(runs, status=q.statuses(*c.FAILURE_STATUSES)))})",
               self.dev_legend(c.WORKLOAD, c.STATUS, text="(failure)"), name="failures", may_be_empty=NO_FAILURE),
             Q(f"sum by ({q.by(*self.dev, c.WORKLOAD, c.STATUS)}) ("
               f"{q.increase(q.sel(runs, status=q.statuses(*c.NOT_RUN_STATUSES)))})",
               self.dev_legend(c.WORKLOAD, c.STATUS, text="(not run)"), name="not run", may_be_empty=ALL_RAN),
             Q(f"sum by ({q.by(*self.dev, c.SUITE)}) ({q.increase(q.sel(c.SUITE_INTERRUPTIONS))})",
               self.dev_legend(c.SUITE, text="interrupted"), name="interrupted", may_be_empty=NO_INTERRUPTION)],
            "none", bars=True, stack=True, w=12)
        run_table = gf.table(
            "Runs in the time range, by status", "Cases recorded within the time range per device, workload and "
            "status.", [Q(f"sum by ({q.by(*self.dev, c.WORKLOAD, c.STATUS)}) ({q.increase(q.sel(runs), RANGE)})",
                          name="runs")], "none", w=12, h=9, hide=self.hidden(), sort_by="runs", descending=True)
        skip_reasons = gf.timeseries(
            "Skips by reason", "Cases skipped per interval, per device, workload and reason class: busy_process "
            "(another process on the GPU), busy_utilization (the GPU's utilization above the guard's threshold), "
            "process_list_unavailable (NVML could not list the GPU's processes: the guard fails closed), mig (a GPU "
            "in MIG mode), other. The full reason is in the history and the agent's log.",
            [Q(f"sum by ({q.by(*self.dev, c.WORKLOAD, c.SKIP_REASON)}) ({q.increase(q.sel(c.WORKLOAD_SKIPS))})",
               self.dev_legend(c.WORKLOAD, c.SKIP_REASON))], "none", bars=True, stack=True, w=12,
            may_be_empty="no case was skipped since the agent started")
        durations = gf.table(
            "Mean case duration since the agent started", "Mean wall time of one case (one shape, precision and "
            "pass, from its start to its result) per device, workload and status, over the cases recorded since the "
            "agent started: the time each workload takes out of the schedule.",
            [Q(f"max by ({q.by(*self.dev, c.WORKLOAD, c.STATUS)}) ({q.sel(c.WORKLOAD_CASE_SECONDS)})", name="mean")],
            "s", w=12, h=9, hide=self.hidden(), sort_by="mean", descending=True)
        cadence = gf.table(
            "Time since each workload last ran", "Per device and workload, how long ago its newest ok run ended "
            "(query A: every workload, whether its suite exports every shape or only its summaries), and the cases "
            "recorded within the time range, of any status (query B): the schedule at work (the default quick suite "
            "runs every 15 minutes). A workload whose cases all fail has cases in the range and an old last ok run; "
            "its statuses are in Runs in the time range, by status.",
            [Q(f"time() - max by ({q.by(*self.dev, c.WORKLOAD)}) ({q.sel(c.WORKLOAD_LAST_SUCCESS)})",
               name="since the last ok run", unit="s"),
             Q(f"sum by ({q.by(*self.dev, c.WORKLOAD)}) ({q.increase(q.sel(runs), RANGE)})",
               name="cases in the time range", unit="none")],
            "s", w=12, h=9, hide=self.hidden(), sort_by="since the last ok run", descending=True)
        suites = self.suite_progress()
        history = [
            gf.state_timeline("History writable", "Whether the last write to the history database succeeded.",
                              [Q(f"max by ({hosts}) ({q.sel(c.HISTORY_UP)})", q.legend(c.HOSTNAME))],
                              mappings=[{"type": "value", "options": {
                                  "0": {"text": "failing", "color": "red", "index": 0},
                                  "1": {"text": "ok", "color": "green", "index": 1}}}], w=8),
            gf.timeseries("Results waiting to be written", "Results recorded but not yet written to the history "
                          "database (kept in memory and in the spool file).",
                          [Q(f"max by ({hosts}) ({q.sel(c.HISTORY_PENDING)})", q.legend(c.HOSTNAME))], "none", w=8),
            gf.timeseries("History write errors", "Failed history writes per interval, by reason (locked, disk_full, "
                          "read_only, corrupt, io, other, dropped). A corrupt history found at the agent's start "
                          "is counted before the first scrape and may not show here: SixdimHistoryDataLoss "
                          "catches it.",
                          [Q(f"sum by ({hosts}, reason) ({q.increase(q.sel(c.HISTORY_WRITE_ERRORS))})",
                             q.legend(c.HOSTNAME, "reason"))], "none", w=8, bars=True),
            gf.state_timeline("History restored", "Whether the agent's results, run counters and regression verdicts "
                              "cover its history. After a start it answers at once and restores them in the "
                              "background (restoring: seconds on a large history); a series or counter missing "
                              "meanwhile is not yet restored, not gone or reset.",
                              [Q(f"min by ({hosts}) ({q.sel(c.HISTORY_RESTORED)})", q.legend(c.HOSTNAME))],
                              mappings=[{"type": "value", "options": {
                                  "0": {"text": "restoring", "color": "blue", "index": 0},
                                  "1": {"text": "restored", "color": "green", "index": 1}}}], w=8),
            gf.state_timeline("Configuration reload", "Whether the agent's last configuration reload (SIGHUP) "
                              "succeeded; failing: it still runs the configuration it had, and the file on disk is "
                              "the broken one (see the agent's log).",
                              [Q(f"max by ({hosts}) ({q.sel(c.CONFIG_RELOAD_SUCCESS)})", q.legend(c.HOSTNAME))],
                              mappings=[{"type": "value", "options": {
                                  "0": {"text": "failed", "color": "red", "index": 0},
                                  "1": {"text": "ok", "color": "green", "index": 1}}}], w=12),
            gf.timeseries("Age of the running configuration", "Time since the agent last loaded its configuration "
                          "successfully: its start, or its last good reload.",
                          [Q(f"time() - max by ({hosts}) ({q.sel(c.CONFIG_LAST_RELOAD)})", q.legend(c.HOSTNAME))],
                          "s", w=12),
        ]
        collectors = [
            gf.state_timeline("Telemetry collectors", "Whether each collector (nvml, host) works on the host.",
                              [Q(f"max by ({hosts}, collector) ({q.sel(c.COLLECTOR_UP)})",
                                 q.legend(c.HOSTNAME, "collector"))], mappings=_MAPPING_UP, w=12),
            gf.table("Collectors now, with the reason", "Each collector's state and, when it is unavailable, why.",
                     [Q(q.sel(c.COLLECTOR_UP), name="state")], "none", w=12, h=8, hide=self.hidden(),
                     mappings=_MAPPING_UP, cell="color-text"),
            gf.timeseries("Host CPU utilization", "The host's CPU utilization (all processes).",
                          [Q(q.sel(c.HOST_CPU), q.legend(c.HOSTNAME))], "percentunit", w=8),
            gf.timeseries("Host memory", "The host's memory in use and installed.",
                          [Q(q.sel(c.HOST_MEMORY_USED), q.legend(c.HOSTNAME, text="used"), name="used"),
                           Q(q.sel(c.HOST_MEMORY_TOTAL), q.legend(c.HOSTNAME, text="installed"), name="installed")],
                          "bytes", w=8),
            gf.timeseries("CPU package power (RAPL)", "CPU package power from the RAPL energy counters.",
                          [Q(f"sum by ({hosts}) ({q.rate(q.sel(c.HOST_RAPL_ENERGY))})", q.legend(c.HOSTNAME))],
                          "watt", w=8, may_be_empty=RAPL),
            gf.timeseries("Host load average", "The host's load average over 1, 5 and 15 minutes (runnable and "
                          "uninterruptible processes, all of the host's): a load above the CPUs the agent may use "
                          "slows CPU workloads and launch-bound GPU ones, and is the host_load cause of a regression.",
                          [Q(f"max by ({hosts}, period) ({q.sel(c.HOST_LOAD)})", q.legend(c.HOSTNAME, "period"))],
                          "none", w=24),
        ]
        rows = [Row("The agent process", agent), Row(SUITES_ROW, suites), Row(COST_ROW, self.suite_costs()),
                Row("Runs", [statuses, skips, skip_reasons, durations, run_table, cadence]), Row("History", history),
                Row("Collectors and host", collectors)]
        return self.dashboard(
            AGENT, "sixdim / Agent health",
            "Is the agent healthy: scraped, running its suites, writing its history, its collectors working, and "
            "its own memory and CPU; and what its benchmarks cost each device, in time and energy.", rows,
            time_from="now-24h", refresh="1m", verdict_annotations=False)


def dashboards(options: Options | None = None) -> dict[str, dict[str, Any]]:
    """Every dashboard's JSON data, by file name (``<uid>.json``), in a fixed order."""
    options = options or Options()
    build, agents = _Dashboards(options), _Dashboards(options, targets=True)
    made = [build.fleet(), build.gpu_detail(), build.versions(), build.scaling(), build.correctness(), agents.agent()]
    return {f"{board['uid']}.json": board for board in made}
