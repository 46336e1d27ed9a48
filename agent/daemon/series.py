"""How many Prometheus series a configuration exports on a host: the series budget.

:func:`count_series` expands every suite's workloads into the cases each of its devices runs (the
workloads' own ``spec.cases``, as ``--check-config`` and the executor do) and multiplies them out
over the metric catalog (:mod:`sixdim.core.catalog`) the way the exporter (:mod:`sixdim.http.exporter`)
renders it:

- **per-shape results** (``sixdim_workload_*``): for each suite with ``export = "shapes"``, one series
  per case and device for each result metric whose figure the workload can report
  (:func:`possible_figures`, an upper bound: a figure a run does not report has no series), plus the
  last-run timestamp;
- **per-shape verdicts**: for each of those series (once, whichever suites ran it), the steady state of
  each watched figure (:func:`sixdim.verdicts.detector.watched_figures`): state, ratio, baseline and
  drift state.  Verdicts of the other series, drift slopes, version changes and causes appear only
  while something happened (an incident adds a few per affected shape): not counted;
- **peer ratios**: one per per-shape series with a rate, and one per summary series with a rate,
  where at least two GPUs of the same model have it (on-host peers);
- **summaries** (``sixdim_suite_*``, every suite): per device, suite, workload, precision, mode and
  pass, the shape count and each summarised figure and flag the workload can report;
- **run counters** per device and workload (upper bound: every status, every skip reason), and
  interruptions per device and suite (at most one series each);
- **suite progress** per device and suite (running, cases, cases done by status, the workload running);
- **suite costs** per device and suite: the device seconds its cases spent, and their energy where the
  device has an energy counter;
- **GPU telemetry** per GPU of the host (identity, readings, clock-event reasons, health: an upper
  bound, as a GPU without NVLink or an Ampere or later GPU leaves one or two out);
- **host and agent**: host readings (RAPL per package domain), build, collectors, configuration
  reloads, the history's health, and prometheus-client's ``process_*``.

Ad-hoc ``sixdim run --workload`` results shown by the daemon (suite ``""``, exported per shape) are
not part of a configuration and are not counted.  ``tests/test_series_budget.py`` checks the count
against a real daemon's scrape on the CPU, series for series.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client import ProcessCollector

from sixdim.collectors.nvml import CLOCK_EVENT_REASONS, HEALTH_GAUGES
from sixdim.config import Suite
from sixdim.core import catalog
from sixdim.run.devices import Device
from sixdim.run.executor import CLOCK_FIGURES
from sixdim.verdicts.detector import watched_figures
from sixdim.verdicts.summary import SUMMARY_FLAGS
from sixdim.workloads import registry
from sixdim.workloads.spec import WorkloadSpec

DEFAULT_GPUS = 8
DEFAULT_GPU_MODEL = "NVIDIA H100 80GB HBM3"
"""The host the budget is written for: 8 H100s (docs/ARCHITECTURE.md, "What a host exports")."""

QUALITY_METRICS = 3
"""Quality metrics counted per ``command`` case (its log decides: a loss, an accuracy, a WER...)."""

LATENCY_PARAM = "latency_samples"
"""A workload with this parameter reports latency percentiles only where it is above 0."""

RUN_SKIP_REASONS = len(catalog.SKIP_REASONS)
HISTORY_WRITE_ERROR_REASONS = 7
"""``sixdim_history_write_errors_total``'s reasons, each always exported (agent/http/exporter.py)."""
COLLECTORS = 2
"""The daemon's telemetry collectors, each with its ``sixdim_collector_up``: NVML and the host."""
HOST_LOAD_PERIODS = 3
DEFAULT_RAPL_DOMAINS = 2
"""RAPL package domains counted for a GPU host (two sockets); the real host's are read by ``--check-config``."""

GPU_LABELS = (catalog.HOSTNAME, catalog.GPU, catalog.UUID, catalog.MODEL_NAME, catalog.PCI_BUS_ID)


def possible_figures(spec: WorkloadSpec, params: dict, device_type: str) -> frozenset[str]:
    """The figures a result of this workload with these (resolved) parameters can carry on this device
    type: the worker's (``WorkloadSpec.figures``; every single-figure result metric for a workload that
    declares none), its allocator peak (torch workloads that run in one process), the executor's window
    telemetry (power, energy, memory, clocks: ``sixdim.run.executor.telemetry_figures``) and the
    fraction of peak where the workload has a peak (``peak_kind``).  An upper bound."""
    figures = set(spec.figures or tuple(
        m.figure for m in catalog.RESULT_METRICS if m.figure and m.figure != "ended_at"))
    if any(p.name == LATENCY_PARAM for p in spec.params) and not params.get(LATENCY_PARAM):
        figures -= {"latency_p50_seconds", "latency_p99_seconds"}
    if spec.uses_torch and not spec.runs_in_ranks:
        figures |= {"memory_bytes", "memory_reserved_bytes"}
    figures |= {"power_watts", "energy_joules", *CLOCK_FIGURES}
    figures.add("device_memory_bytes" if device_type == "cuda" else "memory_bytes")
    if spec.peak_kind:
        figures.add("peak_ratio")
    return frozenset(figures)


def _result_metrics(figures: frozenset[str]) -> int:
    """Per-shape result series of one case: each result metric whose figure it can report, and its
    last-run timestamp."""
    count = 0
    for metric in catalog.RESULT_METRICS:
        if metric.figure == "ended_at":
            count += 1
        elif metric.figure_labels:
            count += QUALITY_METRICS if metric.figure in figures else 0
        elif metric.figure in figures:
            count += 1
    return count


def _has_rate(figures: Iterable[str]) -> bool:
    return any(f in figures for f in catalog.RATES)


@dataclass
class SeriesCount:
    """The series a configuration exports on a host, by part (see the module's docstring)."""

    parts: dict[str, int] = field(default_factory=dict)
    cases: int = 0
    """Cases of one run of every suite on every device."""

    PER_SHAPE = ("per-shape results", "per-shape verdicts", "per-shape peer ratios")
    """The parts that only suites with ``export = "shapes"`` add."""

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def per_shape(self) -> int:
        return sum(self.parts.get(part, 0) for part in self.PER_SHAPE)

    def lines(self, budget: int) -> list[str]:
        """What ``--check-config`` prints: the total against the budget, then each part."""
        share = f"{self.per_shape:,} of them per shape ({self.per_shape / self.total:.0%})" if self.total else ""
        return [f"series:        {self.total:,} Prometheus series at most (budget {budget:,}); {share}",
                *(f"  {part}: {count:,}" for part, count in self.parts.items())]


def count_series(suites: Sequence[Suite], devices: Sequence[Sequence[Device]], gpus: Sequence[Device], *,
                 rapl_domains: int = DEFAULT_RAPL_DOMAINS, statuses: Sequence[str] = catalog.RUN_STATUSES,
                 skip_reasons: int = RUN_SKIP_REASONS, interrupted: bool = True, running: bool = True,
                 steady: bool = True, figures: dict[str, frozenset[str]] | None = None,
                 energy: bool = True) -> SeriesCount:
    """The series ``suites`` export on a host whose NVML GPUs are ``gpus``, each suite running on its
    ``devices`` (resolved as :func:`sixdim.run.devices.resolve` does).  The keyword arguments are
    the upper bounds' assumptions, which a test that compares with a real scrape narrows: the run
    statuses and skip reasons each device and workload has seen, whether each suite has been
    interrupted and is running now, whether verdicts are steady (ratio and baseline known), and the
    figures each workload reports (by name; :func:`possible_figures` where not given), and whether a case
    of each suite had an energy reading on its device (the suite cost counters: device seconds always,
    energy only then)."""
    first_gpu = min((g.index for g in gpus if g.index is not None), default=None)
    results: set[tuple] = set()  # (device, workload, precision, shape, mode, pass, suite)
    shown: dict[tuple, frozenset[str]] = {}  # series key -> figures
    summaries: dict[tuple, set[str]] = {}  # (device, suite, workload, precision, mode, pass) -> figures
    counted: set[tuple[str, str]] = set()  # (device, workload)
    progress = 0
    costs = 0
    total_cases = 0
    for suite, where in zip(suites, devices):
        for device in where:
            device_type = "cuda" if device.type == "cuda" else "cpu"
            progress += 2 + len(catalog.RUN_STATUSES) + (1 if running else 0) + (1 if interrupted else 0)
            costs += 1 + (1 if energy else 0)
            for entry in suite.workloads:
                spec = registry.get(entry.name)
                if spec.scope == "host" and device_type == "cuda" and device.index != first_gpu:
                    continue  # a host-wide workload runs once, from the first GPU's job (agent/run/executor.py)
                can = figures[spec.name] if figures is not None and spec.name in figures else \
                    possible_figures(spec, spec.resolve(entry.params, device_type), device_type)  # type: ignore[arg-type]
                cases = spec.cases(entry.params, device_type)  # type: ignore[arg-type]
                total_cases += len(cases)
                if cases:
                    counted.add((device.name, spec.name))
                for case in cases:
                    key = (device.name, spec.name, case.precision, case.shape, case.mode, case.kernel_pass)
                    group = (device.name, suite.name, spec.name, case.precision, case.mode, case.kernel_pass)
                    summaries.setdefault(group, set()).update(can)
                    if suite.export == "shapes":
                        results.add((*key, suite.name))
                        shown[key] = shown.get(key, frozenset()) | can
    models = {device.name: device.model_name for where in devices for device in where if device.type == "cuda"}

    def peers(keys: Iterable[tuple]) -> int:
        """Series with a rate that at least one other GPU of the same model has too."""
        def on_model(k: tuple) -> tuple:
            return (models[k[0]], *k[1:])

        groups = Counter(on_model(k) for k in keys if k[0] in models)
        return sum(1 for k in keys if k[0] in models and groups[on_model(k)] >= 2)

    figures_of = {key: shown[key[:6]] for key in results}
    count = SeriesCount(cases=total_cases)
    count.parts["per-shape results"] = sum(_result_metrics(figures_of[key]) for key in results)
    count.parts["per-shape verdicts"] = sum((4 if steady else 2) * len(watched_figures(dict.fromkeys(can, 1.0)))
                                            for can in shown.values())
    count.parts["per-shape peer ratios"] = peers([key for key, can in shown.items() if _has_rate(can)])
    count.parts["summaries"] = sum(
        1 + sum(1 for f in catalog.SUMMARY_FIGURES if f in can) + sum(1 for f in SUMMARY_FLAGS if f in can)
        for can in summaries.values())
    count.parts["summary peer ratios"] = peers([group for group, can in summaries.items() if _has_rate(can)])
    count.parts["run counters"] = len(counted) * (2 * len(statuses) + 1 + skip_reasons)
    count.parts["suite progress"] = progress
    count.parts["suite costs"] = costs
    gpu_metrics = [m for m in catalog.ALL_METRICS if m.name.startswith("sixdim_gpu_") and m.labels[:5] == GPU_LABELS]
    per_gpu = sum(len(CLOCK_EVENT_REASONS) if m is catalog.GPU_THROTTLE
                  else sum(1 for gauge, _, _ in HEALTH_GAUGES if gauge is m) or 1 for m in gpu_metrics)
    count.parts["GPU telemetry"] = len(gpus) * per_gpu
    count.parts["host and agent"] = host_and_agent(rapl_domains)
    return count


HOST_AND_AGENT: dict[str, int] = {
    catalog.BUILD_INFO.name: 1, catalog.COLLECTOR_UP.name: COLLECTORS, catalog.CONFIG_RELOAD_SUCCESS.name: 1,
    catalog.CONFIG_LAST_RELOAD.name: 1, catalog.AGENT_CAN_RUN.name: 1, catalog.HISTORY_UP.name: 1,
    catalog.HISTORY_RESTORED.name: 1,
    catalog.HISTORY_PENDING.name: 1, catalog.HISTORY_WRITE_ERRORS.name: HISTORY_WRITE_ERROR_REASONS,
    catalog.HOST_CPU.name: 1, catalog.HOST_MEMORY_USED.name: 1, catalog.HOST_MEMORY_TOTAL.name: 1,
    catalog.HOST_LOAD.name: HOST_LOAD_PERIODS,
}
"""The host's and the agent's own series, one set per host (RAPL apart: one per package domain)."""


def host_and_agent(rapl_domains: int) -> int:
    """The host's and the agent's series: :data:`HOST_AND_AGENT`, RAPL, and prometheus-client's
    ``process_*`` as its ProcessCollector exports them here."""
    process = sum(len(family.samples) for family in ProcessCollector(registry=None).collect())
    return sum(HOST_AND_AGENT.values()) + rapl_domains + process


def host_devices(gpus: int = DEFAULT_GPUS, model: str = DEFAULT_GPU_MODEL) -> list[Device]:
    """A host of ``gpus`` GPUs of one model, as NVML lists them (none: a CPU-only host)."""
    return [Device("cuda", index, f"GPU-{index:08d}", model, f"00000000:{0x17 + index:02X}:00.0")
            for index in range(gpus)]


def suite_devices(suite: Suite, gpus: Sequence[Device]) -> list[Device]:
    """The devices a suite runs on, on a host with these GPUs (:func:`sixdim.run.devices.resolve`'s
    rules without NVML): ``auto`` every GPU or the CPU, ``cpu``, ``cuda:N``."""
    found: dict[str, Device] = {}
    for selector in suite.devices:
        if selector == "auto":
            chosen = list(gpus) or [Device("cpu")]
        elif selector == "cpu":
            chosen = [Device("cpu")]
        else:
            chosen = [g for g in gpus if g.name == selector]
        for device in chosen:
            found.setdefault(device.name, device)
    return list(found.values())

