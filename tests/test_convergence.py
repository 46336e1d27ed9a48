"""Convergence on a real, offline dataset; stability over repeated runs; AI-Rank logs of our own runs."""

import json
import subprocess
import sys
import time

import pytest

from sixdim.workloads import registry
from sixdim.workloads.context import RunContext
from sixdim.workloads.logs.airank import parse_ai_rank
from sixdim.workloads.logs.training_log import TrainingLog
from sixdim.workloads.measure.dimensions import stability
from sixdim.workloads.measure.stats import deepspark_mean
from sixdim.workloads.models.convergence import run


def converge(**overrides):
    [case] = registry.get("convergence").cases(overrides, "cpu")
    return run(case.params, RunContext("cpu"))


@pytest.mark.slow
def test_reaches_target_with_stability_over_five_runs():
    started = time.monotonic()
    output = converge()
    elapsed = time.monotonic() - started
    assert output.status == "ok", output.reason
    runs = output.details["runs"]
    assert len(runs) == 5 and [r["seed"] for r in runs] == [0, 1, 2, 3, 4]
    converged = [r["accuracies"][-1] for r in runs]
    assert min(converged) >= 0.95 and output.figures["accuracy"] == sorted(converged)[2]
    assert output.figures["stability_ratio"] == stability(converged)[0]
    for r in runs:  # time to train ends at the end of the first epoch at or above the target
        first = next(i for i, a in enumerate(r["accuracies"]) if a >= 0.95)
        assert r["time_to_target"] == r["epoch_elapsed"][first] < r["total_seconds"]
    assert output.figures["time_to_train_seconds"] == sorted(r["time_to_target"] for r in runs)[2]
    # the speed: each run's DeepSpark mean of its epochs' throughputs (the first epoch, a warm-up, left
    # out), then the median run's; the time: the median run's whole training
    speeds = sorted(deepspark_mean(r["throughputs"][1:]) for r in runs)
    assert output.figures["samples_per_second"] == pytest.approx(speeds[2]) and speeds[2] > 0
    assert output.figures["seconds"] == pytest.approx(sorted(r["total_seconds"] for r in runs)[2])
    # its own clock, not a bound a busy machine can break: the runs' times fit in the call's
    assert sum(r["total_seconds"] for r in runs) <= elapsed


def test_deterministic_runs_repeat_bit_for_bit():
    first = converge(runs=1, epochs=3)
    second = converge(runs=1, epochs=3)
    assert first.details["runs"][0]["weights_sha256"] == second.details["runs"][0]["weights_sha256"]
    assert first.details["runs"][0]["accuracies"] == second.details["runs"][0]["accuracies"]


def test_a_run_that_misses_the_target_fails():
    output = converge(runs=1, epochs=2, target_accuracy=0.999)
    assert output.status == "failed" and "did not reach the target accuracy 0.999" in output.reason


def test_ai_rank_log_round_trips_through_our_parser():
    output = converge(runs=1, epochs=5)
    log = TrainingLog()
    for line in output.details["ai_rank_log"]:
        assert parse_ai_rank(line, log)
    assert log.accuracies == output.details["runs"][0]["accuracies"]
    assert log.events[0] == "test_begin" and "test_finish" in log.events
    assert log.time_to_train == pytest.approx(output.details["runs"][0]["time_to_target"], abs=0.01)


@pytest.mark.slow
def test_sixdim_run_writes_an_ai_rank_log(tmp_path, cli_env):
    log_path = tmp_path / "GPUx1.log"
    result = subprocess.run([sys.executable, "-m", "sixdim", "run", "-w", "convergence", "-d", "cpu", "-p", "runs=1",
                             "-p", "epochs=4", "--ai-rank-log", str(log_path), "--json"],
                            capture_output=True, text=True, env=cli_env, timeout=120)
    assert result.returncode == 0, result.stderr
    [record] = json.loads(result.stdout)
    lines = log_path.read_text().splitlines()
    assert lines == record["details"]["ai_rank_log"]
    assert lines[0].endswith("test_begin") and lines[-1].split()[-1].startswith("avg_ips:")
