"""The metric catalog: every metric sixdim exports, defined once.

The exporter renders these definitions; the dashboards and alert rules import
them, so a name or a label changes in exactly one place.

Label names follow NVIDIA dcgm-exporter where one exists (``gpu``, ``UUID``,
``pci_bus_id``) so that PromQL can join sixdim results with DCGM telemetry
``on(UUID)``.  Two of dcgm-exporter's names differ from the defaults: its host label
is ``Hostname`` (every release up to 4.5.3-4.8.2; its main branch renamed it
``hostname`` in May 2026, unreleased) and its model label ``modelName``, camelCase,
which ``promtool check metrics`` rejects.  sixdim exports ``hostname`` and
``model_name`` by default, and dcgm-exporter's exact names when the operator asks
for them (``--dcgm-label-names``, :data:`DCGM_LABEL_NAMES`): then
``on(Hostname, gpu)`` joins too, at the cost of the one lint warning on ``modelName``.

All values are in base units: seconds, bytes, watts, joules, hertz, FLOP/s, and
ratios (fractions in [0, 1] where the help says so; speedup, linearity, spread, peer and
regression ratios can exceed 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricKind = Literal["gauge", "counter", "info"]
"""Counters are named with their ``_total`` suffix, as PromQL sees them; info metrics end in ``_info``."""

# Label names.  The host and model labels are the names that depend on configuration (DCGM_LABEL_NAMES).
HOSTNAME = "hostname"
HOSTNAME_DCGM = "Hostname"
GPU = "gpu"
UUID = "UUID"
MODEL_NAME = "model_name"
MODEL_NAME_DCGM = "modelName"
PCI_BUS_ID = "pci_bus_id"
DEVICE_TYPE = "device_type"
WORKLOAD = "workload"
PRECISION = "precision"
SHAPE = "shape"
MODE = "mode"
PASS = "pass"
STATUS = "status"
SUITE = "suite"
DRIVER_VERSION = "driver_version"
CUDA_VERSION = "cuda_version"
TORCH_VERSION = "torch_version"
CUDNN_VERSION = "cudnn_version"
NCCL_VERSION = "nccl_version"

DEVICE_LABELS: tuple[str, ...] = (HOSTNAME, GPU, UUID, MODEL_NAME, PCI_BUS_ID, DEVICE_TYPE)
"""Which device a series describes (dcgm-exporter's join keys plus the device type)."""

WORKLOAD_LABELS: tuple[str, ...] = DEVICE_LABELS + (WORKLOAD, PRECISION, SHAPE, MODE, PASS)
"""Which measurement: the device plus the workload, its precision, shape, mode (training or
inference) and pass (forward, backward_data, backward_weight, ...)."""

VERSION_LABELS: tuple[str, ...] = (DRIVER_VERSION, CUDA_VERSION, CUDNN_VERSION, NCCL_VERSION, TORCH_VERSION)
"""The software a result was measured under, so a driver upgrade shows as a new series (and ``sixdim fleet``
can split a fleet by any of them).  cuDNN and NCCL are empty, so absent in Prometheus, on a CPU."""
VERSION_KEYS: dict[str, str] = {DRIVER_VERSION: "driver", CUDA_VERSION: "cuda_runtime", CUDNN_VERSION: "cudnn",
                                NCCL_VERSION: "nccl", TORCH_VERSION: "torch"}
"""Each version label's key in a run's ``environment`` (the components of ``sixdim.core.conditions``)."""

RESULT_LABELS: tuple[str, ...] = WORKLOAD_LABELS + VERSION_LABELS
"""A result series as judged: the measurement (whichever suite ran it: its shape names every parameter that
changes what is measured) and the versions of its newest run.  The verdicts' and peers' labels."""

SHAPE_RESULT_LABELS: tuple[str, ...] = WORKLOAD_LABELS + (SUITE,) + VERSION_LABELS
"""A per-shape result as exported: the measurement, the suite whose newest result it is, and its versions.
Two suites that run the same shape are two series, so neither's value stands in for the other's."""

SUMMARY_LABELS: tuple[str, ...] = DEVICE_LABELS + (SUITE, WORKLOAD, PRECISION, MODE, PASS) + VERSION_LABELS
"""A summary series: the device, the suite, and the workload's precision, mode and pass, over all the
suite's shapes (see agent/verdicts/summary.py), under one set of software versions."""

RUN_STATUSES: tuple[str, ...] = ("ok", "failed", "timeout", "skipped", "unsupported", "incorrect")
"""``unsupported``: the device lacks what the case needs (a precision, a second GPU).
``incorrect``: the output failed its check against a float64 reference: the worst regression."""

FAILURE_STATUSES: tuple[str, ...] = ("failed", "incorrect", "timeout")
"""The statuses that are failures: the case ran and something is wrong (it raised or its worker died, its
output failed its check, it outlasted its timeout).  Only these count against a run (``sixdim run``'s exit
code 1, the report's and the logs' failures)."""
NOT_RUN_STATUSES: tuple[str, ...] = ("unsupported", "skipped")
"""The statuses of cases that did not run, never failures: the device lacks what the case needs
(``unsupported``), or the case was not started on it (``skipped``: a busy GPU, MIG).  A case an interruption
stopped (a shutdown, Ctrl-C, the agent's death) has no status at all: its suite run's one interruption record
counts it (``sixdim.core.results.Interruption``)."""


# --- What each figure of a run means -----------------------------------------------------------
# A run's figures (``RunRecord.figures``) are defined here once, beside the metrics that export them:
# the verdicts, the summaries, the reports and the command line derive their tables from FIGURES.

UP = 1
"""A larger value is worse (time, power, memory)."""
DOWN = -1
"""A smaller value is worse (rates, efficiency, accuracy)."""


@dataclass(frozen=True)
class Figure:
    """One figure a run can report: how to name and print it, and how to judge it."""

    key: str
    """The key in ``RunRecord.figures`` (and a result metric's ``figure``)."""
    name: str
    """What a person reads: ``time``, ``FLOP/s``, ``latency p50``."""
    unit: str = ""
    """The unit printed after the number (``s``, ``FLOP/s``, ``B``); empty for ratios."""
    style: str = "si"
    """How a number prints: ``si`` (SI prefix), ``count`` (thousands separators), ``binary`` (KiB,
    MiB), ``watts``, ``percent``, ``ratio``."""
    worse: int = 0
    """:data:`UP` or :data:`DOWN`: which way is a regression (a verdict is kept); 0: never judged."""
    speed: int = 0
    """Rank as a series' speed figure, 1 first (its first reported one is its speed); 0: not a speed."""
    rate: bool = False
    """A rate of the work ``seconds`` times: where a run has it, ``seconds`` (its reciprocal) and
    ``peak_ratio`` (a constant times it) would give the same verdict again."""
    restates_rate: bool = False
    """No verdict of its own where the run has a rate (it restates that rate exactly)."""
    echoes_speed: bool = False
    """Left out of a series' change points when it has a rate: a shift of it repeats one of the
    speed's, or of power's, that the list already shows."""
    summarised: bool = False
    """In the suite summaries: the geometric mean over a suite's shapes."""
    grafana: str = "none"
    """Grafana's unit for a panel of it (``s``, ``flops``, ``Bps``, ``percentunit``, ``si:samples/s``)."""


FIGURES: tuple[Figure, ...] = (
    Figure("seconds", "time", "s", worse=UP, speed=4, restates_rate=True, summarised=True, grafana="s"),
    Figure("latency_p50_seconds", "latency p50", "s", worse=UP, echoes_speed=True, grafana="s"),
    Figure("latency_p99_seconds", "latency p99", "s", worse=UP, grafana="s"),
    Figure("time_to_train_seconds", "time to train", "s", worse=UP, grafana="s"),
    Figure("flops", "FLOP/s", "FLOP/s", worse=DOWN, speed=1, rate=True, summarised=True, grafana="flops"),
    Figure("samples_per_second", "samples/s", "samples/s", "count", worse=DOWN, speed=2, rate=True,
           summarised=True, grafana="si:samples/s"),
    Figure("bytes_per_second", "bytes/s", "B/s", worse=DOWN, speed=3, rate=True, summarised=True, grafana="Bps"),
    Figure("bus_bytes_per_second", "bus bytes/s", "B/s", worse=DOWN, grafana="Bps"),
    Figure("power_watts", "power", "W", "watts", worse=UP, grafana="watt"),
    Figure("flop_per_joule", "FLOP/J", "FLOP/J", worse=DOWN, echoes_speed=True, grafana="si:FLOP/J"),
    Figure("samples_per_joule", "samples/J", "samples/J", "count", worse=DOWN, echoes_speed=True,
           grafana="si:samples/J"),
    Figure("memory_bytes", "memory", "B", "binary", worse=UP, grafana="bytes"),
    Figure("accuracy", "accuracy", "", "percent", worse=DOWN, grafana="percentunit"),
    Figure("stability_ratio", "stability", "", "ratio", worse=DOWN, grafana="percentunit"),
    Figure("peak_ratio", "fraction of peak", "", "percent", worse=DOWN, restates_rate=True, summarised=True,
           grafana="percentunit"),
    Figure("linearity_ratio", "linearity", "", "ratio", grafana="percentunit"),
    Figure("linearity_count", "devices", "", "plain"),
    Figure("energy_joules", "energy", "J", grafana="joule"),
    Figure("device_memory_bytes", "device memory", "B", "binary", grafana="bytes"),
    Figure("memory_reserved_bytes", "memory reserved", "B", "binary", grafana="bytes"),
    Figure("latency_p90_seconds", "latency p90", "s", grafana="s"),
    Figure("tokens_per_second", "tokens/s", "tokens/s", "count", worse=DOWN, restates_rate=True, grafana="si:tokens/s"),
    Figure("seconds_iqr_ratio", "spread", "", "ratio", grafana="percentunit"),
    Figure("max_relative_error", "max relative error", "", "plain", grafana="sci"),
    Figure("speedup", "speedup", "", "ratio"),
    Figure("sm_clock_hertz", "SM clock", "Hz", grafana="hertz"),
    Figure("power_capped", "power capped", "", "plain"),
    Figure("thermal_slowdown", "thermal slowdown", "", "plain"),
    Figure("hardware_slowdown", "hardware slowdown", "", "plain"),
    Figure("quality", "quality", "", "plain"),
)
"""Every figure a run reports, in the order tables and verdicts list them.  A new figure is one entry
here and its metric below (``figure=`` its key); the workload that measures it puts it in its
figures.  tests/test_docs.py checks that every result metric's figure is here."""
FIGURES_BY_KEY: dict[str, Figure] = {f.key: f for f in FIGURES}

WATCHED: dict[str, int] = {f.key: f.worse for f in FIGURES if f.worse}
"""The figures that get a verdict, with the direction that is a regression.  Power is watched "for
the same work": a series key fixes workload, shape and precision, so it is."""
RATES: tuple[str, ...] = tuple(f.key for f in FIGURES if f.rate)
SPEED_FIGURES: tuple[str, ...] = tuple(f.key for f in sorted((f for f in FIGURES if f.speed), key=lambda f: f.speed))
"""A series' speed is the first of these it reports."""
SUMMARY_FIGURES: tuple[str, ...] = tuple(f.key for f in FIGURES if f.summarised)
RESTATING: tuple[str, ...] = tuple(f.key for f in FIGURES if f.restates_rate or f.echoes_speed)
"""Figures left out of a series' change points when it has a rate."""


def figure_unit(key: str, integer: bool = False) -> str:
    """A figure's unit; an integer precision's operations are OP, not FLOP."""
    unit = FIGURES_BY_KEY[key].unit if key in FIGURES_BY_KEY else ""
    return unit.replace("FLOP", "OP") if integer else unit


def grafana_unit(metric: MetricDef) -> str:
    """Grafana's unit for a panel of a metric's figure (``none`` where the metric has no figure)."""
    figure = FIGURES_BY_KEY.get(metric.figure or "")
    return figure.grafana if figure else "none"


def figure_name(key: str, integer: bool = False) -> str:
    """A figure's name as a person reads it (its key where it has none)."""
    name = FIGURES_BY_KEY[key].name if key in FIGURES_BY_KEY else key
    return name.replace("FLOP", "OP") if integer else name


# --- Verdict states ------------------------------------------------------------------------------

@dataclass(frozen=True)
class VerdictState:
    """A regression verdict's state: its name, its value in ``sixdim_regression_state`` (worse is
    larger, so ``== 3`` is a regression and ``>= 2`` deserves a look) and its Grafana colour."""

    name: str
    code: int
    colour: str


VERDICT_STATES: tuple[VerdictState, ...] = (
    VerdictState("improvement", -1, "blue"), VerdictState("ok", 0, "green"),
    VerdictState("insufficient_data", 1, "text"), VerdictState("suspicious", 2, "orange"),
    VerdictState("regression", 3, "red"))
STATE_CODES: dict[str, int] = {s.name: s.code for s in VERDICT_STATES}


@dataclass(frozen=True)
class MetricDef:
    """One exported metric: its full name, type, help text and label names."""

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...]
    figure: str | None = None
    """For workload results: the key in a run's ``figures`` that holds the value."""
    extra_labels: tuple[tuple[str, str], ...] = ()
    """(label, parameter) pairs: labels whose values come from the run's parameters (linearity's ``count``)."""
    figure_labels: tuple[str, ...] = ()
    """Labels whose values are part of the figure's key, for a metric a run reports several times:
    the figure ``quality:FID:lower_is_better`` is ``figure`` ``quality`` with ``metric="FID"`` and
    ``direction="lower_is_better"`` (see :func:`figure_label_values`)."""


# --- Workload results (one series per workload, device and parameter set) ---
WORKLOAD_SECONDS = MetricDef(
    "sixdim_workload_seconds", "gauge",
    "Time of one operation of the workload, seconds: for kernels and models the DeepSpark rule (the mean of "
    "the rounds less the fastest and the slowest: the middle 3 of the default 5); for convergence the median "
    "run's time; for a command its run (MLPerf run_start to run_stop, or the process's wall time).",
    SHAPE_RESULT_LABELS, figure="seconds")
WORKLOAD_FLOPS = MetricDef(
    "sixdim_workload_flops", "gauge",
    "Achieved floating-point operations per second of the workload, FLOP/s.",
    SHAPE_RESULT_LABELS, figure="flops")
WORKLOAD_POWER = MetricDef(
    "sixdim_workload_power_watts", "gauge",
    "Average device power over the workload's power phase (at least 1 s, 3 s by default, of back-to-back work, "
    "from the energy counter), or for a workload without one (copies, all-reduce, linearity, convergence, a "
    "command) over its measured window when that lasts at least 1 s, summed over a host-wide run's GPUs; "
    "watts; absent where the device has no counter.",
    SHAPE_RESULT_LABELS, figure="power_watts")
WORKLOAD_ENERGY = MetricDef(
    "sixdim_workload_energy_joules", "gauge",
    "Device energy consumed over the same span as the power figure (the power phase, or the measured window), "
    "joules.",
    SHAPE_RESULT_LABELS, figure="energy_joules")
WORKLOAD_FLOP_PER_JOULE = MetricDef(
    "sixdim_workload_flop_per_joule", "gauge",
    "Work per energy of a kernel: floating-point operations done in the power phase per joule, FLOP/J.",
    SHAPE_RESULT_LABELS, figure="flop_per_joule")
WORKLOAD_SAMPLES_PER_JOULE = MetricDef(
    "sixdim_workload_samples_per_joule", "gauge",
    "Work per energy of a model: samples processed in the power phase per joule.",
    SHAPE_RESULT_LABELS, figure="samples_per_joule")
WORKLOAD_MEMORY = MetricDef(
    "sixdim_workload_memory_bytes", "gauge",
    "The workload's own peak memory, bytes: torch's allocator peak on a GPU (no CUDA context, no cuBLAS workspace, "
    "nothing of earlier cases; for onnx, NVML's memory of the worker at the case's end less before its session; absent "
    "for all-reduce and linearity, whose ranks hold it), the worker's peak resident memory on a CPU.",
    SHAPE_RESULT_LABELS, figure="memory_bytes")
WORKLOAD_MEMORY_RESERVED = MetricDef(
    "sixdim_workload_memory_reserved_bytes", "gauge",
    "Peak device memory torch's caching allocator reserved for the workload, bytes (GPU).",
    SHAPE_RESULT_LABELS, figure="memory_reserved_bytes")
WORKLOAD_DEVICE_MEMORY = MetricDef(
    "sixdim_workload_device_memory_bytes", "gauge",
    "Peak device-wide memory in use during the measured window as NVML sees it, bytes: includes the CUDA "
    "context and any other process (GPU); summed over a host-wide run's GPUs.",
    SHAPE_RESULT_LABELS, figure="device_memory_bytes")
WORKLOAD_SM_CLOCK = MetricDef(
    "sixdim_workload_sm_clock_hertz", "gauge",
    "Average SM clock over the measured window, or over the power phase where the window holds fewer than 3 "
    "telemetry samples (clock_span in the run's details), hertz (CPU core clock on CPU).",
    SHAPE_RESULT_LABELS, figure="sm_clock_hertz")
WORKLOAD_POWER_CAPPED = MetricDef(
    "sixdim_workload_power_capped", "gauge",
    "1 if the clocks were held at the software power cap during the measured window (or the power phase, as "
    "for the SM clock; normal for a large kernel on an SXM GPU), else 0.",
    SHAPE_RESULT_LABELS, figure="power_capped")
WORKLOAD_THERMAL_SLOWDOWN = MetricDef(
    "sixdim_workload_thermal_slowdown", "gauge",
    "1 if a software or hardware thermal slowdown held the clocks down during the measured window (or the "
    "power phase, as for the SM clock), else 0.",
    SHAPE_RESULT_LABELS, figure="thermal_slowdown")
WORKLOAD_HARDWARE_SLOWDOWN = MetricDef(
    "sixdim_workload_hardware_slowdown", "gauge",
    "1 if a hardware slowdown or power-brake slowdown held the clocks down during the measured window (or the "
    "power phase, as for the SM clock), else 0.",
    SHAPE_RESULT_LABELS, figure="hardware_slowdown")
WORKLOAD_SPREAD = MetricDef(
    "sixdim_workload_seconds_iqr_ratio", "gauge",
    "Spread of the timed rounds: interquartile range divided by the median, ratio.",
    SHAPE_RESULT_LABELS, figure="seconds_iqr_ratio")
WORKLOAD_BANDWIDTH = MetricDef(
    "sixdim_workload_bytes_per_second", "gauge",
    "Bytes moved per second: copy bandwidth, or all-reduce algorithm bandwidth (bytes / time).",
    SHAPE_RESULT_LABELS, figure="bytes_per_second")
WORKLOAD_BUS_BANDWIDTH = MetricDef(
    "sixdim_workload_bus_bytes_per_second", "gauge",
    "All-reduce bus bandwidth as nccl-tests defines it: algbw * 2(n-1)/n, bytes per second.",
    SHAPE_RESULT_LABELS, figure="bus_bytes_per_second")
WORKLOAD_SPEEDUP = MetricDef(
    "sixdim_workload_speedup_ratio", "gauge",
    "Sparse GEMM: time of the same GEMM dense divided by the sparse time, ratio.",
    SHAPE_RESULT_LABELS, figure="speedup")
WORKLOAD_ERROR = MetricDef(
    "sixdim_workload_max_relative_error", "gauge",
    "Largest error of the output against its reference, relative to the reference's magnitude: a sample of a "
    "kernel's output against float64, every byte of a copy against its source, an all-reduce's sums against "
    "the exact ones.",
    SHAPE_RESULT_LABELS, figure="max_relative_error")
WORKLOAD_LATENCY_P50 = MetricDef(
    "sixdim_workload_latency_p50_seconds", "gauge",
    "Median latency of a single synchronized call (inference suite), seconds.",
    SHAPE_RESULT_LABELS, figure="latency_p50_seconds")
WORKLOAD_LATENCY_P90 = MetricDef(
    "sixdim_workload_latency_p90_seconds", "gauge",
    "90th-percentile latency of a single request (the onnx workload; MLPerf single-stream's figure), seconds.",
    SHAPE_RESULT_LABELS, figure="latency_p90_seconds")
WORKLOAD_LATENCY_P99 = MetricDef(
    "sixdim_workload_latency_p99_seconds", "gauge",
    "99th-percentile latency of a single synchronized call (inference suite), seconds.",
    SHAPE_RESULT_LABELS, figure="latency_p99_seconds")
WORKLOAD_PEAK_RATIO = MetricDef(
    "sixdim_workload_peak_ratio", "gauge",
    "Achieved FLOP/s (or bytes/s) divided by the GPU's published dense peak for the precision; "
    "absent for a GPU not in the peak table.",
    SHAPE_RESULT_LABELS, figure="peak_ratio")
WORKLOAD_SAMPLES = MetricDef(
    "sixdim_workload_samples_per_second", "gauge",
    "Training or inference throughput, samples/s: for models the DeepSpark speed (the mean of the steady "
    "windows less the fastest and the slowest: the middle 3 of the default 5); for convergence the median "
    "run's; for a command what its log reports.",
    SHAPE_RESULT_LABELS, figure="samples_per_second")
WORKLOAD_TOKENS = MetricDef(
    "sixdim_workload_tokens_per_second", "gauge",
    "Tokens a sequence model processes per second (BERT-large layers and the GPT decoder): samples/s times "
    "the sequence length, the throughput LLM benchmarks (MLPerf) quote.",
    SHAPE_RESULT_LABELS, figure="tokens_per_second")
WORKLOAD_ACCURACY = MetricDef(
    "sixdim_workload_accuracy", "gauge",
    "Accuracy a training run reached, ratio in [0, 1]: the convergence runs' median; a command's final "
    "evaluation (its last before the run ended), only when its one higher-is-better quality metric is a ratio "
    "(a loss, WER or FID is in sixdim_workload_quality).",
    SHAPE_RESULT_LABELS, figure="accuracy")
QUALITY_METRIC = "metric"
QUALITY_DIRECTION = "direction"
WORKLOAD_QUALITY = MetricDef(
    "sixdim_workload_quality", "gauge",
    "Final value of each quality metric of a training run (its last evaluation before the run ended): the metric "
    "label names it (top1_accuracy, WER, eval_loss, FID, CLIP, BBOX, ...), the direction label says whether "
    "higher or lower is better; ratios in [0, 1], other metrics on their own scale.",
    SHAPE_RESULT_LABELS + (QUALITY_METRIC, QUALITY_DIRECTION), figure="quality",
    figure_labels=(QUALITY_METRIC, QUALITY_DIRECTION))
WORKLOAD_TIME_TO_TRAIN = MetricDef(
    "sixdim_workload_time_to_train_seconds", "gauge",
    "AI-Rank Time2train: time from the start of training until the target accuracy was reached, seconds.",
    SHAPE_RESULT_LABELS, figure="time_to_train_seconds")
WORKLOAD_LINEARITY = MetricDef(
    "sixdim_workload_linearity_ratio", "gauge",
    "DeepSpark linearity: (throughput on count cards or nodes / count) / throughput on one, ratio.",
    SHAPE_RESULT_LABELS + ("count",), figure="linearity_ratio", extra_labels=(("count", "linearity_count"),))
WORKLOAD_STABILITY = MetricDef(
    "sixdim_workload_stability_ratio", "gauge",
    "DeepSpark stability over complete runs: 1 minus 0.2 per run outside 1% of the median, ratio.",
    SHAPE_RESULT_LABELS, figure="stability_ratio")
WORKLOAD_LAST_RUN = MetricDef(
    "sixdim_workload_last_run_timestamp_seconds", "gauge",
    "Unix time at which the exported result's run ended, seconds.",
    SHAPE_RESULT_LABELS, figure="ended_at")
WORKLOAD_RUNS = MetricDef(
    "sixdim_workload_runs_total", "counter",
    "Cases of the workload run on the device, by outcome: ok; failed, incorrect, timeout (failures); unsupported, "
    "skipped (not run, never failures); from the history. Cases an interruption stopped (a shutdown, or the death "
    "of their agent) are not runs: sixdim_suite_interruptions_total counts each interrupted suite run once.",
    DEVICE_LABELS + (WORKLOAD, STATUS))

SKIP_REASON = "reason"
SKIP_REASONS: tuple[str, ...] = ("busy_process", "busy_utilization", "process_list_unavailable", "mig", "other")
"""Why a case was skipped, in bounded classes (the recorded reason names PIDs and figures, so it
cannot be a label): another process on the GPU, the GPU's utilization above the guard's threshold,
NVML unable to list the GPU's processes (the guard fails closed), a GPU in MIG mode, anything else.
Cases a shutdown interrupted are not skips of the device and are not counted."""
WORKLOAD_SKIPS = MetricDef(
    "sixdim_workload_skips_total", "counter",
    "Cases of the workload skipped on the device since the agent started, by reason class (busy_process, "
    "busy_utilization, process_list_unavailable, mig, other); the full reason is in the history and the log.",
    DEVICE_LABELS + (WORKLOAD, SKIP_REASON))
WORKLOAD_CASE_SECONDS = MetricDef(
    "sixdim_workload_case_mean_seconds", "gauge",
    "Mean wall time of one case of the workload (one shape, precision and pass, from its start to its result) "
    "over the cases recorded since the agent started, by status, seconds.",
    DEVICE_LABELS + (WORKLOAD, STATUS))

# --- Suite runs: progress while a suite runs, and its interruptions ---
SUITE_LABELS: tuple[str, ...] = DEVICE_LABELS + (SUITE,)
"""A suite's runs on one device (one scheduled job): ``suite`` is empty for ``sixdim run --workload``."""
SUITE_RUNNING = MetricDef(
    "sixdim_suite_running", "gauge",
    "1 while a run of the suite is under way on the device (from the device's lock to its last case), else 0; "
    "for every suite the agent schedules on the device.",
    SUITE_LABELS)
SUITE_CASES = MetricDef(
    "sixdim_suite_cases", "gauge",
    "Cases of the suite's current run on the device (of its last run once it has ended; 0 before its first).",
    SUITE_LABELS)
SUITE_CASES_DONE = MetricDef(
    "sixdim_suite_cases_done", "gauge",
    "Cases of the suite's current run on the device (of its last run once it has ended) that have ended, by "
    "status: ok; failed, incorrect, timeout (failures); unsupported, skipped (not run, never failures). Each is "
    "in the history as it ends; their sum over sixdim_suite_cases is the run's progress.",
    SUITE_LABELS + (STATUS,))
SUITE_CURRENT_WORKLOAD = MetricDef(
    "sixdim_suite_current_workload", "gauge",
    "1 for the workload whose case the suite's run on the device is running now; absent while the suite is not "
    "running.",
    SUITE_LABELS + (WORKLOAD,))
SUITE_INTERRUPTIONS = MetricDef(
    "sixdim_suite_interruptions_total", "counter",
    "Runs of the suite on the device that an interruption ended before every case had run (a shutdown, Ctrl-C or "
    "SIGTERM of sixdim run, the death of the agent), from the history: one record per run, whatever the number "
    "of cases left; the cases that had finished are runs, those left are neither runs, skips nor failures.",
    SUITE_LABELS)
SUITE_DEVICE_SECONDS = MetricDef(
    "sixdim_suite_device_seconds_total", "counter",
    "Device time the suite's cases took on the device since the agent started, seconds: the sum of each recorded "
    "case's span as its worker reported it (set-up, warm-up, timed rounds, power phase, check), of every status "
    "(a case skipped before it started adds 0); the worker's start-up (importing torch, creating the CUDA "
    "context) is not included. A host-wide case (all-reduce, card linearity) counts on the GPU whose job ran it.",
    SUITE_LABELS)
SUITE_ENERGY = MetricDef(
    "sixdim_suite_energy_joules_total", "counter",
    "Device energy over the spans of the suite's cases on the device since the agent started (the same spans as "
    "sixdim_suite_device_seconds_total, the worker's start-up not included), joules: the difference of the "
    "device's energy counter (NVML's total energy on a GPU, RAPL's packages on a CPU) over each span, read by the "
    "agent's sampler; a case it could not be read for (no counter, a host-wide case's sum over several GPUs) "
    "adds nothing, and the series is absent until a case has a reading.",
    SUITE_LABELS)
SUITE_COST_METRICS: tuple[MetricDef, ...] = (SUITE_DEVICE_SECONDS, SUITE_ENERGY)
"""What the suites' cases cost each device: the share of its time and energy spent on benchmarks."""
SUITE_RUN_METRICS: tuple[MetricDef, ...] = (
    SUITE_RUNNING, SUITE_CASES, SUITE_CASES_DONE, SUITE_CURRENT_WORKLOAD, SUITE_INTERRUPTIONS)

# --- Summary series (every suite): geometric means over a suite's shapes ---
SUMMARY_FLOPS = MetricDef(
    "sixdim_suite_flops", "gauge",
    "Geometric mean over the suite's shapes of the achieved FLOP/s (integer OP/s for int8).",
    SUMMARY_LABELS, figure="flops")
SUMMARY_SAMPLES = MetricDef(
    "sixdim_suite_samples_per_second", "gauge",
    "Geometric mean over the suite's shapes (models, batch sizes) of the throughput, samples/s.",
    SUMMARY_LABELS, figure="samples_per_second")
SUMMARY_BANDWIDTH = MetricDef(
    "sixdim_suite_bytes_per_second", "gauge",
    "Geometric mean over the suite's sizes of the bandwidth (copies, all-reduce algbw), bytes/s.",
    SUMMARY_LABELS, figure="bytes_per_second")
SUMMARY_PEAK_RATIO = MetricDef(
    "sixdim_suite_peak_ratio", "gauge",
    "Geometric mean over the suite's shapes of the fraction of the published dense peak, ratio.",
    SUMMARY_LABELS, figure="peak_ratio")
SUMMARY_SECONDS = MetricDef(
    "sixdim_suite_seconds", "gauge",
    "Geometric mean over the suite's shapes of the time of one operation, seconds.",
    SUMMARY_LABELS, figure="seconds")
SUMMARY_SHAPES = MetricDef(
    "sixdim_suite_shapes", "gauge",
    "Number of shapes with an ok result that the summary series of the same labels cover.",
    SUMMARY_LABELS, figure="shapes")
SUMMARY_THERMAL_SLOWDOWN = MetricDef(
    "sixdim_suite_thermal_slowdown", "gauge",
    "1 if a thermal slowdown held the clocks down during the measured window (or power phase, as for "
    "sixdim_workload_thermal_slowdown) of any of the suite's shapes (the summary's results), else 0.",
    SUMMARY_LABELS, figure="thermal_slowdown")
SUMMARY_HARDWARE_SLOWDOWN = MetricDef(
    "sixdim_suite_hardware_slowdown", "gauge",
    "1 if a hardware or power-brake slowdown held the clocks down during the measured window (or power phase, "
    "as for sixdim_workload_hardware_slowdown) of any of the suite's shapes, else 0.",
    SUMMARY_LABELS, figure="hardware_slowdown")
SUMMARY_METRICS: tuple[MetricDef, ...] = (
    SUMMARY_FLOPS, SUMMARY_SAMPLES, SUMMARY_BANDWIDTH, SUMMARY_PEAK_RATIO, SUMMARY_SECONDS, SUMMARY_SHAPES,
    SUMMARY_THERMAL_SLOWDOWN, SUMMARY_HARDWARE_SLOWDOWN)

# --- The history's health ---
HISTORY_UP = MetricDef(
    "sixdim_history_up", "gauge",
    "1 if the last write to the history database succeeded, 0 while results wait in memory for it.", (HOSTNAME,))
HISTORY_PENDING = MetricDef(
    "sixdim_history_pending_results", "gauge",
    "Results recorded but not yet written to the history database (kept in memory and in the spool file).",
    (HOSTNAME,))
HISTORY_WRITE_ERRORS = MetricDef(
    "sixdim_history_write_errors_total", "counter",
    "Failed writes to the history since the agent started, by reason (locked, disk_full, read_only, corrupt: "
    "a broken file moved aside at start, io, other, dropped: a waiting result dropped because too many waited).",
    (HOSTNAME, "reason"))

# --- The configuration (SIGHUP reloads it, as Prometheus's own prometheus_config_* metrics) ---
CONFIG_RELOAD_SUCCESS = MetricDef(
    "sixdim_config_reload_success", "gauge",
    "1 if the last configuration reload (SIGHUP) succeeded or none was asked, 0 if it failed: the previous "
    "configuration is still running.", (HOSTNAME,))
CONFIG_LAST_RELOAD = MetricDef(
    "sixdim_config_last_reload_timestamp_seconds", "gauge",
    "Unix time of the last successful configuration load: the agent's start, or the last reload that succeeded.",
    (HOSTNAME,))

# --- Whether the agent can run its suites at all (agent/run/scheduler.py RunHealth; /healthz says the same) ---
HISTORY_RESTORED = MetricDef(
    "sixdim_history_restored", "gauge",
    "1 once the agent's results, run counters and regression verdicts cover its history; 0 while it restores "
    "them in the background after a start (it answers /metrics at once meanwhile, with the telemetry and the "
    "results restored so far: a series or counter missing then is not yet restored, not gone or reset).",
    (HOSTNAME,))
AGENT_CAN_RUN = MetricDef(
    "sixdim_agent_can_run", "gauge",
    "1 while the agent can run its suites, 0 while a suite job's last run could not start or failed unexpectedly "
    "(its device's lock file could not be written: a full or read-only state folder; the reason is in the log and "
    "in /healthz, which answers 503 meanwhile). Back to 1 when that job's next scheduled run works.", (HOSTNAME,))

# --- Regression verdicts (agent/verdicts/detector.py, agent/verdicts/live.py) ---
FIGURE = "figure"
"""The watched figure a verdict is about: a key of a run's ``figures`` (``flops``, ``samples_per_second``,
``power_watts``, ``memory_bytes``, ...)."""
VERDICT_LABELS: tuple[str, ...] = RESULT_LABELS + (FIGURE,)
"""A verdict's series: the result series it judges (with the versions of its newest run) and the figure."""
REGRESSION_STATE_VALUES: tuple[tuple[str, int], ...] = tuple((s.name, s.code) for s in VERDICT_STATES)
"""``sixdim_regression_state``'s values (name, code), from :data:`VERDICT_STATES`."""
REGRESSION_STATE = MetricDef(
    "sixdim_regression_state", "gauge",
    "Regression verdict of a figure of a result series after its latest run: -1 improvement, 0 ok, "
    "1 insufficient_data, 2 suspicious, 3 regression (an incorrect result is 3 at once). Exported for every "
    "series exported per shape, and for any other series while it is suspicious, regressed or improved.",
    VERDICT_LABELS)
REGRESSION_RATIO = MetricDef(
    "sixdim_regression_ratio", "gauge",
    "Current value of the figure (median of the last 3 runs) divided by its baseline, ratio; whether above "
    "or below 1 is worse depends on the figure (time, power, memory: above; rates, efficiency, accuracy: below).",
    VERDICT_LABELS)
BASELINE_VALUE = MetricDef(
    "sixdim_baseline_value", "gauge",
    "The figure's baseline: median of the accepted runs of the current stable segment (at most 40, those before "
    "the last 6), in the figure's own base unit.",
    VERDICT_LABELS)
CHANGE_COMPONENT = "component"
CHANGE_FROM = "from"
CHANGE_TO = "to"
CHANGE_VERDICT = "verdict"
VERSION_CHANGE_RATIO = MetricDef(
    "sixdim_version_change_ratio", "gauge",
    "The latest software change of a series among its recent runs: median of the first runs after it divided by "
    "the median of the last runs before it, ratio.  component names what changed (driver, cuda_runtime, cudnn, "
    "nccl, torch, vbios, onnxruntime for the onnx workload, and the GPU settings power_limit, clocks, ecc and mig; "
    "several joined by '+'), from and to the versions or settings, "
    "verdict regression, improvement, ok or "
    "insufficient_data (two-sided rank test and minimum effect).",
    VERDICT_LABELS + (CHANGE_COMPONENT, CHANGE_FROM, CHANGE_TO, CHANGE_VERDICT))
DRIFT_STATE = MetricDef(
    "sixdim_drift_state", "gauge",
    "Drift verdict of a figure of a result series: 1 the figure drifts the worse way, -1 the better way, 0 no "
    "drift (a steady slope over the last runs that a line fits better than a step; never a regression verdict, "
    "and steps are judged on top of it). Exported for every series exported per shape, and for any other "
    "series while it drifts.",
    VERDICT_LABELS)
DRIFT_RATE = MetricDef(
    "sixdim_drift_ratio_per_second", "gauge",
    "The drift's slope: relative change of the figure per second along the fitted line (multiply by 86400 for "
    "per day; its sign is the figure's own, so a rate falling is negative), ratio per second; only while a "
    "drift holds.",
    VERDICT_LABELS)
DRIFT_TOTAL_RATIO = MetricDef(
    "sixdim_drift_total_ratio", "gauge",
    "The drift's change: the fitted level now divided by the fitted level at the first of the runs the drift is "
    "fitted on (the series' last 96 runs, or fewer since its last version change), ratio; only while a drift holds.",
    VERDICT_LABELS)
CAUSE = "cause"
"""The likely cause of a series' regression: one of ``sixdim.core.conditions.CAUSE_NAMES``, a small fixed set."""
CAUSE_RANK = "rank"
REGRESSION_CAUSE = MetricDef(
    "sixdim_regression_cause", "gauge",
    "Likely cause of a suspicious or regressed series, from the conditions recorded with its runs (power limit, "
    "clocks, throttling, PCIe link, memory errors, other processes, host load, versions; docs/CAUSES.md): 1 for "
    "each cause named, its rank (1 the most likely) in the label rank; cause=\"none\" when no recorded condition "
    "changed.  Exported while the series is suspicious or regressed, or its latest version change regressed.",
    RESULT_LABELS + (CAUSE, CAUSE_RANK))
WORKLOAD_LAST_SUCCESS = MetricDef(
    "sixdim_workload_last_success_timestamp_seconds", "gauge",
    "Unix time at which the newest ok run of the workload on the device ended, over all its shapes and "
    "precisions, seconds (the benchmark-stale alert).",
    DEVICE_LABELS + (WORKLOAD,))
PEER_RATIO = MetricDef(
    "sixdim_peer_ratio", "gauge",
    "A per-shape result's speed (the figure label: FLOP/s, samples/s or bytes/s) divided by the median of the "
    "same result on every GPU of the same model on this host, ratio; below 1 is slower than its peers. Only "
    "where at least 2 GPUs of the model have the result under the same versions.",
    VERDICT_LABELS)
SUITE_PEER_RATIO = MetricDef(
    "sixdim_suite_peer_ratio", "gauge",
    "A summary series' speed (geometric mean over the suite's shapes) divided by the median of the same summary "
    "on every GPU of the same model on this host, over the same shapes, ratio; only where at least 2 GPUs of the "
    "model have it.",
    SUMMARY_LABELS + (FIGURE,))
PEER_CAUSE = MetricDef(
    "sixdim_peer_cause", "gauge",
    "Likely cause of a per-shape result being at least 10% slower than the median of its peers (the GPUs of the "
    "same model on this host with the same result), from its last runs' recorded conditions against theirs "
    "(docs/CAUSES.md): 1 for each cause named, its rank (1 the most likely) in the label rank; cause=\"none\" "
    "when no recorded condition differs.",
    RESULT_LABELS + (CAUSE, CAUSE_RANK))
VERDICT_METRICS: tuple[MetricDef, ...] = (REGRESSION_STATE, REGRESSION_RATIO, BASELINE_VALUE, VERSION_CHANGE_RATIO,
                                          DRIFT_STATE, DRIFT_RATE, DRIFT_TOTAL_RATIO, REGRESSION_CAUSE, PEER_RATIO,
                                          SUITE_PEER_RATIO, PEER_CAUSE)

RESULT_METRICS: tuple[MetricDef, ...] = (
    WORKLOAD_SECONDS, WORKLOAD_FLOPS, WORKLOAD_POWER, WORKLOAD_ENERGY, WORKLOAD_FLOP_PER_JOULE,
    WORKLOAD_SAMPLES_PER_JOULE, WORKLOAD_MEMORY, WORKLOAD_MEMORY_RESERVED, WORKLOAD_DEVICE_MEMORY,
    WORKLOAD_SM_CLOCK, WORKLOAD_POWER_CAPPED, WORKLOAD_THERMAL_SLOWDOWN, WORKLOAD_HARDWARE_SLOWDOWN,
    WORKLOAD_SPREAD, WORKLOAD_BANDWIDTH,
    WORKLOAD_BUS_BANDWIDTH, WORKLOAD_SPEEDUP, WORKLOAD_ERROR, WORKLOAD_LATENCY_P50, WORKLOAD_LATENCY_P90,
    WORKLOAD_LATENCY_P99,
    WORKLOAD_PEAK_RATIO, WORKLOAD_SAMPLES, WORKLOAD_TOKENS, WORKLOAD_ACCURACY, WORKLOAD_QUALITY, WORKLOAD_TIME_TO_TRAIN,
    WORKLOAD_LINEARITY,
    WORKLOAD_STABILITY, WORKLOAD_LAST_RUN,
)

# --- Identity ---
GPU_INFO = MetricDef(
    "sixdim_gpu_info", "info",
    "GPU identity and firmware/driver versions; always 1.",
    (HOSTNAME, GPU, UUID, MODEL_NAME, PCI_BUS_ID, DRIVER_VERSION, "cuda_driver_version", "vbios_version"))
BUILD_INFO = MetricDef(
    "sixdim_build_info", "info",
    "sixdim build and the software it runs with; always 1.",
    (HOSTNAME, "version", "python_version", TORCH_VERSION, "prometheus_client_version"))
COLLECTOR_UP = MetricDef(
    "sixdim_collector_up", "gauge",
    "1 if the telemetry collector works on this host, 0 if unavailable (see the reason label).",
    (HOSTNAME, "collector", "reason"))

# --- Live GPU telemetry (NVML, read at scrape time) ---
_GPU = (HOSTNAME, GPU, UUID, MODEL_NAME, PCI_BUS_ID)
GPU_POWER = MetricDef("sixdim_gpu_power_watts", "gauge", "GPU power draw, watts.", _GPU)
GPU_ENERGY = MetricDef(
    "sixdim_gpu_energy_joules_total", "counter", "GPU energy consumed since the driver loaded, joules.", _GPU)
GPU_MEMORY_USED = MetricDef("sixdim_gpu_memory_used_bytes", "gauge", "GPU memory in use, bytes.", _GPU)
GPU_MEMORY_TOTAL = MetricDef("sixdim_gpu_memory_total_bytes", "gauge", "GPU memory installed, bytes.", _GPU)
GPU_UTILIZATION = MetricDef(
    "sixdim_gpu_utilization_ratio", "gauge", "Fraction of time a kernel ran on the GPU, ratio.", _GPU)
GPU_SM_CLOCK = MetricDef("sixdim_gpu_sm_clock_hertz", "gauge", "GPU SM clock, hertz.", _GPU)
GPU_MEMORY_CLOCK = MetricDef("sixdim_gpu_memory_clock_hertz", "gauge", "GPU memory clock, hertz.", _GPU)
GPU_TEMPERATURE = MetricDef("sixdim_gpu_temperature_celsius", "gauge", "GPU core temperature, degrees Celsius.", _GPU)
GPU_THROTTLE = MetricDef(
    "sixdim_gpu_clock_throttle_active", "gauge",
    "1 while the named clock throttle (clock event) reason is active, else 0.", _GPU + ("reason",))
GPU_PROCESSES = MetricDef(
    "sixdim_gpu_processes", "gauge", "Compute and graphics processes using the GPU.", _GPU)

# --- Live GPU health and settings (NVML, read at each collect from NvmlCollector.conditions; absent where the
# GPU or the binding cannot answer, never 0 for unknown) ---
GPU_POWER_LIMIT = MetricDef(
    "sixdim_gpu_power_limit_watts", "gauge",
    "The power limit the GPU enforces now (nvmlDeviceGetEnforcedPowerLimit), watts: below the default, someone "
    "or something (nvidia-smi -pl, a power-capping service) lowered it.", _GPU)
GPU_POWER_LIMIT_DEFAULT = MetricDef(
    "sixdim_gpu_power_limit_default_watts", "gauge",
    "The GPU's default power limit (nvmlDeviceGetPowerManagementDefaultLimit), watts.", _GPU)
GPU_PCIE_GENERATION = MetricDef(
    "sixdim_gpu_pcie_link_generation", "gauge",
    "PCIe link generation now (nvmlDeviceGetCurrPcieLinkGeneration); an idle GPU may train its link down to save "
    "power, so compare with the maximum under load.", _GPU)
GPU_PCIE_WIDTH = MetricDef(
    "sixdim_gpu_pcie_link_width", "gauge", "PCIe link width now, lanes (nvmlDeviceGetCurrPcieLinkWidth).", _GPU)
GPU_PCIE_GENERATION_MAX = MetricDef(
    "sixdim_gpu_pcie_link_generation_max", "gauge",
    "The highest PCIe generation the GPU and its slot support (nvmlDeviceGetMaxPcieLinkGeneration).", _GPU)
GPU_PCIE_WIDTH_MAX = MetricDef(
    "sixdim_gpu_pcie_link_width_max", "gauge",
    "The widest PCIe link the GPU and its slot support, lanes (nvmlDeviceGetMaxPcieLinkWidth).", _GPU)
ECC_ERROR_TYPE = "type"
ECC_ERROR_TYPES: tuple[str, ...] = ("corrected", "uncorrected")
"""The ``type`` label of ``sixdim_gpu_ecc_errors``."""
GPU_ECC_ERRORS = MetricDef(
    "sixdim_gpu_ecc_errors", "gauge",
    "ECC errors since the driver loaded, by type (corrected, uncorrected): NVML's volatile counts "
    "(nvmlDeviceGetTotalEccErrors), a level that returns to 0 when the driver reloads or the GPU resets; absent "
    "while ECC is off.", _GPU + (ECC_ERROR_TYPE,))
GPU_ECC_ENABLED = MetricDef(
    "sixdim_gpu_ecc_enabled", "gauge", "1 if ECC is on now (nvmlDeviceGetEccMode, current mode), else 0.", _GPU)
GPU_REMAPPED_ROWS = MetricDef(
    "sixdim_gpu_remapped_rows", "gauge",
    "Memory rows remapped over the GPU's life, for corrected and uncorrected errors together "
    "(nvmlDeviceGetRemappedRows; Ampere and later).", _GPU)
GPU_REMAPPED_ROWS_PENDING = MetricDef(
    "sixdim_gpu_remapped_rows_pending", "gauge",
    "1 if a row remapping waits for a GPU reset to take effect (nvmlDeviceGetRemappedRows), else 0.", _GPU)
GPU_REMAPPED_ROWS_FAILED = MetricDef(
    "sixdim_gpu_remapped_rows_failed", "gauge",
    "1 if a row remapping failed (nvmlDeviceGetRemappedRows): the GPU needs service, else 0.", _GPU)
GPU_RETIRED_PAGES_PENDING = MetricDef(
    "sixdim_gpu_retired_pages_pending", "gauge",
    "1 if memory pages wait to be retired at the next GPU reset (nvmlDeviceGetRetiredPagesPendingStatus; before "
    "Ampere), else 0.", _GPU)
GPU_NVLINK_LINKS_ACTIVE = MetricDef(
    "sixdim_gpu_nvlink_links_active", "gauge",
    "NVLink links up (nvmlDeviceGetNvLinkState over the GPU's links); absent on a GPU without NVLink.", _GPU)
GPU_HEALTH_METRICS: tuple[MetricDef, ...] = (
    GPU_POWER_LIMIT, GPU_POWER_LIMIT_DEFAULT, GPU_PCIE_GENERATION, GPU_PCIE_WIDTH, GPU_PCIE_GENERATION_MAX,
    GPU_PCIE_WIDTH_MAX, GPU_ECC_ERRORS, GPU_ECC_ENABLED, GPU_REMAPPED_ROWS, GPU_REMAPPED_ROWS_PENDING,
    GPU_REMAPPED_ROWS_FAILED, GPU_RETIRED_PAGES_PENDING, GPU_NVLINK_LINKS_ACTIVE)

# --- Live host telemetry (psutil, RAPL) ---
HOST_CPU = MetricDef("sixdim_host_cpu_utilization_ratio", "gauge", "Host CPU utilization, ratio.", (HOSTNAME,))
HOST_MEMORY_USED = MetricDef("sixdim_host_memory_used_bytes", "gauge", "Host memory in use, bytes.", (HOSTNAME,))
HOST_MEMORY_TOTAL = MetricDef("sixdim_host_memory_total_bytes", "gauge", "Host memory installed, bytes.", (HOSTNAME,))
HOST_LOAD = MetricDef(
    "sixdim_host_load_average", "gauge", "Host load average over the period (1m, 5m, 15m).", (HOSTNAME, "period"))
HOST_RAPL_ENERGY = MetricDef(
    "sixdim_host_rapl_energy_joules_total", "counter",
    "CPU package energy from RAPL (powercap), joules, wrap-corrected since the agent started.", (HOSTNAME, "domain"))

ALL_METRICS: tuple[MetricDef, ...] = RESULT_METRICS + SUMMARY_METRICS + VERDICT_METRICS + (
    WORKLOAD_RUNS, WORKLOAD_LAST_SUCCESS, WORKLOAD_SKIPS, WORKLOAD_CASE_SECONDS, *SUITE_RUN_METRICS,
    *SUITE_COST_METRICS,
    HISTORY_UP, HISTORY_PENDING,
    HISTORY_WRITE_ERRORS, HISTORY_RESTORED,
    CONFIG_RELOAD_SUCCESS, CONFIG_LAST_RELOAD, AGENT_CAN_RUN, GPU_INFO, BUILD_INFO, COLLECTOR_UP,
    GPU_POWER, GPU_ENERGY, GPU_MEMORY_USED, GPU_MEMORY_TOTAL, GPU_UTILIZATION, GPU_SM_CLOCK,
    GPU_MEMORY_CLOCK, GPU_TEMPERATURE, GPU_THROTTLE, GPU_PROCESSES,
    *GPU_HEALTH_METRICS,
    HOST_CPU, HOST_MEMORY_USED, HOST_MEMORY_TOTAL, HOST_LOAD, HOST_RAPL_ENERGY,
)


def figure_label_values(metric: MetricDef, key: str) -> dict[str, str] | None:
    """The label values a figure key carries for a metric with ``figure_labels``, or None when the
    key is not one of its figures: ``<figure>:<value>:...:<value>``, one value per label; the
    first value may itself hold colons (a metric's name), so the key is split from the right."""
    prefix = f"{metric.figure}:"
    if not metric.figure_labels or not key.startswith(prefix):
        return None
    values = key[len(prefix):].rsplit(":", len(metric.figure_labels) - 1)
    if len(values) != len(metric.figure_labels) or not all(values):
        return None
    return dict(zip(metric.figure_labels, values))


DCGM_LABEL_NAMES: dict[str, str] = {HOSTNAME: HOSTNAME_DCGM, MODEL_NAME: MODEL_NAME_DCGM}
"""The labels dcgm-exporter names otherwise, and its names for them (its other device labels, ``gpu``, ``UUID``
and ``pci_bus_id``, are sixdim's already).  dcgm-exporter renders ``Hostname`` and ``modelName`` on every GPU
series (internal/pkg/rendermetrics/render_metrics.go, releases up to 4.5.3-4.8.2): with these names
``on(Hostname, gpu)`` and ``on(UUID)`` join sixdim's series with its."""


def exported_label(label: str, dcgm_label_names: bool) -> str:
    """The label name as exported, and as the rules and dashboards name it: in dcgm mode ``hostname`` becomes
    ``Hostname`` and ``model_name`` becomes ``modelName`` (:data:`DCGM_LABEL_NAMES`); every other is itself."""
    return DCGM_LABEL_NAMES.get(label, label) if dcgm_label_names else label
