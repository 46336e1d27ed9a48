"""What watching costs: the device time of a suite run, estimated per case before it ever ran.

``sixdim serve --check-config`` says how much of each device's time the schedule spends
(:mod:`sixdim.daemon.check`).  Where the history holds runs of a suite's cases it uses their recorded
times; where it does not (a new host, a new suite) it needs an estimate, and this is it: a model of a
case's **device time** (its ``details.case_wall`` span: set-up, warm-up, calibration, timed rounds,
power phase, check) from the case's resolved parameters, with constants per device class.

The model follows what the worker does (``workloads/measure/timing.py``; this module is the daemon's and cannot
import it, as it imports torch):

- warm-up for ``warmup_seconds``, then calibration: the block of calls grows until it lasts
  ``min_round_seconds`` and is timed twice more (about :data:`CALIBRATION_ROUNDS` rounds' worth); a warm
  kernel on a GPU times one more block for its per-call time before choosing a CUDA graph;
- ``rounds`` rounds of ``min_round_seconds``, except cold (L2-flushed) rounds on a GPU, which time
  :data:`FLUSHED_CALLS_PER_ROUND` calls each, a flush before each call; sparse GEMM times its dense
  twin too;
- ``latency_samples`` single calls, and the power phase (``power_seconds`` where a device has an energy
  counter and the phase is long enough to report power) with the counter's alignment at both ends;
- a set-up per case of each workload (operands made on the host and copied, the float64 check, the
  allocator reset between cases), plus, for GEMM, a cost per operand element (the 8192³ operands are
  made on the host), for memory bandwidth a cost per byte of the copy (its buffers are filled, copied and
  compared through the host), and for launch latency its launches;
- the first case of each worker carries the lazy start of the device's libraries (on a GPU, cuBLAS and
  the kernels' modules; the worker's own start-up, importing torch and creating the CUDA context, is not
  in any case's span and not counted).

The constants of a GPU come from :func:`fit` over the records of a GPU's quick-suite run (for the
H100: ``docs/gpu-runs/2026-11-25-h100/quick.json``, :data:`H100`); the CPU's were fitted the same way to
runs on the development machine (:data:`CPU`).  Set-up and power-phase costs dominate a short case, and
they are what the records give; the timing terms follow the code, so a suite with other timing
parameters (the tiers' short rounds) is estimated from the same constants.  tests/test_schedule_cost.py
checks the fit against the H100 records and the CPU estimate against a real run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from sixdim.config import Suite
from sixdim.run.executor import worker_groups
from sixdim.run.scheduler import suite_trigger
from sixdim.workloads import registry
from sixdim.workloads.spec import Case, WorkloadSpec

HOUR = 3600.0
CALIBRATION_ROUNDS = 2.5
"""Calibration's cost in rounds of ``min_round_seconds``: the block that first lasts the target is timed
once more to confirm it (two rounds' worth, each a little over the target), after the short blocks that
grew to it (``workloads/measure/timing.py``: ``calibrate``)."""
FLUSHED_CALLS_PER_ROUND = 50
"""Calls in a cold round on a GPU (``timing.FLUSHED_CALLS_PER_ROUND``)."""
MIN_POWER_SECONDS = 1.0
"""A shorter power phase is not run (``timing.MIN_POWER_SECONDS``)."""
POWER_WORKLOADS = frozenset({"gemm", "conv", "rnn", "sparse_gemm"})
"""The workloads with a power phase (``measure_kernel``); memory bandwidth takes ``power_seconds`` but runs none."""
TIMED_KERNELS = {"gemm": 1, "conv": 1, "rnn": 1, "sparse_gemm": 2, "memory_bandwidth": 1}
"""Workloads timed by ``time_rounds``, and how many kernels each case times (sparse GEMM: its dense twin too)."""
ITEM_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 1, "fp8": 1, "fp8_fast": 1}
ALLREDUCE_WARMUP_SECONDS = 0.06
"""All-reduce's warm-up before its sized rounds: blocks that grow until two have lasted 20 ms each
(workloads/kernels/allreduce.py's ``calibrate``), about three such blocks in all."""
RECORDED_RUNS = 5
"""The recorded runs of a case whose median is its device time (``serve --check-config``)."""


@dataclass(frozen=True)
class DeviceModel:
    """The constants of one device class (seconds unless named otherwise)."""

    label: str
    """What the estimate is for, e.g. ``an H100-class GPU``."""
    source: str
    """Where the constants come from, said with the estimate."""
    device_type: str
    setup_seconds: Mapping[str, float]
    """Per case of each workload, beyond its timing, power phase and size terms."""
    first_case_seconds: float
    """Added to the first case of each worker: the device's libraries starting lazily."""
    operand_seconds_per_element: float = 0.0
    """GEMM: per element of A and B (made on the host, copied to the device)."""
    copy_seconds_per_byte: float = 0.0
    """Memory bandwidth: per byte of ``size_bytes`` (filled on the host, copied, compared through the host)."""
    launch_seconds: Mapping[str, float] = field(default_factory=dict)
    """Launch latency: one launch of each kind (``launch``, ``round_trip``)."""
    power_extra_seconds: float = 0.0
    """A power phase's length beyond ``power_seconds`` (its ends wait for a counter update)."""
    flushed_call_seconds: float = 1e-4
    """One cold call on a GPU: the 256 MB flush and the event pair (the kernel itself is left out)."""
    l2_bytes: int = 0
    """A kernel whose data is under twice this is timed cold (0: never, as on a CPU)."""
    latency_sample_seconds: float = 1e-4
    """One latency sample beyond the kernel (a synchronisation); no calibration run timed any."""


H100 = DeviceModel(
    label="an H100-class GPU",
    source="from the H100 case times of docs/gpu-runs/2026-11-25-h100, not measured on this host",
    device_type="cuda",
    setup_seconds={"gemm": 0.339, "conv": 0.545, "rnn": 0.112, "sparse_gemm": 1.034, "memory_bandwidth": 0.0,
                   "launch_latency": 0.333, "allreduce": 0.16},
    first_case_seconds=5.24,
    operand_seconds_per_element=1.09e-08,
    copy_seconds_per_byte=1.033e-08,
    launch_seconds={"launch": 7.92e-06, "round_trip": 1.559e-05},
    power_extra_seconds=0.019,
    flushed_call_seconds=1e-4,
    l2_bytes=50 * 2**20,
)
"""Fitted by :func:`fit` to the 52 records of the H100's quick-suite run (80GB HBM3, 16 threads, torch
2.11.0+cu130, 2026-11-25); with them the model gives the run's 287 s within 1% and each kernel case within
15% (the all-reduce probe, the first case of its worker, 18%): tests/test_schedule_cost.py refits and checks."""

CPU = DeviceModel(
    label="this CPU",
    source="calibrated on a 2-vCPU Intel Xeon VM without RAPL (sixdim's development machine)",
    device_type="cpu",
    setup_seconds={"gemm": 0.12, "conv": 0.11, "rnn": 0.14, "sparse_gemm": 0.11, "memory_bandwidth": 0.0,
                   "launch_latency": 0.12, "allreduce": 2.11},
    first_case_seconds=0.10,
    copy_seconds_per_byte=3.3e-09,
    launch_seconds={"launch": 2.0e-06, "round_trip": 2.1e-06},
    latency_sample_seconds=0.0,
)
"""The CPU's constants: :func:`fit` over ``sixdim run --suite quick|power|frequent --json`` on the development
machine (2 cores, load average 0.7-1.4, 2026-11-29, after issue 41's cuts: operands and copies made where
they are used, the warm-up that stops once stable; six runs): the quick run's set-ups (the most cases of
each workload), the copy and launch terms the median of the runs' fits."""


def _h100_now() -> DeviceModel:
    """:data:`H100` for the code as it is now, where issue 41 moved work its records paid for out of the cases.

    The records were taken before three changes, so three of its terms are derived instead of fitted (until
    a GPU session measures them: tests/test_gpu.py, ``tests/bench/gpu_kit.sh tiers``):

    - the libraries' start (the first case's 5.24 s) now runs before the worker's first case
      (``sixdim.run.worker.prepare_device``, with deterministic mode no longer switched, and its import
      paid, in every case): it is worker start-up, not a case's device time, and said apart
      (:data:`H100_WORKER_START_SECONDS`);
    - GEMM operands are drawn on the device: a write and a read of each element at the H100's memory
      bandwidth (agent/core/peaks.toml), where the host draw and copy cost 1.09e-8 s an element;
    - memory bandwidth's buffer is filled and checked on the device: three passes over its bytes (the fill,
      and the check reading both buffers) at that bandwidth, where filling and comparing through the host
      cost 1.03e-8 s a byte."""
    from sixdim.core.peaks import find

    peak = find("NVIDIA H100 80GB HBM3")
    bandwidth = peak.memory_bytes_per_second if peak is not None else 3.35e12
    return replace(H100, label="an H100-class GPU",
                   source="from the H100 case times of docs/gpu-runs/2026-11-25-h100, with the terms issue 41 "
                          "moved (the libraries' start, operands and copies made on the device) derived, "
                          "not measured on this host",
                   first_case_seconds=0.0, operand_seconds_per_element=2 * 2 / bandwidth,
                   copy_seconds_per_byte=3 / bandwidth)


H100_WORKER_START_SECONDS = H100.first_case_seconds
"""What a worker's start costs on the H100 before its first case (the libraries' start the records measured in
the first case), said beside the estimate: the GPU holds the worker's CUDA context then, but runs nothing."""

H100_NOW = _h100_now()
"""The H100 estimate for the code as it is now (:func:`_h100_now`): what ``serve --check-config`` uses."""


def model_for(device_type: str) -> DeviceModel:
    """The constants for a device type: a GPU is estimated as the H100 (the only GPU calibrated so far), with
    the terms the code no longer pays derived (:data:`H100_NOW`)."""
    return H100_NOW if device_type == "cuda" else CPU


def cold(workload: str, params: Mapping[str, Any], model: DeviceModel) -> bool:
    """Whether the case's rounds run cold (L2 flushed before each call): its data under twice the L2
    (``timing.cache_regime``); sparse GEMM's sparse operand always is, RNNs never (CUDA graphs)."""
    if not model.l2_bytes:
        return False
    item = ITEM_BYTES.get(str(params.get("dtype", "fp32")), 4)
    if workload == "gemm":
        m, n, k = int(params["m"]), int(params["n"]), int(params["k"])
        working = item * (m * k + k * n) + (4 if params.get("dtype") == "int8" else item) * m * n
    elif workload == "conv":
        n, c, h, w, k = (int(params[name]) for name in ("n", "c", "h", "w", "k"))
        r, s = int(params["r"]), int(params["s"])
        p = max(1, (h + 2 * int(params.get("pad_h", 0)) - r) // max(1, int(params.get("stride_h", 1))) + 1)
        q = max(1, (w + 2 * int(params.get("pad_w", 0)) - s) // max(1, int(params.get("stride_w", 1))) + 1)
        working = item * (n * c * h * w + k * c * r * s + n * k * p * q)
    elif workload == "sparse_gemm":
        return True
    else:
        return False
    return 0 < working < 2 * model.l2_bytes


def timing_seconds(workload: str, params: Mapping[str, Any], model: DeviceModel) -> float:
    """Warm-up, calibration and timed rounds of the case's kernels (0 for a workload not timed by rounds)."""
    kernels = TIMED_KERNELS.get(workload, 0)
    if not kernels:
        return 0.0
    target = float(params.get("min_round_seconds", 0.0))
    rounds = int(params.get("rounds", 5))
    if model.l2_bytes and cold(workload, params, model):
        round_seconds = min(target, FLUSHED_CALLS_PER_ROUND * model.flushed_call_seconds) if target else 0.0
        per_call_block = 0.0
    else:
        round_seconds = target
        per_call_block = target if model.device_type == "cuda" else 0.0
    one = float(params.get("warmup_seconds", 0.0)) + CALIBRATION_ROUNDS * target + per_call_block \
        + rounds * round_seconds
    return kernels * one


def power_seconds(workload: str, params: Mapping[str, Any], model: DeviceModel, power_counter: bool) -> float:
    """The power phase: ``power_seconds`` and its ends, where one runs."""
    asked = float(params.get("power_seconds", 0.0))
    if workload not in POWER_WORKLOADS or not power_counter or asked < MIN_POWER_SECONDS:
        return 0.0
    return asked + model.power_extra_seconds


def size_seconds(workload: str, params: Mapping[str, Any], model: DeviceModel) -> float:
    """The terms that grow with the case's size: GEMM operands, memory bandwidth's bytes, launches, and
    all-reduce's warm-up and rounds (each ``min_round_seconds`` long; the records the models were fitted to
    came before that parameter, so a record without it adds nothing: its rounds are in its set-up)."""
    if workload == "gemm":
        return model.operand_seconds_per_element * _operand_elements(params)
    if workload == "memory_bandwidth":
        return model.copy_seconds_per_byte * int(params["size_bytes"])
    if workload == "allreduce" and "min_round_seconds" in params:  # rounds sized by time (records before: by count)
        return ALLREDUCE_WARMUP_SECONDS + int(params.get("rounds", 5)) * float(params["min_round_seconds"])
    if workload == "launch_latency":
        launches = (3 + int(params["rounds"])) * int(params["launches_per_round"])
        return launches * model.launch_seconds.get(str(params.get("mode_of_launch", "launch")), 0.0)
    return 0.0


def _operand_elements(params: Mapping[str, Any]) -> float:
    """GEMM's A and B: M·K + K·N elements."""
    m, n, k = int(params["m"]), int(params["n"]), int(params["k"])
    return float(m * k + k * n)


def case_seconds(workload: str, params: Mapping[str, Any], model: DeviceModel, *, power_counter: bool,
                 first: bool = False) -> float | None:
    """The estimated device time of one case (its resolved parameters); None for a workload the model
    has no constants for (the training workloads, commands, ONNX: their time is the user's model's)."""
    if workload not in model.setup_seconds:
        return None
    latency = int(params.get("latency_samples", 0) or 0) * model.latency_sample_seconds
    return (model.setup_seconds[workload] + (model.first_case_seconds if first else 0.0)
            + size_seconds(workload, params, model) + timing_seconds(workload, params, model)
            + latency + power_seconds(workload, params, model, power_counter))


CaseKey = tuple[str, str, str, str, str]
"""A case of a suite on a device: workload, precision, shape, mode, pass (with the device, its series key)."""


def case_key(spec: WorkloadSpec, case: Case) -> CaseKey:
    return spec.name, case.precision, case.shape, case.mode, case.kernel_pass


def planned_cases(suite: Suite, device_type: str, first_gpu: bool = True) -> list[tuple[WorkloadSpec, Case]]:
    """The cases one run of ``suite`` runs on a device of this type, in order, as the executor plans them
    (a host-wide workload runs from the first GPU's job only)."""
    planned: list[tuple[WorkloadSpec, Case]] = []
    for entry in suite.workloads:
        spec = registry.get(entry.name)
        if spec.scope == "host" and device_type == "cuda" and not first_gpu:
            continue
        planned += [(spec, case) for case in spec.cases(entry.params, device_type)]  # type: ignore[arg-type]
    return planned


@dataclass(frozen=True)
class CaseCost:
    key: CaseKey
    seconds: float | None
    """None: no recorded time and no estimate."""
    recorded: bool


@dataclass(frozen=True)
class RunCost:
    """One run of a suite on one device, case by case."""

    cases: tuple[CaseCost, ...]

    @property
    def seconds(self) -> float:
        return sum(case.seconds or 0.0 for case in self.cases)

    @property
    def recorded(self) -> int:
        return sum(case.recorded for case in self.cases)

    @property
    def unknown(self) -> int:
        return sum(case.seconds is None for case in self.cases)

    @property
    def largest(self) -> CaseCost | None:
        known = [case for case in self.cases if case.seconds is not None]
        return max(known, key=lambda case: case.seconds or 0.0) if known else None


def run_cost(planned: list[tuple[WorkloadSpec, Case]], model: DeviceModel, *, power_counter: bool,
             recorded: Mapping[CaseKey, list[float]] | None = None) -> RunCost:
    """What one run of these cases costs: each case's median recorded time where the history has one
    (``recorded``: its recent runs' device times), else its estimate; the first case of each worker
    (``worker_groups``, as the executor splits a suite) carries :attr:`DeviceModel.first_case_seconds`."""
    recorded = recorded or {}
    firsts = {id(group[0][1]) for group in worker_groups(planned)}
    cases = []
    for spec, case in planned:
        key = case_key(spec, case)
        if recorded.get(key):
            cases.append(CaseCost(key, statistics.median(recorded[key]), True))
            continue
        cases.append(CaseCost(key, case_seconds(spec.name, case.params, model, power_counter=power_counter,
                                                first=id(case) in firsts), False))
    return RunCost(tuple(cases))


def confirmation_seconds(cost: RunCost, planned: list[tuple[WorkloadSpec, Case]], model: DeviceModel, *,
                         power_counter: bool) -> float:
    """The most a confirmation run costs: the suite's most expensive case run alone, in a worker of its
    own, so with the first case's extra (added to a recorded time too, unless the case ran first in its
    worker, where its time has it already)."""
    worst = 0.0
    estimated = {case_key(spec, case): (spec, case) for spec, case in planned}
    firsts = {case_key(*group[0]) for group in worker_groups(planned)}
    for case in cost.cases:
        if case.seconds is None:
            continue
        seconds = case.seconds
        if not case.recorded:
            spec, planned_case = estimated[case.key]
            seconds = case_seconds(spec.name, planned_case.params, model, power_counter=power_counter,
                                   first=True) or 0.0
        elif case.key not in firsts:
            seconds += model.first_case_seconds
        worst = max(worst, seconds)
    return worst


def runs_per_hour(suite: Suite, now: datetime | None = None) -> float:
    """Scheduled runs an hour: 3600 / interval, or a cron's fire times over the coming week / 168 (a daily
    cron is 1/24).  Runs on a change (``on_change``) and confirmation runs are not scheduled: not counted."""
    if suite.interval_seconds:
        return HOUR / suite.interval_seconds
    trigger = suite_trigger(suite)
    start = now or datetime.now(timezone.utc)
    end = start + timedelta(days=7)
    fires, previous, at = 0, None, start
    while True:
        following = trigger.get_next_fire_time(previous, at)
        if following is None or following >= end:
            break
        fires += 1
        previous, at = following, following + timedelta(microseconds=1)
    return fires / (7 * 24)


def fit(records: Iterable[Mapping[str, Any]], base: DeviceModel) -> DeviceModel:
    """``base`` with its measured constants fitted to a suite run's records (``sixdim run --json``): each
    case's device time less its power phase (as recorded) and its modelled timing is its set-up; the
    median of each workload's (GEMM: a least-squares line over its operand elements where ``base`` has a cost
    per element: a GPU; a CPU's scaled-down operands are too small to show one), memory bandwidth's
    over its bytes, launch latency's launch times from its figures, and the first case's extra over the
    set-up of its workload.  Records without a span, or not ``ok``/``unsupported``, are left out."""
    rows = [r for r in records if r.get("status") in ("ok", "unsupported") and _span(r) is not None]
    if not rows:
        raise ValueError("no records with a case_wall span to fit")
    probe = replace(base, operand_seconds_per_element=0.0, copy_seconds_per_byte=0.0,
                    launch_seconds={kind: 0.0 for kind in ("launch", "round_trip")})
    launches: dict[str, list[float]] = {}
    for r in rows:
        if r["workload"] == "launch_latency" and r.get("status") == "ok":
            launches.setdefault(str(r["params"].get("mode_of_launch", "launch")), []).append(
                float(r["figures"]["seconds"]))
    launch_seconds = {kind: statistics.median(values) for kind, values in launches.items()} \
        or dict(base.launch_seconds)
    probe = replace(probe, launch_seconds=launch_seconds)
    powers = [float(r["details"]["power"]["seconds"]) - float(r["params"].get("power_seconds", 0.0))
              for r in rows if isinstance(r.get("details", {}).get("power"), dict)]
    extra = statistics.median(powers) if powers else 0.0

    def rest(r: Mapping[str, Any]) -> float:
        power = r.get("details", {}).get("power")
        phase = float(power["seconds"]) if isinstance(power, dict) else 0.0
        return (_span(r) or 0.0) - phase - timing_seconds(r["workload"], r["params"], probe) \
            - size_seconds(r["workload"], r["params"], probe)

    firsts = worker_firsts([str(r["workload"]) for r in rows])
    by_workload: dict[str, list[Mapping[str, Any]]] = {}
    for index, r in enumerate(rows):
        if index not in firsts and r.get("status") == "ok":
            by_workload.setdefault(r["workload"], []).append(r)
    setup: dict[str, float] = dict(base.setup_seconds)
    per_element, per_byte = base.operand_seconds_per_element, base.copy_seconds_per_byte
    for workload, group in by_workload.items():
        values = [rest(r) for r in group]
        if workload == "gemm" and base.operand_seconds_per_element > 0:
            sizes = [_operand_elements(r["params"]) for r in group]
            per_element, setup[workload] = _line(sizes, values)
        elif workload == "memory_bandwidth":
            per_byte = statistics.median(v / float(r["params"]["size_bytes"]) for v, r in zip(values, group))
            setup[workload] = 0.0
        else:
            setup[workload] = statistics.median(values)
    fitted = replace(probe, setup_seconds=setup, operand_seconds_per_element=max(0.0, per_element),
                     copy_seconds_per_byte=per_byte, power_extra_seconds=extra)
    head = rows[0]
    alone = case_seconds(head["workload"], head["params"], fitted, power_counter=False) or 0.0
    phase = head.get("details", {}).get("power")
    return replace(fitted, first_case_seconds=max(0.0, (_span(head) or 0.0) - alone
                                                  - (float(phase["seconds"]) if isinstance(phase, dict) else 0.0)))


def worker_firsts(workloads: list[str]) -> set[int]:
    """The positions, in a suite run's cases (by workload name), of each worker's first case."""
    groups = worker_groups([(registry.get(name), Case({"at": at})) for at, name in enumerate(workloads)])
    return {int(group[0][1].params["at"]) for group in groups}


def _span(record: Mapping[str, Any]) -> float | None:
    wall = record.get("details", {}).get("case_wall")
    if isinstance(wall, list) and len(wall) == 2 and all(isinstance(t, (int, float)) for t in wall):
        return max(0.0, float(wall[1]) - float(wall[0]))
    return None


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept (slope 0 where the xs do not vary)."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0 or math.isclose(spread, 0.0):
        return 0.0, statistics.median(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread
    return slope, mean_y - slope * mean_x
