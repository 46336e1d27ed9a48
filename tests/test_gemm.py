"""GEMM on the CPU with real torch: its figures against independent computations."""

import json
import subprocess
import sys
import time

import pytest
import torch

from sixdim.workloads import registry
from sixdim.workloads.context import RunContext
from sixdim.workloads.kernels import gemm
from sixdim.workloads.measure.stats import deepspark_mean


def test_gemm_figures_follow_from_its_rounds():
    [case] = registry.get("gemm").cases({"m": 128, "n": 64, "k": 256, "precisions": ["fp32"],
                                         "min_round_seconds": 0.02, "warmup_seconds": 0.05}, "cpu")
    params = case.params
    ctx = RunContext(device="cpu")
    output = gemm.run(params, ctx)
    rounds = output.details["round_seconds"]
    assert len(rounds) == 5
    assert output.figures["seconds"] == pytest.approx(deepspark_mean(rounds))
    assert output.figures["flops"] == pytest.approx(2 * 128 * 64 * 256 / output.figures["seconds"])
    assert output.details["flop_count"] == 2 * 128 * 64 * 256
    # The window covers the 5 timed rounds: their calls, timed with the same clock (CLOCK_MONOTONIC),
    # lie inside it.  True however busy the machine is, unlike a bound on how long a round lasts.
    assert output.details["calls_per_round"] * sum(rounds) <= ctx.window_end - ctx.window_start + 1e-9


def test_cpu_shapes_are_the_gpu_shapes_scaled_down():
    spec = registry.get("gemm")
    [cpu] = spec.cases({"set": "square", "precisions": ["fp32"]}, "cpu")
    [cuda] = spec.cases({"set": "square", "precisions": ["fp32"]}, "cuda")
    assert (cuda.params["m"], cpu.params["m"]) == (8192, 512)


@pytest.fixture
def one_thread():
    """torch on one thread in this process, as it was after the test.

    On a machine whose cores other processes use too, a multi-threaded GEMM's threads wait for
    each other at every barrier, and one descheduled thread stalls them all: its time per call
    then swings by 10-500x from one second to the next (seen here with two busy loops on two
    cores).  One thread's time only stretches by the share of a core it gets."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def hand_timed_mm_seconds(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, calls: int) -> float:
    """Seconds per ``torch.mm(a, b, out=d)`` (sixdim's GEMM call): median of 5 blocks of ``calls``."""
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            torch.mm(a, b, out=d)
        times.append((time.perf_counter() - start) / calls)
    return sorted(times)[2]


ALTERNATIONS = 5


@pytest.mark.slow
def test_gemm_seconds_agree_with_hand_timed_matmul(one_thread):
    """sixdim's GEMM measurement (the worker's entry, run here) and a hand-timed ``torch.mm`` of the
    same shape, alternated, the best of each compared.

    Load that comes and goes (other tests, other jobs) reaches both alike, since they alternate
    every second or so; load that stays slows both alike.  The best of 5 of each is then close
    to what a quiet machine gives: ratios of the bests of 0.95 to 1.5 with two busy loops on
    two cores, where single runs on two threads of a machine shared with other jobs gave 0.05
    to 557 (and the test this one replaces saw 4.9 and 10.2).  The bound, a factor of 3,
    leaves room for that and still catches what this test is for: a time per round reported
    as a time per call (x calls_per_round, about 1000 here), milliseconds for seconds (x1000),
    or a figure that times something other than the call.  The exact relations that no load
    can break (FLOP/s from seconds, seconds from the rounds) are checked apart."""
    n = 128
    [case] = registry.get("gemm").cases({"m": n, "n": n, "k": n, "precisions": ["fp32"], "min_round_seconds": 0.05,
                                         "warmup_seconds": 0.02}, "cpu")
    module, _, function = registry.get("gemm").entry.partition(":")
    run = getattr(__import__(module, fromlist=[function]), function)
    a, b, d = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    ours, by_hand = [], []
    for _ in range(ALTERNATIONS):
        output = run(case.params, RunContext(device="cpu"))
        assert output.status == "ok", output.reason
        ours.append(output.figures["seconds"])
        by_hand.append(hand_timed_mm_seconds(a, b, d, output.details["calls_per_round"]))
    ratio = min(ours) / min(by_hand)
    assert 1 / 3 < ratio < 3, (ratio, ours, by_hand)


@pytest.mark.slow
def test_sixdim_run_json_reports_one_gemm_call_in_seconds(cli_env):
    """The real path (CLI, worker, daemon-side telemetry, JSON), checked only by what load cannot
    change: how its figures follow from each other and from the measured window.  How its
    seconds compare with an independent timing is the test above (load-robust) and
    ``python -m tests.bench.compare_kernels`` (the full path, best of alternated runs)."""
    result = subprocess.run([sys.executable, "-m", "sixdim", "run", "--workload", "gemm", "--device", "cpu", "--json",
                             "-p", "set=square", "-p", "precisions=fp32", "-p", "min_round_seconds=0.2"],
                            capture_output=True, text=True, env=cli_env, timeout=300)
    assert result.returncode == 0, result.stderr
    [record] = json.loads(result.stdout)
    assert record["status"] == "ok" and record["device"] == "cpu"
    m, n, k = (record["params"][x] for x in "mnk")
    assert m == n == k
    seconds, flops = record["figures"]["seconds"], record["figures"]["flops"]
    rounds, calls = record["details"]["round_seconds"], record["details"]["calls_per_round"]
    telemetry = record["details"]["telemetry"]
    assert flops == pytest.approx(2 * m * n * k / seconds, rel=1e-12)
    assert seconds == pytest.approx(deepspark_mean(rounds), rel=1e-12) and min(rounds) <= seconds <= max(rounds)
    # seconds per call, in seconds: the rounds' calls fit in the window the daemon saw (x calls or
    # x1000 too long would not), and the window is the rounds' (JSON keeps 17 digits)
    assert calls * sum(rounds) <= telemetry["window_seconds"] + 1e-9
    # measured conditions and environment travel with the result
    # on a CPU the workload's memory is the worker's peak resident memory (torch alone is >100 MB)
    assert record["figures"]["memory_bytes"] > 100e6
    assert record["figures"]["memory_bytes"] >= telemetry["memory_average_bytes"]
    assert record["environment"]["torch"] == torch.__version__
    assert record["environment"]["python"] and record["environment"]["sixdim"]


@pytest.mark.slow
def test_sixdim_run_table_and_history(cli_env, tmp_path):
    args = [sys.executable, "-m", "sixdim", "run", "-w", "gemm", "-d", "cpu", "-p", "m=64", "-p", "n=64", "-p", "k=64",
            "-p", "precisions=fp32,tf32", "-p", "min_round_seconds=0.01", "-p", "warmup_seconds=0.01"]
    result = subprocess.run(args, capture_output=True, text=True, env=cli_env, timeout=120)
    assert result.returncode == 0, result.stderr
    header, row, unsupported = result.stdout.splitlines()[:3]
    assert header.split()[:7] == ["workload", "device", "precision", "shape", "mode", "pass", "status"]
    assert row.split()[:7] == ["gemm", "cpu", "fp32", "m=64,n=64,k=64,op=NN", "-", "forward", "ok"]
    assert unsupported.split()[2] == "tf32" and unsupported.split()[6] == "unsupported"
    assert "tf32 is a tensor-core precision of GPUs" in result.stdout
    from sixdim.store.history import History

    stored = list(History(tmp_path / "history.db"))
    assert [(r.precision, r.status) for r in stored] == [("fp32", "ok"), ("tf32", "unsupported")]


# ---------------------------------------------------------------------------- padded int8/fp8 shapes (issue 27, item 7)

def _measurement(seconds: float, calls: int = 1, power: dict | None = None):
    from sixdim.workloads.measure.report import Measurement
    from sixdim.workloads.measure.timing import Timing

    return Measurement(Timing([seconds] * 5, calls, "cuda_events"), power_figures=power or {})


@pytest.mark.parametrize("precision, requested, padded", [
    ("int8", (3072, 1, 1024), (3072, 8, 1024)),    # DeepBench inference, N = 1: 8x the work ran
    ("fp8", (1024, 4, 512), (1024, 16, 512)),      # N = 4: 4x
    ("fp8_fast", (7680, 2, 2560), (7680, 16, 2560)),  # N = 2: 8x
])
def test_padded_case_exports_the_requested_shapes_work(precision, requested, padded):
    from sixdim.workloads.measure.correctness import Check

    m, n, k = requested
    pm, pn, pk = padded
    seconds, joules_per_call = 2e-5, 1e-2
    requested_count, padded_count = 2 * m * n * k, 2 * pm * pn * pk
    # what the power phase computes from the count run() hands it: the requested one
    power = {"power_watts": 500.0, "energy_joules": 1500.0, "flop_per_joule": requested_count / joules_per_call}
    output = gemm.output({"m": m, "n": n, "k": k, "dtype": precision}, _measurement(seconds, power=power),
                         Check(0.0, 0.0), padded)
    assert output.status == "ok"
    assert output.figures["seconds"] == pytest.approx(seconds)
    assert output.figures["flops"] == pytest.approx(requested_count / seconds, rel=1e-12)
    assert output.figures["flops"] * output.figures["seconds"] == pytest.approx(requested_count, rel=1e-12)
    assert output.figures["flop_per_joule"] == pytest.approx(requested_count / joules_per_call)
    assert output.details["flop_count"] == output.details["requested_flop_count"] == requested_count
    assert output.details["requested_shape"] == {"m": m, "n": n, "k": k}
    assert output.details["padded_shape"] == {"m": pm, "n": pn, "k": pk}
    assert output.details["padded_flop_count"] == padded_count
    assert output.details["padded_flops"] == pytest.approx(padded_count / seconds, rel=1e-12)
    assert output.details["padded_flop_per_joule"] == pytest.approx(padded_count / joules_per_call, rel=1e-12)
    assert output.details["padded_flops"] / output.figures["flops"] == pytest.approx(pn / n)


def test_unpadded_case_is_unchanged():
    from sixdim.workloads.measure.correctness import Check

    output = gemm.output({"m": 4096, "n": 4096, "k": 4096, "dtype": "int8"}, _measurement(1e-4),
                         Check(0.0, 0.0), (4096, 4096, 4096))
    assert output.figures["flops"] == pytest.approx(2 * 4096**3 / 1e-4)
    assert output.details["flop_count"] == 2 * 4096**3
    assert not {"padded_shape", "requested_shape", "requested_flop_count", "padded_flop_count",
                "padded_flops"} & set(output.details)
    assert "fp8_fast_accum" not in output.details  # an fp8 detail only


def test_padded_int8_run_counts_the_requested_shape(monkeypatch):
    """The real run() on the CPU with CUDA's int8 padding forced: the kernel runs the padded
    operands, the figure and the power phase's count are the requested shape's."""
    monkeypatch.setattr(gemm, "padded_shape", lambda precision, m, n, k, device: (max(17, m), -(-n // 8) * 8, k))
    counts = []
    measure = gemm.measure_kernel

    def spy(*args, **kwargs):
        counts.append(kwargs["flop_count"])
        return measure(*args, **kwargs)

    monkeypatch.setattr(gemm, "measure_kernel", spy)
    [case] = registry.get("gemm").cases({"m": 64, "n": 2, "k": 96, "precisions": ["int8"], "min_round_seconds": 0.01,
                                         "warmup_seconds": 0.01}, "cpu")
    output = gemm.run(case.params, RunContext(device="cpu"))
    assert output.status == "ok", output.reason
    assert output.figures["max_relative_error"] == 0.0  # the padding adds zeros only
    assert counts == [2 * 64 * 2 * 96]
    assert output.figures["flops"] * output.figures["seconds"] == pytest.approx(2 * 64 * 2 * 96, rel=1e-12)
    assert output.details["padded_shape"] == {"m": 64, "n": 8, "k": 96}
    assert output.details["padded_flop_count"] == 2 * 64 * 8 * 96


# ---------------------------------------------------------------------------- fp8_fast (issue 27, item 10)

@pytest.mark.parametrize("precision, fast", [("fp8", False), ("fp8_fast", True)])
def test_every_fp8_case_says_whether_it_accumulates_fast(precision, fast):
    from sixdim.workloads.measure.correctness import Check

    for shape in ((4096, 4096, 4096), (1024, 4, 512)):
        padded = gemm.padded_shape(precision, *shape, torch.device("cuda"))
        output = gemm.output({"m": shape[0], "n": shape[1], "k": shape[2], "dtype": precision}, _measurement(1e-4),
                             Check(0.0, 0.0), padded)
        assert output.details["fp8_fast_accum"] is fast


def test_fp8_fast_is_a_gemm_precision_run_like_fp8():
    from sixdim.workloads.measure import correctness, flags

    assert "fp8_fast" in registry.PRECISIONS and "fp8_fast" in registry.FIXED_LAYOUT_PRECISIONS
    assert "fp8_fast" not in registry.INTEGER_PRECISIONS
    cases = registry.get("gemm").cases({"m": 1000, "n": 3, "k": 500, "op": "TN", "precisions": ["fp8", "fp8_fast"]},
                                       "cuda")
    assert [(c.precision, c.params["op"], c.shape) for c in cases] == [
        ("fp8", "NT", "m=1000,n=3,k=500,op=NT"), ("fp8_fast", "NT", "m=1000,n=3,k=500,op=NT")]
    for c in cases:
        assert c.params["dtype"] == c.precision
    assert gemm.padded_shape("fp8_fast", 1000, 3, 500, torch.device("cuda")) == (1008, 16, 512)
    assert gemm.padded_shape("fp8_fast", 1000, 3, 500, torch.device("cpu")) == (1000, 3, 500)
    assert correctness.TOLERANCES["fp8_fast"] == correctness.TOLERANCES["fp8"]
    assert flags.for_precision("fp8_fast") == flags.for_precision("fp8")
    assert set(registry.PRECISIONS) <= set(correctness.TOLERANCES)  # every precision has a tolerance


def test_fp8_fast_is_in_the_suites_that_run_fp8():
    from sixdim.config.suites import preset_entries

    [inference] = [e for e in preset_entries("inference") if e.name == "gemm"]
    assert {"fp8", "fp8_fast"} <= set(inference.params["precisions"])
    square = registry.get("gemm").cases({"set": "square"}, "cuda")  # the quick suite's 8192³: every precision
    assert [c.precision for c in square] == list(registry.PRECISIONS)


@pytest.mark.parametrize("precision", ["fp8", "fp8_fast"])
def test_fp8_forms_are_unsupported_on_the_cpu(precision):
    from sixdim.workloads.context import Unsupported

    [case] = registry.get("gemm").cases({"m": 32, "n": 32, "k": 32, "precisions": [precision]}, "cpu")
    with pytest.raises(Unsupported) as raised:
        gemm.run(case.params, RunContext(device="cpu"))
    assert str(raised.value) == f"{precision} is a tensor-core precision of GPUs; the CPU has no {precision} GEMM"
