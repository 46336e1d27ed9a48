"""Any framework: run the user's training command and rate it by DeepSpark's dimensions.

The command is an argument list (a shell string only when ``shell`` is set), with its own
working directory and environment.  It runs inside the worker's process group, so the daemon's
per-case timeout stops it, and everything it started, like any other workload.  The daemon
samples power and memory over the command's whole run.  Its output is read as AI-Rank log
lines, MLPerf logs (training v0.5 to today, inference detail logs) and/or the user's regular
expressions (:mod:`sixdim.workloads.logparse`), giving:

- speed: the DeepSpark rule over the reported throughputs (after ``warmup_throughputs`` leading
  ones) when there are 5 or more, else their mean, else MLPerf Inference's or AI-Rank's run-level
  rate; exported as samples per second;
- quality: each metric's *final* value (the last evaluation before the run ended), named and
  directed, as ``quality:<metric>:<direction>`` figures (the ``sixdim_workload_quality`` metric);
  the one higher-is-better accuracy ratio, if the run has exactly one, also as ``accuracy``;
- time to train: AI-Rank's ``target_quality_time``, MLPerf's run_stop − run_start, or the time
  until the metric first met ``target_accuracy`` (in its direction);
- latency: MLPerf Inference's percentiles, in seconds.

A run is ``ok`` only if it finished and something was read from it: an output nothing parsed, an
MLPerf run that never logged ``run_stop`` or stopped with a failure, and an INVALID MLPerf
Inference result are ``failed``, with the reason.  docs/TRAINING_LOGS.md has every rule.

What it shows while it runs (the command, its output lines) and its failure reason have the secrets
of its parameters redacted (:mod:`sixdim.core.redact`, also used by the executor for the record): the
command itself runs with them.

Torch-free: the command may use any framework, or none.
"""

from __future__ import annotations

import collections
import math
import os
import shlex
import statistics
import subprocess
import time
from typing import Any

from sixdim.core.redact import redact_argv, redact_shell, scrub, secret_values
from sixdim.workloads.context import RunContext, WorkloadOutput
from sixdim.workloads.lines import bounded_lines, stream_chunks
from sixdim.workloads.logparse import (
    INFERENCE_CHECKS,
    INFERENCE_RATES,
    Metric,
    Quality,
    TrainingLog,
    describe_formats,
    make_parsers,
    read_line,
)
from sixdim.workloads.stats import deepspark_mean

DEEPSPARK_MINIMUM = 5
"""DeepSpark's speed rule (drop the highest and lowest, average the rest) needs at least 5 readings."""


class CommandFailed(RuntimeError):
    """The command exited with a non-zero status."""


def quality_figure(quality: Quality) -> str:
    """The figure key of a quality metric: ``quality:<metric>:<direction>``, which the catalog's
    ``sixdim_workload_quality`` (figure ``quality``, labels ``metric`` and ``direction``) exports."""
    return f"quality:{quality.metric.name}:{quality.metric.direction}"


def _environment(pairs: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    for pair in pairs:
        key, _, value = pair.partition("=")
        env[key] = value
    return env


MAX_LINE_BYTES = 65536
"""A line of the command's output longer than this is cut (MLPerf's JSON lines are far shorter): a
command printing without newlines must not grow the worker's memory."""


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    parsers = make_parsers(params["formats"], params["throughput_regex"], params["accuracy_regex"])
    argv = params["argv"]
    command: list[str] | str = argv[0] if params["shell"] else argv
    log = TrainingLog(user_metric=Metric(params["quality_metric"].strip(), params["higher_is_better"],
                                         params["accuracy_unit"]))
    tail: collections.deque[str] = collections.deque(maxlen=10)
    lines = 0
    secrets = secret_values(params)  # progress lines are shown and logged: no secret of the command in them
    shown = redact_shell(command) if isinstance(command, str) else shlex.join(redact_argv(command))
    ctx.progress("starting " + shown)
    started = time.monotonic()
    ctx.mark_window_start()
    process = subprocess.Popen(command, shell=params["shell"], cwd=params["cwd"] or None,
                               env=_environment(params["env"]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    for line in bounded_lines(stream_chunks(process.stdout), MAX_LINE_BYTES):
        lines += 1
        tail.append(line)
        log.elapsed = time.monotonic() - started
        read_line(line, parsers, log)
        ctx.progress(scrub(line, secrets)[-120:])
    code = process.wait()
    ctx.mark_window_end()
    elapsed = time.monotonic() - started
    if code != 0:
        last = scrub(next((line for line in reversed(tail) if line.strip()), ""), secrets)  # before it is cut
        raise CommandFailed(f"command exited with code {code}" + (f"; last output: {last[-300:]}" if last else ""))
    return dimensions(log, elapsed, lines, params)


def dimensions(log: TrainingLog, elapsed: float, lines: int, params: dict[str, Any]) -> WorkloadOutput:
    """The figures, details and status of a finished command's output."""
    details: dict[str, Any] = {"wall_seconds": elapsed, "output_lines": lines,
                               "recognised_lines": dict(log.recognised), "events": log.events}
    if log.benchmark:
        details["mlperf_benchmark"] = log.benchmark
    if log.after_stop:  # evaluations logged after run_stop: not the run's result, but say they were there
        details["evaluations_after_run_stop"] = log.after_stop
    if not log.has_figures() and not log.started:
        _note_warnings(log, details)
        return WorkloadOutput({}, details, status="failed", reason=_nothing_read(log, lines, params))
    figures: dict[str, float] = {"seconds": log.total_time if log.total_time is not None else elapsed}
    _speed(log, params["warmup_throughputs"], figures, details)
    qualities = log.qualities()
    _quality(qualities, figures, details)
    _time_to_train(log, qualities, params, figures, details)
    _latency(log, figures, details)
    _inference_details(log, details)
    _drop_non_finite(log, figures)
    _note_warnings(log, details)
    status, reason = _verdict(log)
    return WorkloadOutput(figures, details, status=status, reason=reason)


def _drop_non_finite(log: TrainingLog, figures: dict[str, float]) -> None:
    """The parsers read only finite figures below :data:`sixdim.workloads.logparse.MAX_READING`, so every
    figure is finite; should one ever not be, it is dropped with a warning, never exported."""
    for key in [k for k, v in figures.items() if not math.isfinite(v)]:
        log.warn(f"figure {key!r} is not finite ({figures.pop(key)}): not reported")


def _note_warnings(log: TrainingLog, details: dict[str, Any]) -> None:
    """``warnings``: each message once (at most 20, then a count); ``ignored_lines``: how many output
    lines had a value, or were themselves, ignored."""
    if log.warnings:
        details["warnings"] = log.all_warnings()
    if log.ignored_lines:
        details["ignored_lines"] = log.ignored_lines


def _nothing_read(log: TrainingLog, lines: int, params: dict[str, Any]) -> str:
    """Why an output gave nothing: which formats were tried, and whether any line even matched."""
    tried = describe_formats(params["formats"], params["throughput_regex"], params["accuracy_regex"])
    if not tried:
        return "no log format to read: formats is empty and no throughput_regex or accuracy_regex is set"
    if not lines:
        return "the command printed nothing: no figure to read (tried " + "; ".join(tried) + ")"
    if log.recognised:
        seen = ", ".join(f"{name}: {count}" for name, count in sorted(log.recognised.items()))
        return (f"{sum(log.recognised.values())} of {lines} output lines were recognised ({seen}) but none "
                "carried a throughput, quality value, time or latency (tried " + "; ".join(tried) + ")")
    return f"nothing in the command's {lines} output lines matched any format tried: " + "; ".join(tried)


def _speed(log: TrainingLog, warmup: int, figures: dict[str, float], details: dict[str, Any]) -> None:
    """DeepSpark's rule over the steady readings, after the warm-up ones; a run-level rate otherwise."""
    readings = log.throughputs[warmup:]
    details["throughputs"] = log.throughputs
    if warmup and log.throughputs:
        details["warmup_skipped"] = min(warmup, len(log.throughputs))
    rates = log.inference.get("rates", {})
    rate_key = next((key for key in INFERENCE_RATES if key in rates), None)
    if len(readings) >= DEEPSPARK_MINIMUM:
        figures["samples_per_second"] = deepspark_mean(readings)
        details["speed_rule"] = "DeepSpark: mean of all but the highest and lowest"
    elif readings:
        figures["samples_per_second"] = statistics.fmean(readings)
        details["speed_rule"] = (f"mean of {len(readings)} report{'s' if len(readings) > 1 else ''} "
                                 f"(DeepSpark's rule needs {DEEPSPARK_MINIMUM})")
    elif rate_key is not None:
        figures["samples_per_second"] = rates[rate_key]
        details["speed_rule"] = f"MLPerf Inference {rate_key}"
    elif log.average_throughput is not None:
        figures["samples_per_second"] = log.average_throughput
        details["speed_rule"] = "AI-Rank avg_ips"
    if log.throughputs and not readings:
        details["speed_note"] = f"all {len(log.throughputs)} throughput readings were warm-up (warmup_throughputs)"


def _quality(qualities: list[Quality], figures: dict[str, float], details: dict[str, Any]) -> None:
    """Every metric's final value, named; ``accuracy`` only for the run's one higher-is-better ratio."""
    if not qualities:
        return
    details["quality"] = [q.describe() for q in qualities]
    for quality in qualities:
        figures[quality_figure(quality)] = quality.final
    accuracies = [q for q in qualities if q.metric.higher_is_better and q.metric.unit == "ratio"]
    if len(accuracies) == 1:
        figures["accuracy"] = accuracies[0].final
        details["accuracy_metric"] = accuracies[0].metric.name
    elif accuracies:
        details["accuracy_note"] = ("no accuracy figure: the run has several accuracy ratios ("
                                    + ", ".join(q.metric.name for q in accuracies) + "); see the quality figures")
    else:
        details["accuracy_note"] = ("no accuracy figure: no higher-is-better ratio among the quality metrics; "
                                    "see the quality figures")


def _time_to_train(log: TrainingLog, qualities: list[Quality], params: dict[str, Any], figures: dict[str, float],
                   details: dict[str, Any]) -> None:
    """The log's own time to train, else the time the target was first met (measured by sixdim)."""
    if log.time_to_train is not None:
        figures["time_to_train_seconds"] = log.time_to_train
        details["time_to_train_rule"] = log.time_to_train_rule
        return
    target = params["target_accuracy"]
    if not target:
        return
    quality = _target_metric(log, qualities)
    if quality is None:
        details["target_note"] = f"target_accuracy {target:g}: no quality metric to check it against"
        return
    if quality.metric.unit == "ratio" and target > 1:
        details["target_note"] = (f"target_accuracy {target:g} is above 1 but {quality.metric.name!r} is reported as a "
                                  "ratio: give the target as a ratio (e.g. 0.759, not 75.9)")
    reached = quality.first_reaching(target)
    if reached is None:
        details.setdefault("target_note", f"target {target:g} not reached by {quality.metric.name!r} "
                                          f"({quality.metric.direction}; final {quality.final:g})")
        return
    figures["time_to_train_seconds"] = reached
    details["time_to_train_rule"] = (f"sixdim: command start until {quality.metric.name!r} first met {target:g} "
                                     f"({quality.metric.direction})")


def _target_metric(log: TrainingLog, qualities: list[Quality]) -> Quality | None:
    """The metric a target applies to: the user's own, else the run's only one."""
    mine = [q for q in qualities if q.metric.name == log.user_metric.name]
    if mine:
        return mine[0]
    return qualities[0] if len(qualities) == 1 else None


def _latency(log: TrainingLog, figures: dict[str, float], details: dict[str, Any]) -> None:
    if not log.latencies:
        return
    details["latencies_seconds"] = log.latencies
    for name in ("p50", "p99"):
        if name in log.latencies:
            figures[f"latency_{name}_seconds"] = log.latencies[name]


def _inference_details(log: TrainingLog, details: dict[str, Any]) -> None:
    if log.inference:
        details["mlperf_inference"] = log.inference
    if log.errors:
        details["mlperf_errors"] = log.errors


def _verdict(log: TrainingLog) -> tuple[str, str]:
    """``ok``, or ``failed`` with the reason: a run that did not finish, or finished invalid."""
    if log.started and not log.stopped:
        return "failed", "the MLPerf log never reached run_stop: the run did not finish"
    if log.stopped and log.status not in (None, "success"):
        return "failed", f"the run logged run_stop with status {log.status!r}"
    if log.inference:
        return _inference_verdict(log.inference, log.errors)
    return "ok", ""


def _inference_verdict(info: dict[str, Any], errors: list[str]) -> tuple[str, str]:
    if str(info.get("test_mode", "")).lower().startswith("accuracy"):
        return "ok", ""
    validity = info.get("validity")
    if validity is None:
        return "failed", "the MLPerf Inference log has no result_validity: the performance run did not finish"
    if validity == "VALID":
        return "ok", ""
    unmet = [name for key, name in INFERENCE_CHECKS.items() if info.get("checks", {}).get(key) is False]
    reason = f"the MLPerf Inference result is {validity}"
    if unmet:
        reason += ": " + ", ".join(unmet) + " not met"
    if errors:
        reason += f"; loadgen error: {errors[0]}"
    return "failed", reason
