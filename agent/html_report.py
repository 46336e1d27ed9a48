"""``sixdim report --html FILE``: the local history as one self-contained HTML page.

For a single host, or wherever no Grafana is at hand: a page a person opens in a browser, with

- a header: hosts, devices and their models, the time span, the software versions seen, the runs;
- **the six dimensions** (DeepSpark: speed, accuracy, linearity, power, memory, stability, plus the
  fraction of the published peak) per device and workload: the latest ``ok`` value of every series,
  summarised per workload and precision over its shapes (geometric mean, as ``agent/summary.py``);
- **trend charts** of the speed figure (and power and memory, one click away) per workload and
  precision, a line per device, with every software version change marked and labelled
  (``driver 550.54.15 → 560.28.03``);
- **the version comparison**: the speed change at each driver, CUDA, torch (cuDNN, NCCL, VBIOS)
  change, over the series measured under both versions, and the median under each version;
- **the regressions**: the live verdicts now (as the agent exports them: each series' last 132 runs
  fed to :class:`agent.verdicts.Verdicts`), the latest version change of each series, and the change
  points of the whole history (:func:`agent.regression_report.analyse`) with the versions either side.

The charts are plotly's (an optional extra: ``pip install -e '.[report]'``); plotly.js is embedded
once, inline, so the page fetches nothing and works offline.  plotly and numpy are imported inside
the command only: ``import agent.cli`` stays light.

Size and speed. A chart draws at most :data:`agent.report_format.MAX_POINTS` points per figure: a
longer series is shown as the median per time bucket (15 minutes to a week, the smallest that fits).
A workload with several shapes is drawn as the geometric mean over its shapes per bucket (each run
divided by its shape's median, so a bucket missing a shape does not jump). At most
:data:`agent.report_format.MAX_CHARTS` trend charts, the most important first (a regression, a
change point, then the most runs), with a note naming the rest. The history is read read-only,
without ``details``, in chunks (as ``report regressions``).

All text that comes from the history (host names, workloads, shapes, versions) is escaped.

This module is the command; the work is in four more, one job each: :mod:`agent.report_data` reads
the history, :mod:`agent.report_model` computes what each section shows, :mod:`agent.report_page`
renders it as HTML, and :mod:`agent.report_format` names, formats and bounds what is shown.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from agent.config import load, regression_settings
from agent.files import write_atomically

EXIT_OK, EXIT_USAGE = 0, 2

INSTALL_HINT = "pip install -e '.[report]' in a checkout, or pip install 'sixdim[report]' from a wheel"
"""What to install when plotly is missing (the optional extra)."""

class MissingExtra(RuntimeError):
    """plotly is not installed."""


# ---------------------------------------------------------------------------- the command

OPTION_KEYS = ("agent.history", "regression.min_effect")
"""The configuration options ``sixdim report --html`` takes as flags."""


def add_arguments(report: argparse.ArgumentParser) -> None:
    """``--html FILE`` and its options on ``sixdim report`` itself.  Their destinations start with
    ``html_``: a sub-command's defaults would overwrite the same names (argparse copies a
    sub-parser's whole namespace over its parent's), so ``report --history F regressions`` could
    otherwise read another history without a word; :func:`html_flags` gives them back their names."""
    from agent.config import OPTIONS
    from agent.regression_report import parse_duration

    report.add_argument("--html", metavar="FILE",
                        help="write the history as one self-contained HTML page (six dimensions, trend charts with "
                             "version changes marked, version comparison, regressions); needs the 'report' extra: "
                             f"{INSTALL_HINT}")
    report.add_argument("--since", dest="html_since", type=parse_duration, metavar="DURATION",
                        help="with --html: show only runs at or after now - DURATION: 30m, 12h, 7d, 2w or seconds "
                             "(default: all; verdicts and change points always use the whole history)")
    report.add_argument("--config", dest="html_config", metavar="FILE",
                        help="with --html: TOML configuration file, for agent.history and the regression settings "
                             "[SIXDIM_CONFIG]")
    from agent.config import add_insecure_permissions_flag

    add_insecure_permissions_flag(report, dest="html_insecure_config_permissions")
    group = report.add_argument_group("options of --html (each also a SIXDIM_* variable and a key in the TOML file)")
    for opt in OPTIONS:
        if opt.key in OPTION_KEYS:
            group.add_argument(opt.flag, dest="html_" + opt.dest, default=None,
                               metavar=opt.dest.split("_", 1)[-1].upper(), help=f"{opt.help} [{opt.env}; {opt.key}]")


def given(args: argparse.Namespace) -> list[str]:
    """The ``report``-level options given (``--html`` aside)."""
    from agent.config import OPTIONS

    flags = {"html_since": "--since", "html_config": "--config",
             "html_insecure_config_permissions": "--insecure-config-permissions",
             **{"html_" + o.dest: o.flag for o in OPTIONS if o.key in OPTION_KEYS}}
    return [flag for dest, flag in flags.items() if getattr(args, dest, None) is not None]


def html_flags(args: argparse.Namespace) -> argparse.Namespace:
    """The arguments as :func:`command_html` reads them: ``config``, ``since`` and the options'
    own destinations."""
    from agent.config import OPTIONS

    return argparse.Namespace(html=args.html, since=args.html_since, config=args.html_config,
                              insecure_config_permissions=args.html_insecure_config_permissions,
                              **{o.dest: getattr(args, "html_" + o.dest) for o in OPTIONS if o.key in OPTION_KEYS})


def command_html(args: argparse.Namespace) -> int:
    """``sixdim report --html FILE``: 0 when the page was written; 2 when plotly is missing, or for a
    bad configuration or history (the message names the file)."""
    try:
        _plotly()
    except MissingExtra as exc:
        print(f"sixdim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    config = load(args.config, flags=args)
    folder = Path(args.html).parent
    if not folder.is_dir():  # said before the history is read, not after
        why = "is a file, not a folder" if folder.exists() else "does not exist"
        print(f"sixdim: error: cannot write --html {args.html}: {folder} {why}", file=sys.stderr)
        return EXIT_USAGE
    started = time.perf_counter()
    page, facts = build(config.history, since=args.since, settings=regression_settings(config))
    try:
        write_atomically(args.html, page, make_folder=False)
    except OSError as exc:
        print(f"sixdim: error: cannot write --html {args.html}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    seconds = time.perf_counter() - started
    print(f"wrote {args.html} ({len(page.encode()) / 1e6:.1f} MB): {facts['charts']} chart(s), "
          f"{facts['runs']:,} runs of {facts['series']} series from {config.history} in {seconds:.1f} s")
    return EXIT_OK


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
    Raises :class:`HistoryError` for a history that is missing or not one, :class:`MissingExtra`
    without plotly."""
    from agent.report_data import read
    from agent.report_model import Report
    from agent.report_page import Page
    from agent.verdicts import Verdicts

    pio, offline = _plotly()
    started = time.perf_counter()
    keep = Verdicts(settings).restore_runs
    data = read(path, keep)
    report = Report(data, since=since, settings=settings, now=now, note=note)
    page = Page(report, pio, offline.get_plotlyjs())
    text = page.render()
    return text, {"runs": data.runs, "series": len(data.series), "charts": page.charts,
                  "seconds": time.perf_counter() - started}
