"""AI-Rank's lines: ``AI-Rank-log <unix time> key:value[, key:value]`` or a bare event (``test_begin``,
``test_finish``).  Values may carry units (``8.03sec``, ``1190images/sec``, ``76.1%``).

Torch-free.  :func:`parse_ai_rank` reads one line into a :class:`~sixdim.workloads.logs.training_log.TrainingLog`;
an evaluation logged after ``test_begin`` is placed on the log's own clock (seconds since it), so a
``target_accuracy`` gives a time to train.  The rules are in docs/TRAINING_LOGS.md.
"""

from __future__ import annotations

import re

from sixdim.workloads.logs.model import LOG_CLOCK, MAX_READING
from sixdim.workloads.logs.training_log import NUMBER, TrainingLog, float_or_none, text_reading

AI_RANK = re.compile(r"AI-Rank-log\s+(\d+(?:\.\d+)?)\s+(.*)")

TIME_UNITS = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
              "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hour": 3600.0,
              "hours": 3600.0}
"""Units an AI-Rank time may carry (the format writes ``sec``; a ``ms`` must not pass for seconds)."""


def _seconds(log: TrainingLog, text: str, what: str) -> float | None:
    value, _ = text_reading(log, text, what)
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
    stamp = float_or_none(match.group(1))  # 5,000 digits read as infinity: no time
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
        number, percent = text_reading(log, value, what)
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
        number, _ = text_reading(log, value, what)
        if number is not None and key == "avg_ips":
            log.average_throughput = number
        elif number is not None:
            log.add_throughput(number)
