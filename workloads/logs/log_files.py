"""Files a training run writes: TensorBoard event files, MindSpore's summary files, Hugging Face's
trainer_state.json, Lightning's metrics.csv.

Torch-free.  The command workload reads them after its command ends, or instead of running one (a
run that already happened), into the same :class:`~sixdim.workloads.logs.training_log.TrainingLog` as the
command's output.  The rules are in docs/TRAINING_LOGS.md; in short:

- ``log_files`` entries are paths or globs, relative to the command's ``cwd``.  A folder is searched
  (to :data:`MAX_DEPTH` levels) for event files (``*tfevents*``, and MindSpore's
  ``*.out.events.summary.*``: every one, each folder a run), and for
  the most recently written ``trainer_state.json`` and ``metrics.csv`` (a Trainer's output folder holds
  one per checkpoint, a Lightning log folder one per version: older ones are skipped, and said so).
  When a command ran, a file last written before it started is an earlier run's: skipped, and said so.
- A file's format comes from its name (``*tfevents*``, ``*.out.events.summary.*`` but a ``_lineage`` or
  ``_explain`` file, ``trainer_state.json``, ``metrics.csv``), else its content (a MindSpore version event,
  a JSON object with ``log_history``, a CSV with a ``step`` or ``epoch`` column); it is read
  only if ``formats`` allows that format.
- Quality metrics are the user's ``quality_tags``, else the evaluations' metrics by their names
  (``val_acc``, ``eval/loss``, ``validation/epoch_accuracy``; Hugging Face's ``eval_*``); the
  throughput is ``throughput_tag``, else the one rate named like samples per second.  Each keeps its
  name (a TensorBoard tag in a sub-folder run is ``<run>/<tag>``) and takes the direction its name says.
- TensorBoard and MindSpore scalars carry their wall time: an evaluation's time is measured from the command's start
  (from the first event, for a replayed log), so ``target_accuracy`` gives a time to train.  Values
  stored as float32 are read back as the shortest decimal that is the same float32 (0.6, not
  0.6000000238418579).  The two other files carry no clock.
- A trainer_state.json replaces the Trainer's printed dicts of the same run where both were read
  (:func:`merge_trainer_state`); any other file's readings come after the output's (:func:`merge`).

MindSpore's summary files are decoded by :mod:`~sixdim.workloads.logs.mindspore_summary` (no MindSpore
needed); every scalar tag that names a direction (``loss``, ``accuracy``) is a quality metric there, the
others are details.  TensorBoard files are read with the ``tensorboard`` package (its
``plugin_event_accumulator``, which TensorBoard itself uses, and reads TF1 ``simple_value`` and TF2 tensor
scalars alike), an optional dependency (the ``tensorboard`` extra) imported here only when an event file is read.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sixdim.workloads.logs.framework_lines import (
    hf_quality_keys,
    hf_record,
    is_evaluation_metric,
    is_throughput_name,
    metric_direction,
    metric_for,
    number,
    tokens,
)
from sixdim.workloads.logs.mindspore_summary import VERSION_MARK, Scalar, is_summary_name, read_summary
from sixdim.workloads.logs.model import Evaluation
from sixdim.workloads.logs.training_log import TrainingLog

FILE_FORMATS = {
    "tensorboard": "TensorBoard event files (events.out.tfevents.*: PyTorch's SummaryWriter, Lightning, Keras, "
                   "TensorFlow, the Hugging Face Trainer)",
    "mindspore_summary": "MindSpore's summary files (events.out.events.summary.*_MS: SummaryRecord, "
                         "SummaryCollector)",
    "hf_trainer": "Hugging Face Trainer's trainer_state.json",
    "lightning_csv": "PyTorch Lightning CSVLogger's metrics.csv",
}
"""The file formats, by the name ``formats`` gives them."""

MAX_FILES = 200
CLOCK_SLACK = 2.0
"""Seconds a file's modification time may precede the command's start and still be this run's (a
file system's time stamps may be coarse)."""
MAX_DEPTH = 6
MAX_BYTES = 256 * 2**20
"""A trainer_state.json or metrics.csv larger than this is not read (a year of steps is far smaller).  At most
this much is ever read from one, whatever ``st_size`` says (a device such as /dev/zero says 0)."""
SNIFF_BYTES = 65536
"""How much of a file named explicitly is read to recognise its format."""
_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}
TENSORBOARD_MISSING = ("reading TensorBoard event files needs the tensorboard package, which is not installed: "
                       "pip install tensorboard (or sixdim's extra: pip install 'sixdim[tensorboard]'); or leave "
                       "'tensorboard' out of formats and name the other files in log_files")


@dataclass
class Options:
    """How to read the files: what ``formats`` allows, which names to read, and the clock."""

    formats: Sequence[str]
    quality_tags: Sequence[str] = ()
    throughput_tag: str = ""
    base: str = ""
    """The folder relative entries are taken from (the command's ``cwd``; empty: the current one)."""
    started: float | None = None
    """Wall-clock time (``time.time()``) the command started; None for a replay (the files' own clock)."""


@dataclass
class Report:
    """What one file gave, for the details."""

    path: str
    format: str | None
    read: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {"path": self.path, "format": self.format}
        if self.read:
            described["read"] = self.read
        if self.note:
            described["note"] = self.note
        return described


def tensorboard_available() -> bool:
    """Whether the tensorboard package is installed (found, not imported)."""
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


def may_hold_event_files(patterns: Sequence[str], base: str = "") -> bool:
    """Whether a ``log_files`` entry may name TensorBoard event files: anything but an explicit
    trainer_state.json, JSON, CSV or MindSpore summary file, and an existing folder or glob that holds
    MindSpore summaries and no event file (read without the tensorboard package).  A folder not written
    yet may come to hold anything.  ``base``: the folder relative entries are taken from."""
    for pattern in patterns:
        name = os.path.basename(pattern.rstrip("/"))
        if name.endswith((".json", ".csv")) or is_summary_name(name):
            continue
        present = _formats_present(pattern, base)
        if "tensorboard" in present or "mindspore_summary" not in present:
            return True
    return False


def _formats_present(pattern: str, base: str) -> set[str]:
    """The formats, by file name, of the files an entry names now (searched as :func:`find` does)."""
    text = os.path.expanduser(pattern)
    if not os.path.isabs(text) and base:
        text = os.path.join(base, text)
    matches = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
    paths = [p for m in matches[:MAX_FILES] for p in (_walk(Path(m)) if os.path.isdir(m) else [Path(m)])]
    return {kind for kind in (detect(p, sniff=False) for p in paths[:MAX_FILES]) if kind}


# --- Finding and recognising files --------------------------------------------------------------

def detect(path: Path, sniff: bool = True) -> str | None:
    """A file's format from its name, else (``sniff``) from its first bytes; None: not one sixdim reads."""
    name = path.name
    if "tfevents" in name:
        return "tensorboard"
    if is_summary_name(name):
        return "mindspore_summary"
    if name == "trainer_state.json":
        return "hf_trainer"
    if name == "metrics.csv":
        return "lightning_csv"
    if not sniff:
        return None
    try:
        head = read_limited(path, SNIFF_BYTES, whole=False).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    if VERSION_MARK in head[:64].lower():  # a summary's first record: the version event
        return "mindspore_summary"
    if name.endswith(".json") and '"log_history"' in head:
        return "hf_trainer"
    if name.endswith(".csv"):
        header = {column.strip() for column in head.splitlines()[0].split(",")} if head else set()
        if header & {"step", "epoch"}:
            return "lightning_csv"
    return None


def not_regular(path: Path) -> str | None:
    """What a path is when it is not a regular file once its links are followed (``a character device``: a
    link to /dev/zero, ``a FIFO``), or None.  Such a file is never read: a device has no end and a FIFO no
    writer, and ``st_size`` says nothing of either."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # gone, or unreadable: reading it says why
    return None if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "a special file")


def read_limited(path: Path, limit: int = MAX_BYTES, *, whole: bool = True) -> bytes:
    """At most ``limit`` bytes of a regular file, opened without blocking (a FIFO put there meanwhile does not
    hang the worker) and checked as opened (a file swapped for a device after it was found is refused);
    with ``whole``, a file with more than ``limit`` bytes is refused rather than cut."""
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(handle)
        if not stat.S_ISREG(status.st_mode):
            raise ValueError(f"not a regular file ({_KINDS.get(stat.S_IFMT(status.st_mode), 'a special file')})")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(handle, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            if whole:
                raise ValueError(f"larger than {limit // 2**20} MiB" if limit >= 2**20
                                 else f"larger than {limit} bytes")
            return b"".join(chunks)[:limit]
        return b"".join(chunks)
    finally:
        os.close(handle)


def _walk(folder: Path) -> list[Path]:
    """The files under a folder that a format is named by, to :data:`MAX_DEPTH` levels, in name order."""
    found: list[Path] = []
    root_depth = len(folder.parts)
    for current, folders, files in os.walk(folder):
        folders.sort()
        if len(Path(current).parts) - root_depth >= MAX_DEPTH:
            folders[:] = []
        found += [Path(current) / f for f in sorted(files) if detect(Path(current) / f, sniff=False)]
        if len(found) > MAX_FILES:
            break
    return found


@dataclass
class Found:
    """The files of one ``log_files`` entry, each with its format, and those skipped (with why)."""

    pattern: str
    files: list[tuple[Path, str]]
    skipped: list[Report]


def find(pattern: str, options: Options) -> Found:
    """The files one entry names: a file, a folder (searched), or a glob (``**`` included)."""
    text = os.path.expanduser(pattern)
    if not os.path.isabs(text) and options.base:
        text = os.path.join(options.base, text)
    pattern_like = glob.has_magic(text)
    matches = sorted(glob.glob(text, recursive=True)) if pattern_like else [text] if os.path.exists(text) else []
    candidates: list[tuple[Path, bool]] = []  # (file, matched by the entry itself: recognised by content too)
    for match in matches:
        path = Path(match)
        if path.is_dir():
            candidates += [(p, False) for p in _walk(path)]
        else:
            candidates.append((path, True))
    skipped: list[Report] = []
    files: list[tuple[Path, str]] = []
    for path, explicit in candidates[:MAX_FILES]:
        special = not_regular(path)
        if special is not None:
            skipped.append(Report(str(path), detect(path, sniff=False),
                                  note=f"not a regular file ({special}): not read"))
            continue
        kind = detect(path, sniff=explicit)
        if options.started is not None and _mtime(path) < options.started - CLOCK_SLACK:
            skipped.append(Report(str(path), kind, note="last written before the command started: an earlier run's"))
        elif kind is None:
            skipped.append(Report(str(path), None, note="not a format sixdim reads (" + ", ".join(FILE_FORMATS) + ")"))
        elif kind not in options.formats:
            skipped.append(Report(str(path), kind, note=f"format {kind!r} is not in formats"))
        else:
            files.append((path, kind))
    if len(candidates) > MAX_FILES:
        skipped.append(Report(text, None, note=f"more than {MAX_FILES} files: the rest are not read"))
    files, older = _latest_of_each(files, [] if pattern_like else matches)
    return Found(pattern, files, skipped + older)


def _latest_of_each(files: list[tuple[Path, str]], named: list[str]) -> tuple[list[tuple[Path, str]], list[Report]]:
    """A folder searched, or a glob, gives its most recently written trainer_state.json and metrics.csv:
    a Trainer's output folder holds one per checkpoint (each an earlier part of the same history), a
    Lightning folder one per version (earlier runs).  A file named by its own path is read in any case."""
    explicit = {os.path.normpath(m) for m in named}
    skipped: list[Report] = []
    for kind in ("hf_trainer", "lightning_csv"):
        searched = [p for p, k in files if k == kind and os.path.normpath(str(p)) not in explicit]
        if len(searched) > 1:
            newest = max(searched, key=lambda p: (_mtime(p), len(p.parts) * -1, str(p)))
            skipped += [Report(str(p), kind, note=f"an older file than {newest} (the most recently written one is "
                                                  "read)") for p in searched if p != newest]
            files = [(p, k) for p, k in files if k != kind or p == newest or os.path.normpath(str(p)) in explicit]
    return files, skipped


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


# --- Choosing names ------------------------------------------------------------------------------

def _select(names: Sequence[str], options: Options, default_quality: Any) -> tuple[list[str], list[str], list[str]]:
    """(quality names, throughput names, notes): the user's tags where given, else the defaults.  A
    user's tag matches a name exactly, or its last part (``epoch_accuracy`` matches ``validation/epoch_accuracy``)."""
    notes: list[str] = []

    def matching(tag: str) -> list[str]:
        return [n for n in names if n == tag or n.rsplit("/", 1)[-1] == tag or n.endswith("/" + tag)]

    if options.quality_tags:
        quality = [n for tag in options.quality_tags for n in matching(tag)]
        missing = [tag for tag in options.quality_tags if not matching(tag)]
        if missing:
            notes.append(f"quality_tags {missing} not found")
    else:
        quality = [n for n in names if default_quality(n)]
    if options.throughput_tag:
        throughput = matching(options.throughput_tag)[:1]
        if not throughput:
            notes.append(f"throughput_tag {options.throughput_tag!r} not found")
    else:
        rates = [n for n in names if is_throughput_name(n)]
        whole = [n for n in rates if "device" not in tokens(n)]  # Lightning's per-device rate is the fallback
        throughput = (whole or rates)[:1]
        if len(rates) > 1:
            notes.append(f"throughput read from {throughput[0]!r} (also named like one: "
                         f"{', '.join(n for n in rates if n not in throughput)}; set throughput_tag to choose)")
    quality = list(dict.fromkeys(n for n in quality if n not in throughput))
    return quality, throughput, notes


def _names_note(names: Sequence[str]) -> str:
    shown = ", ".join(list(names)[:30]) + (f", ... ({len(names)} in all)" if len(names) > 30 else "")
    return f"names present: {shown}" if names else "no scalar in it"


# --- Event files: TensorBoard's and MindSpore's ----------------------------------------------------

def _tensorboard_scalars(path: Path) -> tuple[dict[str, list[Scalar]], float | None]:
    """Every scalar of one event file, by tag, in the order written, and the file's first event time."""
    import numpy as np
    from tensorboard.backend.event_processing import plugin_event_accumulator as accumulator
    from tensorboard.util import tensor_util

    events = accumulator.EventAccumulator(str(path), size_guidance={accumulator.TENSORS: 1},
                                          tensor_size_guidance={"scalars": 0}, purge_orphaned_data=False)
    events.Reload()
    scalars: dict[str, list[Scalar]] = {}
    for tag in events.Tags().get("tensors", []):
        if events.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue
        for event in events.Tensors(tag):
            array = tensor_util.make_ndarray(event.tensor_proto)
            if array.size != 1:
                continue
            item = array.reshape(())[()]
            # a float32 scalar as the shortest decimal that is that float32: 0.6, not 0.6000000238418579
            value = float(str(item)) if isinstance(item, np.floating) else float(item)
            scalars.setdefault(tag, []).append(Scalar(event.wall_time, event.step, value))
    try:
        first = events.FirstEventTimestamp()
    except ValueError:
        first = None
    return scalars, first


def _mindspore_scalars(path: Path) -> tuple[dict[str, list[Scalar]], float | None, dict[str, Any]]:
    """Every scalar of one MindSpore summary file, by tag, its earliest event time, and what it held
    besides (:func:`~sixdim.workloads.logs.mindspore_summary.read_summary`)."""
    summary = read_summary(read_limited(path, MAX_BYTES))
    info: dict[str, Any] = {"events": summary.events, "tags": {t: _describe_tag(v) for t, v in summary.scalars.items()},
                            "skipped": dict(summary.skipped)}
    if summary.rewritten:
        info["rewritten"] = summary.rewritten
    return summary.scalars, summary.first_wall, info


def _describe_tag(values: list[Scalar]) -> dict[str, Any]:
    """A tag's readings for the details: how many, its first and last steps and wall times, its final value."""
    return {"readings": len(values), "steps": [values[0].step, values[-1].step],
            "wall": [values[0].wall, values[-1].wall], "final": values[-1].value}


def _has_direction(name: str) -> bool:
    """A MindSpore tag read as a quality metric by default: one whose name says which way is better
    (SummaryCollector's only scalar is the training loss, ``loss/auto``)."""
    return metric_direction(name) is not None


EVENT_FILES = {"tensorboard": ("TensorBoard", is_evaluation_metric), "mindspore_summary": ("MindSpore", _has_direction)}
"""Each event-file format: how its readings are named in warnings, and which names are quality metrics by default."""


def _read_event_files(kind: str, found: list[Found], options: Options, part: TrainingLog,
                      reports: list[Report]) -> None:
    """The event files (``kind``: TensorBoard's or MindSpore's) of every entry: their scalars by tag
    (``<run>/<tag>`` where an entry's files lie in several folders, a run each, named from their common
    folder), selected, into ``part``."""
    label, default_quality = EVENT_FILES[kind]
    series: dict[str, list[Scalar]] = {}
    firsts: list[float] = []
    read: list[Report] = []
    for entry in found:
        paths = [p for p, k in entry.files if k == kind]
        root = os.path.commonpath([str(p.parent) for p in paths]) if paths else ""
        for path in paths:
            report = Report(str(path), kind)
            reports.append(report)
            try:
                if kind == "tensorboard":
                    scalars, first = _tensorboard_scalars(path)
                    report.read["tags"] = len(scalars)
                else:
                    scalars, first, report.read = _mindspore_scalars(path)
            except Exception as exc:  # a truncated or foreign file: said, never the run's end
                report.note = f"could not be read ({type(exc).__name__}: {str(exc)[:160]})"
                continue
            read.append(report)
            if first is not None:
                firsts.append(first)
            run = Path(os.path.relpath(path.parent, root)).as_posix()
            for tag, values in scalars.items():
                series.setdefault(tag if run == "." else f"{run}/{tag}", []).extend(values)
    if not read:
        return
    quality, throughput, notes = _select(list(series), options, default_quality)
    origin = options.started if options.started is not None else min(firsts, default=None)
    for name in quality:
        metric = metric_for(name, part)
        for scalar in series[name]:
            part.elapsed = max(0.0, scalar.wall - origin) if origin is not None else None
            value = number(part, scalar.value, f"{label} {name}")
            if value is not None:
                part.add_quality(metric, value)
    for name in throughput:
        for scalar in series[name]:
            value = number(part, scalar.value, f"{label} {name}")
            if value is not None:
                part.add_throughput(value, marker=[name, scalar.step, scalar.wall])
    part.elapsed = None
    if options.started is None and origin is not None:
        walls = [s.wall for values in series.values() for s in values]
        if walls and max(walls) >= origin:
            part.total_time = max(walls) - origin  # a replay: the span of the files' own clock
    if not quality and not throughput:
        notes.append(_names_note(list(series)))
    read[0].read.update({"quality": {n: len(series[n]) for n in quality},
                         "throughput": {n: len(series[n]) for n in throughput}})
    if kind == "mindspore_summary":  # a tag that is neither a quality metric nor the throughput: a detail
        others = [n for n in series if n not in quality and n not in throughput]
        read[0].read["other_tags"] = {n: _describe_tag(series[n]) for n in others[:MAX_DETAIL_TAGS]}
        if len(others) > MAX_DETAIL_TAGS:
            notes.append(f"{len(others)} other tags: the first {MAX_DETAIL_TAGS} are described")
    if notes:
        read[0].note = "; ".join(notes)


MAX_DETAIL_TAGS = 50


# --- Hugging Face trainer_state.json ------------------------------------------------------------

def _load_json(path: Path) -> Any:
    return json.loads(read_limited(path).decode("utf-8"))


def _read_trainer_state(path: Path, options: Options, part: TrainingLog, report: Report) -> None:
    """``log_history``: each entry a dict the Trainer logged (the same dicts it prints)."""
    state = _load_json(path)
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        report.note = "no log_history list in it"
        return
    records = [entry for entry in history if isinstance(entry, dict)]
    names = list(dict.fromkeys(key for record in records for key in record))
    evaluations = {key for record in records for key in hf_quality_keys(record)}
    quality, throughput, notes = _select(names, options, evaluations.__contains__)
    totals = {"quality": 0, "throughput": 0, "runtime": 0}
    for record in records:
        for key, count in hf_record(record, part, quality, throughput[0] if throughput else None).items():
            totals[key] += count
    report.read = {"quality": {n: sum(1 for r in records if n in r) for n in quality},
                   "throughput": {n: sum(1 for r in records if n in r) for n in throughput}}
    if totals["runtime"]:
        report.read["train_runtime"] = part.total_time
    if not any(totals.values()):
        notes.append(_names_note(names))
    best = best_model(state, records, quality)
    if best:
        part.details[BEST_MODEL] = best
        report.read["best_model_checkpoint"] = state.get("best_model_checkpoint")
    report.note = "; ".join(notes)


BEST_MODEL = "best_model"
"""The key of :attr:`TrainingLog.details` that holds, by metric, the evaluation of the model a Trainer's run
ended with when that is not its last evaluation (:func:`best_model`); the command workload reports it."""


def best_model(state: dict[str, Any], records: list[dict[str, Any]], quality: Sequence[str]) -> dict[str, Any]:
    """The evaluation of the model a Trainer's run ended with, by metric, where it is not the last one:
    with ``load_best_model_at_end`` the Trainer reloads its best checkpoint when training ends, and
    trainer_state.json names it (``best_model_checkpoint``, ``best_metric``; ``best_global_step`` from
    transformers 4.51).  The flag itself is not in the file: a best model named there is taken as the one
    reloaded (``metric_for_best_model``, which names it, is set by default only with that flag).  Each
    entry: the evaluation's place among the metric's evaluations (``index``), its value as logged, and
    the rule, in words.  Empty where the file names no best model, or its evaluation is not found."""
    checkpoint = state.get("best_model_checkpoint")
    best = state.get("best_metric")
    if not isinstance(checkpoint, str) or isinstance(best, bool) or not isinstance(best, (int, float)):
        return {}
    step = state.get("best_global_step")
    if not isinstance(step, int):
        found = re.search(r"checkpoint-(\d+)", checkpoint)
        step = int(found.group(1)) if found else None
    evaluations = [r for r in records if any(k in r for k in quality)]
    chosen = next((r for r in evaluations if r.get("step") == step
                   and any(r.get(k) == best for k in quality)), None)
    if chosen is None or chosen is evaluations[-1]:
        return {}
    by = next(k for k in quality if chosen.get(k) == best)
    place = evaluations.index(chosen)
    said = (f"the best model (trainer_state.json's best_model_checkpoint {checkpoint}, best_metric {by} {best:g} at "
            f"step {step}): the Trainer reloads it at the end with load_best_model_at_end, so the run ended with it, "
            "not with its last evaluation")
    return {key: {"index": sum(1 for r in evaluations[:place] if isinstance(r.get(key), (int, float))),
                  "value": chosen[key], "rule": said}
            for key in quality if isinstance(chosen.get(key), (int, float)) and not isinstance(chosen.get(key), bool)}


# --- Lightning metrics.csv ---------------------------------------------------------------------

def _read_metrics_csv(path: Path, options: Options, part: TrainingLog, report: Report) -> None:
    """CSVLogger's rows (``epoch``, ``step`` and one column per logged name, empty where a row lacks it)."""
    rows = list(csv.DictReader(io.StringIO(read_limited(path).decode("utf-8"), newline="")))
    names = [n for n in (rows[0].keys() if rows else []) if n and n not in ("epoch", "step")]
    quality, throughput, notes = _select(names, options, is_evaluation_metric)
    for row in rows:
        for name in quality:
            if row.get(name, "") not in ("", None):
                value = number(part, row[name], f"metrics.csv {name}")
                if value is not None:
                    part.add_quality(metric_for(name, part), value)
        for name in throughput:
            if row.get(name, "") not in ("", None):
                value = number(part, row[name], f"metrics.csv {name}")
                if value is not None:
                    part.add_throughput(value)
    report.read = {"quality": {n: sum(1 for r in rows if r.get(n)) for n in quality},
                   "throughput": {n: sum(1 for r in rows if r.get(n)) for n in throughput}}
    if not quality and not throughput:
        notes.append(_names_note(names))
    report.note = "; ".join(notes)


# --- Reading them all ------------------------------------------------------------------------

def read(patterns: Sequence[str], options: Options, log: TrainingLog, printed: Sequence[int] = ()) -> list[Report]:
    """Read every file the entries name into ``log``; returns a report per file (and per entry that
    matched nothing).  ``printed``: the indices of ``log.throughputs`` that came from the Trainer's
    printed dicts, which a trainer_state.json of the same run replaces (see :func:`merge_trainer_state`)."""
    reports: list[Report] = []
    found = [find(p, options) for p in patterns]
    for entry in found:
        reports += entry.skipped
        if not entry.files and not entry.skipped:
            reports.append(Report(entry.pattern, None, note="nothing matched this log_files entry"))
    if any(kind == "mindspore_summary" for entry in found for _, kind in entry.files):
        part = _part(log)
        _read_event_files("mindspore_summary", found, options, part, reports)
        merge(log, part)
    if any(kind == "tensorboard" for entry in found for _, kind in entry.files):
        if tensorboard_available():
            part = _part(log)
            _read_event_files("tensorboard", found, options, part, reports)
            merge(log, part)
        else:
            reports += [Report(str(p), k, note=TENSORBOARD_MISSING) for e in found for p, k in e.files
                        if k == "tensorboard"]
            log.warn(TENSORBOARD_MISSING)
    for entry in found:
        for path, kind in entry.files:
            if kind in EVENT_FILES:
                continue
            report = Report(str(path), kind)
            reports.append(report)
            part = _part(log)
            try:
                if kind == "hf_trainer":
                    _read_trainer_state(path, options, part, report)
                else:
                    _read_metrics_csv(path, options, part, report)
            except (OSError, ValueError, UnicodeDecodeError, csv.Error, RecursionError) as exc:
                report.note = f"could not be read ({type(exc).__name__}: {str(exc)[:120]})"
                continue
            if kind == "hf_trainer":
                merge_trainer_state(log, part, printed)
            else:
                merge(log, part)
    return reports


def _carry_best_model(log: TrainingLog, part: TrainingLog, offsets: dict[str, int]) -> None:
    """A file's best model into the run's log, its places counted after the evaluations already there."""
    for name, entry in part.details.get(BEST_MODEL, {}).items():
        log.details.setdefault(BEST_MODEL, {})[name] = {**entry, "index": entry["index"] + offsets.get(name, 0)}


def _part(log: TrainingLog) -> TrainingLog:
    """A fresh log for one file's readings, with the run's user metric."""
    return TrainingLog(user_metric=log.user_metric)


def merge(log: TrainingLog, part: TrainingLog) -> None:
    """A file's readings after the output's: evaluations appended to each metric's series (a new
    metric after the others), throughputs after the output's; its duration where the output had none."""
    offsets = {name: len(log.series[name][1]) if name in log.series else 0 for name in part.series}
    _carry_best_model(log, part, offsets)
    for name, (metric, evaluations) in part.series.items():
        known = log.series.get(name)
        if known is None:
            log.series[name] = (metric, list(evaluations))
            continue
        if known[0].higher_is_better != metric.higher_is_better:
            log.warn(f"quality metric {name!r} logged with both directions: the first one is kept")
        known[1].extend(evaluations)
    log.throughputs.extend(part.throughputs)
    if log.total_time is None and part.total_time is not None:
        log.total_time = part.total_time
    for message in part.all_warnings():
        log.warn(message)


def merge_trainer_state(log: TrainingLog, part: TrainingLog, printed: Sequence[int]) -> None:
    """trainer_state.json is the record of the dicts the Trainer printed: where the output's were read
    too, the file's values replace them (full precision: transformers 5 prints 4 significant digits),
    keeping the times sixdim read the printed ones at when both hold as many evaluations."""
    if not log.recognised.get("hf_trainer"):
        merge(log, part)
        return
    _carry_best_model(log, part, {})  # the file's series replace the printed ones: its places stand
    for name, (metric, evaluations) in part.series.items():
        known = log.series.get(name)
        if known is not None and len(known[1]) == len(evaluations):
            evaluations = [Evaluation(e.value, e.percent, k.at) for e, k in zip(evaluations, known[1])]
        elif known is not None:
            log.warn(f"{name!r}: the output printed {len(known[1])} evaluations, trainer_state.json holds "
                     f"{len(evaluations)}: the file's are kept, without times")
        log.series[name] = (known[0] if known is not None else metric, list(evaluations))
    if part.throughputs:
        for index in sorted(set(printed), reverse=True):
            if 0 <= index < len(log.throughputs):
                del log.throughputs[index]
        log.throughputs.extend(part.throughputs)
    if part.total_time is not None:
        log.total_time = part.total_time
    for message in part.all_warnings():
        log.warn(message)

