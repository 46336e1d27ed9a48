"""GPU acceptance: run only where an NVIDIA GPU and a CUDA build of torch exist; skipped with the reason elsewhere.

Run on a GPU host with ``python -m pytest -rs tests/test_gpu.py`` (about 3 minutes on an H100).
``SIXDIM_GPU_TEST_DEFAULT_TIMING=1`` runs the quick suite with its real timing parameters (power
phases included: about 5 minutes) instead of shortened ones; ``SIXDIM_GPU_RESULTS_DIR=DIR`` also
writes every record of every test as JSON under DIR.

This process never touches CUDA itself (compute capability comes from the worker's environment), so
the idle guard sees only sixdim's own workers.  Checks whose bounds depend on the GPU model (power,
fraction of peak) skip with their reason on other models rather than pass silently.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sixdim.run.devices import resolve
from sixdim.run.executor import Executor, GuardSettings
from sixdim.run.guard import Guard
from sixdim.store.history import History
from sixdim.workloads import registry
from tests.conftest import nvml_or_skip

pytestmark = pytest.mark.gpu

FAST = {"min_round_seconds": 0.05, "warmup_seconds": 0.1, "power_seconds": 0.0}
"""Shortened timing for cases whose figures are not what a test checks."""
SMALL_MODEL = {"size": "small", "warmup_steps": 2, "steps_per_window": 3, "windows": 3, "latency_samples": 5,
               "power_seconds": 0.0}
H100_CLASS = re.compile(r"H100|H200")
KERNELS = {"gemm", "conv", "rnn", "sparse_gemm"}
GPU_TIMING_METHODS = {"cuda_events", "cuda_events_per_call_l2_flushed", "cuda_graph_events"}
TF32_KEYS = ("matmul_allow_tf32", "cudnn_allow_tf32")
BIG, MID, SMALL = 16384, 4096, 256
COLD = (1760, 128, 1760)
"""A DeepBench shape whose fp16 GEMM takes about 10 µs on an H100/H200 and fits in L2 (timed cold)."""


@pytest.fixture(scope="module")
def nvml():
    return nvml_or_skip()


def _fast(name: str, params: dict, **timing) -> dict:
    """``params`` plus the shortened timing, for the parameters the workload has."""
    names = {p.name for p in registry.get(name).params}
    return {**{k: v for k, v in {**FAST, **timing}.items() if k in names}, **params}


def _executor(nvml, tmp_path: Path, guard: bool = False) -> Executor:
    return Executor(hostname="gpu-test", history=History(tmp_path / "h.db"), nvml=nvml, rapl=None,
                    guard=GuardSettings(enabled=guard, max_utilization=0.05))


def _dump(name: str, records: list, **extra) -> None:
    where = os.environ.get("SIXDIM_GPU_RESULTS_DIR")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / f"test_gpu_{name}.json").write_text(
            json.dumps({"records": [r.to_dict() for r in records], **extra}, indent=2, default=str))


def _problems(records: list) -> list[str]:
    return [f"{r.workload} {r.shape} {r.precision} {r.kernel_pass}: {r.status}: {r.reason}" for r in records
            if r.status not in ("ok", "unsupported")]


def _one(records: list, workload: str, precision: str | None = None, shape: str | None = None,
         kernel_pass: str | None = None, mode: str | None = None):
    found = [r for r in records if r.workload == workload and (precision is None or r.precision == precision)
             and (shape is None or r.shape.startswith(shape)) and (kernel_pass is None or r.kernel_pass == kernel_pass)
             and (mode is None or r.mode == mode)]
    assert len(found) == 1, f"expected one {workload} {precision} {shape} {kernel_pass} {mode} record, got " \
                            f"{[(r.shape, r.precision, r.kernel_pass, r.mode) for r in found]}"
    return found[0]


def _capability(record) -> tuple[int, int]:
    text = record.environment.get("compute_capability")
    assert text, f"the worker reported no compute_capability: {record.environment}"
    major, minor = text.split(".")
    return int(major), int(minor)


def _wait_idle(nvml, index: int, seconds: float = 15.0) -> str | None:
    """None once the guard would let a run start, else why not (after waiting ``seconds``)."""
    deadline = time.monotonic() + seconds
    while True:
        reason = Guard(nvml).before_run([index], 0.05)
        if reason is None or time.monotonic() > deadline:
            return reason
        time.sleep(0.5)


# ---------------------------------------------------------------------------- (a) the guard and our own workers

class _NvmlWatch:
    """Polls NVML's process list of one GPU in a thread while a block runs: every PID it listed, and
    those that were descendants of this process (sixdim's workers) when listed."""

    def __init__(self, nvml, index: int, period: float = 0.1):
        self.nvml, self.index, self.period = nvml, index, period
        self.listed: set[int] = set()
        self.ours: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        me = os.getpid()
        while not self._stop.wait(self.period):
            try:
                pids = self.nvml.process_ids(self.index)
            except Exception:
                continue
            for pid in pids:
                self.listed.add(pid)
                try:
                    if any(p.pid == me for p in psutil.Process(pid).parents()):
                        self.ours.add(pid)
                except psutil.Error:
                    pass

    def __enter__(self) -> _NvmlWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def test_guard_never_skips_a_case_because_of_sixdims_own_worker(nvml, tmp_path):
    """Several workloads in several workers (device, host-wide, device again), guard on: each worker
    starts right after the previous one ended, with the GPU just busy from its power phase."""
    device = resolve(["cuda:0"], nvml)[0]
    before = _wait_idle(nvml, device.index)
    if before is not None:
        pytest.skip(f"the GPU is not idle before the test, so the guard check means nothing: {before}")
    items = [(registry.get("gemm"), {"m": 4096, "n": 4096, "k": 4096, "precisions": ["bf16"],
                                     **_fast("gemm", {}, power_seconds=3.0)}),
             (registry.get("conv"), _fast("conv", {"set": "quick", "precisions": ["fp32"], "layouts": ["nchw"],
                                                   "max_batch": 1})),
             (registry.get("allreduce"), {"set": "quick"}),  # host-wide: a worker of its own
             (registry.get("gemm"), {"m": 2048, "n": 2048, "k": 2048, "precisions": ["bf16"],
                                     **_fast("gemm", {}, power_seconds=3.0)}),
             (registry.get("memory_bandwidth"), _fast("memory_bandwidth", {"directions": ["d2d"]}))]
    seen = _NvmlWatch(nvml, device.index)
    with seen:
        records = _executor(nvml, tmp_path, guard=True).execute_many(items, device, timeout=300)
    _dump("guard", records, nvml_listed=sorted(seen.listed), ours=sorted(seen.ours))
    # the check means something only if NVML listed sixdim's workers while they ran: a guard that
    # never saw them would pass whether or not it knows its own processes
    assert seen.ours, f"NVML never listed one of this test's worker processes (it listed {sorted(seen.listed)})"
    skipped = [f"{r.workload} {r.shape}: {r.reason}" for r in records if r.status == "skipped"]
    mine = str(os.getpid())
    assert not any(mine in s for s in skipped), f"this pytest process holds a CUDA context (pid {mine}): {skipped}"
    assert not skipped, f"the guard skipped cases right after sixdim's own worker ended: {skipped}"
    assert not _problems(records), _problems(records)
    assert len({r.started_at for r in records}) >= 3, "expected at least three workers (device, host-wide, device)"


# ---------------------------------------------------------------------------- (b) the quick suite

def test_quick_suite_reports_every_kernel_with_its_timing_method_and_cache_regime(nvml, tmp_path):
    from sixdim.config.suites import preset_entries

    default_timing = os.environ.get("SIXDIM_GPU_TEST_DEFAULT_TIMING") == "1"
    device = resolve(["cuda:0"], nvml)[0]
    items = [(registry.get(e.name), dict(e.params) if default_timing else _fast(e.name, dict(e.params)))
             for e in preset_entries("quick")]
    started = time.monotonic()
    records = _executor(nvml, tmp_path).execute_many(items, device, suite="quick", timeout=600)
    wall = time.monotonic() - started
    _dump("quick_suite", records, wall_seconds=wall, default_timing=default_timing)
    print(f"\nquick suite on {device.model_name}: {len(records)} cases in {wall:.1f} s "
          f"({'default' if default_timing else 'shortened'} timing)")
    assert not _problems(records), _problems(records)
    ok = [r for r in records if r.status == "ok"]
    assert {r.workload for r in ok} >= {"gemm", "conv", "rnn", "sparse_gemm", "memory_bandwidth", "launch_latency"}
    missing = [f"{r.workload} {r.shape} {r.precision} {r.kernel_pass}: {r.details.get('timing_method')!r}, "
               f"{r.details.get('cache_regime')!r}" for r in ok if r.workload in KERNELS and
               (r.details.get("timing_method") not in GPU_TIMING_METHODS or
                r.details.get("cache_regime") not in ("cold", "warm"))]
    assert not missing, f"kernel cases without a GPU timing method and a cache regime: {missing}"
    for r in ok:
        if r.details.get("cache_regime") == "cold":
            assert r.details["timing_method"] == "cuda_events_per_call_l2_flushed", (r.shape, r.details)
    not_graphed = [(r.shape, r.precision, r.kernel_pass, r.details.get("timing_method")) for r in ok
                   if r.workload == "rnn" and r.details.get("timing_method") != "cuda_graph_events"]
    assert not not_graphed, f"RNN cases not replayed from a CUDA graph (a failed capture?): {not_graphed}"
    bandwidth = [r for r in ok if r.workload == "memory_bandwidth"]
    assert all(r.details.get("timing_method") in GPU_TIMING_METHODS for r in bandwidth), \
        [(r.kernel_pass, r.details.get("timing_method")) for r in bandwidth]


# ---------------------------------------------------------------------------- (c)-(h): one worker, many cases

@pytest.fixture(scope="module")
def mixed(nvml, tmp_path_factory):
    """One execute_many call, one worker: the order matters (big before small, convergence before GEMM)."""
    device = resolve(["cuda:0"], nvml)[0]
    items = [
        (registry.get("gemm"), {"m": BIG, "n": BIG, "k": BIG, "precisions": ["bf16"]}),  # default timing and power
        (registry.get("gemm"), _fast("gemm", {"m": SMALL, "n": SMALL, "k": SMALL, "precisions": ["bf16"]})),
        (registry.get("gemm"), _fast("gemm", {"m": MID, "n": MID, "k": MID, "precisions": ["fp32", "tf32", "bf16"]})),
        (registry.get("conv"), _fast("conv", {"set": "quick", "precisions": ["fp32"], "layouts": ["nchw"],
                                              "max_batch": 1})),
        (registry.get("model"), {"models": ["resnet50"], "modes": ["training", "inference"], "precisions": ["fp32"],
                                 **SMALL_MODEL}),
        (registry.get("gemm"), _fast("gemm", {"m": 1001, "n": 1003, "k": 1005, "precisions": ["int8", "fp8"]})),
        (registry.get("convergence"), {}),
        (registry.get("memory_bandwidth"), _fast("memory_bandwidth", {"directions": ["d2d"]})),  # sets no flags
        (registry.get("gemm"), _fast("gemm", {"m": 512, "n": 512, "k": 512, "precisions": ["bf16"]})),
        # a cold µs-scale kernel with a power phase (from a CUDA graph), and one kernel's power over 1 s and 3 s
        (registry.get("gemm"), _fast("gemm", {"m": COLD[0], "n": COLD[1], "k": COLD[2], "precisions": ["fp16"]},
                                     power_seconds=2.0)),
        (registry.get("gemm"), _fast("gemm", {"m": 3072, "n": 3072, "k": 3072, "precisions": ["bf16"]},
                                     power_seconds=1.0)),
        (registry.get("gemm"), _fast("gemm", {"m": 3072, "n": 3072, "k": 3072, "precisions": ["bf16"]},
                                     power_seconds=3.0)),
        (registry.get("sparse_gemm"), _fast("sparse_gemm", {"set": "quick"})),
        (registry.get("model"), {"models": ["gpt"], "modes": ["training", "inference"], "precisions": ["amp"],
                                 **SMALL_MODEL}),
    ]
    records = _executor(nvml, tmp_path_factory.mktemp("mixed")).execute_many(items, device, timeout=600)
    _dump("mixed", records)
    return device, records


def test_mixed_cases_all_run_in_one_worker(mixed):
    device, records = mixed
    assert not _problems(records), _problems(records)
    assert len({r.started_at for r in records}) == 1, "a worker died part-way (the cases after it had a fresh one)"


def test_big_gemm_speed_correctness_and_identity(nvml, mixed):
    device, records = mixed
    r = _one(records, "gemm", "bf16", f"m={BIG},")
    assert r.status == "ok", r.reason
    assert r.figures["flops"] > 1e12  # any data-centre GPU does over a TFLOP/s of bf16 GEMM
    assert r.figures["flops"] == pytest.approx(2 * BIG**3 / r.figures["seconds"], rel=1e-6)
    assert r.figures["max_relative_error"] <= 2e-2  # checked against float64
    assert r.environment.get("driver") and r.environment.get("cuda_runtime"), r.environment
    assert r.uuid == nvml.gpus[0].uuid
    assert r.details["telemetry"].get("telemetry_samples", 0) >= 5
    assert r.details.get("timing_method") in GPU_TIMING_METHODS and r.details.get("cache_regime") == "warm"


def test_big_gemm_fraction_of_peak_on_a_known_gpu(mixed):
    device, records = mixed
    r = _one(records, "gemm", "bf16", f"m={BIG},")
    if not H100_CLASS.search(r.model_name or ""):
        pytest.skip(f"the peak-ratio bound is set for H100/H200; this GPU is {r.model_name!r}")
    assert "peak_ratio" in r.figures, f"{r.model_name!r} has no entry in agent/core/peaks.toml"
    assert 0.4 < r.figures["peak_ratio"] < 1.0, r.figures["peak_ratio"]


# (c) power

def test_power_phase_measured_in_the_worker(mixed):
    device, records = mixed
    r = _one(records, "gemm", "bf16", f"m={BIG},")
    phase = r.details.get("power")
    assert phase, f"no details.power (power_note: {r.details.get('power_note')!r})"
    assert phase["seconds"] >= 3.0, phase
    assert phase["readings"] >= 30, phase
    assert r.figures["energy_joules"] == pytest.approx(r.figures["power_watts"] * phase["seconds"], rel=0.01), \
        "power_watts is not the power phase's energy / seconds (overwritten by the daemon's window telemetry?)"
    assert phase["energy_joules"] == pytest.approx(r.figures["energy_joules"], rel=1e-6)
    assert r.started_at - 1 <= phase["start_unix"] < phase["end_unix"] <= r.ended_at + 1
    assert r.figures["flop_per_joule"] == pytest.approx(2 * BIG**3 * phase["calls"] / r.figures["energy_joules"],
                                                        rel=1e-6)


def test_power_of_a_big_gemm_on_h100_class_is_real(mixed):
    device, records = mixed
    r = _one(records, "gemm", "bf16", f"m={BIG},")
    if not H100_CLASS.search(r.model_name or ""):
        pytest.skip(f"the 50 W bound is set for H100/H200 (idle ~70 W, ~700 W under load); this GPU is "
                    f"{r.model_name!r}")
    assert r.figures.get("power_watts", 0) > 50, r.figures


def test_a_cold_microsecond_kernel_gets_its_power_from_a_graph_that_kept_the_gpu_busy(mixed):
    """Issue 27 item 1: a ~10 µs kernel called one by one from Python leaves the GPU idle between
    launches; its power phase must replay a CUDA graph of many calls and say how busy the GPU was."""
    device, records = mixed
    r = _one(records, "gemm", "fp16", f"m={COLD[0]},")
    assert r.status == "ok", r.reason
    assert r.details["cache_regime"] == "cold", r.details.get("cache_regime")
    phase = r.details.get("power")
    assert phase, f"no power phase: {r.details.get('power_note')!r}"
    assert phase["unit"] == "cuda_graph" and phase["calls_per_unit"] >= 100, phase
    assert "gpu_busy_share" in phase, r.details.get("power_note")
    assert phase["cache_regime"] == "warm" and phase.get("efficiency_note"), phase  # never mixed with cold
    assert phase["gpu_busy_share"] >= 0.9, phase  # NVML's utilization over the phase
    assert r.figures.get("power_watts", 0) > 0, (r.figures, r.details.get("power_note"))
    assert r.figures["flop_per_joule"] == pytest.approx(2 * COLD[0] * COLD[1] * COLD[2] * phase["calls"]
                                                        / r.figures["energy_joules"], rel=1e-6)
    # its timed window (a few ms of flushed calls) holds too few clock samples: the clocks are the phase's
    telemetry = r.details["telemetry"]
    assert telemetry.get("clock_span") == "power_phase", {k: telemetry.get(k) for k in ("clock_span",
                                                                                      "clock_span_note")}


def test_no_record_has_power_beside_a_power_note_and_each_busy_share_has_its_samples(mixed):
    """Issue 45: a figure the method refused stays absent (the daemon's window no longer fills it in), and every
    busy share is read with its NVML utilization sample count (printed: `pytest -s`)."""
    device, records = mixed
    both = [(r.workload, r.shape, r.details.get("power_note")) for r in records
            if "power_watts" in r.figures and r.details.get("power_note")]
    assert not both, both
    for r in records:
        phase = r.details.get("power") or {}
        if "gpu_busy_share" in phase:
            print(f"{r.workload} {r.precision} {r.shape}: busy {phase['gpu_busy_share']:.3f} over "
                  f"{phase.get('gpu_busy_samples')} NVML utilization samples, {phase['seconds']:.2f} s, power "
                  f"{r.figures.get('power_watts', r.details.get('power_note'))}")
            assert phase.get("gpu_busy_samples", 0) >= 3, phase


STARVED_POWER = """
import json, time, torch, pynvml
from sixdim.workloads.measure import energy
from sixdim.workloads.measure import timing
from sixdim.workloads.context import RunContext

pynvml.nvmlInit()
uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
meter = energy.NvmlEnergy([uuid.decode() if isinstance(uuid, bytes) else uuid])
x = torch.ones(1024, device="cuda")

def starved():  # a 2 µs kernel, then 300 µs of host work before the next: the GPU idles >95% of the time
    x.add_(1)
    until = time.perf_counter() + 300e-6
    while time.perf_counter() < until:
        pass

figures, details = timing.power_phase(starved, torch.device("cuda:0"), RunContext(device="cuda:0", energy=meter),
                                      seconds=1.5, seconds_per_unit=300e-6, work_per_call=1.0)
print(json.dumps({"figures": figures, "details": details}))
"""


def test_a_power_phase_the_gpu_idled_through_reports_no_power(nvml):
    """The other side of the 90% rule, on a real GPU and energy counter (in a child process, as the
    worker would: this process never holds a CUDA context).  On an H200 (2026-11-26) CUDA events around
    each call put this loop at 87% busy (the driver held the end event back until the next launch);
    NVML's utilization samples are what the rule now reads."""
    done = subprocess.run([sys.executable, "-c", STARVED_POWER], capture_output=True, text=True, timeout=180,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    phase = out["details"]["power"]
    assert out["figures"] == {}, out
    assert phase["unit"] == "call" and phase["gpu_busy_share"] < 0.5, phase
    assert "the GPU was busy for only" in out["details"]["power_note"], out["details"]


def test_one_second_of_power_agrees_with_three(mixed):
    """The 1 s minimum: aligned on counter updates, a 1 s phase gives the same power as a 3 s one of the
    same kernel (within 6%: the two phases start at different temperatures), from at least 5 updates."""
    device, records = mixed
    short, long_ = [r for r in records if r.workload == "gemm" and r.shape.startswith("m=3072,")]
    for r in (short, long_):
        assert r.status == "ok", r.reason
        phase = r.details.get("power")
        assert phase, r.details.get("power_note")
        assert phase["aligned"] is True and phase["counter_updates"] >= 5, phase
    assert short.details["power"]["seconds"] < 1.5 <= long_.details["power"]["seconds"]
    assert short.figures["power_watts"] == pytest.approx(long_.figures["power_watts"], rel=0.06), \
        (short.figures["power_watts"], long_.figures["power_watts"])


def test_sparse_gemm_keeps_int32_indices_and_one_cache_regime_on_the_gpu(mixed):
    device, records = mixed
    sparse = [r for r in records if r.workload == "sparse_gemm"]
    assert sparse and all(r.status == "ok" for r in sparse), [(r.shape, r.status, r.reason) for r in sparse]
    for r in sparse:
        d = r.details
        assert d["index_dtype"] == "int32", (r.shape, d["index_dtype"])
        assert d["cache_regime"] == d["dense_cache_regime"] in ("cold", "warm"), (r.shape, d)
        assert d["timing_method"] in GPU_TIMING_METHODS and d["dense_timing_method"] in GPU_TIMING_METHODS
        assert r.figures["speedup"] > 0


# (d) memory

def test_memory_is_the_cases_own_not_carried_over(mixed):
    device, records = mixed
    big = _one(records, "gemm", "bf16", f"m={BIG},")
    small = _one(records, "gemm", "bf16", f"m={SMALL},")
    assert big.started_at == small.started_at, "the two cases must share a worker for this check"
    assert "memory_bytes" in big.figures and "memory_bytes" in small.figures, (big.figures, small.figures)
    big_operands = 3 * BIG * BIG * 2  # A, B and D in bf16
    assert big_operands <= big.figures["memory_bytes"] <= 3 * big_operands + 256 * 2**20, big.figures
    small_operands = 3 * SMALL * SMALL * 2
    bound = 4 * small_operands + 64 * 2**20
    assert small.figures["memory_bytes"] < bound, (
        f"the {SMALL}³ case reports {small.figures['memory_bytes'] / 2**20:.1f} MiB (bound {bound / 2**20:.1f} MiB); "
        f"the {BIG}³ case before it had {big.figures['memory_bytes'] / 2**20:.1f} MiB")
    if "memory_reserved_bytes" in small.figures:
        assert small.figures["memory_reserved_bytes"] < big.figures["memory_bytes"]


def test_a_cases_memory_does_not_depend_on_what_ran_before_it(mixed, nvml, tmp_path_factory):
    """The same case alone in a worker and after others: the same memory_bytes.  On an H100 (2026-11-25)
    the first GEMM case of a worker also counted cuBLAS's 32 MiB workspace, and every later one did not."""
    device, records = mixed
    after_others = _one(records, "gemm", "bf16", f"m={SMALL},")
    alone = _executor(nvml, tmp_path_factory.mktemp("alone")).execute_many(
        [(registry.get("gemm"), _fast("gemm", {"m": SMALL, "n": SMALL, "k": SMALL, "precisions": ["bf16"]}))],
        device, timeout=300)
    first = _one(alone, "gemm", "bf16", f"m={SMALL},")
    assert abs(first.figures["memory_bytes"] - after_others.figures["memory_bytes"]) <= 2**20, (
        f"alone {first.figures['memory_bytes'] / 2**20:.2f} MiB, after the {BIG}³ case "
        f"{after_others.figures['memory_bytes'] / 2**20:.2f} MiB")


GRAPHED_RNN = {"set": "quick", "scale": 8, "precisions": ["fp32"]}
"""DeepBench's quick RNN layers at 1/8 size: each case's tensors take a few MiB, less than one workspace."""


def _rnn_bytes_bound(shape: str) -> float:
    """Twice what an fp32 RNN case's tensors can take (inputs, weights, every step's states, activations
    and gradients), plus 4 MiB: well under the 32 MiB a counted cuBLAS workspace would add."""
    p = dict(part.split("=") for part in shape.split(","))
    gates = {"vanilla": 1, "gru": 3, "lstm": 4}[p["cell"]]
    hidden, batch, steps = int(p["hidden"]), int(p["batch"]), int(p["steps"])
    return 2 * 4 * (steps * batch * hidden * (2 * gates + 3) + gates * hidden * hidden) + 4 * 2**20


def test_a_graph_captured_case_counts_no_cublas_workspace(nvml, tmp_path_factory):
    """Issue 27 item 8: a case replayed from a CUDA graph counted the capture stream's cuBLAS workspace
    (32 MiB with CUBLAS_WORKSPACE_CONFIG=:4096:8), a new one for each capture.  Small RNN layers twice in
    one worker, a GEMM between: each case reports only its own memory, the same both times."""
    device = resolve(["cuda:0"], nvml)[0]
    rnn = _fast("rnn", GRAPHED_RNN)
    records = _executor(nvml, tmp_path_factory.mktemp("graphs")).execute_many(
        [(registry.get("rnn"), rnn),
         (registry.get("gemm"), _fast("gemm", {"m": MID, "n": MID, "k": MID, "precisions": ["bf16"]})),
         (registry.get("rnn"), rnn)], device, timeout=300)
    _dump("graphs", records)
    assert not _problems(records), _problems(records)
    rnns = [r for r in records if r.workload == "rnn"]
    first, second = rnns[:len(rnns) // 2], rnns[len(rnns) // 2:]
    assert first and [r.shape for r in first] == [r.shape for r in second]
    for a, b in zip(first, second):
        for r in (a, b):
            assert r.details["timing_method"] == "cuda_graph_events", (r.shape, r.details.get("timing_method"))
            bound = _rnn_bytes_bound(r.shape)
            assert r.figures["memory_bytes"] < bound, (
                f"{r.shape} {r.kernel_pass}: {r.figures['memory_bytes'] / 2**20:.1f} MiB, over the "
                f"{bound / 2**20:.1f} MiB its tensors can take: a cuBLAS workspace (32 MiB)?")
        assert abs(a.figures["memory_bytes"] - b.figures["memory_bytes"]) <= 2**20, (a.shape, a.figures, b.figures)


# (e) TF32 only where asked for

def test_tf32_off_for_fp32_and_on_for_tf32(mixed):
    device, records = mixed
    off = [_one(records, "gemm", "fp32", f"m={MID},"), _one(records, "conv", "fp32", kernel_pass="forward")]
    off += [r for r in records if r.workload == "model"]  # fp32, and amp (autocast over IEEE fp32)
    assert len(off) == 6
    wrong = [(r.workload, r.precision, r.mode, r.details.get("torch_flags")) for r in off
             if r.status != "ok" or any(get_flag(r, key) is not False for key in TF32_KEYS)]
    assert not wrong, f"TF32 not off: {wrong}"
    tf32 = _one(records, "gemm", "tf32", f"m={MID},")
    assert tf32.status == "ok", tf32.reason
    assert get_flag(tf32, "matmul_allow_tf32") is True and get_flag(tf32, "cudnn_allow_tf32") is True, \
        tf32.details.get("torch_flags")
    bf16 = _one(records, "gemm", "bf16", f"m={MID},")
    assert get_flag(bf16, "bf16_reduced_precision_reduction") is False, bf16.details.get("torch_flags")
    assert get_flag(bf16, "matmul_allow_tf32") is False


def get_flag(record, key: str):
    flags = record.details.get("torch_flags")
    assert isinstance(flags, dict), f"{record.workload} {record.precision}: no details.torch_flags"
    return flags.get(key)


# (f) int8 and fp8

@pytest.mark.parametrize("precision, minimum, multiple", [("int8", (7, 5), 8), ("fp8", (8, 9), 16)])
def test_int8_and_fp8_run_at_their_padded_shape(mixed, precision, minimum, multiple):
    device, records = mixed
    r = _one(records, "gemm", precision, "m=1001,")
    capability = _capability(r)
    if capability < minimum:
        assert r.status == "unsupported", (r.status, r.reason)
        pytest.skip(f"{precision} needs compute capability {minimum}, this GPU has {capability}: reported "
                    f"unsupported ({r.reason})")
    assert r.status == "ok", r.reason
    padded = r.details.get("padded_shape")
    assert padded, f"1001×1003×1005 must be padded for {precision}: {r.details}"
    up = lambda v: -(-v // multiple) * multiple  # noqa: E731
    expected = {"m": max(17, up(1001)) if precision == "int8" else up(1001), "n": up(1003), "k": up(1005)}
    assert padded == expected
    flop = 2 * expected["m"] * expected["n"] * expected["k"]
    requested = 2 * 1001 * 1003 * 1005  # the exported rate is the requested shape's work (issue 27 item 7)
    assert r.details["padded_flop_count"] == flop
    assert r.details["flop_count"] == r.details.get("requested_flop_count") == requested
    assert r.figures["flops"] == pytest.approx(requested / r.figures["seconds"], rel=1e-6)
    assert r.details["padded_flops"] == pytest.approx(flop / r.figures["seconds"], rel=1e-6)
    assert r.figures["max_relative_error"] <= (0 if precision == "int8" else 2e-2)


# (g) convergence and models

def test_convergence_is_deterministic_and_converges_on_the_gpu(mixed):
    device, records = mixed
    r = _one(records, "convergence")
    assert r.status == "ok", r.reason
    assert get_flag(r, "deterministic") is True  # cuBLAS accepted it: CUBLAS_WORKSPACE_CONFIG was set
    assert r.figures["accuracy"] >= r.params["target_accuracy"]
    assert r.figures["stability_ratio"] > 0 and r.figures["time_to_train_seconds"] > 0


@pytest.mark.parametrize("model, precision", [("resnet50", "fp32"), ("gpt", "amp")])
@pytest.mark.parametrize("mode", ["training", "inference"])
def test_models_train_and_infer_on_the_gpu(mixed, model, precision, mode):
    device, records = mixed
    r = _one(records, "model", precision, f"model={model},", mode=mode)
    assert r.status == "ok", r.reason
    assert r.figures["samples_per_second"] > 0
    assert r.figures.get("memory_bytes", 0) > 0, r.figures
    assert get_flag(r, "cudnn_benchmark") is True


# (h) flags do not leak from one case to the next

def test_deterministic_mode_does_not_leak_into_the_next_case(mixed):
    """The case after convergence sets no flags of its own (memory_bandwidth), so only the worker's restore
    can have turned deterministic mode off: a GEMM next would set every flag again and hide a leak."""
    device, records = mixed
    index = next(i for i, r in enumerate(records) if r.workload == "convergence")
    assert get_flag(records[index], "deterministic") is True
    after = records[index + 1]
    assert after.workload == "memory_bandwidth", (after.workload, after.shape)
    assert after.started_at == records[index].started_at, "same worker"
    assert after.status == "ok", after.reason
    assert get_flag(after, "deterministic") is False
    assert get_flag(after, "cudnn_benchmark") is False  # nor the conv/model autotuner


# (i) a failed CUDA graph capture leaves the thread on the caller's stream

FAILED_CAPTURE = """
import torch
from sixdim.workloads.measure import timing

x = torch.ones(4, device="cuda")
before = torch.cuda.current_stream().cuda_stream
replay = timing._graph_of(lambda: x.sum().item(), 3)  # a host read cannot be captured
assert replay is None, "the capture should have failed"
after = torch.cuda.current_stream().cuda_stream
assert after == before, f"left on stream {after:#x}, not the caller's {before:#x}"
print((x * 2).sum().item())
"""


def test_a_failed_graph_capture_puts_the_callers_stream_back(nvml):
    """In a child process, so this one never holds a CUDA context (see the module docstring)."""
    done = subprocess.run([sys.executable, "-c", FAILED_CAPTURE], capture_output=True, text=True, timeout=180,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "8.0"


# (j) the onnx workload on ONNX Runtime's CUDA provider

ONNX_FAST = {"rounds": 5, "min_round_seconds": 0.05, "warmup_seconds": 0.2, "latency_samples": 40,
             "power_seconds": 0.0}


def test_onnx_runs_on_the_cuda_provider_or_says_why_not(nvml, tmp_path):
    """sixdim's small GPT through ``CUDAExecutionProvider``: checked against PyTorch, with GPU memory
    from NVML. Where the installed onnxruntime has no CUDA provider (the CPU wheel), the case must be
    ``unsupported`` naming the extra, and the test then skips with that reason."""
    try:
        import onnxruntime
    except ImportError:
        pytest.skip("onnxruntime is not installed: pip install -e '.[onnx-gpu]'")
    device = resolve(["cuda:0"], nvml)[0]
    params = {"model": "gpt", "size": "small", "latency_batches": [1], "throughput_batches": [32],
              "providers": ["CUDAExecutionProvider"], "cache_dir": str(tmp_path / "onnx"), **ONNX_FAST}
    records = _executor(nvml, tmp_path).execute_many([(registry.get("onnx"), params)], device, timeout=600)
    _dump("onnx", records)
    assert [r.shape for r in records] == ["model=gpt,size=small,batch=1,ep=CUDA",
                                          "model=gpt,size=small,batch=32,ep=CUDA"]
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        assert all(r.status == "unsupported" and "sixdim[onnx-gpu]" in r.reason for r in records), \
            [(r.status, r.reason) for r in records]
        pytest.skip(f"onnxruntime {onnxruntime.__version__} here has no CUDA provider "
                    f"({onnxruntime.get_available_providers()}): install the onnx-gpu extra")
    assert not _problems(records), _problems(records)
    for r in records:
        f, d = r.figures, r.details
        assert d["active_providers"][0] == "CUDAExecutionProvider", d["active_providers"]
        assert 0 < f["latency_p50_seconds"] <= f["latency_p90_seconds"] <= f["latency_p99_seconds"]
        assert f["max_relative_error"] <= d["tolerance"]
        assert f["samples_per_second"] > 0
        assert f.get("memory_bytes", 0) > 0, (f, d.get("memory_note"))  # ORT's arena, seen by NVML
        assert r.environment["onnxruntime"] == onnxruntime.__version__
    small, large = records
    assert large.figures["samples_per_second"] > small.figures["samples_per_second"]  # batching pays on a GPU


# (k) the run conditions as NVML reads them on a real GPU (read only: nothing is set)


def test_gpu_conditions_are_read_in_plausible_ranges_or_say_why_not(nvml):
    """Every snapshot GPU condition of every GPU is read in a plausible range, or listed as
    unavailable with NVML's reason (a GPU without NVLink or MIG, a query needing root)."""
    from sixdim.core.conditions import CONDITIONS, UNAVAILABLE

    snapshot = {c.name: c for c in CONDITIONS if c.scope == "gpu" and c.span == "snapshot"}
    for gpu in nvml.gpus:
        started = time.perf_counter()
        conditions = nvml.conditions(gpu.index, own_pids=(os.getpid(),))
        took = time.perf_counter() - started
        where = f"GPU {gpu.index} ({gpu.name})"
        unavailable = conditions[UNAVAILABLE]
        values = {k: v for k, v in conditions.items() if k != UNAVAILABLE}
        assert set(values) | set(unavailable) == set(snapshot), where
        assert not set(values) & set(unavailable), where
        assert all(isinstance(r, str) and r.strip() for r in unavailable.values()), (where, unavailable)
        assert took < 1.0, f"{where}: one conditions() call took {took:.3f} s"
        for name, value in values.items():
            unit = snapshot[name].unit
            assert isinstance(value, (int, float)) and not isinstance(value, bool), (where, name, value)
            if unit == "watts":
                assert 10 <= value <= 2000, (where, name, value)
            elif unit == "hertz":
                assert 100e6 <= value <= 5e9, (where, name, value)
            elif unit == "flag":
                assert value in (0, 1), (where, name, value)
            elif unit == "code":
                assert value in (0, 1, 2, 3), (where, name, value)  # nvmlComputeMode_t
            elif unit == "count":
                assert value >= 0, (where, name, value)
            elif unit == "celsius":
                assert 5 <= value <= 120, (where, name, value)
        if {"power_limit_watts", "power_limit_default_watts"} <= set(values):
            assert values["power_limit_watts"] <= values["power_limit_default_watts"] * 1.5, (where, values)
        for applications, maximum in (("applications_sm_clock_hertz", "max_sm_clock_hertz"),
                                      ("applications_memory_clock_hertz", "max_memory_clock_hertz")):
            if {applications, maximum} <= set(values):
                assert values[applications] <= values[maximum], (where, values[applications], values[maximum])
        for key in ("pcie_generation", "pcie_max_generation"):
            if key in values:
                assert 1 <= values[key] <= 6, (where, key, values[key])
        for key in ("pcie_width", "pcie_max_width"):
            if key in values:
                assert values[key] in (1, 2, 4, 8, 16, 32), (where, key, values[key])
        for now, most in (("pcie_generation", "pcie_max_generation"), ("pcie_width", "pcie_max_width")):
            if {now, most} <= set(values):
                assert values[now] <= values[most], (where, now, values[now], most, values[most])
        if "nvlink_active_links" in values:
            assert 0 <= values["nvlink_active_links"] <= 18, (where, values["nvlink_active_links"])


# ---------------------------------------------------------------------------- the cost of watching (issue 41)

def test_the_first_case_of_a_worker_no_longer_carries_the_libraries_start(nvml, tmp_path):
    """The worker starts CUDA, cuBLAS and cuDNN before its first case (agent/run/worker.py
    ``prepare_device``): the same GEMM first and second in one worker take about as long (on the H100,
    before this, the first took 5.2 s more), and the first says how long the preparation took."""
    [device] = resolve(["cuda:0"], nvml)
    params = _fast("gemm", {"m": 1760, "n": 128, "k": 1760, "precisions": ["bf16"]})
    executor = _executor(nvml, tmp_path)
    records = executor.execute_many([(registry.get("gemm"), params), (registry.get("gemm"), params)], device,
                                    suite="cost", timeout=300)
    _dump("first_case", records)
    assert not _problems(records)
    first, second = (r.details["case_wall"][1] - r.details["case_wall"][0] for r in records)
    assert records[0].details.get("device_setup_seconds", 0) > 0 and "device_setup_seconds" not in records[1].details
    assert first < 1.5 * second + 0.5, (first, second, records[0].details["device_setup_seconds"])


def test_the_frequent_tier_costs_what_check_config_estimates(nvml, tmp_path):
    """The frequent tier's device time on this GPU against serve --check-config's estimate for it (the H100
    model): within a factor of two either way (the model is the H100's; other GPUs differ), and printed
    for docs/BENCHMARKS.md."""
    from sixdim.config import load
    from sixdim.daemon import cost

    [device] = resolve(["cuda:0"], nvml)
    frequent = next(s for s in load(None, env={}).suites if s.name == "frequent")
    executor = _executor(nvml, tmp_path, guard=True)
    started = time.monotonic()
    records = executor.execute_many([(registry.get(e.name), e.params) for e in frequent.workloads], device,
                                    suite="frequent", timeout=300)
    wall = time.monotonic() - started
    _dump("frequent", records, wall_seconds=wall)
    assert not _problems(records)
    spent = sum(r.details["case_wall"][1] - r.details["case_wall"][0] for r in records)
    estimate = cost.run_cost(cost.planned_cases(frequent, "cuda"), cost.H100, power_counter=True).seconds
    print(f"frequent tier on {device.model_name}: {spent:.2f} s of device time ({wall:.2f} s wall), "
          f"estimate {estimate:.2f} s; per case: " + ", ".join(
              f"{r.workload} {r.details['case_wall'][1] - r.details['case_wall'][0]:.2f} s" for r in records))
    assert 0.5 * estimate < spent < 2 * estimate
