"""Reading a training command's output: AI-Rank lines, MLPerf logs (training and inference), or regexes.

Torch-free.  Each parser reads one line into a :class:`TrainingLog`; :meth:`TrainingLog.qualities`
then resolves every quality metric the run reported into its *final* value, named, with its
direction and unit.  The command workload turns that into figures and a status.  The rules are
written out in docs/TRAINING_LOGS.md; in short:

- AI-Rank: ``AI-Rank-log <unix time> key:value[, key:value]`` or a bare event (``test_begin``,
  ``test_finish``).  Values may carry units (``8.03sec``, ``1190images/sec``, ``76.1%``).
- MLPerf Training: ``:::MLLOG {json}`` (v0.7 on), ``:::MLL <time> <key>: {json}`` (v0.6) and
  ``:::MLPv0.5.0 <benchmark> <time> (<file>:<line>) <key>[: <json>]`` (v0.5).  Time to train is
  ``run_stop`` minus ``run_start``, as MLPerf defines it.
- MLPerf Inference: loadgen's ``mlperf_log_detail.txt`` (``:::MLLOG`` lines with ``result_*`` keys):
  throughput, latency percentiles and the run's validity.
- Regex: the user's expressions; the first group (or the whole match) is the number.

A quality value is the one the run *ended* with: the last evaluation logged before ``run_stop``
(in the order of the lines, not of their timestamps: MLPerf Stable Diffusion evaluates its
checkpoints offline and logs them with later times than its ``run_stop``).  Taking the best would
report the worst evaluation for a lower-is-better metric (word error rate, loss, FID).

A figure that is not a finite, non-negative number (NaN, infinity, a boolean, a negative
throughput) or is absurdly large (above :data:`MAX_READING`) is ignored with a warning: never
exported, never counted as 0 or 1.  Neither does a line a parser cannot read (JSON nested too
deeply, a ``metadata`` that is not an object, an expression's group that matched nothing) end the
run: it is ignored with a warning, and :attr:`TrainingLog.ignored_lines` counts such lines.  The
patterns match in time linear in the line (a lazy group before trailing spaces would take seconds
on a 64 KiB line of spaces).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

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

FORMATS = {
    "ai_rank": "AI-Rank ('AI-Rank-log <time> key:value' lines)",
    "mlperf": "MLPerf (':::MLLOG', ':::MLL' and ':::MLPv0.5.0' lines)",
}


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
    "llama2_70b_lora": (_score("eval_loss", False),),
    "flux1": (_score("eval_loss", False),),
    "stable_diffusion": (_score("FID", False), _score("CLIP", True)),
    "transformer": (_score("BLEU", True),),
    "gnmt": (_score("BLEU", True),),
}
"""Each MLPerf Training benchmark's quality metric(s) (``submission_benchmark``'s value, v0.5 to
v5.x), from MLCommons' compliance checker: the direction its target is checked in, its unit.
Several benchmarks log a lower-is-better value under ``eval_accuracy``."""

KNOWN_METRICS: dict[str, Metric] = {m.name.lower(): m for m in (
    _score("FID", False), _score("CLIP", True), _ratio("WER", higher=False), _ratio("BBOX"), _ratio("SEGM"))}
"""Metrics named in ``eval_accuracy``'s ``metadata.metric`` or as keys of a dict value, when the
benchmark's own table does not name them."""


@dataclass
class Evaluation:
    """One reading of a quality metric: the number as logged, whether it was written with a ``%``
    sign, and when sixdim read it (seconds since the command started; None when unknown)."""

    value: float
    percent: bool = False
    at: float | None = None


@dataclass
class Quality:
    """One quality metric of a run, resolved: its values in the reported unit, in log order."""

    metric: Metric
    """With the unit resolved to ``ratio`` or ``score``."""
    values: list[float]
    at: list[float | None]
    scale: str
    """How the logged numbers were read, e.g. ``percent (divided by 100)``."""

    @property
    def final(self) -> float:
        return self.values[-1]

    @property
    def best(self) -> float:
        return max(self.values) if self.metric.higher_is_better else min(self.values)

    def meets(self, value: float, target: float) -> bool:
        return value >= target if self.metric.higher_is_better else value <= target

    def first_reaching(self, target: float) -> float | None:
        """When (seconds since the command started) the metric first met the target, in its direction."""
        return next((at for value, at in zip(self.values, self.at) if at is not None and self.meets(value, target)),
                    None)

    def describe(self) -> dict[str, Any]:
        return {"metric": self.metric.name, "direction": self.metric.direction, "unit": self.metric.unit,
                "scale": self.scale, "final": self.final, "best": self.best, "evaluations": len(self.values),
                "values": self.values}


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
    status: str | None = None                               # MLPerf run_stop status
    started: bool = False                                   # MLPerf init_start or run_start seen
    stopped: bool = False                                   # MLPerf run_stop seen
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
    _seen_throughputs: set = field(default_factory=set, repr=False)
    _dropped_warnings: int = field(default=0, repr=False)

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
        return [e.value for e in self.series.get(self.user_metric.name, (None, []))[1]]

    def add_throughput(self, value: float, marker: Any = None) -> None:
        """One throughput reading; the same value at the same step or time (an MLPerf ``throughput``
        record and its ``tracked_stats`` twin) is counted once."""
        if marker is not None:
            key = (value, json.dumps(marker, sort_keys=True, default=str))
            if key in self._seen_throughputs:
                return
            self._seen_throughputs.add(key)
        self.throughputs.append(value)

    def add_quality(self, metric: Metric, value: float, percent: bool = False) -> None:
        """One evaluation of a metric, in log order; one logged after ``run_stop`` is not part of the
        run MLPerf timed, so it is only counted."""
        if self.stopped:
            self.after_stop += 1
            return
        known = self.series.get(metric.name)
        if known is None:
            known = self.series[metric.name] = (metric, [])
        elif known[0].higher_is_better != metric.higher_is_better:
            self.warn(f"quality metric {metric.name!r} logged with both directions: the first one is kept")
        known[1].append(Evaluation(value, percent, self.elapsed))

    def has_figures(self) -> bool:
        """Whether any parser extracted something: a figure, a run boundary or a verdict."""
        return bool(self.throughputs or self.average_throughput is not None or self.series
                    or self.time_to_train is not None or self.total_time is not None or self.latencies
                    or self.stopped or self.inference.get("validity") or self.inference.get("rates"))

    def qualities(self) -> list[Quality]:
        """Every quality metric, resolved to its reported unit, in the order first logged."""
        resolved = (_resolve(metric, evaluations, self) for metric, evaluations in self.series.values())
        return [q for q in resolved if q is not None]


Parser = Callable[[str, TrainingLog], bool]


# --- Numbers --------------------------------------------------------------------------------

def _reading(log: TrainingLog, value: Any, what: str) -> float | None:
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
        return _reading(log, text.strip().lower() == "true", what), False
    match = NUMBER.search(text)
    if not match:
        log.warn(f"{what}: no number in {text.strip()[:40]!r}: ignored")
        return None, False
    percent = text[match.end():].lstrip().startswith("%")
    return _reading(log, float(match.group()), what), percent


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
            _ai_rank_item(log, key, value)
    return True


def _ai_rank_event(log: TrainingLog, key: str, stamp: float | None) -> None:
    log.events.append(key)
    if key == "test_begin":
        log.begin = stamp
    elif key in ("test_finish", "test_end"):
        log.end = stamp


def _ai_rank_item(log: TrainingLog, key: str, value: str) -> None:
    what = f"AI-Rank {key}"
    if key in ("eval_accuracy", "total_accuracy"):
        number, percent = _text_reading(log, value, what)
        if number is not None:
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

def _json(log: TrainingLog, text: str, what: str) -> tuple[bool, Any]:
    """Parse JSON that may be broken or absurdly nested; (False, None) when it cannot be read."""
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
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
    stamp = record.get("time_ms")
    seconds = stamp / 1000.0 if _is_number(stamp) else None
    _record(log, record["key"], record.get("value"), seconds, _metadata(log, record.get("metadata")))
    return True


def _parse_mll(line: str, log: TrainingLog) -> bool:
    match = MLL.search(line)
    if not match:
        return False
    if not _relevant(match.group(2)):
        return True
    text = match.group(3).strip()
    ok, payload = _json(log, text, f"MLPerf {match.group(2)}") if text else (True, None)
    if not ok:
        return True
    value, metadata = payload, {}
    if isinstance(payload, dict) and "value" in payload:
        value, metadata = payload.get("value"), _metadata(log, payload.get("metadata"))
    _record(log, match.group(2), value, _float_or_none(match.group(1)), metadata)
    return True


def _parse_mlp05(line: str, log: TrainingLog) -> bool:
    """MLPerf v0.5: ``eval_accuracy: {"epoch": 8, "value": 0.47}``, ``run_stop: {"success": true}``."""
    match = MLP05.search(line)
    if not match:
        return False
    benchmark, stamp, key, text = match.groups()
    text = text.strip() if text is not None else None
    if log.benchmark is None:
        _record(log, "submission_benchmark", benchmark, None, {})
    if not _relevant(key):
        return True
    ok, value = _json(log, text, f"MLPerf {key}") if text else (True, None)
    if not ok:
        return True
    metadata: dict[str, Any] = {}
    if key == "eval_accuracy" and isinstance(value, dict):
        metadata = {"epoch_num": value.get("epoch")}
        value = value.get("value")
    elif key == "run_stop":
        success = value.get("success") if isinstance(value, dict) else None
        metadata = {"status": None if success is None else
                    "success" if str(success).lower() == "true" else "aborted"}
    _record(log, key, value, _float_or_none(stamp), metadata)
    return True


def _is_number(value: Any) -> bool:
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
                                            "samples_per_second", "tracked_stats"))


def _relevant(key: str) -> bool:
    """Whether a record's value is worth parsing: the older formats log every hyperparameter, in
    free text as well as JSON, and a value nobody reads must not cost a warning."""
    return key in TRAINING_KEYS or key.startswith(INFERENCE_PREFIXES)


def _record(log: TrainingLog, key: str, value: Any, seconds: float | None, metadata: dict[str, Any]) -> None:
    """One MLPerf record, whatever the version wrote it as."""
    if key == "submission_benchmark" and isinstance(value, str):
        log.benchmark = value.strip().lower()
    elif key in TRAINING_START:
        log.started = True
        if key == "run_start" and seconds is not None:
            log.begin = seconds
    elif key == "run_stop":
        _run_stop(log, seconds, metadata)
    elif key == "eval_accuracy":
        _evaluation(log, value, metadata)
    elif key in ("throughput", "samples_per_second"):
        _throughput(log, value, seconds, metadata, f"MLPerf {key}")
    elif key == "tracked_stats" and isinstance(value, dict) and "throughput" in value:
        _throughput(log, value["throughput"], seconds, metadata, "MLPerf tracked_stats throughput")
    elif key.startswith(INFERENCE_PREFIXES):
        _inference(log, key, value)
    if metadata.get("is_error") is True and len(log.errors) < MAX_WARNINGS:
        log.errors.append(f"{key}: {str(value)[:200]}")


def _run_stop(log: TrainingLog, seconds: float | None, metadata: dict[str, Any]) -> None:
    status = metadata.get("status")
    log.stopped, log.end = True, seconds
    log.status = status if isinstance(status, str) or status is None else str(status)
    if log.begin is None or seconds is None:
        return
    if seconds < log.begin:
        log.warn("MLPerf run_stop is earlier than run_start: no time to train")
        return
    total = seconds - log.begin
    if not total <= MAX_READING:  # stamps of 1e308 and -1e308: their difference overflows (or is absurd)
        log.warn(f"MLPerf run_stop - run_start is out of range ({total:g} s): no time to train")
        return
    log.total_time = total
    if log.status in (None, "success"):
        log.time_to_train, log.time_to_train_rule = log.total_time, "MLPerf run_stop - run_start"


def _throughput(log: TrainingLog, value: Any, seconds: float | None, metadata: dict[str, Any], what: str) -> None:
    number = _reading(log, value, what)
    if number is None:
        return
    marker = next((metadata[k] for k in ("step", "step_num", "samples_count", "epoch_num", "first_epoch_num")
                   if k in metadata), None)
    log.add_throughput(number, marker if marker is not None else seconds)


def _evaluation(log: TrainingLog, value: Any, metadata: dict[str, Any]) -> None:
    """``eval_accuracy``: a number (named by the benchmark or ``metadata.metric``), a dict of named
    numbers (Mask R-CNN's BBOX and SEGM) or a list (Mask R-CNN v0.6, in the benchmark's order)."""
    table = MLPERF_BENCHMARKS.get(log.benchmark or "", ())
    if isinstance(value, dict):
        items = [(str(name), v) for name, v in value.items()]
    elif isinstance(value, list):
        names = ([m.name for m in table] if len(table) == len(value)
                 else [f"eval_accuracy_{i}" for i in range(len(value))])
        items = list(zip(names, value))
    else:
        named = metadata.get("metric")
        items = [(str(named) if isinstance(named, (str, int, float)) and not isinstance(named, bool) else None, value)]
    for name, raw in items:
        metric = _mlperf_metric(log, name, table)
        number = _reading(log, raw, f"MLPerf eval_accuracy {metric.name}")
        if number is not None:
            log.add_quality(metric, number)


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
        number = _reading(log, value, f"MLPerf Inference {key}")
        if number is not None:
            info.setdefault("rates", {})[key] = number
    else:
        _latency(log, key, value)


def _latency(log: TrainingLog, key: str, value: Any) -> None:
    match = LATENCY_PERCENTILE.fullmatch(key)
    name = f"p{float(match.group(1)):g}" if match else "mean" if key == "result_mean_latency_ns" else None
    if name is None:
        return
    number = _reading(log, value, f"MLPerf Inference {key}")
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


def _resolve(metric: Metric, evaluations: list[Evaluation], log: TrainingLog) -> Quality | None:
    unit, values, scale = _scale(metric, evaluations)
    kept = [(v, e.at) for v, e in zip(values, evaluations) if unit != "ratio" or v <= 1.0]
    if len(kept) < len(values):
        log.warn(f"quality metric {metric.name!r}: {len(values) - len(kept)} value(s) above 1 for a ratio: ignored "
                 "(set accuracy_unit to 'percent' or 'score' if that is how it is logged)")
    if not kept:
        return None
    return Quality(Metric(metric.name, metric.higher_is_better, unit), [v for v, _ in kept], [a for _, a in kept],
                   scale)
