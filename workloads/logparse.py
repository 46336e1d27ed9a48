"""Reading a training command's output: AI-Rank log lines, MLPerf ``:::MLLOG`` lines, or regexes.

Torch-free.  Each parser turns lines into :class:`TrainingLog` observations; the command
workload turns those into the six dimensions.

- AI-Rank: ``AI-Rank-log <unix time> key:value[, key:value]`` or a bare event (``test_begin``,
  ``test_finish``).  Values may carry units (``8.03sec``, ``1190images/sec``).
- MLPerf: ``:::MLLOG {json}`` with ``key``, ``value``, ``time_ms`` and ``metadata``.
  Time to train is ``run_stop`` minus ``run_start``, as MLPerf defines it.
- Regex: the user's expressions; the first group (or the whole match) must be a number.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

AI_RANK = re.compile(r"AI-Rank-log\s+(\d+(?:\.\d+)?)\s+(.*?)\s*$")
MLLOG = re.compile(r":::MLLOG\s+(\{.*\})\s*$")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass
class TrainingLog:
    """What a training run said about itself."""

    throughputs: list[float] = field(default_factory=list)  # samples/s, per epoch or report
    average_throughput: float | None = None                 # a run-level figure (AI-Rank avg_ips)
    accuracies: list[float] = field(default_factory=list)
    time_to_train: float | None = None                      # seconds
    total_time: float | None = None                         # seconds
    begin: float | None = None                              # the log's own clock, seconds
    end: float | None = None
    events: list[str] = field(default_factory=list)
    status: str | None = None                               # MLPerf run_stop status


def _number(text: str) -> float | None:
    match = NUMBER.search(text)
    return float(match.group()) if match else None


def parse_ai_rank(line: str, log: TrainingLog) -> bool:
    match = AI_RANK.search(line)
    if not match:
        return False
    stamp = float(match.group(1))
    for item in (part.strip() for part in match.group(2).split(",")):
        key, sep, value = item.partition(":")
        key = key.strip()
        if not sep:
            log.events.append(key)
            if key == "test_begin":
                log.begin = stamp
            elif key == "test_finish":
                log.end = stamp
            continue
        number = _number(value)
        if number is None:
            continue
        if key == "eval_accuracy":
            log.accuracies.append(number)
        elif key == "target_quality_time":
            log.time_to_train = number
        elif key == "total_use_time":
            log.total_time = number
        elif key == "avg_ips":
            log.average_throughput = number
        elif key == "ips":
            log.throughputs.append(number)
    return True


def parse_mlperf(line: str, log: TrainingLog) -> bool:
    match = MLLOG.search(line)
    if not match:
        return False
    try:
        record = json.loads(match.group(1))
    except ValueError:
        return False
    key, value, stamp = record.get("key"), record.get("value"), record.get("time_ms")
    metadata = record.get("metadata") or {}
    seconds = stamp / 1000.0 if isinstance(stamp, (int, float)) else None
    if key == "run_start" and seconds is not None:
        log.begin = seconds
    elif key == "run_stop" and seconds is not None:
        log.end = seconds
        log.status = metadata.get("status")
    elif key == "eval_accuracy" and isinstance(value, (int, float)):
        log.accuracies.append(float(value))
    elif key in ("throughput", "samples_per_second") and isinstance(value, (int, float)):
        log.throughputs.append(float(value))
    elif key == "tracked_stats" and isinstance(value, dict) and isinstance(value.get("throughput"), (int, float)):
        log.throughputs.append(float(value["throughput"]))
    if key == "run_stop" and log.begin is not None and seconds is not None:
        log.total_time = seconds - log.begin
        if log.status in (None, "success"):
            log.time_to_train = log.total_time
    return True


class RegexParser:
    """The user's expressions for throughput and accuracy; each match's first group is the number."""

    def __init__(self, throughput: str = "", accuracy: str = ""):
        self.throughput = re.compile(throughput) if throughput else None
        self.accuracy = re.compile(accuracy) if accuracy else None

    def __call__(self, line: str, log: TrainingLog) -> bool:
        found = False
        for pattern, target in ((self.throughput, log.throughputs), (self.accuracy, log.accuracies)):
            match = pattern.search(line) if pattern else None
            if match:
                number = _number(match.group(1) if match.groups() else match.group())
                if number is not None:
                    target.append(number)
                    found = True
        return found
