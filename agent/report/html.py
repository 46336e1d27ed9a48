"""``sixdim report html FILE``: the local history as one self-contained HTML page.

For a single host, or wherever no Grafana is at hand: a page a person opens in a browser, with

- a header: hosts, devices and their models, the time span, the software versions seen, the runs;
- **the six dimensions** (DeepSpark: speed, accuracy, linearity, power, memory, stability, plus the
  fraction of the published peak) per device and workload: the latest ``ok`` value of every series,
  summarised per workload and precision over its shapes (geometric mean, as ``agent/verdicts/summary.py``);
- **trend charts** of the speed figure (and power and memory, one click away) per workload and
  precision, a line per device, with every software version change marked and labelled
  (``driver 550.54.15 → 560.28.03``);
- **the version comparison**: the speed change at each driver, CUDA, torch (cuDNN, NCCL, VBIOS)
  change, over the series measured under both versions, and the median under each version;
- **the regressions**: the live verdicts now (as the agent exports them: each series' last 256 runs
  fed to :class:`sixdim.verdicts.live.Verdicts`), the latest version change of each series, and the change
  points of the whole history (:func:`sixdim.report.regressions.analyse`) with the versions either side,
  each regression with its likely cause (the evidence of the first of its causes: the agent's own for the
  verdicts, :func:`sixdim.report.regressions.add_causes` for the change points), from the conditions of
  the runs either side of it, read by id afterwards for those runs only.

The charts are plotly's (an optional extra: ``pip install -e '.[report]'``); plotly.js is embedded
once, inline, so the page fetches nothing and works offline.  plotly and numpy are imported inside
the command only: ``import sixdim.cli`` stays light.

Size and speed. A chart draws at most :data:`sixdim.report.format.MAX_POINTS` points per figure: a
point per run, or per suite run for a workload with several shapes (the geometric mean over its shapes:
each run divided by its shape's median, so a suite run missing a shape does not jump); a longer series
is shown as the median per time bucket (15 minutes to a week, the smallest that fits; an hour at least
for several shapes), each point at the median time of its runs. The axes: at least ten minutes of time,
ticks labelled as precisely as they are spaced (times only within one day), and values over at least
±5% of the data's middle (:func:`sixdim.report.format.value_range` says why). At most
:data:`sixdim.report.format.MAX_CHARTS` trend charts, the most important first (a regression, a
change point, then the most runs), with a note naming the rest. The history is read read-only,
without ``details``, in chunks (as ``report regressions``).

All text that comes from the history (host names, workloads, shapes, versions, the causes' evidence)
is escaped.

This module is the command; the work is in four more, one job each: :mod:`sixdim.report.data` reads
the history, :mod:`sixdim.report.model` computes what each section shows, :mod:`sixdim.report.page`
renders it as HTML, and :mod:`sixdim.report.format` names, formats and bounds what is shown.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

from sixdim.config import add_insecure_permissions_flag, add_option_flags, load
from sixdim.core import exits
from sixdim.core.durations import EXAMPLES, duration_argument
from sixdim.core.files import STANDARD_OUTPUT, NotARegularFile, special_kind, write_atomically

INSTALL_HINT = "pip install -e '.[report]' in a checkout, or pip install 'sixdim[report]' from a wheel"
"""What to install when plotly is missing (the optional extra)."""

class MissingExtra(RuntimeError):
    """plotly is not installed."""


# ---------------------------------------------------------------------------- the command

OPTION_KEYS = ("agent.history", "regression.min_effect")
"""The configuration options ``sixdim report html`` takes as flags."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sixdim report html FILE`` (the parser is :mod:`sixdim.report.command`'s)."""
    parser.add_argument("file", metavar="FILE", help="the page to write (replaced atomically)")
    parser.add_argument("--since", type=duration_argument, metavar="DURATION",
                        help=f"show only runs at or after now - DURATION: {EXAMPLES} "
                             "(default: all; verdicts and change points always use the whole history)")
    parser.add_argument("--config", metavar="FILE",
                        help="TOML configuration file, for agent.history and the regression settings [SIXDIM_CONFIG]")
    add_option_flags(parser, OPTION_KEYS)
    add_insecure_permissions_flag(parser)


def command(args: argparse.Namespace) -> int:
    """``sixdim report html FILE``: 0 when the page was written; 2 when plotly is missing, or for a
    bad configuration or history (the message names the file)."""
    try:
        _plotly()
    except MissingExtra as exc:
        print(f"sixdim: error: {exc}", file=sys.stderr)
        return exits.USAGE
    config = load(args.config, flags=args)
    to_stdout = args.file == STANDARD_OUTPUT
    folder = Path(args.file).parent
    if not to_stdout and not folder.is_dir():  # said before the history is read, not after
        why = "is a file, not a folder" if folder.exists() else "does not exist"
        print(f"sixdim: error: cannot write {args.file}: {folder} {why}", file=sys.stderr)
        return exits.USAGE
    kind = None if to_stdout else special_kind(args.file)
    if kind is not None:  # a FIFO, a device, a link: never replaced by a regular file (said before the work)
        print(f"sixdim: error: cannot write {args.file}: {NotARegularFile(args.file, kind)}", file=sys.stderr)
        return exits.USAGE
    started = time.perf_counter()
    from sixdim.verdicts.detector import settings_from

    page, facts = build(config.history, since=args.since, settings=settings_from(config))
    try:
        if to_stdout:
            sys.stdout.write(page)
            sys.stdout.flush()
        else:
            write_atomically(args.file, page, make_folder=False, mode=report_mode(config.history))
    except OSError as exc:
        print(f"sixdim: error: cannot write {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return exits.USAGE
    seconds = time.perf_counter() - started
    print(f"wrote {'the page to standard output' if to_stdout else args.file} ({len(page.encode()) / 1e6:.1f} MB): "
          f"{facts['charts']} chart(s), {facts['runs']:,} runs of {facts['series']} series from {config.history} "
          f"in {seconds:.1f} s", file=sys.stderr if to_stdout else sys.stdout)
    return exits.OK


def report_mode(history: str | os.PathLike[str]) -> int:
    """The page's mode: never more readable than the history it shows (0600 for a 0600 history, 0644 for a
    0644 one, 0640 for 0640), its owner's to read and write; 0600 where the history's mode cannot be read."""
    try:
        mode = stat.S_IMODE(os.stat(history).st_mode)
    except OSError:
        return 0o600
    return 0o600 | (mode & 0o044)


def _plotly() -> tuple[Any, Any]:
    """plotly.io and plotly.offline, or :class:`MissingExtra` saying what to install."""
    try:
        import plotly.io as pio
        import plotly.offline as offline
    except ImportError:
        raise MissingExtra(f"the HTML report needs plotly, an optional extra: {INSTALL_HINT} "
                           "(or pip install 'plotly>=5.20')") from None
    return pio, offline


def build(path: str, *, since: float | None = None, settings: Any = None, now: float | None = None,
          note: str = "") -> tuple[str, dict[str, Any]]:
    """The page of the history at ``path`` and a few facts about it (runs, series, charts, seconds).
    Raises :class:`sixdim.store.history.HistoryError` for a history that is missing or not one, :class:`MissingExtra`
    without plotly."""
    from sixdim.report.data import read
    from sixdim.report.model import Report
    from sixdim.report.page import Page
    from sixdim.verdicts.live import Verdicts

    pio, offline = _plotly()
    started = time.perf_counter()
    keep = Verdicts(settings).restore_runs
    data = read(path, keep)
    report = Report(data, since=since, settings=settings, now=now, note=note)
    page = Page(report, pio, offline.get_plotlyjs())
    text = page.render()
    return text, {"runs": data.runs, "series": len(data.series), "charts": page.charts,
                  "seconds": time.perf_counter() - started}
