"""GEMM on the CPU with real torch: its figures against independent computations."""

import json
import subprocess
import sys
import time

import pytest
import torch

from workloads import gemm, registry
from workloads.context import RunContext
from workloads.stats import deepspark_mean


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
    # the window covers the 5 timed rounds, each calibrated to last min_round_seconds (a shared
    # 2-vCPU machine can still run a round faster than calibration saw, hence the margin)
    assert ctx.window_end - ctx.window_start >= 0.5 * 5 * 0.02
    assert output.details["calls_per_round"] * max(rounds) >= 0.5 * 0.02


def test_cpu_shapes_are_the_gpu_shapes_scaled_down():
    spec = registry.get("gemm")
    [cpu] = spec.cases({"set": "square", "precisions": ["fp32"]}, "cpu")
    [cuda] = spec.cases({"set": "square", "precisions": ["fp32"]}, "cuda")
    assert (cuda.params["m"], cpu.params["m"]) == (8192, 512)


def hand_timed_matmul_seconds(n: int) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(5):
        torch.matmul(a, b)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            torch.matmul(a, b)
        times.append((time.perf_counter() - start) / 10)
    return sorted(times)[2]


def test_sixdim_run_json_agrees_with_hand_timed_matmul(cli_env):
    result = subprocess.run([sys.executable, "-m", "agent", "run", "--workload", "gemm", "--device", "cpu", "--json",
                             "-p", "set=square", "-p", "precisions=fp32", "-p", "min_round_seconds=0.2"],
                            capture_output=True, text=True, env=cli_env, timeout=300)
    assert result.returncode == 0, result.stderr
    [record] = json.loads(result.stdout)
    assert record["status"] == "ok" and record["device"] == "cpu"
    m, n, k = (record["params"][x] for x in "mnk")
    assert m == n == k
    seconds, flops = record["figures"]["seconds"], record["figures"]["flops"]
    assert seconds > 0 and flops == pytest.approx(2 * m * n * k / seconds)
    by_hand = hand_timed_matmul_seconds(m)
    assert 0.5 < seconds / by_hand < 2.0, (seconds, by_hand)
    # measured conditions and environment travel with the result
    # on a CPU the workload's memory is the worker's peak resident memory (torch alone is >100 MB)
    assert record["figures"]["memory_bytes"] > 100e6
    assert record["figures"]["memory_bytes"] >= record["details"]["telemetry"]["memory_average_bytes"]
    assert record["environment"]["torch"] == torch.__version__
    assert record["environment"]["python"] and record["environment"]["sixdim"]
    assert record["details"]["telemetry"]["telemetry_samples"] >= 5  # 10 Hz over a >= 1 s window


def test_sixdim_run_table_and_history(cli_env, tmp_path):
    args = [sys.executable, "-m", "agent", "run", "-w", "gemm", "-d", "cpu", "-p", "m=64", "-p", "n=64", "-p", "k=64",
            "-p", "precisions=fp32,tf32", "-p", "min_round_seconds=0.01", "-p", "warmup_seconds=0.01"]
    result = subprocess.run(args, capture_output=True, text=True, env=cli_env, timeout=120)
    assert result.returncode == 0, result.stderr
    header, row, unsupported = result.stdout.splitlines()[:3]
    assert header.split()[:7] == ["workload", "device", "precision", "shape", "mode", "pass", "status"]
    assert row.split()[:7] == ["gemm", "cpu", "fp32", "m=64,n=64,k=64,op=NN", "-", "forward", "ok"]
    assert unsupported.split()[2] == "tf32" and unsupported.split()[6] == "unsupported"
    assert "tf32 is a tensor-core precision of GPUs" in result.stdout
    from agent.history import History

    stored = list(History(tmp_path / "history.db"))
    assert [(r.precision, r.status) for r in stored] == [("fp32", "ok"), ("tf32", "unsupported")]


def test_calibration_is_not_fooled_by_one_stall():
    import torch

    from workloads.timing import calibrate

    calls = {"n": 0}

    def kernel():
        calls["n"] += 1
        if calls["n"] == 4:  # the first timed block of calibration stalls once
            time.sleep(0.05)
        time.sleep(0.001)

    block = calibrate(kernel, torch.device("cpu"), warmup_seconds=0.0, min_round_seconds=0.02)
    assert block >= 15  # about 20 calls of 1 ms, not the single stalled call
