"""Cases sharing a worker do not see each other, and a number's meaning is set per case.

Real worker processes (sixdim.run.runner), real torch on the CPU.  What only a GPU can show
(allocator peaks per case, TF32 on cuDNN) is in tests/test_gpu.py.
"""

from __future__ import annotations

import time

import pytest
import torch

from sixdim.run.runner import run_worker
from sixdim.workloads import registry
from sixdim.workloads.context import RunContext
from sixdim.workloads.kernels import gemm
from sixdim.workloads.measure import flags
from sixdim.workloads.measure.energy import NvmlEnergy
from sixdim.workloads.measure.report import Measurement
from sixdim.workloads.measure.timing import (
    MIN_BUSY_SHARE,
    Timing,
    _Blocks,
    busy_note,
    cache_regime,
    power_phase,
    power_unit,
)


@pytest.mark.slow
def test_flags_a_case_sets_are_restored_before_the_next_case():
    outcome = run_worker(["tests.flag_workloads:sets_every_flag", "tests.flag_workloads:reports_environment"],
                         [{}, {}], "cpu", 60)
    first, second = outcome.cases[0], outcome.cases[1]
    # The first case's result records the flags it ran under ...
    assert first.details["torch_flags"] == {
        "matmul_allow_tf32": True, "cudnn_allow_tf32": False, "cudnn_benchmark": True, "deterministic": True,
        "fp16_reduced_precision_reduction": False, "bf16_reduced_precision_reduction": False}
    # ... and the second starts from torch's defaults again.
    assert second.details["deterministic_at_start"] is False
    assert second.details["matmul_tf32_at_start"] is False
    assert second.details["cudnn_tf32_at_start"] is True  # torch's own default, restored
    assert second.details["cudnn_benchmark_at_start"] is False


@pytest.mark.slow
def test_worker_sets_the_cublas_workspace_that_deterministic_mode_needs():
    outcome = run_worker("tests.flag_workloads:reports_environment", [{}], "cpu", 60)
    assert outcome.cases[0].details["cublas_workspace_config"] == flags.CUBLAS_WORKSPACE_CONFIG


@pytest.mark.slow
def test_convergence_deterministic_mode_does_not_leak_into_the_next_case():
    convergence = registry.get("convergence").cases({"runs": 1, "epochs": 2, "target_accuracy": 0.0}, "cpu")[0]
    fp32 = registry.get("gemm").cases({"m": 32, "n": 32, "k": 32, "precisions": ["fp32"], "power_seconds": 0}, "cpu")[0]
    outcome = run_worker(["sixdim.workloads.models.convergence:run", "sixdim.workloads.kernels.gemm:run",
                          "tests.flag_workloads:reports_environment"],
                         [convergence.params, fp32.params, {}], "cpu", 120)
    assert outcome.cases[0].status == "ok", outcome.cases[0].reason
    assert outcome.cases[0].details["torch_flags"]["deterministic"] is True
    assert outcome.cases[1].status == "ok", outcome.cases[1].reason
    assert outcome.cases[1].details["torch_flags"]["deterministic"] is False
    assert outcome.cases[1].details["torch_flags"]["matmul_allow_tf32"] is False
    assert outcome.cases[2].details["deterministic_at_start"] is False


@pytest.mark.parametrize("precision, tf32, reduced", [("fp32", False, True), ("tf32", True, True),
                                                      ("bf16", False, False), ("fp16", False, False)])
def test_each_precision_sets_what_it_means(precision, tf32, reduced):
    try:
        applied = flags.apply(precision, cudnn_benchmark=True)
        assert flags.current() == applied
        assert applied["matmul_allow_tf32"] is tf32 and applied["cudnn_allow_tf32"] is tf32
        assert applied["bf16_reduced_precision_reduction"] is reduced
        assert applied["cudnn_benchmark"] is True
        assert flags.apply("fp32", cudnn_benchmark=True, deterministic=True)["cudnn_benchmark"] is False
    finally:
        flags.restore()


def test_int8_and_fp8_run_each_shape_once_in_their_one_layout():
    cases = registry.get("gemm").cases({"set": "training", "scale": 64, "precisions": ["int8", "fp8", "fp32"]},
                                       "cuda")
    for precision in ("int8", "fp8"):
        shapes = [c.shape for c in cases if c.precision == precision]
        assert shapes and len(shapes) == len(set(shapes))
        assert all(s.endswith("op=NT") for s in shapes)
        assert {c.params["op"] for c in cases if c.precision == precision} == {"NT"}
    fp32_ops = {c.params["op"] for c in cases if c.precision == "fp32"}
    assert fp32_ops == {"NN", "TN", "NT"}  # the float precisions keep DeepBench's transposes


def test_padded_int8_shape_counts_the_requested_flops():
    assert gemm.padded_shape("int8", 10, 12, 13, torch.device("cuda")) == (17, 16, 16)
    assert gemm.padded_shape("fp8", 10, 12, 13, torch.device("cuda")) == (16, 16, 16)
    assert gemm.padded_shape("int8", 10, 12, 13, torch.device("cpu")) == (10, 12, 13)
    produced = torch.ones(2, 2)
    timing = Timing([1e-3] * 5, 1, "perf_counter")
    output = gemm.finish({"m": 10, "n": 12, "k": 13, "dtype": "int8"}, lambda: None,
                         lambda: (produced, produced.double()), Measurement(timing), (17, 16, 16))
    assert output.figures["flops"] == pytest.approx(2 * 10 * 12 * 13 / 1e-3)  # the work the label names
    assert output.details["flop_count"] == 2 * 10 * 12 * 13
    assert output.details["padded_flop_count"] == 2 * 17 * 16 * 16
    assert output.details["padded_shape"] == {"m": 17, "n": 16, "k": 16}
    assert output.details["requested_flop_count"] == 2 * 10 * 12 * 13


def test_gemm_result_states_its_cache_regime_and_runs_mm_into_its_output():
    case = registry.get("gemm").cases({"m": 64, "n": 32, "k": 48, "precisions": ["fp32"]}, "cpu")[0]
    output = gemm.run(case.params, RunContext(device="cpu"))
    assert output.status == "ok"
    assert output.details["cache_regime"] == "warm" and cache_regime(torch.device("cpu"), 10) == "warm"
    assert output.figures["flops"] == pytest.approx(2 * 64 * 32 * 48 / output.figures["seconds"])


class _FakeMeter:
    """A counter that advances at a known power, as NVML's total-energy counter would."""

    available, reason, source = True, "", "fake"

    def __init__(self, watts: float):
        self.watts, self.origin = watts, time.monotonic()

    def joules(self) -> float:
        return self.watts * (time.monotonic() - self.origin)


def _busy(seconds: float = 2e-3):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.slow
def test_power_phase_reads_the_counter_at_both_ends_and_gives_work_per_joule():
    ctx = RunContext(device="cpu", energy=_FakeMeter(250.0))
    figures, details = power_phase(_busy, torch.device("cpu"), ctx, seconds=1.2, seconds_per_unit=2e-3,
                                   work_per_call=1e9)
    power = details["power"]
    assert power["seconds"] >= 1.2 and power["readings"] >= 10  # about 24 blocks of 50 ms; fewer on a busy machine
    # the clock and the counter are read one after the other: a busy machine's preemption between
    # the two reads skews the quotient by its length over 1.2 s
    assert figures["power_watts"] == pytest.approx(250.0, rel=0.1)
    assert figures["energy_joules"] == pytest.approx(figures["power_watts"] * power["seconds"])
    assert figures["flop_per_joule"] == pytest.approx(1e9 * power["calls"] / figures["energy_joules"])
    assert power["end_unix"] - power["start_unix"] == pytest.approx(power["seconds"], abs=0.2)


def test_the_power_phase_says_what_it_repeated_and_keeps_the_kernel_on_a_cpu():
    """On a CPU the unit is the kernel as it is (no graphs, no device events): ``unit`` says so and no
    GPU-busy share is claimed; a unit that is already a replay of several calls stays one."""
    ctx = RunContext(device="cpu", energy=_FakeMeter(100.0))
    figures, details = power_phase(_busy, torch.device("cpu"), ctx, seconds=1.0, seconds_per_unit=2e-3,
                                   work_per_call=1.0)
    power = details["power"]
    assert (power["unit"], power["calls_per_unit"]) == ("call", 1) and "gpu_busy_share" not in power
    assert figures["power_watts"] > 0
    replay = lambda: _busy(2e-3)  # noqa: E731  (stands for a graph of 4 calls)
    assert power_unit(replay, torch.device("cpu"), 4, 2e-3) == (replay, 4, 2e-3, "graph_replay")
    # a short kernel is only captured on CUDA; on a CPU it is called as it is
    assert power_unit(_busy, torch.device("cpu"), 1, 10e-6) == (_busy, 1, 10e-6, "call")


def test_a_power_phase_the_gpu_idled_through_reports_no_power_and_says_why():
    """The 90% rule: below it the energy would be the launch gaps' as much as the kernel's."""
    assert busy_note(0.95) is None and busy_note(MIN_BUSY_SHARE) is None
    note = busy_note(0.42)
    assert note is not None and "42%" in note and "90%" in note and "utilization" in note


class _QueuedEvent:
    """Stands for a CUDA event on a queue that runs behind the host: it completes only when waited for,
    and logs that, so the order of launches, waits and reads can be checked."""

    log: list[str] = []

    def record(self) -> None:
        self.log.append("record")

    def synchronize(self) -> None:
        self.log.append("wait")


class _LoggingMeter(_FakeMeter):
    def joules(self) -> float:
        _QueuedEvent.log.append("read")
        return super().joules()


def test_the_counter_is_read_with_the_next_block_already_queued():
    """On a GPU the phase never leaves the device idle while the host reads the counter: each read waits
    for the block before the one just launched, and counts the units done by that block's end."""
    _QueuedEvent.log = []
    calls: list[int] = []
    blocks = _Blocks(lambda: calls.append(1), torch.device("cpu"), _LoggingMeter(10.0), event=_QueuedEvent)
    _, done = blocks.read_after(3)  # the first read: two blocks queued, the older one waited for
    assert (len(calls), done) == (6, 3)
    assert _QueuedEvent.log == ["record", "record", "wait", "read"]
    _QueuedEvent.log = []
    _, done = blocks.read_after(5)
    assert (len(calls), done) == (11, 6) and len(blocks.pending) == 1
    assert _QueuedEvent.log == ["record", "wait", "read"]  # launched before waiting: the queue never runs dry


def test_a_cpu_power_phase_reads_after_each_block_it_ran():
    blocks = _Blocks(_busy, torch.device("cpu"), _FakeMeter(10.0))
    _, done = blocks.read_after(2)
    assert done == 2 and blocks.pending == []


def _gpu_with_samples(samples):
    from tests.fakenvml import FakeGpu, FakeNvml

    fake = FakeNvml([FakeGpu(utilization_samples=samples)])
    return fake, NvmlEnergy([fake.gpus[0].uuid], module=fake)


def test_the_busy_share_is_nvmls_utilization_over_the_phase_only():
    """Samples before the phase's marker do not count; the share is their mean, as a ratio."""
    fake, meter = _gpu_with_samples([(1_000_000, 100), (1_166_000, 100)])  # before the phase: the timed rounds
    assert meter.available
    marker = meter.utilization_marker()
    assert marker == [1_166_000]
    fake.gpus[0].utilization_samples += [(1_333_000, 4), (1_500_000, 2), (1_666_000, 3), (1_833_000, 3)]
    share, count = meter.busy_share(marker, 0.7)
    assert count == 4 and share == pytest.approx(0.03)
    assert busy_note(share) is not None


def test_a_phase_with_too_few_utilization_samples_has_no_share_and_says_why():
    fake, meter = _gpu_with_samples([])
    marker = meter.utilization_marker()  # NVML answers NOT_FOUND: no sample yet
    assert marker == [0]
    fake.gpus[0].utilization_samples += [(2_000_000, 100)]
    why = meter.busy_share(marker, 1.0)
    assert isinstance(why, str) and "1 utilization sample(s)" in why and "at least 3" in why


def test_no_power_from_a_phase_shorter_than_a_second_or_without_a_counter():
    figures, details = power_phase(_busy, torch.device("cpu"), RunContext(device="cpu", energy=_FakeMeter(1.0)),
                                   seconds=0.5, work_per_call=1.0)
    assert figures == {} and "shorter than 1 s" in details["power_note"]
    figures, details = power_phase(_busy, torch.device("cpu"), RunContext(device="cpu"), seconds=3.0)
    assert figures == {} and details["power_note"]


class _FailingMeter(_FakeMeter):
    """A counter that stops answering after a few readings, as an NVML error or a lost RAPL package would."""

    def __init__(self, watts: float, answers: int):
        super().__init__(watts)
        self.answers = answers

    def joules(self) -> float:
        self.answers -= 1
        if self.answers < 0:
            raise RuntimeError("no readable CPU energy counter: package-1 unreadable")
        return super().joules()


def test_a_counter_lost_mid_phase_costs_the_power_figure_not_the_case():
    figures, details = power_phase(_busy, torch.device("cpu"),
                                   RunContext(device="cpu", energy=_FailingMeter(100.0, answers=3)),
                                   seconds=1.0, work_per_call=1.0)
    assert figures == {}
    assert "could not be read during the power phase" in details["power_note"]
    assert "package-1 unreadable" in details["power_note"]


def test_a_workload_error_in_the_power_phase_still_fails_the_case():
    def broken():
        raise ValueError("the kernel itself failed")

    with pytest.raises(ValueError, match="kernel itself"):
        power_phase(broken, torch.device("cpu"), RunContext(device="cpu", energy=_FakeMeter(1.0)), seconds=1.0,
                    seconds_per_unit=1e-3)


@pytest.mark.slow
def test_a_case_whose_work_runs_in_ranks_gets_no_memory_from_the_worker(monkeypatch):
    """all-reduce and linearity (runs_in_ranks): the worker runs them without touching its own
    allocator's statistics, which would report their memory as 0."""
    from sixdim.run.executor import worker_groups
    from sixdim.run.worker import run_case
    from sixdim.workloads.measure import timing

    assert registry.get("allreduce").runs_in_ranks and registry.get("linearity").runs_in_ranks
    assert not registry.get("gemm").runs_in_ranks
    calls: list[str] = []
    monkeypatch.setattr(timing, "begin_case_memory", lambda ctx, device: calls.append("begin"))
    monkeypatch.setattr(timing, "note_memory", lambda ctx: calls.append("note"))

    from sixdim.workloads.context import WorkloadOutput

    result = run_case(lambda params, ctx: WorkloadOutput({"seconds": 1.0}), {}, RunContext(device="cpu"),
                      uses_torch=True, worker_memory=False)
    assert result["status"] == "ok" and "memory_bytes" not in result["figures"] and calls == []
    run_case(lambda params, ctx: WorkloadOutput({"seconds": 1.0}), {}, RunContext(device="cpu"), uses_torch=True)
    assert calls == ["begin", "note"]
    # and a rank-running workload never shares a worker with one that measures its own memory
    gemm, allreduce = registry.get("gemm"), registry.get("allreduce")
    planned = [(gemm, c) for c in gemm.cases({}, "cpu")[:1]] + [(allreduce, c) for c in allreduce.cases({}, "cpu")[:1]]
    assert [[spec.name for spec, _ in group] for group in worker_groups(planned)] == [["gemm"], ["allreduce"]]


class _SteppedMeter(_FakeMeter):
    """A counter that moves in steps every ``period`` seconds, as NVML's total energy does (about every
    100 ms), at a known power, its steps starting at ``phase`` into the period."""

    def __init__(self, watts: float, period: float = 0.1, phase: float = 0.0):
        super().__init__(watts)
        self.period, self.origin = period, self.origin - phase

    def joules(self) -> float:
        elapsed = time.monotonic() - self.origin
        return self.watts * self.period * int(elapsed / self.period)


def _unaligned_power(meter, seconds: float) -> float:
    """The phase as it was before (first and last readings wherever they fall): what alignment replaces."""
    start_t, start_j = time.monotonic(), meter.joules()
    while time.monotonic() - start_t < seconds:
        _busy(0.05)
    end_t, end_j = time.monotonic(), meter.joules()
    return (end_j - start_j) / (end_t - start_t)


@pytest.mark.slow
def test_the_power_phase_sits_on_the_counters_updates_so_its_steps_add_no_error():
    """A 100 ms-step counter at 300 W, with its steps at four phases: the aligned phase gives 300 W within
    2% each time, and records the updates it spanned; the same phase cut anywhere is up to a step off at
    each end (a 1.05 s phase holds 10 or 11 steps: about 5% off)."""
    errors, unaligned = [], []
    for phase in (0.0, 0.03, 0.06, 0.09):
        meter = _SteppedMeter(300.0, phase=phase)
        figures, details = power_phase(lambda: _busy(1e-3), torch.device("cpu"), RunContext(device="cpu", energy=meter),
                                       seconds=1.05, seconds_per_unit=1e-3)
        power = details["power"]
        assert power["aligned"] and power["counter_updates"] >= 10, power
        errors.append(abs(figures["power_watts"] / 300.0 - 1))
        unaligned.append(abs(_unaligned_power(_SteppedMeter(300.0, phase=phase), 1.05) / 300.0 - 1))
    assert max(errors) < 0.02, errors
    assert max(unaligned) > 0.03, unaligned  # 10 or 11 steps in 1.05 s: about 5% off one way or the other


def test_a_counter_that_moves_too_rarely_gives_no_power():
    figures, details = power_phase(lambda: _busy(1e-3), torch.device("cpu"),
                                   RunContext(device="cpu", energy=_SteppedMeter(300.0, period=0.4)),
                                   seconds=1.0, seconds_per_unit=1e-3)
    assert figures == {} and "moved only" in details["power_note"], details


def test_after_any_case_torchs_own_code_can_still_read_the_tf32_flags():
    """Why TF32 stays on the ``allow_tf32`` flags (issue 27, item 11): torch 2.13 deprecates them for
    ``fp32_precision``, but its own ONNX exporter still reads ``torch.backends.cudnn.allow_tf32``, and that
    read raises once cuDNN's precision was set through the new settings to "ieee" (measured: it raised in
    tests/test_onnx.py's export after an fp32 case).  Whatever a case sets, the legacy reads must work."""
    from sixdim.workloads.measure import flags

    try:
        for precision in ("fp32", "tf32", "bf16", "fp32"):
            flags.apply(precision)
            assert torch.backends.cudnn.allow_tf32 is (precision == "tf32")
            assert torch.backends.cuda.matmul.allow_tf32 is (precision == "tf32")
    finally:
        flags.restore()
