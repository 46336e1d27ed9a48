"""Framework output lines: Hugging Face Trainer's printed metric dicts, MindSpore's monitors and results.

Torch-free, standard library only.  Each parser reads one line of a command's output into a
:class:`~sixdim.workloads.logs.training_log.TrainingLog`, as sixdim's own parsers do; :data:`LINE_FORMATS`
names them for the command workload's ``formats``.  The rules are in docs/TRAINING_LOGS.md; in short:

- ``hf_trainer``: the dicts the Trainer prints when it logs (``{'eval_loss': 0.49, 'eval_accuracy':
  0.88, ...}``; transformers 5 prints the values as strings, ``{'eval_loss': '0.4882', ...}``).  Every
  ``eval_*`` metric is a quality metric under its own name (``eval_runtime`` and the eval speeds are
  not), ``train_samples_per_second`` is a throughput reading, ``train_runtime`` the run's duration.
  The per-step training ``loss`` is not read: it is not an evaluation.
- ``mindspore``: LossMonitor's ``epoch: 1 step: 1875, loss is 0.0343`` (the ``train_loss`` metric, its
  last value in each epoch), ModelZoo's ``epoch: [1/90] loss: 1.08, epoch time: ...``, TimeMonitor's
  ``[Train ]epoch time: 9143.2 ms, per step time: 4.876 ms`` (seconds per step, kept by
  :func:`step_seconds`: the command workload turns them into samples/s with its ``batch_size``), and
  ``Model.eval``'s printed results (``result: {'top_1_accuracy': 0.7368}``, or the bare
  ``'Accuracy': 0.9842`` of MindSpore's docs): each metric-like key a quality metric.

A metric's direction comes from its name (:func:`metric_direction`: a loss, error rate, perplexity or
FID is lower-is-better; an accuracy, F1, mAP, AUC, BLEU higher-is-better); a name that says neither
takes the user's ``higher_is_better`` and ``accuracy_unit``.  :mod:`sixdim.workloads.logs.log_files` uses the
same naming rules for the files these frameworks write.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from sixdim.workloads.logs.model import Evaluation, Metric
from sixdim.workloads.logs.training_log import Parser, TrainingLog, reading

# --- Names: which way is better, which names are evaluations or speeds -----------------------------

LOWER_TOKENS = frozenset({"loss", "perplexity", "ppl", "error", "err", "wer", "cer", "mae", "mse", "rmse", "fid",
                          "nll", "mape", "hausdorff"})
HIGHER_TOKENS = frozenset({"acc", "accuracy", "auc", "roc", "f1", "fbeta", "precision", "recall", "map", "iou",
                           "miou", "dice", "bleu", "rouge", "rouge1", "rouge2", "rougel", "psnr", "ssim", "top1",
                           "top5", "top", "mcc", "matthews", "pearson", "spearman", "spearmanr", "exact", "em", "hr",
                           "ndcg", "kappa", "r2"})
"""Words of a metric's name that say its direction: ``val_loss`` and ``eval/wer`` are lower-is-better,
``val_acc``, ``top_1_accuracy`` and ``eval_f1`` higher-is-better."""
EVALUATION_TOKENS = frozenset({"val", "valid", "validation", "validate", "eval", "evaluation", "test"})
"""Words that mark a name as an evaluation's (``val_acc``, ``eval/loss``, ``validation/epoch_accuracy``)."""
TIME_TOKENS = frozenset({"runtime", "time", "per", "second", "seconds", "sec", "samples", "steps", "flos",
                         "preparation"})
"""Words of a name that is a duration, a speed or a count, never a quality (``eval_runtime``,
``eval_samples_per_second``)."""
THROUGHPUT_NAME = re.compile(r"(?:samples|examples|images|imgs|img|sequences|seqs)[_/ -]?(?:per[_ -]?sec(?:ond)?|/s)"
                             r"|throughput", re.IGNORECASE)
"""A name that is a rate in samples per second (``train_samples_per_second``, Lightning's
ThroughputMonitor ``train/samples_per_sec``); not tokens per second."""


def tokens(name: str) -> set[str]:
    """The words of a name, lower-case: ``validation/epoch_accuracy`` is {validation, epoch, accuracy}."""
    return {word for word in re.split(r"[^a-z0-9]+", name.lower()) if word}


def metric_direction(name: str) -> bool | None:
    """True when the name says higher is better, False when lower is, None when it says neither.  A
    duration or speed (``eval_runtime``, ``eval_steps_per_second``) says neither."""
    words = tokens(name)
    if words & TIME_TOKENS or THROUGHPUT_NAME.search(name):
        return None
    if words & LOWER_TOKENS:
        return False
    if words & HIGHER_TOKENS:
        return True
    return None


def metric_for(name: str, log: TrainingLog) -> Metric:
    """The metric a framework reported under this name: its direction from the name (unit decided from
    the values, as ``auto``), else the user's direction and unit (``higher_is_better``, ``accuracy_unit``)."""
    higher = metric_direction(name)
    if higher is None:
        return Metric(name, log.user_metric.higher_is_better, log.user_metric.unit)
    return Metric(name, higher, "auto")


def is_throughput_name(name: str) -> bool:
    """A training speed in samples/s: named like one, and not an evaluation's (``eval_samples_per_second``)."""
    return bool(THROUGHPUT_NAME.search(name)) and not tokens(name) & EVALUATION_TOKENS


def is_evaluation_metric(name: str) -> bool:
    """A quality metric of an evaluation, by its name: ``val_acc``, ``eval/loss``, ``validation/epoch_accuracy``."""
    return bool(tokens(name) & EVALUATION_TOKENS) and metric_direction(name) is not None


# --- Numbers ---------------------------------------------------------------------------------------

NUMPY_SCALAR = re.compile(r"\b(?:np|numpy)\.(?:float|int|uint)(?:16|32|64)?\(\s*([^()]{1,40}?)\s*\)")
"""numpy 2 prints a scalar as ``np.float64(0.93)``: MindSpore's metrics return numpy scalars."""
DICT = re.compile(r"\{[^{}]{1,8000}\}")
"""A printed dict of at most 8,000 characters, not nested (a deeper one is not a metrics dict)."""
LOSS_IS = re.compile(r"value=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
                     r"|^[\s\[(]*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)", re.IGNORECASE)
"""The loss after ``loss is``: ``0.0343``, ``[2.3025851]`` (MindSpore 1.x) or ``Tensor(shape=[],
dtype=Float32, value= 2.30252)`` (the number after ``value=``, never the 32 of ``Float32``)."""


def number(log: TrainingLog, raw: Any, what: str) -> float | None:
    """A printed or stored value as a figure: a number or a numeric string (transformers 5 prints
    ``'0.4882'``), judged by :func:`sixdim.workloads.logs.training_log.reading` (a boolean, a non-finite,
    negative or absurd value is ignored with a warning)."""
    if isinstance(raw, str):
        try:
            raw = float(raw.strip())
        except ValueError:
            log.warn(f"{what}: {raw.strip()[:40]!r} is not a number: ignored")
            return None
    return reading(log, raw, what)


def literal_dict(text: str) -> dict[str, Any] | None:
    """A printed Python dict of named values (``{'acc': 0.93}``), or None: read with
    :func:`ast.literal_eval`, which evaluates literals only, never code."""
    text = NUMPY_SCALAR.sub(r"\1", text)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict) or not value or not all(isinstance(k, str) for k in value):
        return None
    return value


def _foreign(line: str) -> bool:
    """A line another format owns: an MLPerf or AI-Rank record holds dicts too."""
    return ":::ML" in line or "AI-Rank-log" in line


# --- Hugging Face Trainer ---------------------------------------------------------------------------

HF_RUN_KEYS = ("train_samples_per_second", "train_runtime")
HF_MARKERS = ("eval_", "train_")
HF_STEP_KEYS = frozenset({"learning_rate", "grad_norm"})


def is_hf_record(record: dict[str, Any]) -> bool:
    """A dict the Trainer logged: an evaluation (``eval_*``), the run's summary (``train_*``) or a
    training step (``loss``, ``learning_rate``, ``grad_norm``, ``epoch``)."""
    return any(key.startswith(HF_MARKERS) for key in record) or bool(HF_STEP_KEYS & set(record))


def hf_quality_keys(record: dict[str, Any]) -> list[str]:
    """The evaluation metrics of a logged dict: every ``eval_*`` key but the evaluation's duration,
    speed and counts (``eval_runtime``, ``eval_samples_per_second``, ``eval_steps_per_second``)."""
    return [key for key in record if key.startswith("eval_") and not tokens(key) & TIME_TOKENS
            and not THROUGHPUT_NAME.search(key)]


def hf_record(record: dict[str, Any], log: TrainingLog, quality: list[str] | None = None,
              throughput: str | None = "train_samples_per_second") -> dict[str, int]:
    """One logged dict into the log: its quality metrics (``quality``, else :func:`hf_quality_keys`),
    its throughput (the ``throughput`` key; None: none) and ``train_runtime`` as the run's duration.
    Returns how many values of each kind it read."""
    read = {"quality": 0, "throughput": 0, "runtime": 0}
    for key in quality if quality is not None else hf_quality_keys(record):
        if key in record:
            value = number(log, record[key], f"Hugging Face {key}")
            if value is not None:
                log.add_quality(metric_for(key, log), value)
                read["quality"] += 1
    if throughput is not None and throughput in record:
        value = number(log, record[throughput], f"Hugging Face {throughput}")
        if value is not None:
            log.add_throughput(value)
            read["throughput"] += 1
    if "train_runtime" in record:
        value = number(log, record["train_runtime"], "Hugging Face train_runtime")
        if value is not None:
            log.total_time = value
            read["runtime"] += 1
    return read


def parse_hf_trainer(line: str, log: TrainingLog) -> bool:
    """The Trainer's printed log dicts (``{'eval_loss': 0.4882, 'eval_accuracy': 0.8803, ...}``),
    found anywhere in the line (a progress bar may precede one)."""
    if "{" not in line or _foreign(line):
        return False
    found = False
    for match in DICT.finditer(line):
        record = literal_dict(match.group())
        if record is None or not is_hf_record(record):
            continue
        found = True
        hf_record(record, log)
    if found:
        log.recognised["hf_trainer"] += 1
    return found


# --- MindSpore --------------------------------------------------------------------------------------

LOSS_MONITOR = re.compile(r"\bepoch:\s*\[?\s*(\d+)(?:\s*/\s*\d+)?\s*\]?\s*,?\s*step:\s*\[?\s*\d+(?:\s*/\s*\d+)?\s*\]?"
                          r"\s*,?\s*loss is\s+(.{1,200})", re.IGNORECASE)
MODELZOO_LOSS = re.compile(r"\bepoch:\s*\[\s*(\d+)\s*/\s*\d+\s*\]\s*,?\s*loss:\s*"
                           r"([-+]?[\d.]+(?:[eE][-+]?\d+)?|nan|inf)", re.IGNORECASE)
TIME_MONITOR = re.compile(r"(?:\b(train|eval)\s+)?epoch time:\s*([\d.]+(?:[eE][-+]?\d+)?)\s*(ms|s)\b\s*,\s*"
                          r"per step time:\s*([\d.]+(?:[eE][-+]?\d+)?)\s*(ms|s)\b", re.IGNORECASE)
BARE_PAIRS = re.compile(r"""\s*['"][^'"]{1,100}['"]\s*:.{1,8000}""")
"""``'Accuracy': 0.9842`` alone on a line: Model.eval's dict as MindSpore's own docs show it."""
TRAIN_LOSS = "train_loss"


def _state(log: TrainingLog) -> dict[str, Any]:
    """What the MindSpore parser keeps between lines of one output, on the log itself (a parser is a
    plain function shared by every run): the seconds per step read, the epoch of the last loss."""
    state: dict[str, Any] = vars(log).setdefault("framework_lines", {})
    return state


def step_seconds(log: TrainingLog) -> list[float]:
    """MindSpore TimeMonitor's training seconds per step, one per epoch, in log order."""
    return list(_state(log).get("step_seconds", []))


def _train_loss(log: TrainingLog, epoch: int, text: str) -> None:
    """The epoch's training loss: LossMonitor may print every step; an epoch keeps its last value."""
    match = LOSS_IS.search(text)
    if not match:
        log.warn(f"MindSpore loss: no number in {text.strip()[:40]!r}: ignored")
        return
    value = number(log, match.group(1) or match.group(2), "MindSpore loss")
    if value is None:
        return
    state = _state(log)
    known = log.series.get(TRAIN_LOSS)
    if known is not None and known[1] and state.get("loss_epoch") == epoch and not log.stopped:
        known[1][-1] = Evaluation(value, False, log.elapsed)
    else:
        log.add_quality(Metric(TRAIN_LOSS, False, "score"), value)
    state["loss_epoch"] = epoch


def _step_time(log: TrainingLog, match: re.Match) -> None:
    mode, _, _, step, unit = match.groups()
    if mode and mode.lower() == "eval":
        return  # an evaluation's pace, not training's
    value = number(log, step, "MindSpore per step time")
    if value is None or value == 0:
        if value == 0:
            log.warn("MindSpore per step time: 0: ignored")
        return
    _state(log).setdefault("step_seconds", []).append(value / 1000.0 if unit.lower() == "ms" else value)


def _eval_results(line: str, log: TrainingLog) -> bool:
    """Model.eval's printed dict: every numeric value under a metric-like name.  A dict the Trainer
    logged, or one with a non-numeric value, is not one."""
    records = [literal_dict(m.group()) for m in DICT.finditer(line)] if "{" in line else []
    if not records and BARE_PAIRS.fullmatch(line.rstrip().rstrip(".")):
        records = [literal_dict("{" + line.strip().rstrip(".") + "}")]
    found = False
    for record in records:
        if record is None or is_hf_record(record):
            continue
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in record.values()):
            continue
        named = [key for key in record if metric_direction(key) is not None]
        for key in named:
            value = number(log, record[key], f"MindSpore {key}")
            if value is not None:
                log.add_quality(metric_for(key, log), value)
        found = found or bool(named)
    return found


def parse_mindspore(line: str, log: TrainingLog) -> bool:
    """MindSpore's LossMonitor, TimeMonitor and ModelZoo lines, and Model.eval's results.  Runs of
    white space are made one space first: the patterns then match in time linear in the line, however
    long a run of spaces it holds (Python 3.10 has no possessive quantifiers)."""
    if _foreign(line):
        return False
    line = " ".join(line.split())
    found = False
    if "loss" in line.lower():
        match = LOSS_MONITOR.search(line)
        if match:
            _train_loss(log, int(match.group(1)), match.group(2))
            found = True
        else:
            zoo = MODELZOO_LOSS.search(line)
            if zoo:
                _train_loss(log, int(zoo.group(1)), zoo.group(2))
                found = True
    if "per step time" in line:
        timed = TIME_MONITOR.search(line)
        if timed:
            _step_time(log, timed)
            found = True
    if not found and ":" in line:
        found = _eval_results(line, log)
    if found:
        log.recognised["mindspore"] += 1
    return found


LINE_FORMATS: dict[str, tuple[str, Parser]] = {
    "hf_trainer": ("Hugging Face Trainer (its printed metric dicts, {'eval_loss': ..., "
                   "'train_samples_per_second': ...})", parse_hf_trainer),
    "mindspore": ("MindSpore ('epoch: N step: N, loss is X', '[Train ]epoch time: X ms, per step time: X ms' and "
                  "Model.eval's printed {'metric': value})", parse_mindspore),
}
"""The framework line formats, by the name ``formats`` gives them: (what they read, the parser)."""
