"""What a training (or inference) run said about itself, line by line, and what needs the whole log.

Torch-free.  Each parser (:mod:`sixdim.workloads.logs.parsers`) reads one line into a :class:`TrainingLog`;
:meth:`TrainingLog.finish` (which :func:`~sixdim.workloads.logs.parsers.parse_lines` and
:meth:`TrainingLog.qualities` call) then decides what needs the whole log, and :meth:`TrainingLog.qualities`
gives every quality metric the run reported as its *final* value, named, with its direction and unit.
The rules are written out in docs/TRAINING_LOGS.md; in short:

An MLPerf log's benchmark, and so each evaluation's metric, direction and unit, is decided from the
whole log, not from the order of its lines (``submission_benchmark`` is the last line of some).  A
*run* is one ``run_start`` ... ``run_stop``: an output holding several reports one of them, the last
that finished, with its time, status, quality and speed all its own, and says what became of the others.
Time to train is ``run_stop`` minus ``run_start``, as MLPerf defines it, of one run, and only when
the run met its benchmark's quality target (:mod:`sixdim.workloads.logs.mlperf_targets`).  These
decisions live here, beside the log, because :meth:`TrainingLog.finish` makes them; the MLPerf lines
themselves are read by :mod:`sixdim.workloads.logs.mlperf`.

A quality value is the one the run *ended* with: the last evaluation logged before ``run_stop``
(in the order of the lines, not of their timestamps: MLPerf Stable Diffusion evaluates its
checkpoints offline and logs them with later times than its ``run_stop``), repeats included: Google's
v4.1 Stable Diffusion logs the checkpoint that met the target once more just before ``run_stop``, and
that is the one the run ended with (only a twin line, equal to its metric's latest reading, is counted
once: :func:`sixdim.workloads.logs.mlperf._evaluation`).  Taking the best would
report the worst evaluation for a lower-is-better metric (word error rate, loss, FID).

A figure that is not a finite, non-negative number (NaN, infinity, a boolean, a negative
throughput) or is absurdly large (above :data:`~sixdim.workloads.logs.model.MAX_READING`) is ignored
with a warning (:func:`reading`): never exported, never counted as 0 or 1.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sixdim.workloads.logs import mlperf_targets
from sixdim.workloads.logs.model import (
    HIGHER_IS_BETTER,
    KNOWN_METRICS,
    LOG_CLOCK,
    LOWER_IS_BETTER,
    MAX_READING,
    MAX_WARNINGS,
    MLPERF_BENCHMARKS,
    SIXDIM_CLOCK,
    Evaluation,
    Metric,
    MlperfReading,
    MlperfRun,
    Quality,
    resolve_unit,
)

NUMBER = re.compile(r"[-+]?(?:\b(?:nan|inf(?:inity)?)\b|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)", re.IGNORECASE)

FAILED_V05 = "failed (success: false)"
"""The status of a v0.5 run whose ``run_stop`` says ``{"success": false}``: failed, in the log's words."""


@dataclass
class TrainingLog:
    """What a training (or inference) run said about itself, line by line."""

    user_metric: Metric = field(default_factory=lambda: Metric("accuracy"))
    """The metric AI-Rank's ``eval_accuracy``, the accuracy regex and an MLPerf log of an unknown
    benchmark report: named and directed by the user."""
    throughputs: list[float] = field(default_factory=list)  # samples/s, per epoch or report
    average_throughput: float | None = None                 # a run-level figure (AI-Rank avg_ips)
    series: dict[str, tuple[Metric, list[Evaluation]]] = field(default_factory=dict)
    time_to_train: float | None = None                      # seconds
    time_to_train_rule: str = ""
    total_time: float | None = None                         # seconds
    begin: float | None = None                              # the log's own clock, seconds
    end: float | None = None
    events: list[str] = field(default_factory=list)
    status: str | None = None                               # MLPerf run_stop status (of the reported run)
    started: bool = False                                   # MLPerf init_start or run_start seen
    stopped: bool = False                                   # a run finished (MLPerf run_stop seen)
    after_stop: int = 0                                     # evaluations logged after run_stop (ignored)
    benchmark: str | None = None                            # MLPerf submission_benchmark
    inference: dict[str, Any] = field(default_factory=dict)  # MLPerf Inference: validity, checks, rates
    latencies: dict[str, float] = field(default_factory=dict)  # seconds, by "p50", "p99", "mean", ...
    errors: list[str] = field(default_factory=list)          # MLPerf records marked metadata.is_error
    recognised: Counter = field(default_factory=Counter)    # lines recognised, by format
    warnings: list[str] = field(default_factory=list)
    warning_count: int = 0
    """Every warning, repeats included (:attr:`warnings` keeps each message once)."""
    ignored_lines: int = 0
    """Lines on which something was ignored with a warning: a figure, or the whole line."""
    elapsed: float | None = None
    """Seconds since the command started, set by the reader before each line."""
    target_accuracy: float | None = None
    """The user's ``target_accuracy``, checked in the user's direction (``user_metric``); it overrides
    an MLPerf benchmark's own target.  None: the benchmark's target, if sixdim knows it."""
    read_beside_mlperf: tuple[str, ...] = ()
    """The framework line formats the user asked to read even in an MLPerf log.  Others stop reading
    once an MLPerf line is seen (:func:`~sixdim.workloads.logs.parsers.read_line`): NVIDIA's BERT prints
    Python dicts (``{'eval_loss': ...}``, a placeholder ``{'final_loss': 0.0}``) among its MLPerf lines."""
    details: dict[str, Any] = field(default_factory=dict)
    """What :meth:`finish` found that belongs in the result's details: the MLPerf runs and which one is
    reported, the round, the target and whether it was reached (``target_reached``, ``target_note``)."""
    runs: list[MlperfRun] = field(default_factory=list)
    """The MLPerf training runs of the output, in order."""
    _seen_throughputs: set = field(default_factory=set, repr=False)
    _dropped_warnings: int = field(default=0, repr=False)
    _mlperf_form: str | None = field(default=None, repr=False)
    _mlperf_keys: set = field(default_factory=set, repr=False)
    _global_batch_size: float | None = field(default=None, repr=False)
    _changes: int = field(default=0, repr=False)
    _finished_at: int = field(default=-1, repr=False)
    _mlperf_qualities: list[Quality] = field(default_factory=list, repr=False)
    _derived_time: bool = field(default=False, repr=False)

    def warn(self, message: str) -> None:
        """Note an ignored figure once; past :data:`MAX_WARNINGS`, only count them."""
        self.warning_count += 1
        if message in self.warnings:
            return
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(message)
        else:
            self._dropped_warnings += 1

    def all_warnings(self) -> list[str]:
        extra = [f"... and {self._dropped_warnings} more warnings"] if self._dropped_warnings else []
        return self.warnings + extra

    @property
    def accuracies(self) -> list[float]:
        """The user metric's values as logged (before any rescaling)."""
        self.finish()
        mine = [q for q in self._mlperf_qualities if q.metric.name == self.user_metric.name]
        return [e.value for e in self.series.get(self.user_metric.name, (None, []))[1]] + \
            [v for q in mine for v in q.values]

    def add_throughput(self, value: float, marker: Any = None) -> None:
        """One throughput reading; the same value at the same step or time (an MLPerf ``throughput``
        record and its ``tracked_stats`` twin) is counted once."""
        if marker is not None:
            key = (value, json.dumps(marker, sort_keys=True, default=str))
            if key in self._seen_throughputs:
                return
            self._seen_throughputs.add(key)
        self.throughputs.append(value)

    def add_quality(self, metric: Metric, value: float, percent: bool = False, at: float | None = None,
                    clock: str = SIXDIM_CLOCK) -> None:
        """One evaluation of a metric, in log order, read at ``at`` on ``clock`` (default: now, as
        sixdim read it); one logged after an MLPerf ``run_stop`` is not part of the run MLPerf timed,
        so it is only counted."""
        if self.stopped and not (self.runs and not self.runs[-1].ended):
            if self.runs:
                self.runs[-1].after_stop += 1
            self.after_stop += 1
            return
        known = self.series.get(metric.name)
        if known is None:
            known = self.series[metric.name] = (metric, [])
        elif known[0].higher_is_better != metric.higher_is_better:
            self.warn(f"quality metric {metric.name!r} logged with both directions: the first one is kept")
        known[1].append(Evaluation(value, percent, self.elapsed if at is None else at,
                                   SIXDIM_CLOCK if at is None else clock))
        self._changes += 1

    def has_figures(self) -> bool:
        """Whether any parser extracted something: a figure, a run boundary or a verdict."""
        return bool(self.throughputs or self.average_throughput is not None or self.series
                    or any(run.readings for run in self.runs)
                    or self.time_to_train is not None or self.total_time is not None or self.latencies
                    or self.stopped or self.inference.get("validity") or self.inference.get("rates"))

    def qualities(self) -> list[Quality]:
        """Every quality metric, resolved to its reported unit, in the order first logged: the reported
        MLPerf run's, then the other formats'."""
        self.finish()
        return list(self._mlperf_qualities) + self._series_qualities()

    def _series_qualities(self) -> list[Quality]:
        resolved = (_resolve(metric, evaluations, self) for metric, evaluations in self.series.values())
        return [q for q in resolved if q is not None]

    def finish(self) -> None:
        """Decide what needs the whole log: an MLPerf log's benchmark and so its metrics, which run is
        reported, its quality target and whether it was met (:attr:`details`); the time to train to
        ``target_accuracy`` on the log's own clock.  Called by :func:`parse_lines` and
        :meth:`qualities`; again only when lines came since."""
        if self._finished_at == self._changes:
            return
        self._finished_at = self._changes
        _finish_mlperf(self)
        _finish_user_target(self)

    def run_failure(self) -> str | None:
        """Why an MLPerf training run failed, said specifically, or None: the log ends before any run
        reached ``run_stop``, or the reported run's ``run_stop`` says it did not succeed."""
        self.finish()
        if self.started and not self.stopped:
            return _cut_reason(self)
        if self.stopped and self.status not in (None, "success"):
            if self.status == FAILED_V05:
                return f"the run {FAILED_V05}: its run_stop says so"
            return f"the run logged run_stop with status {self.status!r}"
        return None


Parser = Callable[[str, TrainingLog], bool]


# --- Numbers --------------------------------------------------------------------------------

def reading(log: TrainingLog, value: Any, what: str) -> float | None:
    """A JSON value as a figure, or None: booleans, non-finite and negative numbers are ignored with
    a warning (``isinstance(True, int)`` holds in Python, so booleans are checked first)."""
    if isinstance(value, bool):
        log.warn(f"{what}: {value!r} is a boolean, not a number: ignored")
        return None
    if not isinstance(value, (int, float)):
        if value is not None:
            log.warn(f"{what}: {str(value)[:40]!r} is not a number: ignored")
        return None
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        log.warn(f"{what}: {str(value)[:40]} is not finite: ignored")
        return None
    if number < 0:
        log.warn(f"{what}: {number:g} is negative: ignored")
        return None
    if number > MAX_READING:
        log.warn(f"{what}: {number:g} is too large (above {MAX_READING:g}): ignored")
        return None
    return number


def text_reading(log: TrainingLog, text: str | None, what: str) -> tuple[float | None, bool]:
    """The first number in a piece of text, and whether a ``%`` sign follows it."""
    if text is None:
        log.warn(f"{what}: the expression matched but its first group matched nothing: ignored")
        return None, False
    if text.strip().lower() in ("true", "false"):
        return reading(log, text.strip().lower() == "true", what), False
    match = NUMBER.search(text)
    if not match:
        log.warn(f"{what}: no number in {text.strip()[:40]!r}: ignored")
        return None, False
    percent = text[match.end():].lstrip().startswith("%")
    return reading(log, float(match.group()), what), percent


def float_or_none(text: str) -> float | None:
    """A time or number as the log wrote it, or None when it is not one, or not finite (5,000 digits
    read as infinity): a line's stamp that cannot place it in time."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# --- What needs the whole log: the MLPerf runs, their targets, the user's target ---------------

def _last_record(run: MlperfRun) -> str:
    """The run's last training record, in words: ``eval_start (epoch_num 2020) 2081.5 s after run_start``."""
    if run.last is None:
        return ""
    key, seconds, step = run.last
    where = f" ({step[0]} {step[1]})" if step is not None else ""
    when = (f" {seconds - run.begin:.1f} s after run_start" if seconds is not None and run.begin is not None
            and seconds >= run.begin else "")
    return f"{key}{where}{when}"


def report_run(log: TrainingLog, run: MlperfRun) -> None:
    """The log's run-level fields from the run it reports: the last that finished."""
    log.stopped, log.status, log.after_stop = run.ended, run.status, run.after_stop
    log.begin, log.end = run.begin, run.stop_time
    log.total_time = None
    if log.time_to_train_rule.startswith("MLPerf") or not log.time_to_train_rule:
        log.time_to_train, log.time_to_train_rule = None, ""
    end = run.stop_time
    if not run.ended or run.begin is None or end is None:
        return
    if end < run.begin:
        log.warn("MLPerf run_stop is earlier than run_start: no time to train")
        return
    total = end - run.begin
    if not total <= MAX_READING:  # stamps of 1e308 and -1e308: their difference overflows (or is absurd)
        log.warn(f"MLPerf run_stop - run_start is out of range ({total:g} s): no time to train")
        return
    log.total_time = total
    if run.status in (None, "success") and (log.time_to_train is None or log.time_to_train_rule.startswith("MLPerf")):
        log.time_to_train = total
        log.time_to_train_rule = ("MLPerf run_stop - run_start" if run.stopped
                                  else "MLPerf eval_result timestamp (MiniGo: no run_stop)")


def reported_run(log: TrainingLog) -> MlperfRun | None:
    """The run an output is reported by: the last that finished, else the last one."""
    return next((run for run in reversed(log.runs) if run.ended), log.runs[-1] if log.runs else None)


def sync_throughputs(log: TrainingLog) -> None:
    """With several runs holding throughput readings, :attr:`TrainingLog.throughputs` holds only the
    reported run's (after any other format's readings)."""
    holding = [run for run in log.runs if run.throughputs]
    reported = reported_run(log)
    if len(holding) < 2 or reported is None:
        return
    others = Counter(log.throughputs) - Counter(v for run in holding for v in run.throughputs)
    log.throughputs[:] = list(others.elements()) + list(reported.throughputs)


def _mlperf_metric(log: TrainingLog, name: str | None, table: tuple[Metric, ...]) -> Metric:
    """The metric an evaluation reports: the benchmark's own (by name when it has several), a
    well-known one (FID, CLIP, WER), or the user's (name and direction) for an unknown benchmark."""
    if name is None:
        if len(table) == 1:
            return table[0]
        return log.user_metric
    for metric in table:
        if metric.name.lower() == name.lower():
            return metric
    known = KNOWN_METRICS.get(name.lower())
    if known is not None:
        return known
    return Metric(name, log.user_metric.higher_is_better, log.user_metric.unit)


def _reading_metric(log: TrainingLog, reading: MlperfReading, table: tuple[Metric, ...]) -> Metric:
    if reading.position is None:
        return _mlperf_metric(log, reading.name, table)
    if len(table) == reading.width:
        return table[reading.position]
    return _mlperf_metric(log, f"eval_accuracy_{reading.position}", table)


def _run_qualities(log: TrainingLog, run: MlperfRun) -> list[Quality]:
    """A run's evaluations as metrics, now that the benchmark is known; on the log's clock (seconds
    after ``run_start``) when the run has its start and every evaluation its time."""
    table = MLPERF_BENCHMARKS.get(log.benchmark or "", ())
    on_log_clock = run.begin is not None and all(r.seconds is not None for r in run.readings)
    grouped: dict[str, tuple[Metric, list[Evaluation], list[Any]]] = {}
    for reading in run.readings:
        metric = _reading_metric(log, reading, table)
        known = grouped.setdefault(metric.name, (metric, [], []))
        if known[0].higher_is_better != metric.higher_is_better:
            log.warn(f"quality metric {metric.name!r} logged with both directions: the first one is kept")
        at = reading.seconds - run.begin if on_log_clock else reading.elapsed  # type: ignore[operator]
        known[1].append(Evaluation(reading.value, False, at, LOG_CLOCK if on_log_clock else SIXDIM_CLOCK))
        known[2].append(reading.step)
    qualities = []
    for metric, evaluations, steps in grouped.values():
        quality = _resolve(metric, evaluations, log, steps)
        if quality is not None:
            qualities.append(quality)
    return qualities


def _finish_mlperf(log: TrainingLog) -> None:
    """The reported run's qualities and fields, what became of the other runs, and the target check."""
    for key in [k for k in log.details if k.startswith(("mlperf_", "target_"))]:
        del log.details[key]
    log._mlperf_qualities = []
    run = reported_run(log)
    if run is None:
        return
    log._mlperf_qualities = _run_qualities(log, run)
    report_run(log, run)
    details = log.details
    runs = [r for r in log.runs if r is run or r.begin is not None or r.readings or r.ended]  # not a bare init_start
    details["mlperf_runs"] = len(runs)
    if len(runs) > 1:
        details["mlperf_reported_run"] = run.number
        others = [_describe_run(log, other) for other in runs if other is not run]
        details["mlperf_runs_not_reported"] = others
        log.warn(f"{len(runs)} MLPerf runs (run_start ... run_stop) in one output: run {run.number}, the last "
                 "that finished, is reported, its time, status, quality and speed its own; the others are not ("
                 + "; ".join(others) + ")")
    if run.extra_stops:
        details["mlperf_run_stop_lines"] = 1 + len(run.extra_stops)
        log.warn(f"run {run.number} has {1 + len(run.extra_stops)} run_stop lines: its first ends it (status "
                 f"{run.status!r}); the others are ignored (" + "; ".join(run.extra_stops) + ")")
    if run.result_at is not None and not run.stopped:
        details["mlperf_run_end"] = "eval_result timestamp (MiniGo v0.6 logs no run_stop)"
    _check_target(log, run)


def _describe_run(log: TrainingLog, run: MlperfRun) -> str:
    """A run that is not reported, in a few words."""
    if run.stopped:
        end = f"run_stop status {run.status!r}" if run.status is not None else "run_stop"
    elif run.result_at is not None:
        end = "eval_result"
    else:
        end = "no run_stop" + (f" (the last record: {_last_record(run)})" if run.last else "")
    length = f", {run.stop_time - run.begin:.1f} s" if run.ended and run.begin is not None \
        and run.stop_time is not None else ""
    qualities = _run_qualities(log, run) if run.readings else []
    final = ", ".join(f"final {q.metric.name} {q.final:g}" for q in qualities)
    return f"run {run.number}: {end}{length}" + (f", {final}" if final else "")


def _cut_reason(log: TrainingLog) -> str:
    """A log that ends before any run's ``run_stop``: what it ended with."""
    run = log.runs[-1] if log.runs else None
    if run is None:
        return "the log ends before run_stop: the run never reached run_stop"
    said = f"the log ends before run_stop: its last MLPerf record is {_last_record(run)}" if run.last else \
        "the log ends before run_stop"
    qualities = _run_qualities(log, run) if run.readings else []
    if qualities:
        said += "; " + ", ".join(f"{len(q.values)} evaluation{'s' if len(q.values) > 1 else ''} of {q.metric.name} "
                                 f"(the last {q.final:g})" for q in qualities)
    else:
        said += "; no evaluation was logged"
    said += "; the run never reached run_stop"
    if run.odd_stops == 1:
        said += f" (a run_stop line was ignored: its time {run.odd_stop_times[0]} is not a number)"
    elif run.odd_stops:
        more = ", ..." if run.odd_stops > len(run.odd_stop_times) else ""
        said += (f" ({run.odd_stops} run_stop lines were ignored: their times, "
                 + ", ".join(run.odd_stop_times) + f"{more}, are not numbers)")
    return said


def _check_target(log: TrainingLog, run: MlperfRun) -> None:
    """The quality target: the user's ``target_accuracy`` (in the user's direction) if set, else the
    benchmark's for the log's round.  As MLCommons' compliance checker, a run meets it when one of its
    evaluations does (every metric of it at that evaluation).  Not met: no time to train."""
    details = log.details
    qualities = {q.metric.name: q for q in log._mlperf_qualities}
    if log.target_accuracy is not None:
        _check_user_target(log, run, list(qualities.values()))
        return
    benchmark = log.benchmark
    if benchmark is None:
        return
    rounds = mlperf_targets.candidate_rounds(benchmark, log._mlperf_form, sorted(log._mlperf_keys))
    groups = mlperf_targets.targets_by_round(benchmark, rounds, log._global_batch_size)
    if not groups:
        details["target_note"] = f"sixdim knows no MLPerf quality target for {benchmark!r} in this log's form"
        return
    details["mlperf_round"] = mlperf_targets.describe_rounds(rounds)
    series = {name: list(zip(q.steps, q.values)) for name, q in qualities.items()}
    verdicts = []
    for targets, held in groups:
        met = mlperf_targets.first_meeting(targets, series)
        verdicts.append((targets, held, met is not None))
    described = "; ".join(" and ".join(t.describe() for t in targets)
                          + f" (MLPerf {mlperf_targets.describe_rounds(held)})" for targets, held, _ in verdicts)
    details["mlperf_target"] = described
    if any(t.metric not in qualities for targets, _, _ in verdicts for t in targets):
        details["target_reached"] = False
        missing = sorted({t.metric for targets, _, _ in verdicts for t in targets if t.metric not in qualities})
        reason = f"no evaluation of {', '.join(missing)} in run {run.number}"
    elif all(reached for _, _, reached in verdicts):
        details["target_reached"] = True
        return
    elif not any(reached for _, _, reached in verdicts):
        details["target_reached"] = False
        finals = ", ".join(f"{q.metric.name} {q.final:g}" for q in qualities.values())
        reason = f"no evaluation met it (final {finals})"
    else:
        details["target_reached"] = None
        which = "; ".join(f"{'met' if reached else 'not met'} for MLPerf {mlperf_targets.describe_rounds(held)}"
                          for _, held, reached in verdicts)
        details["target_note"] = (f"the target depends on the MLPerf round, which the log does not say: {which}; "
                                  "the run's own verdict (run_stop) stands")
        return
    details["target_note"] = f"target {described} not reached: {reason}: no time to train"
    if log.time_to_train_rule.startswith("MLPerf"):
        log.time_to_train, log.time_to_train_rule = None, ""


def _check_user_target(log: TrainingLog, run: MlperfRun, qualities: list[Quality]) -> None:
    """``target_accuracy``: met when one evaluation of the user's metric (else the run's only one) meets
    it in the user's direction; the time to train is then until that evaluation, on the log's clock."""
    target, higher = log.target_accuracy, log.user_metric.higher_is_better
    assert target is not None
    details = log.details
    direction = HIGHER_IS_BETTER if higher else LOWER_IS_BETTER
    mine = [q for q in qualities if q.metric.name == log.user_metric.name]
    quality = mine[0] if mine else qualities[0] if len(qualities) == 1 else None
    if log.time_to_train_rule.startswith("MLPerf"):
        log.time_to_train, log.time_to_train_rule = None, ""
    if quality is None:
        details["target_reached"] = None
        names = ", ".join(q.metric.name for q in qualities) or "none"
        details["target_note"] = f"target_accuracy {target:g}: no single quality metric to check it against ({names})"
        return
    details["mlperf_target"] = f"{quality.metric.name} {'>=' if higher else '<='} {target:g} (target_accuracy)"
    if higher != quality.metric.higher_is_better:
        log.warn(f"target_accuracy is checked {direction} (higher_is_better) but {quality.metric.name!r} is "
                 f"{quality.metric.direction}")
    reached = [at for value, at in zip(quality.values, quality.at) if (value >= target if higher else value <= target)]
    details["target_reached"] = bool(reached)
    if not reached:
        details["target_note"] = (f"target_accuracy {target:g} not reached by {quality.metric.name!r} ({direction}; "
                                  f"final {quality.final:g}): no time to train")
        return
    if quality.clock == LOG_CLOCK and reached[0] is not None:
        log.time_to_train = reached[0]
        log.time_to_train_rule = (f"MLPerf log clock: run_start until {quality.metric.name!r} first met "
                                  f"{target:g} ({direction})")


def _finish_user_target(log: TrainingLog) -> None:
    """``target_accuracy`` for the other formats: where every evaluation of the metric carries the log's
    own time (AI-Rank's), the time to train is until the first that met it, on that clock."""
    if log._derived_time:
        log.time_to_train, log.time_to_train_rule, log._derived_time = None, "", False
    if log.target_accuracy is None or log.runs or log.time_to_train is not None:
        return
    qualities = log._series_qualities()
    mine = [q for q in qualities if q.metric.name == log.user_metric.name]
    quality = mine[0] if mine else qualities[0] if len(qualities) == 1 else None
    if quality is None or quality.clock != LOG_CLOCK:
        return
    higher = log.user_metric.higher_is_better
    reached = quality.first_reaching(log.target_accuracy, higher)
    if reached is not None:
        log.time_to_train, log._derived_time = reached, True
        log.time_to_train_rule = (f"the log's own clock: from its start until {quality.metric.name!r} first met "
                                  f"{log.target_accuracy:g} ({HIGHER_IS_BETTER if higher else LOWER_IS_BETTER})")


# --- Resolving a metric's unit ------------------------------------------------------------------

def _resolve(metric: Metric, evaluations: list[Evaluation], log: TrainingLog,
             steps: Sequence[Any] | None = None) -> Quality | None:
    """The metric's values in its reported unit.  A value above 1 cannot be an accuracy ratio and is
    dropped with a warning; an error rate (a lower-is-better ratio: RNN-T's WER) can exceed 1, when a
    model inserts more words than the reference holds, early in training."""
    unit, values, scale = resolve_unit(metric, evaluations)
    steps = list(steps) if steps is not None else [None] * len(evaluations)
    bounded = unit == "ratio" and metric.higher_is_better
    kept = [(v, e.at, e.clock, s) for v, e, s in zip(values, evaluations, steps) if not bounded or v <= 1.0]
    if len(kept) < len(values):
        log.warn(f"quality metric {metric.name!r}: {len(values) - len(kept)} value(s) above 1 for a ratio: ignored "
                 "(set accuracy_unit to 'percent' or 'score' if that is how it is logged)")
    if not kept:
        return None
    clock = LOG_CLOCK if all(c == LOG_CLOCK for _, _, c, _ in kept) else SIXDIM_CLOCK
    return Quality(Metric(metric.name, metric.higher_is_better, unit), [v for v, _, _, _ in kept],
                   [a for _, a, _, _ in kept], scale, clock, [s for _, _, _, s in kept])
