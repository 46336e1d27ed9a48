#!/usr/bin/env python3
"""How many Prometheus series one GPU costs, for the embedded default and for a full-suite setup.

Usage (from the repository root):

    python -m tests.bench.series_budget [--gpus 8] [--hosts 1000]

For each configuration it expands every suite's workloads into the cases a GPU runs (the
registry's GPU defaults: DeepBench's full shapes), makes one ``ok`` result per case carrying the
figures a GPU result of that workload has (the table :data:`GPU_FIGURES`, from the workloads'
code: kernels report time, rate, power phase, memory, clocks, clock events, spread, error and
fraction of peak), adds one result per status a suite commonly sees, and renders them through
the real exporter (``results`` part, with the suite's export setting, and every series' regression
verdicts after 20 steady runs: state, ratio, baseline and drift state per watched figure).  It counts the samples of
the exposition: that is the number of series one GPU adds to Prometheus.  It runs nothing on a
device: the counts follow from the configuration and the exporter alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sixdim.config import Suite, load  # noqa: E402
from sixdim.config.suites import preset_entries  # noqa: E402
from sixdim.core.results import RunRecord  # noqa: E402
from sixdim.http.board import Board  # noqa: E402
from sixdim.http.exporter import SixdimCollector  # noqa: E402
from sixdim.verdicts.live import Verdicts  # noqa: E402
from sixdim.workloads import registry  # noqa: E402

KERNEL = ("seconds", "flops", "power_watts", "energy_joules", "flop_per_joule", "memory_bytes",
          "memory_reserved_bytes", "device_memory_bytes", "sm_clock_hertz", "power_capped", "thermal_slowdown",
          "hardware_slowdown", "seconds_iqr_ratio", "max_relative_error", "peak_ratio")
GPU_FIGURES: dict[str, tuple[str, ...]] = {
    "gemm": KERNEL, "conv": KERNEL, "rnn": KERNEL, "sparse_gemm": KERNEL + ("speedup",),
    "memory_bandwidth": ("seconds", "bytes_per_second", "memory_bytes", "device_memory_bytes", "sm_clock_hertz",
                         "power_capped", "thermal_slowdown", "hardware_slowdown", "seconds_iqr_ratio", "peak_ratio"),
    "launch_latency": ("seconds", "seconds_iqr_ratio", "device_memory_bytes", "sm_clock_hertz"),
    "allreduce": ("seconds", "bytes_per_second", "bus_bytes_per_second", "power_watts", "energy_joules",
                  "device_memory_bytes", "sm_clock_hertz", "power_capped", "thermal_slowdown", "hardware_slowdown"),
    "model": ("samples_per_second", "seconds", "power_watts", "energy_joules", "samples_per_joule", "memory_bytes",
              "memory_reserved_bytes", "device_memory_bytes", "sm_clock_hertz", "power_capped", "thermal_slowdown",
              "hardware_slowdown", "seconds_iqr_ratio", "latency_p50_seconds", "latency_p99_seconds"),
    "convergence": ("samples_per_second", "accuracy", "time_to_train_seconds", "stability_ratio", "seconds",
                    "power_watts", "energy_joules", "device_memory_bytes", "memory_bytes"),
    "linearity": ("samples_per_second", "linearity_ratio", "power_watts", "energy_joules", "device_memory_bytes"),
}
"""What a GPU result of each workload carries (a result also gets its last-run timestamp)."""

FULL = Suite(name="nightly", workloads=preset_entries("full") + preset_entries("training"), cron="0 3 * * *")
DEFAULT = list(load(None, env={}).suites)
"""The embedded default: its three tiers (frequent, power, quick), every one exported per shape."""
CONFIGS = {
    "default (embedded tiers: frequent, power, quick; export = shapes)": DEFAULT,
    "default + nightly full and training suites (export = summary)": [*DEFAULT, FULL],
    "nightly full and training suites with export = shapes (not recommended)": [
        Suite(name="nightly", workloads=FULL.workloads, cron="0 3 * * *", export="shapes")],
}


def records_for(suites: list[Suite]) -> list[RunRecord]:
    records = []
    for suite in suites:
        for entry in suite.workloads:
            spec = registry.get(entry.name)
            names = {p.name for p in spec.params}
            for case in spec.cases({k: v for k, v in entry.params.items() if k in names}, "cuda"):
                figures = {name: 1.0 for name in GPU_FIGURES.get(spec.name, ("seconds",))}
                records.append(RunRecord(
                    suite=suite.name, workload=spec.name, precision=case.precision, params=case.params,
                    shape=case.shape, mode=case.mode, kernel_pass=case.kernel_pass, hostname="host1",
                    device_type="cuda", device="cuda:0", gpu="0", uuid="GPU-0", model_name="NVIDIA H100 80GB HBM3",
                    pci_bus_id="00000000:17:00.0", status="ok", reason="", started_at=0.0, ended_at=1.0,
                    figures=figures, environment={"driver": "580.159.04", "cuda_runtime": "13.0", "torch": "2.13.0"}))
    for status in ("failed", "skipped", "unsupported"):  # a few outcomes every suite meets
        for record in records[:: max(1, len(records) // 10)]:
            records.append(RunRecord(**{**record.to_dict(), "status": status, "figures": {}, "id": None}))
    return records


STEADY_RUNS = 20
"""Runs fed to each series' regression verdicts first, so they are past ``insufficient_data`` and
export what a steady agent exports (state, ratio, baseline and drift state)."""


def count_series(suites: list[Suite]) -> tuple[int, int, dict[str, int]]:
    board = Board(Verdicts())
    records = records_for(suites)
    for record in records:
        if record.status == "ok":
            for _ in range(STEADY_RUNS - 1):
                board.verdicts.add(record)
        board.add(record)
    registry_ = CollectorRegistry()
    registry_.register(SixdimCollector(board, [], "host1", part="results",
                                       shape_suites={s.name for s in suites if s.export == "shapes"}))
    by_family: dict[str, int] = {}
    for family in text_string_to_metric_families(generate_latest(registry_).decode()):
        by_family[family.name] = len(family.samples)
    cases = sum(1 for r in records if r.status == "ok")
    return cases, sum(by_family.values()), by_family


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per host")
    parser.add_argument("--hosts", type=int, default=1000, help="hosts in the fleet")
    args = parser.parse_args()
    for name, suites in CONFIGS.items():
        cases, series, by_family = count_series(suites)
        summary = sum(v for k, v in by_family.items()
                      if k.startswith("sixdim_suite_") and not k.startswith("sixdim_suite_peer_"))
        verdicts = sum(v for k, v in by_family.items()
                       if k.startswith(("sixdim_regression_", "sixdim_baseline_", "sixdim_version_change_",
                                        "sixdim_drift_", "sixdim_peer_", "sixdim_suite_peer_")))
        print(f"{name}:\n  {cases} cases per GPU -> {series:,} series per GPU "
              f"({summary:,} summary, {by_family.get('sixdim_workload_runs', 0)} run counters, "
              f"{verdicts:,} verdict); "
              f"{args.gpus} GPUs: {series * args.gpus:,} per host; {args.hosts} hosts: "
              f"{series * args.gpus * args.hosts:,} in the fleet (plus about 15 live telemetry series per GPU)")


if __name__ == "__main__":
    main()
