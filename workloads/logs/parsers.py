"""Reading a training command's output: AI-Rank lines, MLPerf logs (training and inference), regexes, and
the frameworks' own lines.

Torch-free.  Each parser reads one line into a :class:`~sixdim.workloads.logs.training_log.TrainingLog`
(which then decides what needs the whole log); the command workload turns that into figures and a
status.  This module names the formats, makes their parsers and feeds them the lines; the dialects are
:mod:`~sixdim.workloads.logs.airank`, :mod:`~sixdim.workloads.logs.mlperf`,
:mod:`~sixdim.workloads.logs.user_regex` and :mod:`~sixdim.workloads.logs.framework_lines`.  The rules
are written out in docs/TRAINING_LOGS.md.

A log that is MLPerf is read as MLPerf: once an MLPerf line is read, the framework line formats
(framework_lines) stop reading, but for those the user asked for by name
(:attr:`~sixdim.workloads.logs.training_log.TrainingLog.read_beside_mlperf`).  Lines they read before
the first MLPerf line stay read.

A line a parser cannot read (JSON nested too deeply, a ``metadata`` that is not an object, an
expression's group that matched nothing, or a parser failing outright) does not end the run: it is
ignored with a warning, and :attr:`~sixdim.workloads.logs.training_log.TrainingLog.ignored_lines`
counts such lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sixdim.workloads.logs.airank import parse_ai_rank
from sixdim.workloads.logs.framework_lines import LINE_FORMATS
from sixdim.workloads.logs.mlperf import parse_mlperf
from sixdim.workloads.logs.training_log import Parser, TrainingLog
from sixdim.workloads.logs.user_regex import RegexParser

OWN_FORMATS = {
    "ai_rank": "AI-Rank ('AI-Rank-log <time> key:value' lines)",
    "mlperf": "MLPerf (':::MLLOG', ':::MLL' and ':::MLPv0.5.0' lines)",
}
"""sixdim's own line dialects, described as a reason that says what was tried names them."""
FORMATS: Mapping[str, str] = {**OWN_FORMATS, **{name: described for name, (described, _) in LINE_FORMATS.items()}}
"""Every output format's description, by name: :data:`OWN_FORMATS`, then framework_lines' formats."""


def make_parsers(formats: Sequence[str], throughput_regex: str = "", accuracy_regex: str = "") -> list[Parser]:
    """The parsers of the formats named (a name of no line format reads nothing here: a file format's),
    then one for the user's expressions when there are any."""
    parsers: list[Parser] = []
    if "ai_rank" in formats:
        parsers.append(parse_ai_rank)
    if "mlperf" in formats:
        parsers.append(parse_mlperf)
    parsers += [parse for name, (_, parse) in LINE_FORMATS.items() if name in formats]
    if throughput_regex or accuracy_regex:
        parsers.append(RegexParser(throughput_regex, accuracy_regex))
    return parsers


def describe_formats(formats: Sequence[str], throughput_regex: str = "", accuracy_regex: str = "") -> list[str]:
    """What was tried, for a reason that says so when nothing matched."""
    tried = [FORMATS[f] for f in formats if f in FORMATS]
    tried += [f"throughput_regex {throughput_regex!r}"] if throughput_regex else []
    tried += [f"accuracy_regex {accuracy_regex!r}"] if accuracy_regex else []
    return tried


def yields_to_mlperf(parse: Parser, log: TrainingLog) -> bool:
    """Whether a parser is to skip this log's lines: a framework format the user did not ask for by
    name (:attr:`TrainingLog.read_beside_mlperf`), once an MLPerf line has been read.  A log that is
    MLPerf is read as MLPerf: the Python dicts NVIDIA's BERT prints among its records are not the
    Trainer's, and its ``{'final_loss': 0.0}`` is a placeholder."""
    if not log.recognised.get("mlperf"):
        return False
    name = next((name for name, (_, framework) in LINE_FORMATS.items() if framework is parse), None)
    return name is not None and name not in log.read_beside_mlperf


def read_line(line: str, parsers: Sequence[Parser], log: TrainingLog) -> None:
    """Feed one line to every parser (but those that yield to MLPerf: :func:`yields_to_mlperf`); a parser
    that fails on odd input costs a warning, not the run.  A line that cost any warning is counted in
    :attr:`TrainingLog.ignored_lines`."""
    before = log.warning_count
    for parse in parsers:
        if yields_to_mlperf(parse, log):
            continue
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
    log.finish()
    return log

