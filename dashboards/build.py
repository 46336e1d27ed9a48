"""The six sixdim dashboards, generated with grafanalib from the metric catalog.

``dashboards(Options())`` gives each dashboard's JSON data by file name; ``sixdim dashboards --out
DIR`` writes them (dashboards/command.py) and the copies generated with the defaults are committed
in dashboards/json/.  What each dashboard answers and how to install it: docs/DASHBOARDS.md.

Every dashboard has the same variables (datasource; hostname, model, GPU, workload and precision, each
read from a series every host exports, a CPU-only one included), the same links to the others, and
panels whose descriptions start with a marker when they can legitimately be empty on a host running
the default configuration (``GPU-only: ...``, ``May be empty: ...``; see dashboards/queries.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grafanalib import core as G

from sixdim.core import catalog, conditions
from sixdim.core.catalog import grafana_unit as u  # a figure's unit in Grafana, from the catalog's FIGURES
from sixdim.dashboards import grafana as gf
from sixdim.dashboards.grafana import Q, Row
from sixdim.dashboards.promql import (
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
    UP,
    WORKLOAD_VAR,
    PromQL,
    quote,
)
from sixdim.monitoring import recording
from sixdim.monitoring.options import Options
from sixdim.monitoring.promql import REGRESSION

TAG = "sixdim"

FLEET, GPU_DETAIL, VERSIONS, SCALING, CORRECTNESS, AGENT = (
    "sixdim-fleet", "sixdim-gpu", "sixdim-versions", "sixdim-scaling", "sixdim-correctness", "sixdim-agent")
UIDS = (FLEET, GPU_DETAIL, VERSIONS, SCALING, CORRECTNESS, AGENT)
"""The dashboards' fixed uids, which are also their file names (``<uid>.json``)."""

VERSION_POINTS = 500
"""The Versions tables read each series at most this many times over the time range (a subquery at
``$__interval``, which Grafana sizes to the range over the panel's maxDataPoints): a month of a large
fleet stays within Prometheus's sample limit, where the raw samples of the range would not."""

CHANGE_WINDOW = "30m"
"""How long a version-change annotation lasts after the first result under the new versions."""

# Why a panel (or one of its queries) may have no data on a host that runs the default configuration.
GPU_TELEMETRY = "live NVML telemetry, exported only by a host with a GPU; empty on a CPU host"
GPU_HEALTH = ("NVML health and settings, exported only by a host with a GPU and only where its GPU answers "
              "(no row remapping before Ampere, no NVLink on most PCIe cards, no ECC counts while ECC is off); "
              "empty on a CPU host")
CLOCK_EVENTS = "NVML clock-event reasons, read only on a GPU; empty on a CPU host"
GPU_MEMORY = "torch's CUDA allocator and NVML's device memory exist only on a GPU; empty on a CPU host"
GPU_INFO = f"{catalog.GPU_INFO.name} describes GPUs; empty on a CPU host"
PEERS_ON_HOST = "needs two GPUs of one model on a host; empty on a CPU host"
ENERGY = "needs an energy counter: a GPU's, or RAPL on a CPU host, and a suite exported per shape"
RAPL = "needs RAPL (powercap) energy counters the agent can read"
PEAK = "only for GPUs in the published peak table (agent/core/peaks.toml), never for a CPU"
MODELS = ("samples/s comes from the model, convergence, linearity and training-command workloads (the training "
          "suite), not from the default quick suite")
MODELS_PER_SHAPE = ("the model, convergence and training-command workloads, exported per shape only by a suite "
                    "with export = \"shapes\" (not the default quick suite)")
TRAINING = ("the convergence and training-command workloads, exported per shape only by a suite with "
            "export = \"shapes\" (not the default quick suite)")
LINEARITY = ("the linearity workload (training suite), exported per shape only by a suite with "
             "export = \"shapes\" (not the default quick suite)")
INFERENCE = "latency percentiles come from the inference suite and MLPerf Inference logs, not the quick suite"
NO_REGRESSION = "nothing is suspicious or regressed"
NO_CHANGE = "no driver, CUDA, cuDNN, NCCL, torch or VBIOS change among the series' recent runs"
BASELINE = "a series has a baseline only after 10 runs (2.5 hours of the default quick suite)"
NO_INCORRECT = "no incorrect result was ever recorded on these devices (the series appears with the first)"
ALL_OK = "every run in the range was ok"
NO_GPU_VALUES = "a CPU host has no GPU: its gpu label is empty, which All (.*) matches"

HEALTH_ROW = "GPU health"
"""The GPU detail dashboard's row of NVML health and settings (and the throttling of the results)."""
CAUSES_TITLE = "Likely causes of open regressions"
"""The table of the likely causes (catalog.REGRESSION_CAUSE) on the fleet overview and the GPU detail."""

ANNOTATION_MAY_BE_EMPTY = {
    "Software versions changed": "a host's driver, CUDA runtime or torch changed within the time range",
    "Version-change verdicts": "a verdict on a software change appeared or changed within the time range",
}
"""Annotations are events: each may be empty, and says when it is not (dashboards/queries.py)."""


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

_HIDDEN = ("__name__", catalog.UUID, catalog.PCI_BUS_ID) + TARGET_LABELS


class _Dashboards:
    def __init__(self, options: Options) -> None:
        options.validate()
        self.o = options
        self.q = PromQL(options.dcgm_label_names, options.cluster_label)
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
        return self.dev_legend(catalog.WORKLOAD, catalog.PRECISION, catalog.SHAPE, catalog.PASS, *more)

    def gpu_legend(self, *more: str) -> str:
        """Live GPU telemetry has no device type: ``host GPU 3``."""
        q = self.q
        return " ".join([f"{{{{{q.lab(catalog.HOSTNAME)}}}}} GPU {{{{{catalog.GPU}}}}}", q.legend(*more)]).strip()

    def gpu_link(self) -> list[dict[str, Any]]:
        """From a row of a table to the GPU detail dashboard of that host and GPU."""
        h, g = self.q.lab(catalog.HOSTNAME), catalog.GPU
        return [{"title": "GPU detail", "targetBlank": False,
                 "url": f"/d/{GPU_DETAIL}/?${{__url_time_range}}&${{datasource:queryparam}}"
                        f"&var-{HOST_VAR.name}=${{__data.fields.{h}}}&var-{GPU_VAR.name}=${{__data.fields.{g}}}"}]

    def hidden(self) -> tuple[str, ...]:
        return _HIDDEN

    # --- variables
    def variables(self) -> list[G.Template]:
        q = self.q
        runs, shapes, build = catalog.WORKLOAD_RUNS, catalog.SUMMARY_SHAPES, catalog.BUILD_INFO
        f = lambda metric, *keep: q.sel(metric, skip=[v.label for v in (  # noqa: E731
            HOST_VAR, MODEL_VAR, GPU_VAR, WORKLOAD_VAR, PRECISION_VAR) if v.label not in keep])
        return [gf.datasource_variable()] + [v.template() for v in (
            gf.Variable(HOST_VAR.name, q.lab(catalog.HOSTNAME), "Host", build.name,
                        f"Hosts with a sixdim agent ({build.name}: every agent from its start)."),
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
            gf.stat("Failed or timed out", "Runs (cases) that failed or timed out within the time range.",
                    [Q(f"sum({q.increase(q.sel(runs, status=q.statuses('failed', 'timeout')), RANGE)}) or vector(0)",
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
            "memory, accuracy, linearity and stability. A blank cell is a figure the workload does not have. "
            "Click a row for its GPU detail.",
            [Q(q.geomean(by, q.sel(c.SUMMARY_FLOPS)), name="FLOP/s", unit=u(c.SUMMARY_FLOPS)),
             Q(q.geomean(by, q.sel(c.SUMMARY_SAMPLES)), name="samples/s",
               unit=u(c.SUMMARY_SAMPLES), may_be_empty=MODELS),
             Q(q.geomean(by, q.sel(c.SUMMARY_BANDWIDTH)), name="bytes/s", unit=u(c.SUMMARY_BANDWIDTH)),
             Q(q.geomean(by, q.sel(c.SUMMARY_PEAK_RATIO)), name="of peak",
               unit=u(c.SUMMARY_PEAK_RATIO), may_be_empty=PEAK),
             Q(f"avg by ({q.by(*by)}) ({q.sel(c.WORKLOAD_POWER)})", name="power",
               unit=u(c.WORKLOAD_POWER), may_be_empty=ENERGY),
             Q(f"max by ({q.by(*by)}) ({q.sel(c.WORKLOAD_MEMORY)})", name="peak memory", unit=u(c.WORKLOAD_MEMORY)),
             Q(f"max by ({q.by(*by)}) ({q.sel(c.WORKLOAD_ACCURACY)})", name="accuracy", unit=u(c.WORKLOAD_ACCURACY),
               may_be_empty=TRAINING),
             Q(f"min by ({q.by(*by)}) ({q.sel(c.WORKLOAD_LINEARITY)})", name="linearity", unit=u(c.WORKLOAD_LINEARITY),
               may_be_empty=LINEARITY),
             Q(f"min by ({q.by(*by)}) ({q.sel(c.WORKLOAD_STABILITY)})", name="stability", unit=u(c.WORKLOAD_STABILITY),
               may_be_empty=TRAINING)],
            "none", h=10, links=self.gpu_link(), hide=self.hidden(), sort_by=q.lab(c.HOSTNAME))
        verdict_labels = self.dev + (c.WORKLOAD, c.PRECISION, c.SHAPE, c.MODE, c.PASS, c.FIGURE) + c.VERSION_LABELS
        open_state = f"{q.sel(state)} >= {STATES['suspicious']}"
        regressions = gf.table(
            "Open regressions and suspicious series",
            "Every figure of a result series whose verdict is suspicious or regression now, with its current value "
            "over its baseline (above 1 is worse for time, power and memory; below 1 for rates, efficiency and "
            "accuracy). See docs/REGRESSIONS.md.",
            [Q(f"max by ({q.by(*verdict_labels)}) ({open_state})", name="verdict"),
             Q(f"max by ({q.by(*verdict_labels)}) ({q.sel(c.REGRESSION_RATIO)} and on ({q.result_key()}, "
               f"{c.FIGURE}) ({open_state}))", name="ratio to baseline", unit="percentunit", may_be_empty=BASELINE)],
            "none", w=24, h=8, may_be_empty=NO_REGRESSION, hide=self.hidden(), mappings=_MAPPING_STATES,
            links=self.gpu_link(), sort_by="verdict", descending=True)
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
        not_ok = gf.timeseries(
            "Runs not ok, by status",
            "Cases that failed, timed out, were skipped (a busy GPU, MIG), unsupported (a precision the device "
            "lacks) or incorrect, per interval. Their reasons are in the history (sixdim run --json, the agent's "
            "log); the counter has no reason label.",
            [Q(f"sum by ({q.by(*self.dev, c.WORKLOAD, c.STATUS)}) "
               f"({q.increase(q.sel(runs, status=('!=', 'ok')))})", self.dev_legend(c.WORKLOAD, c.STATUS))],
            "none", bars=True, stack=True, w=12)
        not_ok_table = gf.table(
            "Runs not ok in the time range",
            "Cases per device, workload and status that were not ok within the time range.",
            [Q(f"sum by ({q.by(*self.dev, c.WORKLOAD, c.STATUS)}) "
               f"({q.increase(q.sel(runs, status=('!=', 'ok')), RANGE)}) > 0", name="runs")],
            "none", w=12, h=8, may_be_empty=ALL_OK, hide=self.hidden(), sort_by="runs", descending=True,
            links=self.gpu_link())
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
            Row("What changed: verdicts now open", [regressions, self.causes_table(), changes]),
            Row("Outliers among peers", [slowest, on_host]),
            Row("Runs that did not succeed", [not_ok, not_ok_table, stale_table]),
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
                          gpu_only=CLOCK_EVENTS),
        ]

    # ------------------------------------------------------------------------- GPU detail
    def gpu_detail(self) -> dict[str, Any]:
        q, c = self.q, catalog
        per_shape = lambda metric: q.without_versions(q.sel(metric))  # noqa: E731
        leg = self.shape_legend()
        speed = [
            gf.timeseries("FLOP/s per shape", "Achieved floating-point operations per second of each shape (integer "
                          "OP/s for int8): a step at each run.", [Q(per_shape(c.WORKLOAD_FLOPS), leg)],
                          u(c.WORKLOAD_FLOPS),
                          results=True),
            gf.timeseries("Samples/s per shape", "Training or inference throughput of the models (DeepSpark speed).",
                          [Q(per_shape(c.WORKLOAD_SAMPLES), leg)], u(c.WORKLOAD_SAMPLES), results=True,
                          may_be_empty=MODELS_PER_SHAPE),
            gf.timeseries("Time per operation", "Time of one operation of each shape (DeepSpark rule: mean of the "
                          "middle 3 of 5 rounds); launch latency included.", [Q(per_shape(c.WORKLOAD_SECONDS), leg)],
                          "s", results=True, log=True),
            gf.timeseries("Bytes per second", "Copy bandwidth, and the algorithm bandwidth of all-reduce.",
                          [Q(per_shape(c.WORKLOAD_BANDWIDTH), leg)], u(c.WORKLOAD_BANDWIDTH), results=True),
            gf.timeseries("Fraction of the published peak", "Achieved FLOP/s (or bytes/s) over the GPU's published "
                          "dense peak for the precision.", [Q(per_shape(c.WORKLOAD_PEAK_RATIO), leg)],
                          u(c.WORKLOAD_PEAK_RATIO),
                          results=True, may_be_empty=PEAK),
            gf.timeseries("Inference latency, p50, p90 and p99",
                          "Latency percentiles of single synchronized calls (p90: the onnx workload only).",
                          [Q(per_shape(c.WORKLOAD_LATENCY_P50), self.shape_legend() + " p50"),
                           Q(per_shape(c.WORKLOAD_LATENCY_P90), self.shape_legend() + " p90"),
                           Q(per_shape(c.WORKLOAD_LATENCY_P99), self.shape_legend() + " p99")], "s", results=True,
                          may_be_empty=INFERENCE),
        ]
        power = [
            gf.timeseries("Power during the measurement", "Average device power over each case's power phase (3 s "
                          "of back-to-back work), from the energy counter.", [Q(per_shape(c.WORKLOAD_POWER), leg)],
                          "watt", results=True, may_be_empty=ENERGY),
            gf.timeseries("Energy of the power phase", "Device energy consumed over each case's power phase.",
                          [Q(per_shape(c.WORKLOAD_ENERGY), leg)],
                          u(c.WORKLOAD_ENERGY), results=True, may_be_empty=ENERGY),
            gf.timeseries("Work per joule", "Floating-point operations per joule (kernels) and samples per joule "
                          "(models), over the power phase.",
                          [Q(per_shape(c.WORKLOAD_FLOP_PER_JOULE), leg, name="FLOP/J",
                             unit=u(c.WORKLOAD_FLOP_PER_JOULE)),
                           Q(per_shape(c.WORKLOAD_SAMPLES_PER_JOULE), leg, name="samples/J",
                             unit=u(c.WORKLOAD_SAMPLES_PER_JOULE),
                             may_be_empty=MODELS_PER_SHAPE)], "si:FLOP/J", results=True, may_be_empty=ENERGY),
            gf.timeseries("Live GPU power", "GPU power draw now, read by the agent at each scrape (a level in watts, "
                          "never summed over the time range).", [Q(q.sel(c.GPU_POWER), self.gpu_legend())], "watt",
                          gpu_only=GPU_TELEMETRY),
        ]
        memory = [
            gf.timeseries("Peak memory of the workload", "torch's allocator peak of each case on a GPU (no CUDA "
                          "context, nothing of earlier cases); the worker's peak resident memory on a CPU.",
                          [Q(per_shape(c.WORKLOAD_MEMORY), leg)], u(c.WORKLOAD_MEMORY), results=True),
            gf.timeseries("Reserved and device-wide memory", "Peak memory torch's caching allocator reserved, and "
                          "peak device-wide memory in use as NVML sees it (CUDA context and other processes included).",
                          [Q(per_shape(c.WORKLOAD_MEMORY_RESERVED), leg + " reserved", name="reserved"),
                           Q(per_shape(c.WORKLOAD_DEVICE_MEMORY), leg + " device", name="device-wide")], "bytes",
                          results=True, gpu_only=GPU_MEMORY),
            gf.timeseries("Live GPU memory", "GPU memory in use and installed, now.",
                          [Q(q.sel(c.GPU_MEMORY_USED), self.gpu_legend() + " used", name="used"),
                           Q(q.sel(c.GPU_MEMORY_TOTAL), self.gpu_legend() + " installed", name="installed")],
                          "bytes", gpu_only=GPU_TELEMETRY),
        ]
        by_case = self.dev + (c.WORKLOAD, c.PRECISION)
        limits = [
            gf.timeseries("Clock during the measurement", "Average SM clock over each case's measured window (the "
                          "core clock on a CPU).", [Q(per_shape(c.WORKLOAD_SM_CLOCK), leg)],
                          u(c.WORKLOAD_SM_CLOCK), results=True),
            gf.timeseries("Live SM and memory clocks", "GPU clocks now.",
                          [Q(q.sel(c.GPU_SM_CLOCK), self.gpu_legend() + " SM", name="SM"),
                           Q(q.sel(c.GPU_MEMORY_CLOCK), self.gpu_legend() + " memory", name="memory")], "hertz",
                          gpu_only=GPU_TELEMETRY),
            gf.state_timeline("Clock limits during the measurements", "Whether the power cap (normal for large "
                              "kernels on SXM GPUs), a thermal slowdown or a hardware or power-brake slowdown held the "
                              "clocks down during any case of the workload and precision.",
                              [Q(f"max by ({q.by(*by_case)}) ({q.sel(c.WORKLOAD_POWER_CAPPED)})",
                                 self.dev_legend(c.WORKLOAD, c.PRECISION, text="power cap"), name="power cap"),
                               Q(f"max by ({q.by(*by_case)}) ({q.sel(c.WORKLOAD_THERMAL_SLOWDOWN)})",
                                 self.dev_legend(c.WORKLOAD, c.PRECISION, text="thermal"), name="thermal"),
                               Q(f"max by ({q.by(*by_case)}) ({q.sel(c.WORKLOAD_HARDWARE_SLOWDOWN)})",
                                 self.dev_legend(c.WORKLOAD, c.PRECISION, text="hardware"), name="hardware")],
                              mappings=_MAPPING_YES_NO, gpu_only=CLOCK_EVENTS, w=12),
            gf.state_timeline("Live clock throttle reasons", "Clock-event (throttle) reasons active now, per GPU.",
                              [Q(f"max by ({q.by(c.HOSTNAME, c.GPU, 'reason')}) ({q.sel(c.GPU_THROTTLE)})",
                                 self.gpu_legend("reason"))],
                              mappings=_MAPPING_YES_NO, gpu_only=GPU_TELEMETRY, w=12),
            gf.timeseries("GPU temperature", "GPU core temperature now.",
                          [Q(q.sel(c.GPU_TEMPERATURE), self.gpu_legend())], "celsius", gpu_only=GPU_TELEMETRY),
            gf.timeseries("GPU utilization", "Fraction of time a kernel ran on the GPU: sixdim's own runs, or "
                          "someone else's work the idle guard would skip a run for.",
                          [Q(q.sel(c.GPU_UTILIZATION), self.gpu_legend())], "percentunit", gpu_only=GPU_TELEMETRY),
        ]
        verdicts = [
            gf.state_timeline("Regression verdict per workload and precision", "The worst verdict over the shapes "
                              "and figures of each workload and precision: improvement, ok, insufficient_data, "
                              "suspicious, regression.",
                              [Q(f"max by ({q.by(*by_case)}) ({q.sel(c.REGRESSION_STATE)})",
                                 self.dev_legend(c.WORKLOAD, c.PRECISION))], mappings=_MAPPING_STATES, w=24),
            self.causes_table(),
            gf.heatmap("Ratio to baseline, every watched figure", "How the figures of all the series selected stand "
                       "against their baselines over time (1 = at the baseline).",
                       [Q(q.sel(c.REGRESSION_RATIO), self.shape_legend(c.FIGURE))], "percentunit",
                       may_be_empty=BASELINE),
            gf.timeseries("Spread of the timed rounds", "Interquartile range over the median of each case's timed "
                          "rounds: a noisy measurement is a weak one.", [Q(per_shape(c.WORKLOAD_SPREAD), leg)],
                          "percentunit", results=True),
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
                   may_be_empty: str | None, what: str) -> gf.PanelSpec:
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
            [Q(expr)], unit, w=8, h=9, may_be_empty=may_be_empty, merge=False, max_points=VERSION_POINTS,
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
            self.by_version(f"Power by {name}", c.WORKLOAD_POWER, version, u(c.WORKLOAD_POWER), ENERGY, "Power")
            for version, name in versions] + [
            self.by_version(f"FLOP per joule by {name}", c.WORKLOAD_FLOP_PER_JOULE, version,
                            u(c.WORKLOAD_FLOP_PER_JOULE), ENERGY, "FLOP/J") for version, name in versions],
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
        return self.dashboard(
            VERSIONS, "sixdim / Versions",
            "The same figures grouped by driver, by CUDA and by torch version, side by side: the view across driver "
            "and SDK versions, and the verdicts on the latest change of each series.", rows,
            time_from="now-30d", refresh="15m")

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
                          results=True, may_be_empty=LINEARITY),
            gf.bargauge("Linearity now", "The latest linearity of each device, workload and card or node count.",
                        [Q(per_shape(c.WORKLOAD_LINEARITY), self.shape_legend() + " x{{count}}")],
                        u(c.WORKLOAD_LINEARITY),
                        minimum=0, maximum=1, thresholds=((None, "red"), (0.8, "yellow"), (0.9, "green")),
                        may_be_empty=LINEARITY),
        ]
        leg = self.shape_legend()
        allreduce = [
            gf.timeseries("All-reduce bus bandwidth per size", "nccl-tests' bus bandwidth (algbw x 2(n-1)/n) of each "
                          "message size and rank count (gloo on a CPU host).", [Q(q.without_versions(bus), leg)],
                          "Bps", results=True),
            gf.bargauge("All-reduce bus bandwidth now", "The latest bus bandwidth of each message size.",
                        [Q(q.without_versions(bus), leg)], "Bps"),
            gf.timeseries("All-reduce algorithm bandwidth", "Bytes over time of each all-reduce (algbw).",
                          [Q(q.without_versions(f"{q.sel(c.WORKLOAD_BANDWIDTH)} and on ({key}) {bus}"), leg)], "Bps",
                          results=True),
            gf.timeseries("All-reduce time per size", "Time of one all-reduce of each message size.",
                          [Q(q.without_versions(f"{q.sel(c.WORKLOAD_SECONDS)} and on ({key}) {bus}"), leg)], "s",
                          results=True, log=True),
        ]
        copies = f"{q.sel(c.WORKLOAD_BANDWIDTH)} unless on ({key}) {bus}"
        memory = [
            gf.timeseries("Copy bandwidth", "Device-to-device, host-to-device and device-to-host copies (a CPU "
                          "host copies in memory only).", [Q(q.without_versions(copies), leg)], "Bps", results=True),
            gf.timeseries("Copy bandwidth, fraction of the published peak", "Device-to-device copy bandwidth over "
                          "the GPU's published memory bandwidth.",
                          [Q(q.without_versions(f"{q.sel(c.WORKLOAD_PEAK_RATIO)} and on ({key}) ({copies})"), leg)],
                          "percentunit", results=True, may_be_empty=PEAK),
            gf.timeseries("Speed against the other GPUs of the host, per shape", f"{c.PEER_RATIO.name}: each result's "
                          "speed over the median of the same result on the GPUs of the same model on its host.",
                          [Q(q.sel(c.PEER_RATIO), self.shape_legend(c.FIGURE))], "percentunit", w=24, results=True,
                          gpu_only=PEERS_ON_HOST),
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
                          [Q(per_shape(c.WORKLOAD_ERROR), leg)], u(c.WORKLOAD_ERROR), log=True, results=True),
            gf.table("Largest relative error now", "Per device, workload and precision, the largest relative error "
                     "among the latest results of its shapes.",
                     [Q(f"max by ({q.by(*self.dev, c.WORKLOAD, c.PRECISION)}) ({q.sel(c.WORKLOAD_ERROR)})",
                        name="max relative error")], "sci", w=12, h=8, hide=self.hidden(),
                     sort_by="max relative error", descending=True),
        ]
        stability = [
            gf.timeseries("Spread of the timed rounds", "Interquartile range over the median of each case's timed "
                          "rounds.", [Q(per_shape(c.WORKLOAD_SPREAD), leg)], u(c.WORKLOAD_SPREAD), results=True),
            gf.heatmap("Spread of the timed rounds, all series", "How many series have each spread, over time: a "
                       "band moving up is a noisier machine.", [Q(q.sel(c.WORKLOAD_SPREAD), leg)], "percentunit",
                       log=True),
            gf.timeseries("Stability over complete runs", "DeepSpark stability: 1 minus 0.2 per complete run "
                          "outside 1% of the median.", [Q(per_shape(c.WORKLOAD_STABILITY), leg)],
                          u(c.WORKLOAD_STABILITY),
                          results=True, may_be_empty=TRAINING),
        ]
        accuracy = [
            gf.timeseries("Accuracy reached", "Accuracy at convergence (the runs' median), or a training command's "
                          "final evaluation when it is a ratio.", [Q(per_shape(c.WORKLOAD_ACCURACY), leg)],
                          "percentunit", results=True, may_be_empty=TRAINING),
            gf.timeseries("Quality metrics of training runs", "Final value of each quality metric (top-1, WER, loss, "
                          "FID, ...), with whether higher or lower is better.",
                          [Q(per_shape(c.WORKLOAD_QUALITY), self.shape_legend(c.QUALITY_METRIC, c.QUALITY_DIRECTION))],
                          "none", results=True, may_be_empty=TRAINING),
            gf.timeseries("Time to train", "AI-Rank Time2train: time from the start of training until the target "
                          "accuracy was reached (or MLPerf's run_stop - run_start).",
                          [Q(per_shape(c.WORKLOAD_TIME_TO_TRAIN), leg)],
                          u(c.WORKLOAD_TIME_TO_TRAIN), results=True, may_be_empty=TRAINING),
        ]
        rows = [Row("Correctness against float64", checks), Row("Stability", stability),
                Row("Accuracy and time to train", accuracy)]
        return self.dashboard(
            CORRECTNESS, "sixdim / Correctness and stability",
            "Correctness failures and errors against float64, the stability of the measurements and of training, "
            "accuracy and time to train.", rows, time_from="now-7d", refresh="5m")

    # ------------------------------------------------------------------------- agent health
    def agent(self) -> dict[str, Any]:
        q, c = self.q, catalog
        runs, build = c.WORKLOAD_RUNS, c.BUILD_INFO
        host, hosts = q.lab(c.HOSTNAME), q.by(c.HOSTNAME)
        target = q.by(*TARGET_LABELS)
        scraped = (f"max by ({hosts}) ({UP} * on ({target}) group_left ({host}) "
                   f"{q.sel(recording.TARGET_HOSTNAME)})")
        agent = [
            gf.state_timeline("Agent scraped", "Whether Prometheus scrapes each agent (up), with the host name the "
                              "agent last reported, which the rules remember while it is down "
                              f"({recording.TARGET_HOSTNAME.name}, a recording rule: load the rules file in this "
                              "Prometheus).", [Q(scraped, q.legend(c.HOSTNAME))],
                              mappings=_MAPPING_UP, w=24, h=5),
            gf.timeseries("Agent resident memory", "The daemon's resident memory (the worker that runs benchmarks "
                          "is a separate process).",
                          [Q(f"max by ({hosts}) ({q.with_host(PROCESS_RESIDENT_MEMORY)})", q.legend(c.HOSTNAME))],
                          "bytes", w=8),
            gf.timeseries("Agent CPU", "CPU time the daemon uses per second (1 = one core).",
                          [Q(f"max by ({hosts}) ({q.with_host(q.rate(PROCESS_CPU_SECONDS))})", q.legend(c.HOSTNAME))],
                          "percentunit", w=8),
            gf.timeseries("Agent file descriptors", "Open file descriptors over the process limit.",
                          [Q(f"max by ({hosts}) ({q.with_host(f'{PROCESS_OPEN_FDS} / {PROCESS_MAX_FDS}')})",
                             q.legend(c.HOSTNAME))], "percentunit", w=8),
            gf.stat("Agent uptime", "Time since each daemon started.",
                    [Q(f"min by ({hosts}) (time() - {q.with_host(PROCESS_START_TIME)})", q.legend(c.HOSTNAME))], "s",
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
            "Skipped, unsupported and failed runs, by workload", "Why cases did not give a result: skipped (another "
            "process on the GPU, MIG, the agent stopping), unsupported (a precision or a second GPU the device "
            "lacks), failed or timed out. Skips by reason class are in the next panel; every reason in full is in the "
            "history and the agent's log.",
            [Q(f"sum by ({q.by(*self.dev, c.WORKLOAD, c.STATUS)}) ("
               f"{q.increase(q.sel(runs, status=q.statuses('skipped', 'unsupported', 'failed', 'timeout')))})",
               self.dev_legend(c.WORKLOAD, c.STATUS))], "none", bars=True, stack=True, w=12)
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
            "Time since each workload last ran", "How long ago the run of each exported result ended, per device and "
            "workload: the schedule at work (the default quick suite runs every 15 minutes).",
            [Q(f"time() - max by ({q.by(*self.dev, c.WORKLOAD)}) ({q.sel(c.WORKLOAD_LAST_RUN)})", name="since")],
            "s", w=12, h=9, hide=self.hidden(), sort_by="since", descending=True)
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
        ]
        rows = [Row("The agent process", agent),
                Row("Runs", [statuses, skips, skip_reasons, durations, run_table, cadence]), Row("History", history),
                Row("Collectors and host", collectors)]
        return self.dashboard(
            AGENT, "sixdim / Agent health",
            "Is the agent healthy: scraped, running its suites, writing its history, its collectors working, and "
            "its own memory and CPU.", rows, time_from="now-24h", refresh="1m", verdict_annotations=False)


def dashboards(options: Options | None = None) -> dict[str, dict[str, Any]]:
    """Every dashboard's JSON data, by file name (``<uid>.json``), in a fixed order."""
    build = _Dashboards(options or Options())
    made = [build.fleet(), build.gpu_detail(), build.versions(), build.scaling(), build.correctness(), build.agent()]
    return {f"{board['uid']}.json": board for board in made}
