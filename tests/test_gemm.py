"""GEMM on the CPU with real torch: its figures against independent computations."""

import json
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from sixdim.workloads import gemm, registry
from sixdim.workloads.context import RunContext
from sixdim.workloads.stats import deepspark_mean


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


def test_calibration_is_not_fooled_by_one_stall(monkeypatch):
    """Calibration against a kernel of exactly 1 ms whose first timed call stalls for 50 ms, on a
    clock that only the kernel moves: the answer cannot depend on how busy the machine is (a
    real ``sleep(0.001)`` lasts 2 ms or more on a loaded one)."""
    from sixdim.workloads import timing

    clock = {"now": 0.0, "calls": 0}

    def kernel():
        clock["calls"] += 1
        clock["now"] += 0.001 + (0.05 if clock["calls"] == 4 else 0.0)  # the first timed block stalls once

    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: clock["now"]))
    block = timing.calibrate(kernel, torch.device("cpu"), warmup_seconds=0.0, min_round_seconds=0.02)
    assert block == 22  # 1 call stalled -> confirmed at 1 ms -> 10 calls (10 ms) -> 22 calls (22 ms), twice
