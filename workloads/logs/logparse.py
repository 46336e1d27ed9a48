"""Reading a training command's output: AI-Rank lines, MLPerf logs (training and inference), or regexes.

Torch-free.  Each parser reads one line into a :class:`TrainingLog`; :meth:`TrainingLog.finish` (which
:func:`parse_lines` and :meth:`TrainingLog.qualities` call) then decides what needs the whole log, and
:meth:`TrainingLog.qualities` gives every quality metric the run reported as its *final* value, named,
with its direction and unit.  The command workload turns that into figures and a status.  The rules are
written out in docs/TRAINING_LOGS.md; in short:

- AI-Rank: ``AI-Rank-log <unix time> key:value[, key:value]`` or a bare event (``test_begin``,
  ``test_finish``).  Values may carry units (``8.03sec``, ``1190images/sec``, ``76.1%``).
- MLPerf Training: ``:::MLLOG {json}`` (v0.7 on), ``:::MLL <time> <key>: {json}`` (v0.6) and
  ``:::MLPv0.5.0 <benchmark> <time> (<file>:<line>) <key>[: <json>]`` (v0.5); a record that is a Python
  literal rather than JSON (v0.6's ``'status': 'success'``) is read with :func:`ast.literal_eval`.
  Time to train is ``run_stop`` minus ``run_start``, as MLPerf defines it, of one run, and only when
  the run met its benchmark's quality target (:mod:`sixdim.workloads.logs.mlperf_targets`).
- MLPerf Inference: loadgen's ``mlperf_log_detail.txt`` (``:::MLLOG`` lines with ``result_*`` keys):
  throughput, latency percentiles and the run's validity.
- Regex: the user's expressions; the first group (or the whole match) is the number.

An MLPerf log's benchmark, and so each evaluation's metric, direction and unit, is decided from the
whole log, not from the order of its lines (``submission_benchmark`` is the last line of some).  A
*run* is one ``run_start`` ... ``run_stop``: an output holding several reports one of them, the last
that finished, with its time, status, quality and speed all its own, and says what became of the others.

A quality value is the one the run *ended* with: the last evaluation logged before ``run_stop``
(in the order of the lines, not of their timestamps: MLPerf Stable Diffusion evaluates its
checkpoints offline and logs them with later times than its ``run_stop``).  Taking the best would
report the worst evaluation for a lower-is-better metric (word error rate, loss, FID).

A figure that is not a finite, non-negative number (NaN, infinity, a boolean, a negative
throughput) or is absurdly large (above :data:`MAX_READING`) is ignored with a warning: never
exported, never counted as 0 or 1.  Neither does a line a parser cannot read (JSON nested too
deeply, a ``metadata`` that is not an object, an expression's group that matched nothing) end the
run: it is ignored with a warning, and :attr:`TrainingLog.ignored_lines` counts such lines.  So is an
MLPerf ``run_stop`` whose time is there but not a number (``"time_ms": "abc"``): taken as the run's
end, it would silently drop every later evaluation; the run goes on to its next ``run_stop``, and a
log with no other one says, in its failure, that this one was ignored.  The
patterns match in time linear in the line (a lazy group before trailing spaces would take seconds
on a 64 KiB line of spaces).
"""

from __future__ import annotations

import ast
import importlib
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from sixdim.workloads.logs import mlperf_targets

AI_RANK = re.compile(r"AI-Rank-log\s+(\d+(?:\.\d+)?)\s+(.*)")
MLLOG = re.compile(r":::MLLOG\s+(\{.*)")  # the JSON runs to the line's end: checked in _parse_mllog
MLL = re.compile(r":::MLL\s+(\S+)\s+([A-Za-z0-9_.]+):(.*)")
MLP05 = re.compile(r":::MLPv0\.5\.0\s+(\S+)\s+(\S+)\s+\([^)]{0,1000}\)\s+([A-Za-z0-9_.]+)(?::(.*))?\s*$")
NUMBER = re.compile(r"[-+]?(?:\b(?:nan|inf(?:inity)?)\b|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)", re.IGNORECASE)
LATENCY_PERCENTILE = re.compile(r"result_(\d+(?:\.\d+)?)_percentile_latency_ns")

HIGHER_IS_BETTER = "higher_is_better"
LOWER_IS_BETTER = "lower_is_better"
UNITS = ("auto", "ratio", "percent", "score")
MAX_WARNINGS = 20
MAX_READING = 1e15
"""The largest figure read (throughput, quality value, seconds, nanoseconds): a bigger one is garbage
(10^15 samples per second; 10^15 ns is 11 days), and sums and means of readings below it stay finite."""

TIME_UNITS = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
              "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hour": 3600.0,
              "hours": 3600.0}
"""Units an AI-Rank time may carry (the format writes ``sec``; a ``ms`` must not pass for seconds)."""

OWN_FORMATS = {
    "ai_rank": "AI-Rank ('AI-Rank-log <time> key:value' lines)",
    "mlperf": "MLPerf (':::MLLOG', ':::MLL' and ':::MLPv0.5.0' lines)",
}


FRAMEWORK_LINES = "sixdim.workloads.logs.framework_lines"
"""The module of the frameworks' line formats.  It imports this one, so it is reached by name when
used, never imported here (no import cycle; the worker module is reached the same way)."""


def _line_formats() -> dict[str, tuple[str, Parser]]:
    """framework_lines' ``LINE_FORMATS`` (name -> (description, parser)), when that module is there."""
    try:
        return dict(getattr(importlib.import_module(FRAMEWORK_LINES), "LINE_FORMATS", {}))
    except ImportError:
        return {}


class _Formats(Mapping[str, str]):
    """:data:`OWN_FORMATS`, then framework_lines' formats: every output format's description, by name."""

    def _all(self) -> dict[str, str]:
        return {**OWN_FORMATS, **{name: described for name, (described, _) in _line_formats().items()}}

    def __getitem__(self, name: str) -> str:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


FORMATS: Mapping[str, str] = _Formats()


@dataclass(frozen=True)
class Metric:
    """A quality metric: its name (the exported ``metric`` label), which way is better, its unit.

    ``unit``: ``ratio`` (a fraction in [0, 1]: accuracy, mAP, AUC, word error rate), ``percent``
    (0–100, reported as a ratio), ``score`` (a scale of its own: loss, perplexity, BLEU, FID;
    never rescaled) or ``auto`` (decided from the values: see :func:`_scale`).
    """

    name: str
    higher_is_better: bool = True
    unit: str = "auto"

    @property
    def direction(self) -> str:
        return HIGHER_IS_BETTER if self.higher_is_better else LOWER_IS_BETTER


def _ratio(name: str, higher: bool = True) -> Metric:
    return Metric(name, higher, "ratio")


def _score(name: str, higher: bool) -> Metric:
    return Metric(name, higher, "score")


MLPERF_BENCHMARKS: dict[str, tuple[Metric, ...]] = {
    "resnet": (_ratio("top1_accuracy"),),
    "bert": (_ratio("mlm_accuracy"),),
    "ssd": (_ratio("mAP"),),
    "retinanet": (_ratio("mAP"),),
    "maskrcnn": (_ratio("BBOX"), _ratio("SEGM")),
    "mask": (_ratio("BBOX"), _ratio("SEGM")),
    "unet3d": (_ratio("mean_dice"),),
    "dlrm": (_ratio("AUC"),),
    "dlrm_dcnv2": (_ratio("AUC"),),
    "dlrmv2": (_ratio("AUC"),),
    "gnn": (_ratio("accuracy"),),
    "rgat": (_ratio("accuracy"),),
    "minigo": (_ratio("win_rate"),),
    "ncf": (_ratio("HR@10"),),
    "rnnt": (_ratio("WER", higher=False),),
    "gpt3": (_score("log_perplexity", False),),
    "llama31_405b": (_score("log_perplexity", False),),
    "llama31_8b": (_score("log_perplexity", False),),
    "gpt_oss_20b": (_score("log_perplexity", False),),
    "deepseekv3_671b": (_score("log_perplexity", False),),
    "llama2_70b_lora": (_score("eval_loss", False),),
    "flux1": (_score("eval_loss", False),),
    "stable_diffusion": (_score("FID", False), _score("CLIP", True)),
    "transformer": (_score("BLEU", True),),
    "gnmt": (_score("BLEU", True),),
}
"""Each MLPerf Training benchmark's quality metric(s) (``submission_benchmark``'s value, v0.5 to
v6.0), from MLCommons' compliance checker: the direction its target is checked in, its unit.
Several benchmarks log a lower-is-better value under ``eval_accuracy``.  Their targets, by round, are
in :mod:`sixdim.workloads.logs.mlperf_targets`."""

KNOWN_METRICS: dict[str, Metric] = {m.name.lower(): m for m in (
    _score("FID", False), _score("CLIP", True), _ratio("WER", higher=False), _ratio("BBOX"), _ratio("SEGM"))}
"""Metrics named in ``eval_accuracy``'s ``metadata.metric`` or as keys of a dict value, when the
benchmark's own table does not name them."""


SIXDIM_CLOCK = "sixdim"
LOG_CLOCK = "log"


@dataclass
class Evaluation:
    """One reading of a quality metric: the number as logged, whether it was written with a ``%``
    sign, and when: seconds since the command started as sixdim read it (``clock`` ``sixdim``), or
    since the run's start on the log's own timestamps (``clock`` ``log``); None when unknown."""

    value: float
    percent: bool = False
    at: float | None = None
    clock: str = SIXDIM_CLOCK


@dataclass
class Quality:
    """One quality metric of a run, resolved: its values in the reported unit, in log order."""

    metric: Metric
    """With the unit resolved to ``ratio`` or ``score``."""
    values: list[float]
    at: list[float | None]
    scale: str
    """How the logged numbers were read, e.g. ``percent (divided by 100)``."""
    clock: str = SIXDIM_CLOCK
    """Which clock :attr:`at` is on: ``log`` (seconds from the run's start on the log's own timestamps)
    when every evaluation has one, else ``sixdim`` (seconds since the command started, as read)."""
    steps: list[Any] = field(default_factory=list)
    """Each value's step as logged (an MLPerf ``epoch_num`` or ``samples_count``), or None."""

    @property
    def final(self) -> float:
        return self.values[-1]

    @property
    def best(self) -> float:
        return max(self.values) if self.metric.higher_is_better else min(self.values)

    def meets(self, value: float, target: float) -> bool:
        return value >= target if self.metric.higher_is_better else value <= target

    def first_reaching(self, target: float, higher_is_better: bool | None = None) -> float | None:
        """When (seconds on :attr:`clock`) the metric first met the target, in its direction (or the one given)."""
        higher = self.metric.higher_is_better if higher_is_better is None else higher_is_better
        return next((at for value, at in zip(self.values, self.at)
                     if at is not None and (value >= target if higher else value <= target)), None)

    def describe(self) -> dict[str, Any]:
        return {"metric": self.metric.name, "direction": self.metric.direction, "unit": self.metric.unit,
                "scale": self.scale, "final": self.final, "best": self.best, "evaluations": len(self.values),
                "values": self.values}


@dataclass
class MlperfReading:
    """One number of an MLPerf ``eval_accuracy`` record, read as the line came: its name when the
    record gives one (``metadata.metric``, a dict's key), or its place in a list value (named from the
    benchmark's table once the whole log is read), and both clocks."""

    value: float
    name: str | None = None
    position: int | None = None
    width: int = 1
    seconds: float | None = None
    """The log's own time of the record, seconds."""
    elapsed: float | None = None
    """sixdim's: seconds since the command started, as read."""
    step: Any = None


@dataclass
class MlperfRun:
    """One MLPerf training run: ``run_start`` (or the first record of a run that logged none) up to
    its first ``run_stop``; what comes after that line and before the next run's start is counted,
    not read."""

    number: int
    begin: float | None = None
    """``run_start``'s time, the log's clock, seconds."""
    end: float | None = None
    stopped: bool = False
    status: str | None = None
    readings: list[MlperfReading] = field(default_factory=list)
    throughputs: list[float] = field(default_factory=list)
    after_stop: int = 0
    """Evaluations logged after this run's ``run_stop`` (before another run starts): not read."""
    extra_stops: list[str] = field(default_factory=list)
    """Further ``run_stop`` lines of this run that differ from its first: each described."""
    odd_stops: int = 0
    """``run_stop`` lines of this run ignored because their time is not a number."""
    odd_stop_times: list[str] = field(default_factory=list)
    """The first few of their times, as logged."""
    result_at: float | None = None
    """MiniGo's ``eval_result`` ``timestamp`` (seconds after ``run_start``): where v0.6 logs no run_stop,
    the end of the run."""
    last: tuple[str, float | None, Any] | None = None
    """The last training record read in this run (key, time, step), for a cut log's reason."""
    seen: set = field(default_factory=set, repr=False)
    seen_throughputs: set = field(default_factory=set, repr=False)

    @property
    def ended(self) -> bool:
        return self.stopped or self.result_at is not None

    @property
    def stop_time(self) -> float | None:
        if self.stopped:
            return self.end
        return None if self.result_at is None or self.begin is None else self.begin + self.result_at


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


def _text_reading(log: TrainingLog, text: str | None, what: str) -> tuple[float | None, bool]:
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


def _seconds(log: TrainingLog, text: str, what: str) -> float | None:
    value, _ = _text_reading(log, text, what)
    if value is None:
        return None
    match = NUMBER.search(text)
    unit = re.match(r"\s*([A-Za-z]+)", text[match.end():]) if match else None
    if unit and unit.group(1).lower() not in TIME_UNITS:
        log.warn(f"{what}: unknown time unit {unit.group(1)!r}: ignored")
        return None
    seconds = value * TIME_UNITS[unit.group(1).lower()] if unit else value
    if seconds > MAX_READING:  # 1e15 hours
        log.warn(f"{what}: {seconds:g} s is too large (above {MAX_READING:g}): ignored")
        return None
    return seconds


# --- AI-Rank ----------------------------------------------------------------------------------

def parse_ai_rank(line: str, log: TrainingLog) -> bool:
    match = AI_RANK.search(line)
    if not match:
        return False
    log.recognised["ai_rank"] += 1
    stamp = _float_or_none(match.group(1))  # 5,000 digits read as infinity: no time
    for item in (part.strip() for part in match.group(2).split(",")):
        key, sep, value = item.partition(":")
        key = key.strip()
        if not sep:
            _ai_rank_event(log, key, stamp)
        else:
            _ai_rank_item(log, key, value, stamp)
    return True


def _ai_rank_event(log: TrainingLog, key: str, stamp: float | None) -> None:
    log.events.append(key)
    if key == "test_begin":
        log.begin = stamp
    elif key in ("test_finish", "test_end"):
        log.end = stamp


def _ai_rank_item(log: TrainingLog, key: str, value: str, stamp: float | None = None) -> None:
    what = f"AI-Rank {key}"
    if key in ("eval_accuracy", "total_accuracy"):
        number, percent = _text_reading(log, value, what)
        if number is not None and log.begin is not None and stamp is not None and stamp >= log.begin:
            log.add_quality(log.user_metric, number, percent, stamp - log.begin, LOG_CLOCK)  # since test_begin
        elif number is not None:
            log.add_quality(log.user_metric, number, percent)
    elif key in ("target_quality_time", "total_use_time"):
        seconds = _seconds(log, value, what)
        if seconds is not None and key == "target_quality_time":
            log.time_to_train, log.time_to_train_rule = seconds, "AI-Rank target_quality_time"
        elif seconds is not None:
            log.total_time = seconds
    elif key in ("avg_ips", "ips"):
        number, _ = _text_reading(log, value, what)
        if number is not None and key == "avg_ips":
            log.average_throughput = number
        elif number is not None:
            log.add_throughput(number)


# --- MLPerf -----------------------------------------------------------------------------------

FAILED_V05 = "failed (success: false)"
"""The status of a v0.5 run whose ``run_stop`` says ``{"success": false}``: failed, in the log's words."""
NUMERIC_TEXT = re.compile(r"\s*[-+]?(?:nan|inf(?:inity)?|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*", re.IGNORECASE)
PYTHON_NAMES = {"null": None, "true": True, "false": False, "None": None, "True": True, "False": False,
                "NaN": math.nan, "Infinity": math.inf}
"""Names a record that is a Python literal may hold: JSON's, and Python's own."""
STEP_KEYS = ("epoch_num", "samples_count", "epoch", "step_num", "step", "iteration")
"""The metadata keys that place an MLPerf evaluation in the run, in order of preference."""


class _Names(ast.NodeTransformer):
    """JSON's and Python's constant names as constants; any other name makes the text no literal."""

    def visit_Name(self, node: ast.Name) -> ast.Constant:
        if node.id not in PYTHON_NAMES:
            raise ValueError(f"name {node.id!r}")
        return ast.copy_location(ast.Constant(PYTHON_NAMES[node.id]), node)


def _python_literal(text: str) -> Any:
    """A record written as a Python literal (v0.6's ``{"value": null, "metadata": {'lineno': 615}}``),
    read with :func:`ast.literal_eval`, never ``eval``: literals only, JSON's ``null``/``true``/``false``
    allowed.  Python's parser refuses nesting over 200 deep, so this is as bounded as the JSON reader."""
    return ast.literal_eval(_Names().visit(ast.parse(text.strip(), mode="eval")))


def _json(log: TrainingLog, text: str, what: str) -> tuple[bool, Any]:
    """Parse JSON (or, failing that, a Python literal) that may be broken or absurdly nested;
    (False, None) when it cannot be read."""
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        return True, _python_literal(text)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        log.warn(f"{what}: not valid JSON (or nested too deeply): ignored")
        return False, None


def parse_mlperf(line: str, log: TrainingLog) -> bool:
    """Any MLPerf line: ``:::MLLOG`` (training v0.7 on, inference), ``:::MLL`` (v0.6), ``:::MLPv0.5.0``."""
    if ":::ML" not in line:
        return False
    for parse in (_parse_mllog, _parse_mll, _parse_mlp05):
        recognised = parse(line, log)
        if recognised:
            log.recognised["mlperf"] += 1
            return True
    return False


def _parse_mllog(line: str, log: TrainingLog) -> bool:
    match = MLLOG.search(line)
    if not match:
        return False
    text = match.group(1).rstrip()
    if not text.endswith("}"):  # cut short: a line over the reader's limit, or a writer killed mid-line
        log.warn("MLPerf line: its JSON is cut short (no closing brace): ignored")
        return False
    ok, record = _json(log, text, "MLPerf line")
    if not ok or not isinstance(record, dict) or not isinstance(record.get("key"), str):
        return ok
    stamp, scale = (record.get("time_ms"), 1000.0) if "time_ms" in record else (record.get("time_s"), 1.0)
    seconds = stamp / scale if _is_number(stamp) else None  # time_s: Alibaba's v0.7 logs
    if record["key"] == "run_stop" and seconds is None and ("time_ms" in record or "time_s" in record):
        _odd_run_stop(log, stamp)
        return True
    _record(log, record["key"], record.get("value"), seconds, _metadata(log, record.get("metadata")), "mllog")
    return True


def _parse_mll(line: str, log: TrainingLog) -> bool:
    match = MLL.search(line)
    if not match:
        return False
    key = match.group(2)
    if not _relevant(key):
        _note_key(log, key)
        return True
    text = match.group(3).strip()
    ok, payload = _json(log, text, f"MLPerf {key}") if text else (True, None)
    if not ok:
        return True
    value, metadata = payload, {}
    if isinstance(payload, dict) and "value" in payload:
        value, metadata = payload.get("value"), _metadata(log, payload.get("metadata"))
    seconds = _float_or_none(match.group(1))
    if key == "run_stop" and seconds is None:
        _odd_run_stop(log, match.group(1))
        return True
    _record(log, key, value, seconds, metadata, "v0.6")
    return True


def _parse_mlp05(line: str, log: TrainingLog) -> bool:
    """MLPerf v0.5: ``eval_accuracy: {"epoch": 8, "value": 0.47}``, ``run_stop: {"success": true}``."""
    match = MLP05.search(line)
    if not match:
        return False
    benchmark, stamp, key, text = match.groups()
    text = text.strip() if text is not None else None
    if log.benchmark is None:
        _record(log, "submission_benchmark", benchmark, None, {}, "v0.5")
    if not _relevant(key):
        _note_key(log, key)
        return True
    ok, value = _json(log, text, f"MLPerf {key}") if text else (True, None)
    if not ok:
        return True
    metadata: dict[str, Any] = {}
    if key == "eval_accuracy" and isinstance(value, dict):
        metadata = {"epoch_num": value.get("epoch")}
        value = value.get("value")
    elif key == "run_stop":
        if _float_or_none(stamp) is None:
            _odd_run_stop(log, stamp)
            return True
        success = value.get("success") if isinstance(value, dict) else None
        metadata = {"status": None if success is None else
                    "success" if str(success).lower() == "true" else FAILED_V05}
    _record(log, key, value, _float_or_none(stamp), metadata, "v0.5")
    return True


def _odd_run_stop(log: TrainingLog, stamp: Any) -> None:
    """A ``run_stop`` whose time is there but is not a number: ignored with a warning.  Taken as the
    run's end, it would cut every later evaluation off the run, silently; the run goes on to its next
    ``run_stop``, and, should none come, its failure names this one (:func:`_cut_reason`)."""
    shown = repr(stamp)[:40]
    log.warn(f"MLPerf run_stop: its time {shown} is not a number: the line is ignored and the run goes on "
             "(a later run_stop ends it)")
    if log.runs and not log.runs[-1].ended:
        run = log.runs[-1]
        run.odd_stops += 1
        if len(run.odd_stop_times) < 3:
            run.odd_stop_times.append(shown)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _float_or_none(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _metadata(log: TrainingLog, metadata: Any) -> dict[str, Any]:
    if metadata is None or isinstance(metadata, dict):
        return metadata or {}
    log.warn("MLPerf line: metadata is not an object: ignored")
    return {}


INFERENCE_PREFIXES = ("result_", "requested_", "effective_", "loadgen_", "early_stopping")
TRAINING_START = ("init_start", "run_start")
TRAINING_KEYS = frozenset(TRAINING_START + ("submission_benchmark", "run_stop", "eval_accuracy", "throughput",
                                            "samples_per_second", "tracked_stats", "eval_result"))


def _relevant(key: str) -> bool:
    """Whether a record's value is worth parsing: the older formats log every hyperparameter, in
    free text as well as JSON, and a value nobody reads must not cost a warning."""
    return key in TRAINING_KEYS or key.startswith(INFERENCE_PREFIXES)


def _note_key(log: TrainingLog, key: str) -> None:
    """A key whose value is not read, kept when it tells the log's round (:data:`mlperf_targets.ROUND_HINTS`)."""
    if key in mlperf_targets.HINT_KEYS and key not in log._mlperf_keys:
        log._mlperf_keys.add(key)
        log._changes += 1


def _record(log: TrainingLog, key: str, value: Any, seconds: float | None, metadata: dict[str, Any],
            form: str) -> None:
    """One MLPerf record, whatever the version wrote it as."""
    if key.startswith(INFERENCE_PREFIXES):
        _inference(log, key, value)
    else:
        _training_record(log, key, value, seconds, metadata, form)
    if metadata.get("is_error") is True and len(log.errors) < MAX_WARNINGS:
        log.errors.append(f"{key}: {str(value)[:200]}")


def _training_record(log: TrainingLog, key: str, value: Any, seconds: float | None, metadata: dict[str, Any],
                     form: str) -> None:
    _note_key(log, key)
    if key == "global_batch_size" and _is_number(value):
        log._global_batch_size = float(value)
        log._changes += 1
    if key not in TRAINING_KEYS:
        if log.runs and not log.runs[-1].ended:
            log.runs[-1].last = (key, seconds, _step(metadata))
        return
    log._changes += 1
    if log._mlperf_form is None and key != "submission_benchmark":
        log._mlperf_form = form
    if key == "submission_benchmark":
        _benchmark(log, value)
        return
    if key in TRAINING_START:
        log.started = True
        run = _run_start(log, seconds) if key == "run_start" else _open_run(log, new_after_stop=True)
    elif key == "run_stop":
        run = _run_stop(log, seconds, metadata)
    elif key == "eval_accuracy":
        run = _evaluation(log, value, seconds, metadata)
    elif key == "eval_result":
        run = _eval_result(log, metadata)
    else:
        run = _throughput_record(log, key, value, seconds, metadata)
    if run is not None and not (run.stopped and key != "run_stop"):
        run.last = (key, seconds, _step(metadata))


def _benchmark(log: TrainingLog, value: Any) -> None:
    """``submission_benchmark``: the first one named; another name is a warning (the log's metrics are
    decided once the whole log is read, so a late line still names them all)."""
    if not isinstance(value, str) or not value.strip():
        return
    name = value.strip().lower()
    if log.benchmark is None:
        log.benchmark = name
    elif name != log.benchmark:
        log.warn(f"MLPerf submission_benchmark {name!r} after {log.benchmark!r}: the first one is kept")


def _step(metadata: dict[str, Any]) -> tuple[str, Any] | None:
    """Where a record is in its run: its first :data:`STEP_KEYS` entry, as (key, value)."""
    return next(((k, metadata[k]) for k in STEP_KEYS if k in metadata and metadata[k] is not None), None)


def _last_record(run: MlperfRun) -> str:
    """The run's last training record, in words: ``eval_start (epoch_num 2020) 2081.5 s after run_start``."""
    if run.last is None:
        return ""
    key, seconds, step = run.last
    where = f" ({step[0]} {step[1]})" if step is not None else ""
    when = (f" {seconds - run.begin:.1f} s after run_start" if seconds is not None and run.begin is not None
            and seconds >= run.begin else "")
    return f"{key}{where}{when}"


def _open_run(log: TrainingLog, new_after_stop: bool) -> MlperfRun | None:
    """The run a record belongs to: the open one, or a new one (the first record of a run that logs no
    ``run_start``, or an ``init_start`` after a run stopped).  None: a record after a run's ``run_stop``
    that starts nothing."""
    if log.runs and not log.runs[-1].ended:
        return log.runs[-1]
    if log.runs and not new_after_stop:
        return None
    log.runs.append(MlperfRun(len(log.runs) + 1))
    return log.runs[-1]


def _run_start(log: TrainingLog, seconds: float | None) -> MlperfRun:
    """``run_start``: the open run's start, unless that run already started and has evaluations (it
    then never logged its ``run_stop``: a new run begins).  Another ``run_start`` before any
    evaluation (every rank logs one; a line printed twice) is the same run: its first time stands."""
    run = log.runs[-1] if log.runs and not log.runs[-1].ended else None
    if run is not None and run.begin is not None and run.readings:
        run = None
    if run is None:
        log.runs.append(MlperfRun(len(log.runs) + 1))
        run = log.runs[-1]
    if run.begin is None:
        run.begin = seconds
    if not any(r.ended for r in log.runs):
        log.begin = run.begin
    return run


def _run_stop(log: TrainingLog, seconds: float | None, metadata: dict[str, Any]) -> MlperfRun:
    """``run_stop`` ends the open run.  After a run stopped (with no new start), it is another line of
    that run's end: the same one again is ignored, a different one is noted; the first stands."""
    status = metadata.get("status")
    status = status if isinstance(status, str) or status is None else str(status)
    run: MlperfRun | None
    if log.runs and log.runs[-1].stopped:
        run = log.runs[-1]
        if (seconds, status) != (run.end, run.status):
            run.extra_stops.append(f"status {status!r}" + (f" at {seconds - run.begin:.1f} s" if seconds is not None
                                                            and run.begin is not None else ""))
        return run
    run = log.runs[-1] if log.runs and not log.runs[-1].stopped else _open_run(log, new_after_stop=True)
    assert run is not None  # (a run that MiniGo's eval_result ended is stopped by its run_stop)
    run.stopped, run.end, run.status = True, seconds, status
    _report(log, run)
    _sync_throughputs(log)
    return run


def _eval_result(log: TrainingLog, metadata: dict[str, Any]) -> MlperfRun | None:
    """MiniGo's ``eval_result``: ``metadata.timestamp`` is when (after ``run_start``) the model that met
    the target was made.  v0.6's NVIDIA logs end there, with no ``run_stop``: it ends the run."""
    run = _open_run(log, new_after_stop=False)
    stamp = metadata.get("timestamp")
    if run is not None and _is_number(stamp) and 0 <= stamp <= MAX_READING and run.begin is not None:
        run.result_at = float(stamp)
        _report(log, run)
        _sync_throughputs(log)
    return run


def _report(log: TrainingLog, run: MlperfRun) -> None:
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


def _throughput_record(log: TrainingLog, key: str, value: Any, seconds: float | None,
                       metadata: dict[str, Any]) -> MlperfRun | None:
    if key in ("throughput", "samples_per_second"):
        return _throughput(log, value, seconds, metadata, f"MLPerf {key}")
    if isinstance(value, dict) and "throughput" in value:
        return _throughput(log, value["throughput"], seconds, metadata, "MLPerf tracked_stats throughput")
    return None


def _throughput(log: TrainingLog, value: Any, seconds: float | None, metadata: dict[str, Any],
                what: str) -> MlperfRun | None:
    """A throughput reading of the open run (or, after ``run_stop``, of the run that stopped); the
    same value at the same step or time (a ``throughput`` record and its ``tracked_stats`` twin) once."""
    number = reading(log, value, what)
    if number is None:
        return None
    run = _open_run(log, new_after_stop=False) or log.runs[-1]
    marker = next((metadata[k] for k in ("step", "step_num", "samples_count", "epoch_num", "first_epoch_num")
                   if k in metadata), None)
    marker = marker if marker is not None else seconds
    if marker is not None:
        key = (number, json.dumps(marker, sort_keys=True, default=str))
        if key in run.seen_throughputs:
            return run
        run.seen_throughputs.add(key)
    run.throughputs.append(number)
    if sum(1 for r in log.runs if r.throughputs) < 2:
        log.throughputs.append(number)  # one run: its readings as they come
    else:
        _sync_throughputs(log)
    return run


def _reported_run(log: TrainingLog) -> MlperfRun | None:
    """The run an output is reported by: the last that finished, else the last one."""
    return next((run for run in reversed(log.runs) if run.ended), log.runs[-1] if log.runs else None)


def _sync_throughputs(log: TrainingLog) -> None:
    """With several runs holding throughput readings, :attr:`TrainingLog.throughputs` holds only the
    reported run's (after any other format's readings)."""
    holding = [run for run in log.runs if run.throughputs]
    reported = _reported_run(log)
    if len(holding) < 2 or reported is None:
        return
    others = Counter(log.throughputs) - Counter(v for run in holding for v in run.throughputs)
    log.throughputs[:] = list(others.elements()) + list(reported.throughputs)


def _evaluation(log: TrainingLog, value: Any, seconds: float | None, metadata: dict[str, Any]) -> MlperfRun | None:
    """``eval_accuracy``: a number (named by ``metadata.metric``, else by the benchmark once the whole
    log is read), a number written as a string (v0.6's ``"25.33"``), a dict of named numbers (Mask
    R-CNN's BBOX and SEGM), nested (v0.6's ``{"accuracy": {"BBOX": ..., "SEGM": ...}}``), or a list (Mask
    R-CNN v0.6, in the benchmark's order).  The same reading twice (a line printed by two loggers, a
    value logged again at the same step) is counted once; one after ``run_stop`` is only counted."""
    run = _open_run(log, new_after_stop=False)
    if run is None:
        log.runs[-1].after_stop += 1
        log.after_stop = _reported_run(log).after_stop  # type: ignore[union-attr]
        return None
    place = _step(metadata)
    step = place[1] if place is not None else None
    named = metadata.get("metric")
    named = str(named) if isinstance(named, (str, int, float)) and not isinstance(named, bool) else None
    for name, position, width, raw in _eval_items(value, named):
        number = reading(log, _numeric(raw), "MLPerf eval_accuracy" + (f" {name}" if name else ""))
        if number is None:
            continue
        key = ((name, position, number, json.dumps(step, default=str) if step is not None else seconds)
               if step is not None or seconds is not None else None)
        if key is not None and key in run.seen:
            continue
        if key is not None:
            run.seen.add(key)
        run.readings.append(MlperfReading(number, name, position, width, seconds, log.elapsed, step))
    return run


def _eval_items(value: Any, named: str | None, depth: int = 0) -> list[tuple[str | None, int | None, int, Any]]:
    """(name, position in a list, the list's length, raw value) of each number an evaluation holds."""
    if isinstance(value, dict):
        items: list[tuple[str | None, int | None, int, Any]] = []
        for key, inner in value.items():
            if isinstance(inner, dict) and depth < 3:
                items += _eval_items(inner, None, depth + 1)
            else:
                items.append((str(key), None, 1, inner))
        return items
    if isinstance(value, list):
        return [(None, i, len(value), v) for i, v in enumerate(value)]
    return [(named, None, 1, value)]


def _numeric(value: Any) -> Any:
    """A number written as a string (``"25.33"``) as the number; anything else as it is."""
    if isinstance(value, str) and NUMERIC_TEXT.fullmatch(value):
        return float(value)
    return value


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
    run = _reported_run(log)
    if run is None:
        return
    log._mlperf_qualities = _run_qualities(log, run)
    _report(log, run)
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


INFERENCE_RATES = ("result_samples_per_second", "result_completed_samples_per_sec", "result_scheduled_samples_per_sec")
"""Loadgen's throughput keys, in order of preference: Offline reports samples per second; Server
reports the rate it completed queries at (preferred) and the rate it scheduled them at."""
INFERENCE_CHECKS = {"result_min_duration_met": "minimum duration", "result_min_queries_met": "minimum query count",
                    "result_perf_constraints_met": "latency constraint", "early_stopping_met": "early stopping"}


def _inference(log: TrainingLog, key: str, value: Any) -> None:
    info = log.inference
    if key == "result_validity" and isinstance(value, str):
        info["validity"] = value.strip().upper()
    elif key in INFERENCE_CHECKS and isinstance(value, bool):
        info.setdefault("checks", {})[key] = value
    elif key in ("effective_scenario", "effective_test_mode") and isinstance(value, str):
        info[key.removeprefix("effective_")] = value  # what ran, over what was asked (logged first)
    elif key in ("requested_scenario", "requested_test_mode") and isinstance(value, str):
        info.setdefault(key.removeprefix("requested_"), value)
    elif key in INFERENCE_RATES:
        number = reading(log, value, f"MLPerf Inference {key}")
        if number is not None:
            info.setdefault("rates", {})[key] = number
    else:
        _latency(log, key, value)


def _latency(log: TrainingLog, key: str, value: Any) -> None:
    match = LATENCY_PERCENTILE.fullmatch(key)
    name = f"p{float(match.group(1)):g}" if match else "mean" if key == "result_mean_latency_ns" else None
    if name is None:
        return
    number = reading(log, value, f"MLPerf Inference {key}")
    if number is not None:
        log.latencies[name] = number / 1e9


# --- The user's regular expressions --------------------------------------------------------------

class RegexParser:
    """The user's expressions for throughput and quality; each match's first group is the number."""

    def __init__(self, throughput: str = "", accuracy: str = ""):
        self.throughput = re.compile(throughput) if throughput else None
        self.accuracy = re.compile(accuracy) if accuracy else None

    def __call__(self, line: str, log: TrainingLog) -> bool:
        found = False
        for pattern, what in ((self.throughput, "throughput_regex"), (self.accuracy, "accuracy_regex")):
            match = pattern.search(line) if pattern else None
            if not match:
                continue
            found = True
            text = match.group(1) if match.groups() else match.group()
            number, percent = _text_reading(log, text, what)
            if number is not None and pattern is self.throughput:
                log.add_throughput(number)
            elif number is not None:
                log.add_quality(log.user_metric, number, percent or _percent_after(line, match))
        if found:
            log.recognised["regex"] += 1
        return found


def _percent_after(line: str, match: re.Match) -> bool:
    """A ``%`` right after the captured number (``top1 76.1 %``), outside the group."""
    end = match.end(1) if match.groups() and match.group(1) is not None else match.end()
    return line[end:].lstrip().startswith("%")


# --- Reading a whole output ---------------------------------------------------------------------

def make_parsers(formats: Sequence[str], throughput_regex: str = "", accuracy_regex: str = "") -> list[Parser]:
    parsers: list[Parser] = []
    if "ai_rank" in formats:
        parsers.append(parse_ai_rank)
    if "mlperf" in formats:
        parsers.append(parse_mlperf)
    parsers += [parse for name, (_, parse) in _line_formats().items() if name in formats]
    if throughput_regex or accuracy_regex:
        parsers.append(RegexParser(throughput_regex, accuracy_regex))
    return parsers


def describe_formats(formats: Sequence[str], throughput_regex: str = "", accuracy_regex: str = "") -> list[str]:
    """What was tried, for a reason that says so when nothing matched."""
    tried = [FORMATS[f] for f in formats if f in FORMATS]
    tried += [f"throughput_regex {throughput_regex!r}"] if throughput_regex else []
    tried += [f"accuracy_regex {accuracy_regex!r}"] if accuracy_regex else []
    return tried


def read_line(line: str, parsers: Sequence[Parser], log: TrainingLog) -> None:
    """Feed one line to every parser; a parser that fails on odd input costs a warning, not the run.
    A line that cost any warning is counted in :attr:`TrainingLog.ignored_lines`."""
    before = log.warning_count
    for parse in parsers:
        try:
            parse(line, log)
        except Exception as exc:  # never let a strange line end the case
            log.warn(f"a parser failed on a line ({type(exc).__name__}: {str(exc)[:80]}): line ignored")
    if log.warning_count > before:
        log.ignored_lines += 1


def parse_lines(lines: Iterable[str], parsers: Sequence[Parser], log: TrainingLog | None = None) -> TrainingLog:
    log = log if log is not None else TrainingLog()
    for line in lines:
        read_line(line.rstrip("\n"), parsers, log)
    log.finish()
    return log


# --- Resolving a metric's unit ------------------------------------------------------------------

def _scale(metric: Metric, evaluations: list[Evaluation]) -> tuple[str, list[float], str]:
    """(resolved unit, values, how they were read).  ``percent`` divides by 100 into a ratio; ``auto``
    reads a value written with ``%`` as percent, then a higher-is-better series all within [0, 1] as
    a ratio, all within [0, 100] (some above 1) as percent, anything else as a score."""
    raw = [e.value for e in evaluations]
    if metric.unit == "score":
        return "score", raw, "score (as logged)"
    if metric.unit == "percent" or (evaluations and all(e.percent for e in evaluations)):
        return "ratio", [v / 100.0 for v in raw], "percent (divided by 100)"
    if metric.unit == "ratio" or any(e.percent for e in evaluations):
        return "ratio", [e.value / 100.0 if e.percent else e.value for e in evaluations], "ratio"
    if all(v <= 1.0 for v in raw):
        return ("ratio", raw, "ratio (all values within [0, 1])") if metric.higher_is_better else \
            ("score", raw, "score (as logged)")
    if metric.higher_is_better and all(v <= 100.0 for v in raw):
        return "ratio", [v / 100.0 for v in raw], "percent (values up to 100, divided by 100)"
    return "score", raw, "score (as logged)"


def _resolve(metric: Metric, evaluations: list[Evaluation], log: TrainingLog,
             steps: Sequence[Any] | None = None) -> Quality | None:
    """The metric's values in its reported unit.  A value above 1 cannot be an accuracy ratio and is
    dropped with a warning; an error rate (a lower-is-better ratio: RNN-T's WER) can exceed 1, when a
    model inserts more words than the reference holds, early in training."""
    unit, values, scale = _scale(metric, evaluations)
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
