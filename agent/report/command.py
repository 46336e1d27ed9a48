"""``sixdim report``: the reports over the run history, one sub-command each.

- ``sixdim report latest``, and ``sixdim report`` with no report named: the latest result of each
  workload per device, with its verdict and likely cause, as a table in the terminal
  (:mod:`sixdim.report.latest`);
- ``sixdim report html FILE``: the history as one self-contained page (:mod:`sixdim.report.html`);
- ``sixdim report regressions``: every shift found by change-point analysis
  (:mod:`sixdim.report.regressions`).

Each report module owns its arguments and its work; this one only puts them side by side, so they
never import each other.  Two spellings are turned into the sub-commands before parsing, by
:func:`legacy_argv`: the older ``sixdim report --html FILE [options]`` is ``report html FILE
[options]``, and ``sixdim report [options]`` with no report named is ``report latest [options]``.

Exit codes: 0 the report was made; 2 bad usage, configuration or history, or plotly missing for
``html``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sixdim.core import exits
from sixdim.report import html, latest, regressions

DEFAULT = "latest"
"""The report run when none is named."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``report`` and its reports on the CLI's sub-commands."""
    report = commands.add_parser(
        "report", help="reports over the run history: 'report' the latest result of each workload, "
                       "'report html FILE' a page, 'report regressions' every shift",
        description="Reports over the run history. 'sixdim report' (or 'sixdim report latest') prints the latest "
                    "result of each workload per device in the terminal: when it last ran, its cases by status, "
                    "its headline speed, the agent's live verdict over its series and the likely cause of a "
                    "regression. 'sixdim report html FILE' writes one self-contained HTML page "
                    "(the six dimensions per device and workload, trend charts with version changes marked, the "
                    "version comparison and the regressions; needs the 'report' extra for plotly). 'sixdim report "
                    "regressions' runs a change-point analysis over every series of the history and lists each "
                    "shift with its time, change, p-value and the software versions either side. "
                    "'sixdim report --html FILE' is the older spelling of 'report html FILE'; options given with "
                    "no report named are latest's ('sixdim report --json').",
        epilog="Exit codes: 0 the report was made; 2 bad usage, configuration or history, or plotly missing for "
               "html. See docs/REPORT.md and docs/REGRESSIONS.md.")
    report.set_defaults(handler=lambda args: _no_kind(report))
    kinds = report.add_subparsers(dest="report", metavar="REPORT")
    newest = kinds.add_parser(
        "latest", help="the latest result of each workload per device, its verdict and likely cause (the default)",
        description="The latest result of each workload per device, one row each: when its latest run ended "
                    "(local time, and how long ago); the cases of that run by status, failures apart from the "
                    "cases that did not run, and the cases an interruption left ('interrupted: 17 of 20 not run'); "
                    "its headline speed (the first speed figure its ok cases report, "
                    "FLOP/s, samples/s, bytes/s or else the time: the one case's value, or the geometric mean over "
                    "its cases, all shapes and precisions, marked 'geomean of N', and '(interrupted: 3 of 20 "
                    "cases)' where it is over part of them); the verdict, the worst of the "
                    "agent's live regression verdicts over the workload's series on that device (regression, "
                    "suspicious, ok, improvement, insufficient data; a series whose latest version or GPU-setting "
                    "change regressed a figure counts as a regression), with how many series are in each state; and "
                    "for a regression or a suspicious verdict the worst series (its figure and change) and the "
                    "likely cause the agent names (sixdim_regression_cause). Under the table, the incidents the agent "
                    "recorded (a series out of ok: when it started, was found and ended, its size and the likely "
                    "cause it kept), open or ended in the last 24 h or --since. The verdicts are computed as the "
                    "agent restores them at start, from each series' last runs. The latest run of a workload is "
                    "its newest worker run with the worker runs of the same suite just before it (a crash's "
                    "restart) that repeat none of its cases. The history is read read-only.",
        epilog="Exit codes: 0 the table was printed, whatever the verdicts; 2 bad usage, bad configuration, or a "
               "history that is missing or not a sixdim database. See docs/REPORT.md.")
    latest.add_arguments(newest)
    newest.set_defaults(handler=latest.command)
    page = kinds.add_parser(
        "html", help="the history as one self-contained HTML page",
        description="The history as one self-contained HTML page: the six dimensions per device and workload, "
                    "trend charts with version changes marked, the version comparison and the regressions. Needs "
                    f"the 'report' extra for plotly ({html.INSTALL_HINT}). The history is read read-only.",
        epilog="Exit codes: 0 the page was written; 2 bad usage, configuration or history, or plotly missing. "
               "See docs/REPORT.md.")
    html.add_arguments(page)
    page.set_defaults(handler=html.command)
    shifts = kinds.add_parser(
        "regressions", help="change points of every series over the whole history (E-Divisive means)",
        description="Change-point analysis over the whole history: for every series (host, GPU, workload, "
                    "precision, shape, mode, pass) and every watched figure of its ok runs, E-Divisive means "
                    "(as Apache Otava runs it: split windows, t-test, merge) with version changes as known break "
                    "points. A shift is listed when its p-value is at most 0.001 and the medians either side differ "
                    "by at least the figure's minimum effect (regression.min_effect, 1.8%, or [regression.effects] "
                    "as for the live verdicts); its state is 'regression' or 'improvement' by the figure's "
                    "direction. A slow drift is listed too, its state 'drift' (and its direction, worse or "
                    "better). Beside them, the incidents the agent's live verdicts recorded (listed from the run the "
                    "live verdict found them, before the analysis can place a shift), open or ended since --since; a "
                    "shift that is one carries it. The history is read read-only.",
        epilog="Exit codes: 0 the report was made, whether or not it lists a shift; 2 bad usage, bad "
               "configuration, or a history that is missing or not a sixdim database. See docs/REGRESSIONS.md.")
    regressions.add_arguments(shifts)
    shifts.set_defaults(handler=regressions.command)


def legacy_argv(argv: Sequence[str]) -> list[str]:
    """``report --html FILE [options]`` (the older spelling) as ``report html FILE [options]``, and
    ``report [options]`` with no report named as ``report latest [options]`` (``report -h`` still shows
    the help of ``report``); any other command line unchanged.  Both reports at once is a usage error,
    said by argparse, and so is an option before a report's name."""
    args = list(argv)
    if not args or args[0] != "report":
        return args
    for i, arg in enumerate(args[1:], 1):
        if arg == "--html" and i + 1 < len(args):
            return ["report", "html", args[i + 1], *args[1:i], *args[i + 2:]]
        if arg.startswith("--html="):
            return ["report", "html", arg.split("=", 1)[1], *args[1:i], *args[i + 1:]]
        if not arg.startswith("-") and (i == 1 or not args[i - 1].startswith("-")):
            return args  # a report kind, or an option's value: not the older spelling, a report is named
    if any(arg in ("-h", "--help") for arg in args[1:]):
        return args
    return ["report", DEFAULT, *args[1:]]


def _no_kind(parser: argparse.ArgumentParser) -> int:
    parser.print_help()  # not reached from the command line, where no report named is 'latest'
    print("sixdim: error: report: give a report: 'latest', 'html FILE' or 'regressions'", file=sys.stderr)
    return exits.USAGE
