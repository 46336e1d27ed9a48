"""The shared model of a training log: quality metrics, which way each is better, its unit, and MLPerf's runs.

Torch-free and free of any parser: the types every reader of a training command's output fills in (the
line dialects of :mod:`~sixdim.workloads.logs.airank`, :mod:`~sixdim.workloads.logs.mlperf`,
:mod:`~sixdim.workloads.logs.user_regex` and :mod:`~sixdim.workloads.logs.framework_lines`, and the files of
:mod:`~sixdim.workloads.logs.log_files`), and the direction rules: each MLPerf benchmark's metric
(:data:`MLPERF_BENCHMARKS`), the well-known ones (:data:`KNOWN_METRICS`), and how a unit is decided from
the values (:func:`resolve_unit`).  The log that holds them is :class:`~sixdim.workloads.logs.training_log.TrainingLog`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HIGHER_IS_BETTER = "higher_is_better"
LOWER_IS_BETTER = "lower_is_better"
UNITS = ("auto", "ratio", "percent", "score")
MAX_WARNINGS = 20
MAX_READING = 1e15
"""The largest figure read (throughput, quality value, seconds, nanoseconds): a bigger one is garbage
(10^15 samples per second; 10^15 ns is 11 days), and sums and means of readings below it stay finite."""

SIXDIM_CLOCK = "sixdim"
LOG_CLOCK = "log"


@dataclass(frozen=True)
class Metric:
    """A quality metric: its name (the exported ``metric`` label), which way is better, its unit.

    ``unit``: ``ratio`` (a fraction in [0, 1]: accuracy, mAP, AUC, word error rate), ``percent``
    (0–100, reported as a ratio), ``score`` (a scale of its own: loss, perplexity, BLEU, FID;
    never rescaled) or ``auto`` (decided from the values: see :func:`resolve_unit`).
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
    latest: dict = field(default_factory=dict, repr=False)
    """Each metric's (name, position) latest reading, as (name, position, value, step or time): a
    reading equal to it is a twin line, counted once."""
    seen_throughputs: set = field(default_factory=set, repr=False)

    @property
    def ended(self) -> bool:
        return self.stopped or self.result_at is not None

    @property
    def stop_time(self) -> float | None:
        if self.stopped:
            return self.end
        return None if self.result_at is None or self.begin is None else self.begin + self.result_at


def resolve_unit(metric: Metric, evaluations: list[Evaluation]) -> tuple[str, list[float], str]:
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


COMMAND_LINE_FORMATS = ("ai_rank", "mlperf", "hf_trainer", "mindspore", "keras", "megatron", "deepspeed")
COMMAND_FILE_FORMATS = ("tensorboard", "mindspore_summary", "hf_trainer", "lightning_csv")
COMMAND_FORMATS = tuple(dict.fromkeys(COMMAND_LINE_FORMATS + COMMAND_FILE_FORMATS))
"""What the command workload reads: its output's line formats (parsers and framework_lines) and the
formats of the files it writes (log_files); ``hf_trainer`` is both (printed dicts and trainer_state.json)."""
