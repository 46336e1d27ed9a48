"""The user's regular expressions for throughput and quality: each match's first group (or the whole
match) is the number; and the log's own clock, read from each line's timestamp.

Torch-free.  An expression's group that matched nothing costs a warning, not the run.  The rules are in
docs/TRAINING_LOGS.md.

A log whose lines carry timestamps is timed by them, not by when sixdim read it: a finished run replayed
through ``cat`` reads in a fraction of a second, yet its evaluations happened minutes or hours apart.
Each line's stamp is read by the user's ``time_regex`` (its first group, or the whole match: seconds
since the epoch, or a date in one of the formats below) or, without one, in the common formats
(:func:`line_time`): Python logging's and PaddleNLP's ``[2023-05-12 10:11:12,345]``, a plain
``2023-05-12 10:11:12``, ISO 8601 with ``T`` and a zone, ``2020/11/16 11:11:18``, and glog's
``I0512 10:11:12.345678`` (which has no year: the year of the log's dated lines is taken).  An
evaluation is then placed at its line's stamp (or, on a line without one, the last stamp before it)
minus the first stamp of the log, on the log's clock; ``target_accuracy`` is then timed on that clock
(:meth:`~sixdim.workloads.logs.training_log.TrainingLog.finish`).
"""

from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta, timezone

from sixdim.workloads.logs.model import LOG_CLOCK
from sixdim.workloads.logs.training_log import TrainingLog, float_or_none, text_reading

DATED = re.compile(r"(?<!\d)(\d{4})[-/](\d{2})[-/](\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
                   r"\s?(Z|[+-]\d{2}:?\d{2}(?!\d))?")
"""A date and time: ``2023-05-12 10:11:12,345`` (logging), ``2023-05-12T10:11:12.5+02:00`` (ISO 8601),
``2020/11/16 11:11:18``.  Without a zone, the time is taken as UTC: only differences are used."""
GLOG = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{1,9})\s")
"""glog's prefix (PaddlePaddle's and TensorFlow's C++ logging): ``I0512 10:11:12.345678 123 file.cc:1]``."""
SEARCHED = 80
"""How far into a line a date is looked for: a stamp leads its line (after a level or a launcher's
name, ``LAUNCH INFO 2022-08-15 07:37:38,947``), never sits in the middle of a message."""


def _fraction(digits: str | None) -> float:
    return int(digits) / 10 ** len(digits) if digits else 0.0


def _dated(match: re.Match) -> float | None:
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
    except ValueError:  # 2023-13-45: not a date
        return None
    zone = match.group(8)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        moment -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return moment.timestamp() + _fraction(match.group(7))


def line_time(line: str, pattern: str | re.Pattern | None = None, year: int = 1970) -> tuple[float, str] | None:
    """A line's own timestamp as (seconds since the epoch, its format), or None.  ``pattern``: the
    user's ``time_regex`` (its first group, or the whole match, is seconds or a date), which replaces
    the common formats; ``year``: the year a glog stamp, which has none, is taken to be in."""
    if pattern:
        match = re.search(pattern, line)
        if not match:
            return None
        text = match.group(1) if match.groups() else match.group()
        if text is None:
            return None
        seconds = float_or_none(text.strip())
        if seconds is not None:
            return seconds, "time_regex (seconds)"
        dated = DATED.search(text)
        stamp = _dated(dated) if dated else None
        return (stamp, "time_regex") if stamp is not None else None
    glog = GLOG.match(line)
    if glog:
        month, day, hour, minute, second = (int(g) for g in glog.groups()[:5])
        try:
            start = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
            datetime(year, month, day)
        except ValueError:
            return None
        return start + _fraction(glog.group(6)), "glog (I0512 10:11:12.345678)"
    dated = DATED.search(line[:SEARCHED])
    if dated:
        stamp = _dated(dated)
        if stamp is not None:
            return stamp, "date and time (2023-05-12 10:11:12)"
    return None


class LogClock:
    """The log's own clock over the lines read so far: its first stamp, the last one, and the year
    of its dated lines (for glog's)."""

    def __init__(self, pattern: str = ""):
        self.pattern = re.compile(pattern) if pattern else None
        self.first: float | None = None
        self.last: float | None = None
        self.year = 1970
        self.dated = False
        self.yearless_first: str | None = None
        """The first stamped line when it was glog's (no year), to place once a dated line gives the year."""
        self.formats: list[str] = []
        self.backwards = 0

    def read(self, line: str, log: TrainingLog) -> None:
        """Note a line's stamp, if it has one; the span so far goes into the log's details."""
        stamp = line_time(line, self.pattern, self.year)
        if stamp is None:
            return
        seconds, described = stamp
        if described.startswith("date") and not self.dated:
            self.dated, self.year = True, datetime.fromtimestamp(seconds, timezone.utc).year
            if self.yearless_first is not None:  # the glog lines before it were read in 1970
                placed = line_time(self.yearless_first, self.pattern, self.year)
                self.first = placed[0] if placed else self.first
                self.last = self.first
        elif described.startswith("glog") and self.first is None and not self.dated:
            self.yearless_first = line
        if described not in self.formats:
            self.formats.append(described)
        if self.first is None:
            self.first = seconds
        elif self.last is not None and seconds < self.last:
            self.backwards += 1
        self.last = seconds
        log.details["log_clock"] = {"formats": list(self.formats), "span_seconds": max(0.0, seconds - self.first),
                                    **({"stamps_going_back": self.backwards} if self.backwards else {})}

    def now(self) -> float | None:
        """Seconds from the log's first stamp to its last so far (never negative), or None without one."""
        if self.first is None or self.last is None:
            return None
        return max(0.0, self.last - self.first)


class RegexParser:
    """The user's expressions for throughput and quality; each match's first group is the number.  An
    evaluation is placed on the log's own clock where its lines carry timestamps (``time``: the user's
    ``time_regex``, else the common formats)."""

    def __init__(self, throughput: str = "", accuracy: str = "", time: str = ""):
        self.throughput = re.compile(throughput) if throughput else None
        self.accuracy = re.compile(accuracy) if accuracy else None
        self.time = time
        self._clock = LogClock(time)
        self._log_id: int | None = None

    def __call__(self, line: str, log: TrainingLog) -> bool:
        if self._log_id != id(log):  # a parser reused for another log starts a clock of its own
            self._clock, self._log_id = LogClock(self.time), id(log)
        self._clock.read(line, log)
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
                at = self._clock.now()
                log.add_quality(log.user_metric, number, percent or _percent_after(line, match), at=at,
                                **({"clock": LOG_CLOCK} if at is not None else {}))
        if found:
            log.recognised["regex"] += 1
        return found


def _percent_after(line: str, match: re.Match) -> bool:
    """A ``%`` right after the captured number (``top1 76.1 %``), outside the group."""
    end = match.end(1) if match.groups() and match.group(1) is not None else match.end()
    return line[end:].lstrip().startswith("%")
