"""Any framework: run the user's training command and rate it by DeepSpark's dimensions.

The command is an argument list (a shell string only when ``shell`` is set), with its own
working directory and environment.  It runs inside the worker's process group, so the daemon's
per-case timeout stops it, and everything it started, like any other workload.  The daemon
samples power and memory over the command's whole run.  Its output is read as AI-Rank log
lines, MLPerf ``:::MLLOG`` lines and/or the user's regular expressions, giving:

- speed: the DeepSpark rule over the reported throughputs when there are 5 or more, else their
  mean, else AI-Rank's ``avg_ips``; exported as samples per second;
- accuracy: the best evaluation accuracy reported (AI-Rank's definition);
- time to train: AI-Rank's ``target_quality_time``, MLPerf's run_stop − run_start, or the
  time until the first accuracy at or above ``target_accuracy``.

Torch-free: the command may use any framework, or none.
"""

from __future__ import annotations

import collections
import os
import shlex
import statistics
import subprocess
import time
from typing import Any

from workloads.context import RunContext, WorkloadOutput
from workloads.logparse import RegexParser, TrainingLog, parse_ai_rank, parse_mlperf
from workloads.stats import deepspark_mean


class CommandFailed(RuntimeError):
    """The command exited with a non-zero status."""


def _environment(pairs: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    for pair in pairs:
        key, _, value = pair.partition("=")
        env[key] = value
    return env


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    parsers = []
    if "ai_rank" in params["formats"]:
        parsers.append(parse_ai_rank)
    if "mlperf" in params["formats"]:
        parsers.append(parse_mlperf)
    if params["throughput_regex"] or params["accuracy_regex"]:
        parsers.append(RegexParser(params["throughput_regex"], params["accuracy_regex"]))
    argv = params["argv"]
    command: list[str] | str = argv[0] if params["shell"] else argv
    log = TrainingLog()
    tail: collections.deque[str] = collections.deque(maxlen=10)
    target = params["target_accuracy"]
    reached_at: float | None = None
    ctx.progress("starting " + (command if isinstance(command, str) else shlex.join(command)))
    started = time.monotonic()
    ctx.mark_window_start()
    process = subprocess.Popen(command, shell=params["shell"], cwd=params["cwd"] or None,
                               env=_environment(params["env"]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, text=True, errors="replace")
    for line in process.stdout:
        line = line.rstrip("\n")
        tail.append(line)
        for parse in parsers:
            parse(line, log)
        if target and reached_at is None and log.accuracies and max(log.accuracies) >= target:
            reached_at = time.monotonic() - started
        ctx.progress(line[-120:])
    code = process.wait()
    ctx.mark_window_end()
    elapsed = time.monotonic() - started
    if code != 0:
        last = next((l for l in reversed(tail) if l.strip()), "")
        raise CommandFailed(f"command exited with code {code}" + (f"; last output: {last[-300:]}" if last else ""))
    return _dimensions(log, elapsed, reached_at)


def _dimensions(log: TrainingLog, elapsed: float, reached_at: float | None) -> WorkloadOutput:
    figures: dict[str, float] = {"seconds": log.total_time if log.total_time is not None else elapsed}
    details: dict[str, Any] = {"throughputs": log.throughputs, "accuracies": log.accuracies,
                               "wall_seconds": elapsed, "events": log.events}
    if len(log.throughputs) >= 5:
        figures["samples_per_second"] = deepspark_mean(log.throughputs)
        details["speed_rule"] = "DeepSpark: mean of all but the highest and lowest"
    elif log.throughputs:
        figures["samples_per_second"] = statistics.fmean(log.throughputs)
        details["speed_rule"] = f"mean of {len(log.throughputs)} reports (DeepSpark's rule needs 5)"
    elif log.average_throughput is not None:
        figures["samples_per_second"] = log.average_throughput
        details["speed_rule"] = "AI-Rank avg_ips"
    if log.accuracies:
        figures["accuracy"] = max(log.accuracies)
        details["final_accuracy"] = log.accuracies[-1]
    time_to_train = log.time_to_train if log.time_to_train is not None else reached_at
    if time_to_train is not None:
        figures["time_to_train_seconds"] = time_to_train
    if log.status not in (None, "success"):
        return WorkloadOutput(figures, details, status="failed",
                              reason=f"the run logged run_stop with status {log.status!r}")
    return WorkloadOutput(figures, details)
