"""Framework output lines: the Hugging Face Trainer, MindSpore, Keras fit(), Megatron-LM and DeepSpeed.

Torch-free, standard library only.  Each parser reads one line of a command's output into a
:class:`~sixdim.workloads.logs.training_log.TrainingLog`, as sixdim's own parsers do; :data:`LINE_FORMATS`
names them for the command workload's ``formats``.  The rules are in docs/TRAINING_LOGS.md; in short:

- ``hf_trainer``: the dicts the Trainer prints when it logs (``{'eval_loss': 0.49, 'eval_accuracy':
  0.88, ...}``; transformers 5 prints the values as strings, ``{'eval_loss': '0.4882', ...}``).  Every
  ``eval_*`` metric is a quality metric under its own name (``eval_runtime`` and the eval speeds are
  not), ``train_samples_per_second`` is a throughput reading, ``train_runtime`` the run's duration.
  The per-step training ``loss`` is not read: it is not an evaluation.  The example scripts' tables
  (``***** eval metrics *****``, ``  eval_accuracy = 0.8456``) are read the same way; the train table's
  speed only when no printed dict gave it (it is the same number).
- ``mindspore``: LossMonitor's ``epoch: 1 step: 1875, loss is 0.0343`` (the ``train_loss`` metric, its
  last value in each epoch), ModelZoo's ``epoch: [1/90] loss: 1.08, epoch time: ...``, TimeMonitor's
  ``[Train ]epoch time: 9143.2 ms, per step time: 4.876 ms`` (seconds per step, kept by
  :func:`step_seconds`: the command workload turns them into samples/s with its ``batch_size``), and
  ``Model.eval``'s printed results (``result: {'top_1_accuracy': 0.7368}``, or the bare
  ``'Accuracy': 0.9842`` of MindSpore's docs): each metric-like key a quality metric.
- ``keras``: ``fit()``'s epoch-end progress line (Keras 2 and 3 bars, redrawn with backspaces and
  carriage returns or not, and ``verbose=2``): each ``val_*`` figure a quality metric, one per epoch.
- ``megatron``: Megatron-LM's iteration line (throughput: the global batch over the time per iteration,
  or Megatron-DeepSpeed's own ``samples per second``) and its validation line (``val_lm_loss``,
  ``val_lm_loss_ppl``, lower-is-better).
- ``deepspeed``: the engine's ``step=`` line and its ThroughputTimer's samples per second.

Where a value's step is known (an epoch, an iteration), the details' ``quality_steps`` hold it, one per
value.  :func:`unread_notes` says what a recognised format printed that could not be read, and what to
use instead (a Keras run without validation: ``validation_data``, or ``accuracy_regex``).

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
    found anywhere in the line (a progress bar may precede one), and the example scripts' metric
    tables (:func:`_hf_table_line`)."""
    if _foreign(line):
        return False
    found = False
    for match in DICT.finditer(line) if "{" in line else ():
        record = literal_dict(match.group())
        if record is None or not is_hf_record(record):
            continue
        found = True
        if hf_record(record, log)["throughput"]:
            _state(log)["hf_summary_speed"] = True
    if not found and ("=" in line or "metrics" in line):
        found = _hf_table_line(line, log)
    if found:
        log.recognised["hf_trainer"] += 1
    return found


HF_TABLE_HEADER = re.compile(r"\*{5} (\w+) metrics \*{5}")
"""``trainer.log_metrics``' header, ``***** eval metrics *****``: logged (stderr, maybe behind a logger's
prefix), while its rows are printed (stdout): the two may arrive apart."""
HF_TABLE_ROW = re.compile(r"\s{1,8}([A-Za-z_][\w./-]{0,80}?)\s*=\s*(\S{1,40})\s*")
HOURS = re.compile(r"(\d+):(\d\d):(\d\d(?:\.\d+)?)")
"""``train_runtime = 1:08:59.29``: ``metrics_format`` prints durations as h:mm:ss.ff."""


def _table_number(log: TrainingLog, text: str, what: str) -> float | None:
    hours = HOURS.fullmatch(text)
    if hours:
        return int(hours.group(1)) * 3600 + int(hours.group(2)) * 60 + float(hours.group(3))
    return number(log, text, what)


def _hf_table_line(line: str, log: TrainingLog) -> bool:
    """A line of the tables the Trainer's example scripts print at the end (``trainer.log_metrics``):
    ``***** eval metrics *****`` then ``  eval_accuracy = 0.8456`` rows.  An ``eval_*`` row is an
    evaluation wherever it comes (the header may arrive apart from the rows); an unprefixed metric
    (``perplexity``, run_clm's) only inside an eval table.  The train table's speed is read unless the
    run's printed summary dict gave it already (the same number); ``predict``/``test``/``best`` tables are
    not the evaluation the run reports, and are not read."""
    state = _state(log)
    header = HF_TABLE_HEADER.search(line)
    if header:
        state["hf_table"] = header.group(1).lower()
        return True
    row = HF_TABLE_ROW.fullmatch(line)
    if not row:
        if line.strip():
            state["hf_table"] = None
        return False
    key, raw = row.groups()
    table = state.get("hf_table")
    if key == "epoch":
        if table is not None:
            state["hf_table_epoch"] = _table_number(log, raw, "Hugging Face epoch")
        return table is not None
    if key.startswith("eval_") and not hf_quality_keys({key: 0}):
        return True  # the evaluation's duration, speed or count
    if key.startswith("eval_") or (table == "eval" and metric_direction(key) is not None):
        value = _table_number(log, raw, f"Hugging Face {key}")
        if value is not None:
            log.add_quality(metric_for(key, log), value)
            _note_step(log, key, state.get("hf_table_epoch") if table == "eval" else None)
        return True
    if key == "train_samples_per_second":
        value = _table_number(log, raw, "Hugging Face train_samples_per_second")
        if value is not None and not state.get("hf_summary_speed"):
            log.add_throughput(value)
            state["hf_summary_speed"] = True
        return True
    if key == "train_runtime":
        value = _table_number(log, raw, "Hugging Face train_runtime")
        if value is not None:
            log.total_time = value
        return True
    return table is not None


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


def _note_step(log: TrainingLog, metric: str, step: Any) -> None:
    """The step (epoch, iteration) of a quality value just added, in the details' ``quality_steps``,
    one per value of the metric."""
    values = len(log.series.get(metric, (None, []))[1])
    steps = log.details.setdefault("quality_steps", {}).setdefault(metric, [])
    if len(steps) >= values:  # the value was not added (logged after an MLPerf run_stop)
        return
    steps.extend([None] * (values - 1 - len(steps)))
    steps.append(step)


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


# --- Keras fit() -----------------------------------------------------------------------------------

KERAS_EPOCH = re.compile(r"\s*Epoch (\d{1,9})/\d{1,9}\s*")
KERAS_BAR = re.compile(r"\d{1,12}/(?:\d{1,12}|Unknown) (?:\[[=>.]{0,200}\]|[━─╸╺]{1,200}|- )")
"""Where a progress line starts: ``422/422 [====...]`` (Keras 2), ``782/782 ━━━━`` (Keras 3), or
``8/8 - 5s - ...`` (``verbose=2``).  A bar pasted without its carriage returns holds several: the last
is read."""
KERAS_VERBOSE2_OLD = re.compile(r"\s*\d{1,6}s - [A-Za-z_]\w{0,80}: ")
"""Keras 1's ``verbose=2`` line, ``0s - loss: 0.0396 - acc: 0.0021``, with no step count."""
FIGURE = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
"""A printed number; its digits can be given back one way only, so a failed match costs time linear in them."""
KERAS_PAIR = re.compile(r"(?:^|\s)-\s([A-Za-z_][\w./@-]{0,100}?):\s*(" + FIGURE + r"|nan|inf)(?=\s|$)",
                        re.IGNORECASE)
KERAS_STEP_TIME = re.compile(r"(?:^|\s)(\d+(?:\.\d+)?)(s|ms|us|µs)/(step|sample)\b")
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}


def _keras_segment(line: str) -> str | None:
    """The progress line's last bar (from its step count on), or None when the line is no Keras
    progress line.  Backspaces (Keras 2's redraws) are dropped first."""
    line = line.replace("\b", "")
    starts = [m.start() for m in KERAS_BAR.finditer(line)]
    if starts:
        return line[starts[-1]:]
    if KERAS_VERBOSE2_OLD.match(line):
        return line
    return None


def parse_keras(line: str, log: TrainingLog) -> bool:
    """Keras ``fit()``'s output: ``Epoch 3/15`` and each epoch's progress line, whose last redraw
    (the epoch's end) carries the validation figures (``... - val_loss: 0.03 - val_accuracy: 0.992``).
    Every ``val_*`` figure is a quality metric under its own name, one value per epoch (a redraw of
    the same epoch replaces it); training figures (``loss``, ``accuracy``) are not evaluations.  Keras
    prints time per step, not samples/s: kept as the details' ``keras_seconds_per_step``; a ``us/sample``
    time (Keras 2.1 on arrays) is a throughput, 1 / seconds."""
    if _foreign(line) or ("/" not in line and " - " not in line):
        return False
    state = _state(log)
    epoch = KERAS_EPOCH.fullmatch(line)
    if epoch:  # noted, not counted as recognised: other scripts print "Epoch 3/15" too
        state["keras_epoch"] = int(epoch.group(1))
        return False
    segment = _keras_segment(line)
    if segment is None:
        return False
    pairs = [(name, raw) for name, raw in KERAS_PAIR.findall(segment) if name.lower() != "eta"]
    timed = KERAS_STEP_TIME.search(segment)
    if not pairs and not timed:
        return False
    log.recognised["keras"] += 1
    state["keras_progress"] = state.get("keras_progress", 0) + 1
    for name, raw in pairs:
        if name.startswith("val_"):
            _keras_value(log, name, raw, state.get("keras_epoch"))
        elif metric_direction(name):
            state.setdefault("keras_training_metric", name)  # for the hint when no val_ figure comes
    count = re.match(r"(\d+)/(\d+|Unknown)", segment)
    if timed and "ETA" not in segment and (count is None or count.group(1) == count.group(2)):
        # the epoch's end: a redraw before it gives its ETA (Keras 3 without the word) beside its pace
        seconds = float(timed.group(1)) * TIME_UNITS[timed.group(2)]
        if seconds > 0 and timed.group(3) == "sample":
            log.add_throughput(1.0 / seconds)
        elif seconds > 0:
            log.details.setdefault("keras_seconds_per_step", []).append(seconds)
    return True


def _keras_value(log: TrainingLog, name: str, raw: str, epoch: int | None) -> None:
    value = number(log, raw, f"Keras {name}")
    if value is None:
        return
    state = _state(log)
    read_at = state.setdefault("keras_read_epoch", {})
    known = log.series.get(name)
    if known is not None and known[1] and epoch is not None and read_at.get(name) == epoch and not log.stopped:
        known[1][-1] = Evaluation(value, False, log.elapsed)
        return
    log.add_quality(metric_for(name, log), value)
    _note_step(log, name, epoch)
    read_at[name] = epoch


# --- Megatron-LM ------------------------------------------------------------------------------------

MEGATRON_ITERATION = re.compile(r"\biteration\s{0,40}(\d{1,12})\s{0,40}/\s{0,40}\d{1,12}\s{0,40}\|")
MEGATRON_FIELD = re.compile(r"\|\s{0,40}([^|:]{1,100}?):\s{0,40}(" + FIGURE + r")\s{0,40}(?=\|)")
MEGATRON_VALIDATION = re.compile(r"\b(?:validation|valid) loss at ([^|]{1,200}?)\s{0,40}\|(.{0,8000})")
MEGATRON_VALUE = re.compile(r"([^|]{1,100}?) (value|PPL):\s{0,40}(" + FIGURE + r")\s{0,40}(?=\|)")
MEGATRON_SPEED = {"elapsed time per iteration (ms)": 1e-3, "elapsed time per iteration (s)": 1.0}


def _slug(text: str) -> str:
    return "_".join(word for word in re.split(r"[^a-z0-9]+", text.lower()) if word)


def parse_megatron(line: str, log: TrainingLog) -> bool:
    """Megatron-LM's ``training_log`` line (`` iteration 100/ 500000 | consumed samples: ... | elapsed
    time per iteration (ms): 657.0 | ... | global batch size: 512 | lm loss: 5.36E+00 | ...``) and its
    ``evaluate_and_print_results`` line (`` validation loss at iteration 1000 | lm loss value: 5.31E+00 |
    lm loss PPL: 2.03E+02 |``; Megatron-DeepSpeed writes ``valid loss``).  Throughput: the line's
    ``samples per second`` where it prints one (Megatron-DeepSpeed), else the global batch size over the
    time per iteration.  Each validation ``<name> value`` is the quality metric ``val_<name>`` (``test_``
    for the test set), its ``PPL`` ``val_<name>_ppl``, lower-is-better, at its iteration; the training
    ``lm loss`` is not an evaluation."""
    if _foreign(line) or "|" not in line or "iteration" not in line:
        return False
    line = " ".join(line.split())
    validation = MEGATRON_VALIDATION.search(line)
    if validation:
        return _megatron_validation(log, validation.group(1), validation.group(2))
    iteration = MEGATRON_ITERATION.search(line)
    if not iteration:
        return False
    log.recognised["megatron"] += 1
    step = int(iteration.group(1))
    _state(log)["megatron_iteration"] = step
    log.details["megatron_last_iteration"] = step
    fields = {name.strip().lower(): raw for name, raw in MEGATRON_FIELD.findall(line[iteration.end() - 1:] + "|")}
    if "samples per second" in fields:
        value = number(log, fields["samples per second"], "Megatron samples per second")
        if value is not None:
            log.add_throughput(value)
        return True
    batch = fields.get("global batch size")
    for name, scale in MEGATRON_SPEED.items():
        if name in fields and batch is not None:
            seconds = number(log, fields[name], f"Megatron {name}")
            samples = number(log, batch, "Megatron global batch size")
            if seconds and samples is not None:
                log.add_throughput(samples / (seconds * scale))
    return True


def _megatron_validation(log: TrainingLog, where: str, fields: str) -> bool:
    """`` validation loss at iteration 1000 [on validation set] | lm loss value: ... | lm loss PPL: ... |``;
    also ``at the end of training for val data`` and ``... on test set`` / ``for test data``."""
    values = MEGATRON_VALUE.findall(fields.rstrip() + ("" if fields.rstrip().endswith("|") else "|"))
    if not values:
        return False
    log.recognised["megatron"] += 1
    split = "test" if "test" in where.lower() else "val"
    at = re.search(r"iteration (\d+)", where)
    step = int(at.group(1)) if at else _state(log).get("megatron_iteration")
    for name, kind, raw in values:
        metric = f"{split}_{_slug(name)}" + ("_ppl" if kind == "PPL" else "")
        value = number(log, raw, f"Megatron {metric}")
        if value is not None:
            log.add_quality(Metric(metric, False, "score"), value)
            _note_step(log, metric, step)
    return True


# --- DeepSpeed --------------------------------------------------------------------------------------

DEEPSPEED_STEP = re.compile(r"\[Rank \d+\] step=(\d{1,12}), skipped=(\d{1,12}), lr=")
DEEPSPEED_TIMER = re.compile(r"(?:\bCurrSamplesPerSec|(?<![A-Za-z])SamplesPerSec)=\s{0,4}(" + FIGURE + r"|nan|inf)")
DEEPSPEED_PIPE = re.compile(r"\bsteps: (\d{1,12}) loss: \S{1,40} iter time \(s\): \S{1,40} samples/sec: (" + FIGURE
                            + r"|nan|inf)")


def parse_deepspeed(line: str, log: TrainingLog) -> bool:
    """DeepSpeed's engine lines: ``[Rank 0] step=40, skipped=2, lr=[...], mom=[...]`` (the step and the
    skipped steps, as details), its ThroughputTimer's ``CurrSamplesPerSec=16.8`` (each a throughput
    reading; older versions print ``SamplesPerSec=``, the running mean since the timer's start step, read
    as printed; ``RunningAvgSamplesPerSec`` is not read beside ``CurrSamplesPerSec``), and the pipeline
    engine's ``steps: 10 loss: ... iter time (s): ... samples/sec: 97.8``.  These are the global batch's
    samples per second.  DeepSpeed prints no evaluation."""
    if _foreign(line) or ("step" not in line and "SamplesPerSec" not in line):
        return False
    found = False
    stepped = DEEPSPEED_STEP.search(line)
    if stepped:
        log.details["deepspeed_last_step"] = int(stepped.group(1))
        log.details["deepspeed_skipped_steps"] = int(stepped.group(2))
        found = True
    rate = DEEPSPEED_TIMER.search(line) or DEEPSPEED_PIPE.search(line)
    if rate:
        value = number(log, rate.group(rate.lastindex or 1), "DeepSpeed samples per second")
        if value is not None:
            log.add_throughput(value)
        if rate.re is DEEPSPEED_PIPE:
            log.details["deepspeed_last_step"] = int(rate.group(1))
        found = True
    if found:
        log.recognised["deepspeed"] += 1
    return found


# --- What was recognised but not read ---------------------------------------------------------------

KERAS_HINT = ("Keras fit() printed no validation figure: pass validation_data (or validation_split) to fit(), or "
              "set accuracy_regex to read a training figure (e.g. ' - {name}: ([0-9.]+)'), or write the "
              "TensorBoard callback's files and name them in log_files")


def unread_notes(log: TrainingLog) -> list[str]:
    """What a recognised format printed that sixdim could not turn into a figure, and what to use
    instead: for a failure's reason (nothing read) and the details."""
    notes = []
    if _state(log).get("keras_progress") and not any(name.startswith("val_") for name in log.series):
        notes.append(KERAS_HINT.format(name=_state(log).get("keras_training_metric", "accuracy")))
    if log.recognised.get("deepspeed") and "deepspeed_last_step" in log.details and not log.throughputs:
        notes.append("DeepSpeed printed its steps but no throughput: its ThroughputTimer line ('SamplesPerSec=') "
                     "comes every steps_per_print steps; or set throughput_regex")
    if log.recognised.get("megatron") and not log.throughputs and not log.series:
        notes.append("Megatron lines without a time per iteration and a global batch size: set throughput_regex")
    return notes


LINE_FORMATS: dict[str, tuple[str, Parser]] = {
    "hf_trainer": ("Hugging Face Trainer (its printed metric dicts, {'eval_loss': ..., "
                   "'train_samples_per_second': ...})", parse_hf_trainer),
    "mindspore": ("MindSpore ('epoch: N step: N, loss is X', '[Train ]epoch time: X ms, per step time: X ms' and "
                  "Model.eval's printed {'metric': value})", parse_mindspore),
    "keras": ("Keras fit() ('Epoch 3/15' and each epoch's last progress line: its val_* figures; without "
              "validation_data there are none: pass validation_data, or set accuracy_regex)", parse_keras),
    "megatron": ("Megatron-LM (' iteration N/ M | ... elapsed time per iteration (ms): X | global batch size: N |' "
                 "and ' validation loss at iteration N | lm loss value: X | lm loss PPL: X |')", parse_megatron),
    "deepspeed": ("DeepSpeed ('[Rank 0] step=N, skipped=N, ...' and its ThroughputTimer's 'CurrSamplesPerSec=X' "
                  "or 'SamplesPerSec=X')", parse_deepspeed),
}
"""The framework line formats, by the name ``formats`` gives them: (what they read, the parser)."""
