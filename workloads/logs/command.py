"""Any framework: run the user's training command and rate it by DeepSpark's dimensions.

The command is an argument list (a shell string only when ``shell`` is set), with its own
working directory and environment.  It runs inside the worker's process group, so the daemon's
per-case timeout stops it, and everything it started, like any other workload.  The daemon
samples power and memory over the command's whole run.  Its output is read as AI-Rank log
lines, MLPerf logs (training v0.5 to today, inference detail logs) and/or the user's regular
expressions (:mod:`sixdim.workloads.logs.parsers`), the Hugging Face Trainer's printed dicts and
MindSpore's monitor lines (:mod:`sixdim.workloads.logs.framework_lines`); then the files the run wrote
(``log_files``: TensorBoard event files, trainer_state.json, Lightning's metrics.csv;
:mod:`sixdim.workloads.logs.log_files`) are read into the same log.  With no ``argv``, only the files are
read: a run that already happened, replayed.  Together they give:

- speed: the DeepSpark rule over the reported throughputs (after ``warmup_throughputs`` leading
  ones) when there are 5 or more, else their mean, else MLPerf Inference's or AI-Rank's run-level
  rate; exported as samples per second;
- quality: each metric's *final* value (the last evaluation before the run ended), named and
  directed, as ``quality:<metric>:<direction>`` figures (the ``sixdim_workload_quality`` metric);
  the one higher-is-better accuracy ratio, if the run has exactly one, also as ``accuracy``;
- time to train: AI-Rank's ``target_quality_time``, MLPerf's run_stop − run_start, or the time
  until the metric first met ``target_accuracy`` (in its direction), measured by sixdim as lines
  arrived or by a TensorBoard scalar's own wall time;
- latency: MLPerf Inference's percentiles, in seconds.

A run is ``ok`` only if it finished and something was read from it: an output nothing parsed, an
MLPerf run that never logged ``run_stop`` or stopped with a failure, and an INVALID MLPerf
Inference result are ``failed``, with the reason.  docs/TRAINING_LOGS.md has every rule.  A command
that exits non-zero fails with its code, or the signal that killed it (:func:`exit_reason`); one killed
by SIGKILL, which sixdim never sends it (a timeout stops the whole worker), is most often the kernel's
OOM killer, which the reason says, and says for sure where the kernel counted an OOM kill while the
command ran (its cgroup's ``memory.events``, else ``/proc/vmstat``).

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
import signal
import statistics
import subprocess
import time
from typing import Any

from sixdim.core.redact import redact_argv, redact_shell, scrub, secret_values
from sixdim.workloads.context import RunContext, Unsupported, WorkloadOutput
from sixdim.workloads.logs import log_files
from sixdim.workloads.logs.framework_lines import LINE_FORMATS, step_seconds, unread_notes
from sixdim.workloads.logs.lines import bounded_lines, stream_chunks
from sixdim.workloads.logs.mlperf import INFERENCE_CHECKS, INFERENCE_RATES
from sixdim.workloads.logs.model import COMMAND_FORMATS, Metric, Quality
from sixdim.workloads.logs.parsers import describe_formats, make_parsers, read_line
from sixdim.workloads.logs.training_log import Parser, TrainingLog
from sixdim.workloads.logs.user_regex import RegexParser
from sixdim.workloads.measure.stats import deepspark_mean

DEEPSPARK_MINIMUM = 5
"""DeepSpark's speed rule (drop the highest and lowest, average the rest) needs at least 5 readings."""


class CommandFailed(RuntimeError):
    """The command exited with a non-zero status."""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _cgroup_memory_events() -> str | None:
    """This process's cgroup v2 ``memory.events`` (the command runs in its worker's cgroup), or None
    where there is none (no cgroup v2, no memory controller there, the root cgroup)."""
    try:
        with open("/proc/self/mountinfo") as handle:
            mount = next((line.partition(" - ")[0].split()[4] for line in handle
                          if line.partition(" - ")[2].split()[:1] == ["cgroup2"]), None)
        with open("/proc/self/cgroup") as handle:
            own = next((line[3:].strip() for line in handle if line.startswith("0::")), None)
    except (OSError, IndexError):
        return None
    if mount is None or own is None:
        return None
    path = os.path.join(mount, own.lstrip("/"), "memory.events")
    return path if os.path.isfile(path) else None


def _oom_kill_counter(path: str) -> int | None:
    """The ``oom_kill`` line of a ``memory.events`` or ``/proc/vmstat`` file, or None."""
    try:
        with open(path) as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


class OomWatch:
    """The kernel's count of OOM kills when the command starts, to tell afterwards whether the OOM
    killer killed anything while it ran: in its cgroup where it has one with a memory controller
    (cgroup v2's ``memory.events``), else on the whole host (``/proc/vmstat``, Linux 4.13 on)."""

    def __init__(self) -> None:
        events = _cgroup_memory_events()
        self.sources = [(path, scope, count) for path, scope in ((events, "in its cgroup"),
                                                                 ("/proc/vmstat", "on this host"))
                        if path is not None and (count := _oom_kill_counter(path)) is not None]

    def kills(self) -> tuple[int, str] | None:
        """(OOM kills since the start, where), from the narrowest source that still reads; None where
        none can be read."""
        for path, scope, before in self.sources:
            now = _oom_kill_counter(path)
            if now is not None:
                return now - before, scope
        return None


def exit_reason(code: int, oom: tuple[int, str] | None) -> str:
    """Why a command that exited with ``code`` (negative: killed by that signal, as
    :class:`subprocess.Popen` says it) failed, with what the kernel said of OOM kills while it ran
    (``oom``: how many, and where, from :class:`OomWatch`; None where unknown).

    SIGKILL is what the OOM killer sends, and sixdim never sends it to a command (a timeout kills the
    whole worker): a command killed by it, or a shell whose command was (exit code 137, 128 + 9), is
    said to be, most likely, out of memory; for sure where the kernel counted OOM kills meanwhile."""
    counted = ""
    if oom is not None and oom[0] > 0:
        kills, scope = oom
        counted = (f"the kernel's OOM killer killed {kills} process{'es' if kills > 1 else ''} {scope} while it ran "
                   f"(out of memory{'' if scope == 'in its cgroup' else ', likely'}: check dmesg)")
    guess = "the kernel's OOM killer, if memory ran out: check dmesg"
    if code < 0:
        said = f"command killed by {_signal_name(-code)}"
        if code == -signal.SIGKILL:
            return f"{said}: {counted}" if counted else f"{said} ({guess})"
        return f"{said}; {counted}" if counted else said
    said = f"command exited with code {code}"
    if code == 128 + signal.SIGKILL:
        return f"{said} (128 + 9: a shell's way of saying its command was killed by SIGKILL; {counted or guess})"
    return f"{said}; {counted}" if counted else said


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


def parsers_for(params: dict[str, Any]) -> list[Parser]:
    """The parsers for ``formats`` and the regexes (:func:`~sixdim.workloads.logs.parsers.make_parsers`), and
    the framework line formats named in ``formats`` that are not among them already (it may include them itself)."""
    parsers = make_parsers(params["formats"])
    if params["throughput_regex"] or params["accuracy_regex"]:  # with the log's own clock (time_regex)
        parsers.append(RegexParser(params["throughput_regex"], params["accuracy_regex"], params.get("time_regex", "")))
    for name in params["formats"]:
        if name in LINE_FORMATS and LINE_FORMATS[name][1] not in parsers:
            parsers.append(LINE_FORMATS[name][1])
    return parsers


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    parsers = parsers_for(params)
    argv = params["argv"]
    patterns = params["log_files"]
    if (patterns and "tensorboard" in params["formats"] and log_files.may_hold_event_files(patterns, params["cwd"])
            and not log_files.tensorboard_available()):
        raise Unsupported(log_files.TENSORBOARD_MISSING)  # said before a run of hours, not after it
    # the framework line formats read beside MLPerf's only where the user chose the formats (not the default)
    chosen = () if set(params["formats"]) == set(COMMAND_FORMATS) else tuple(params["formats"])
    log = TrainingLog(user_metric=Metric(params["quality_metric"].strip(), params["higher_is_better"],
                                         params["accuracy_unit"]), target_accuracy=params["target_accuracy"] or None,
                      read_beside_mlperf=chosen)
    printed: list[int] = []  # the throughputs read from the Trainer's printed dicts
    elapsed, lines, started = 0.0, 0, None
    if argv:
        started = time.time()
        elapsed, lines = _run_command(params, ctx, parsers, log, printed)
    if patterns:
        ctx.progress("reading " + ", ".join(patterns))
        options = log_files.Options(params["formats"], params["quality_tags"], params["throughput_tag"].strip(),
                                    params["cwd"], started)
        reports = log_files.read(patterns, options, log, printed)
        return dimensions(log, elapsed, lines, params, [r.describe() for r in reports], replay=not argv)
    return dimensions(log, elapsed, lines, params)


def _run_command(params: dict[str, Any], ctx: RunContext, parsers: list[Parser], log: TrainingLog,
                 printed: list[int]) -> tuple[float, int]:
    """Run the command, reading each output line as it comes; (its wall seconds, its line count)."""
    argv = params["argv"]
    command: list[str] | str = argv[0] if params["shell"] else argv
    tail: collections.deque[str] = collections.deque(maxlen=10)
    lines = 0
    secrets = secret_values(params)  # progress lines are shown and logged: no secret of the command in them
    shown = redact_shell(command) if isinstance(command, str) else shlex.join(redact_argv(command))
    ctx.progress("starting " + shown)
    started = time.monotonic()
    ctx.mark_window_start()
    oom = OomWatch()
    process = subprocess.Popen(command, shell=params["shell"], cwd=params["cwd"] or None,
                               env=_environment(params["env"]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    assert process.stdout is not None  # stdout=PIPE
    for line in bounded_lines(stream_chunks(process.stdout), MAX_LINE_BYTES):
        lines += 1
        tail.append(line)
        log.elapsed = time.monotonic() - started
        before = (log.recognised.get("hf_trainer", 0), len(log.throughputs))
        read_line(line, parsers, log)
        if log.recognised.get("hf_trainer", 0) > before[0]:
            printed.extend(range(before[1], len(log.throughputs)))
        ctx.progress(scrub(line, secrets)[-120:])
    code = process.wait()
    ctx.mark_window_end()
    elapsed = time.monotonic() - started
    if code != 0:
        last = scrub(next((line for line in reversed(tail) if line.strip()), ""), secrets)  # before it is cut
        raise CommandFailed(exit_reason(code, oom.kills()) + (f"; last output: {last[-300:]}" if last else ""))
    return elapsed, lines


def dimensions(log: TrainingLog, elapsed: float, lines: int, params: dict[str, Any],
               files: list[dict[str, Any]] | None = None, replay: bool = False) -> WorkloadOutput:
    """The figures, details and status of a finished command's output (and of the files it wrote,
    described in ``files``; ``replay``: no command ran, only files were read)."""
    details: dict[str, Any] = {"wall_seconds": elapsed, "output_lines": lines,
                               "recognised_lines": dict(log.recognised), "events": log.events}
    if files is not None:
        details["log_files"] = files
    if log.benchmark:
        details["mlperf_benchmark"] = log.benchmark
    if log.after_stop:  # evaluations logged after run_stop: not the run's result, but say they were there
        details["evaluations_after_run_stop"] = log.after_stop
    stepped = _step_throughputs(log, params, details)
    if not log.has_figures() and not log.started and not stepped:
        _note_warnings(log, details)
        return WorkloadOutput({}, details, status="failed", reason=_nothing_read(log, lines, params, files, replay))
    figures: dict[str, float] = {}
    if log.total_time is not None or not replay:
        figures["seconds"] = log.total_time if log.total_time is not None else elapsed
    else:
        details["seconds_note"] = "a replayed log with no duration of its own: no seconds figure"
    _speed(log, params["warmup_throughputs"], figures, details, stepped)
    qualities = log.qualities()
    details.update(log.details)  # MLPerf: the runs, the round, the quality target and whether it was met
    finals = _finals(log, qualities, details.pop(log_files.BEST_MODEL, {}))
    _quality(qualities, figures, details, finals)
    _time_to_train(log, qualities, params, figures, details)
    _latency(log, figures, details)
    _inference_details(log, details)
    _drop_non_finite(log, figures)
    _note_warnings(log, details)
    status, reason = _verdict(log)
    return WorkloadOutput(figures, details, status=status, reason=reason)


def _step_throughputs(log: TrainingLog, params: dict[str, Any], details: dict[str, Any]) -> list[float]:
    """MindSpore's seconds per step as samples/s, ``batch_size`` / seconds, where a batch size is given;
    without one they stay a detail (``seconds_per_step``)."""
    steps = step_seconds(log)
    if not steps:
        return []
    details["seconds_per_step"] = steps
    batch = params.get("batch_size", 0)
    if not batch:
        details["seconds_per_step_note"] = ("MindSpore's per step time is not a throughput without a batch size: set "
                                            "batch_size (samples per step) to have it in samples/s")
        return []
    return [batch / seconds for seconds in steps]


def _drop_non_finite(log: TrainingLog, figures: dict[str, float]) -> None:
    """The parsers read only finite figures below :data:`sixdim.workloads.logs.model.MAX_READING`, so every
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


def tried_formats(params: dict[str, Any]) -> list[str]:
    """Every format and expression ``formats`` and the regexes name, described."""
    tried = describe_formats(params["formats"], params["throughput_regex"], params["accuracy_regex"])
    for name in params["formats"]:
        for described in (LINE_FORMATS[name][0] if name in LINE_FORMATS else None,
                          log_files.FILE_FORMATS.get(name) if params.get("log_files") else None):
            if described and described not in tried:
                tried.append(described)
    return tried


def _nothing_read(log: TrainingLog, lines: int, params: dict[str, Any], files: list[dict[str, Any]] | None = None,
                  replay: bool = False) -> str:
    """Why an output gave nothing: which formats were tried, and whether any line even matched."""
    tried = tried_formats(params)
    if not tried:
        return "no log format to read: formats is empty and no throughput_regex or accuracy_regex is set"
    hint = ""
    if step_seconds(log) and not params.get("batch_size"):
        hint = "; MindSpore's per step time was read: set batch_size to turn it into samples/s"
    hint += "".join("; " + note for note in unread_notes(log))  # a format seen but not readable: what to do
    if files is not None:
        said = "; ".join(f"{f['path']}: {f.get('note') or 'nothing selected'}" for f in files[:5])
        if replay or not lines:
            return (f"the log files gave no throughput, quality value, time or latency ({said or 'no file'})" + hint)
        hint += f"; log files: {said or 'none found'}"
    if not lines:
        return "the command printed nothing: no figure to read (tried " + "; ".join(tried) + ")" + hint
    if log.recognised:
        seen = ", ".join(f"{name}: {count}" for name, count in sorted(log.recognised.items()))
        return (f"{sum(log.recognised.values())} of {lines} output lines were recognised ({seen}) but none "
                "carried a throughput, quality value, time or latency (tried " + "; ".join(tried) + ")" + hint)
    return f"nothing in the command's {lines} output lines matched any format tried: " + "; ".join(tried) + hint


def _speed(log: TrainingLog, warmup: int, figures: dict[str, float], details: dict[str, Any],
           stepped: list[float] | None = None) -> None:
    """DeepSpark's rule over the steady readings, after the warm-up ones; a run-level rate otherwise.
    ``stepped``: MindSpore's per-step readings, in samples/s, after the log's own."""
    throughputs = log.throughputs + (stepped or [])
    if stepped:
        details["speed_source"] = "MindSpore per step time: batch_size / seconds per step"
    readings = throughputs[warmup:]
    details["throughputs"] = throughputs
    if warmup and throughputs:
        details["warmup_skipped"] = min(warmup, len(throughputs))
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
    if throughputs and not readings:
        details["speed_note"] = f"all {len(throughputs)} throughput readings were warm-up (warmup_throughputs)"


def _finals(log: TrainingLog, qualities: list[Quality], best: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """By metric, the final value where it is not the last evaluation, with the rule: the best model a
    Trainer reloaded at the end (:func:`sixdim.workloads.logs.log_files.best_model`).  Its place is among
    the evaluations as logged, so it is used only where every one of them was kept in the reported unit."""
    finals: dict[str, tuple[float, str]] = {}
    for quality in qualities:
        entry = best.get(quality.metric.name)
        logged = log.series.get(quality.metric.name, (None, []))[1]
        if entry is None or len(logged) != len(quality.values) or not 0 <= entry["index"] < len(logged):
            continue
        if logged[entry["index"]].value == entry["value"]:
            finals[quality.metric.name] = (quality.values[entry["index"]], entry["rule"])
    return finals


def _quality(qualities: list[Quality], figures: dict[str, float], details: dict[str, Any],
             finals: dict[str, tuple[float, str]] | None = None) -> None:
    """Every metric's final value, named (the model the run ended with: its last evaluation, or where
    ``finals`` says otherwise, that value, with the rule); ``accuracy`` only for the run's one
    higher-is-better ratio."""
    if not qualities:
        return
    finals = finals or {}
    described = []
    for quality in qualities:
        entry = quality.describe()
        if quality.metric.name in finals:
            value, rule = finals[quality.metric.name]
            entry.update(final=value, last_evaluation=quality.final, final_rule=rule)
        described.append(entry)
        figures[quality_figure(quality)] = entry["final"]
    details["quality"] = described
    accuracies = [q for q in qualities if q.metric.higher_is_better and q.metric.unit == "ratio"]
    if len(accuracies) == 1:
        figures["accuracy"] = finals.get(accuracies[0].metric.name, (accuracies[0].final, ""))[0]
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
        details["target_note"] = _no_target_metric(log, qualities, target)
        return
    if quality.metric.unit == "ratio" and target > 1:
        details["target_note"] = (f"target_accuracy {target:g} is above 1 but {quality.metric.name!r} is reported as a "
                                  "ratio: give the target as a ratio (e.g. 0.759, not 75.9)")
    reached = quality.first_reaching(target)
    if reached is None:
        met = next((i for i, value in enumerate(quality.values) if quality.meets(value, target)), None)
        if met is not None:  # read from a file with no clock (trainer_state.json, metrics.csv)
            details.setdefault("target_note", f"target {target:g} met by {quality.metric.name!r} at its evaluation "
                                              f"{met + 1} of {len(quality.values)}, but the log has no time for it: "
                                              "no time to train")
            return
        details.setdefault("target_note", f"target {target:g} not reached by {quality.metric.name!r} "
                                          f"({quality.metric.direction}; final {quality.final:g})")
        return
    figures["time_to_train_seconds"] = reached
    details["time_to_train_rule"] = (f"sixdim: command start (for a replayed log, its first event) until "
                                     f"{quality.metric.name!r} first met {target:g} ({quality.metric.direction})")


def _target_metric(log: TrainingLog, qualities: list[Quality]) -> Quality | None:
    """The metric a target applies to: the user's own, else the run's only one, else its one accuracy
    (its only higher-is-better ratio: a framework's ``eval_accuracy`` beside its ``eval_loss``)."""
    mine = [q for q in qualities if q.metric.name == log.user_metric.name]
    if mine:
        return mine[0]
    if len(qualities) == 1:
        return qualities[0]
    accuracies = [q for q in qualities if q.metric.higher_is_better and q.metric.unit == "ratio"]
    return accuracies[0] if len(accuracies) == 1 else None


def _no_target_metric(log: TrainingLog, qualities: list[Quality], target: float) -> str:
    """Why a target has no metric to be checked against, and how to give it one: the candidates by name."""
    if not qualities:
        return f"target_accuracy {target:g}: the run reported no quality metric to check it against"
    accuracies = [q.metric.name for q in qualities if q.metric.higher_is_better and q.metric.unit == "ratio"]
    names = accuracies if len(accuracies) > 1 else [q.metric.name for q in qualities]
    kind = "accuracy-like metrics (higher-is-better ratios)" if len(accuracies) > 1 else "quality metrics"
    return (f"target_accuracy {target:g}: the run has several {kind} ({', '.join(names)}) and quality_metric "
            f"{log.user_metric.name!r} is none of them: set quality_metric to the one the target is for "
            f"(e.g. quality_metric = \"{names[0]}\")")


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
    failure = log.run_failure()  # a log cut before run_stop, or a run_stop that says the run failed
    if failure:
        return "failed", failure
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
