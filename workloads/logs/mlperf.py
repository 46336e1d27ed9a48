"""MLPerf's lines, training and inference, read into a :class:`~sixdim.workloads.logs.training_log.TrainingLog`.

Torch-free.  The rules are in docs/TRAINING_LOGS.md; in short:

- MLPerf Training: ``:::MLLOG {json}`` (v0.7 on), ``:::MLL <time> <key>: {json}`` (v0.6) and
  ``:::MLPv0.5.0 <benchmark> <time> (<file>:<line>) <key>[: <json>]`` (v0.5); a record that is a Python
  literal rather than JSON (v0.6's ``'status': 'success'``) is read with :func:`ast.literal_eval`.
  Each record goes to its run (``run_start`` ... ``run_stop``); which run is reported, its time to train
  and its quality target are decided once the whole log is read
  (:meth:`~sixdim.workloads.logs.training_log.TrainingLog.finish`).
- MLPerf Inference: loadgen's ``mlperf_log_detail.txt`` (``:::MLLOG`` lines with ``result_*`` keys):
  throughput, latency percentiles and the run's validity.

A line this module cannot read (JSON nested too deeply, a ``metadata`` that is not an object) is
ignored with a warning.  So is a ``run_stop`` whose time is there but not a number (``"time_ms": "abc"``):
taken as the run's end, it would silently drop every later evaluation; the run goes on to its next
``run_stop``, and a log with no other one says, in its failure, that this one was ignored.  The
patterns match in time linear in the line (a lazy group before trailing spaces would take seconds on a
64 KiB line of spaces).
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any, TypeGuard

from sixdim.workloads.logs import mlperf_targets
from sixdim.workloads.logs.model import MAX_READING, MAX_WARNINGS, MlperfReading, MlperfRun
from sixdim.workloads.logs.training_log import (
    FAILED_V05,
    TrainingLog,
    float_or_none,
    reading,
    report_run,
    reported_run,
    sync_throughputs,
)

MLLOG = re.compile(r":::MLLOG\s+(\{.*)")  # the JSON runs to the line's end: checked in _parse_mllog
MLL = re.compile(r":::MLL\s+(\S+)\s+([A-Za-z0-9_.]+):(.*)")
MLP05 = re.compile(r":::MLPv0\.5\.0\s+(\S+)\s+(\S+)\s+\([^)]{0,1000}\)\s+([A-Za-z0-9_.]+)(?::(.*))?\s*$")
LATENCY_PERCENTILE = re.compile(r"result_(\d+(?:\.\d+)?)_percentile_latency_ns")
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
    seconds = float_or_none(match.group(1))
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
        if float_or_none(stamp) is None:
            _odd_run_stop(log, stamp)
            return True
        success = value.get("success") if isinstance(value, dict) else None
        metadata = {"status": None if success is None else
                    "success" if str(success).lower() == "true" else FAILED_V05}
    _record(log, key, value, float_or_none(stamp), metadata, "v0.5")
    return True


def _odd_run_stop(log: TrainingLog, stamp: Any) -> None:
    """A ``run_stop`` whose time is there but is not a number: ignored with a warning.  Taken as the
    run's end, it would cut every later evaluation off the run, silently; the run goes on to its next
    ``run_stop``, and, should none come, its failure names this one
    (:meth:`~sixdim.workloads.logs.training_log.TrainingLog.run_failure`)."""
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
    report_run(log, run)
    sync_throughputs(log)
    return run


def _eval_result(log: TrainingLog, metadata: dict[str, Any]) -> MlperfRun | None:
    """MiniGo's ``eval_result``: ``metadata.timestamp`` is when (after ``run_start``) the model that met
    the target was made.  v0.6's NVIDIA logs end there, with no ``run_stop``: it ends the run."""
    run = _open_run(log, new_after_stop=False)
    stamp = metadata.get("timestamp")
    if run is not None and _is_number(stamp) and 0 <= stamp <= MAX_READING and run.begin is not None:
        run.result_at = float(stamp)
        report_run(log, run)
        sync_throughputs(log)
    return run

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
        sync_throughputs(log)
    return run

def _evaluation(log: TrainingLog, value: Any, seconds: float | None, metadata: dict[str, Any]) -> MlperfRun | None:
    """``eval_accuracy``: a number (named by ``metadata.metric``, else by the benchmark once the whole
    log is read), a number written as a string (v0.6's ``"25.33"``), a dict of named numbers (Mask
    R-CNN's BBOX and SEGM), nested (v0.6's ``{"accuracy": {"BBOX": ..., "SEGM": ...}}``), or a list (Mask
    R-CNN v0.6, in the benchmark's order).  A reading equal to its metric's latest (same value, same
    step: a line printed by two loggers, or by every rank) is counted once; a repeat of an *earlier*
    evaluation after others is read again, as the one the run ended with (Google's v4.1 Stable Diffusion
    logs the checkpoint that met the target once more just before ``run_stop``).  One after ``run_stop``
    is only counted."""
    run = _open_run(log, new_after_stop=False)
    if run is None:
        log.runs[-1].after_stop += 1
        log.after_stop = reported_run(log).after_stop  # type: ignore[union-attr]
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
        if key is not None:
            if run.latest.get((name, position)) == key:
                continue  # a twin line
            run.latest[(name, position)] = key
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


