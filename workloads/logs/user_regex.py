"""The user's regular expressions for throughput and quality: each match's first group (or the whole
match) is the number.

Torch-free.  An expression's group that matched nothing costs a warning, not the run.  The rules are in
docs/TRAINING_LOGS.md.
"""

from __future__ import annotations

import re

from sixdim.workloads.logs.training_log import TrainingLog, text_reading


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
            number, percent = text_reading(log, text, what)
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

