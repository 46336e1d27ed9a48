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

Size and speed.  A chart draws at most :data:`MAX_POINTS` points per figure: a longer series is shown
as the median per time bucket (15 minutes to a week, the smallest that fits).  A workload with several
shapes is drawn as the geometric mean over its shapes per bucket (each run divided by its shape's
median, so a bucket missing a shape does not jump).  At most :data:`MAX_CHARTS` trend charts, the
most important first (a regression, a change point, then the most runs), with a note naming the
rest.  The history is read read-only, without ``details``, in chunks (as ``report regressions``).

All text that comes from the history (host names, workloads, shapes, versions) is escaped.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from agent.config import load, regression_settings
from agent.files import write_atomically
from workloads.registry import INTEGER_PRECISIONS

EXIT_OK, EXIT_USAGE = 0, 2

INSTALL_HINT = "pip install -e '.[report]' in a checkout, or pip install 'sixdim[report]' from a wheel"
"""What to install when plotly is missing (the optional extra)."""
MAX_CHARTS = 24
"""Trend charts at most; the rest are named in a note."""
MAX_POINTS = 1500
"""Points per trend chart and figure, summed over its lines: beyond it, medians per time bucket."""
MIN_MULTI_SHAPE_BUCKET = 3600.0
"""A workload with several shapes is drawn per bucket of at least an hour (its shapes' geometric mean)."""
BUCKETS = (900.0, 1800.0, 3600.0, 2 * 3600.0, 3 * 3600.0, 6 * 3600.0, 12 * 3600.0, 86400.0, 2 * 86400.0,
           7 * 86400.0)
MAX_MARKS = 8
"""Version-change marks per chart at most (those on the most devices, then the latest)."""
MARK_CLUSTER_SECONDS = 12 * 3600.0
"""The same version change on several devices within this time is one mark."""
MAX_SHAPE_ROWS = 400
"""Rows of the per-shape table at most."""
MAX_CHANGE_POINTS = 200
"""Change points listed at most (the newest)."""
MAX_VERDICT_ROWS = 300
"""Verdict rows listed at most."""
MAX_SUSPICIOUS_SHOWN = 30
"""Beyond this many suspicious verdicts, they are listed in a collapsed part of their own."""
CHART_HEIGHT = 360
DATE_TICKS = [{"dtickrange": [None, 86400000], "value": "%b %-d %H:%M"},
              {"dtickrange": [86400000, "M1"], "value": "%b %-d"},
              {"dtickrange": ["M1", None], "value": "%b %Y"}]
"""Date axis labels on one line (the year is in the page's time span)."""

COMPONENTS = {"driver": "driver", "torch": "torch", "cuda_runtime": "CUDA", "cudnn": "cuDNN", "nccl": "NCCL",
              "vbios": "VBIOS", "onnxruntime": "ONNX Runtime"}
"""The version keys of :data:`agent.regression.VERSION_KEYS`, as the page names them, in the order
a change names them."""
MIN_SIDE_RUNS = 3
"""Runs a series needs either side of a version change to take part in the comparison."""
TRANSITION_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#9d755d", "#72b7b2", "#eeca3b", "#ff9da6")
EXTRA_FIGURES = ("linearity_ratio", "linearity_count")
"""Figures read besides the watched ones (the six dimensions need them)."""
SPEED_FIGURES = ("flops", "samples_per_second", "bytes_per_second", "seconds")
"""The speed figure of a series: the first of these it reports (``regression.primary_figure``)."""
RESTATING = ("seconds", "peak_ratio", "flop_per_joule", "samples_per_joule", "latency_p50_seconds")
"""Figures left out of the change points of a series that has a rate: they restate a shift of its
speed (or of its power) that the list already shows."""

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd",
           "#e6550d", "#31a354", "#756bb1", "#636363")
"""One colour per device, the same in every chart (beyond 20 devices, dashes tell them apart)."""
DASHES = ("solid", "dash", "dot", "dashdot")
FONT = ('system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", '
        '"Liberation Sans", sans-serif')

_UNIT = {
    "flops": ("FLOP/s", "si"), "samples_per_second": ("samples/s", "count"), "bytes_per_second": ("B/s", "si"),
    "bus_bytes_per_second": ("B/s", "si"), "seconds": ("s", "si"), "latency_p50_seconds": ("s", "si"),
    "latency_p99_seconds": ("s", "si"), "time_to_train_seconds": ("s", "si"), "power_watts": ("W", "watts"),
    "flop_per_joule": ("FLOP/J", "si"), "samples_per_joule": ("samples/J", "count"),
    "memory_bytes": ("B", "binary"), "accuracy": ("", "percent"), "stability_ratio": ("", "ratio"),
    "peak_ratio": ("", "percent"), "linearity_ratio": ("", "ratio"),
}
_FIGURE_NAMES = {
    "flops": "FLOP/s", "samples_per_second": "samples/s", "bytes_per_second": "bytes/s",
    "bus_bytes_per_second": "bus bytes/s", "seconds": "time", "latency_p50_seconds": "latency p50",
    "latency_p99_seconds": "latency p99", "time_to_train_seconds": "time to train", "power_watts": "power",
    "flop_per_joule": "FLOP/J", "samples_per_joule": "samples/J", "memory_bytes": "memory",
    "accuracy": "accuracy", "stability_ratio": "stability", "peak_ratio": "fraction of peak",
}


def unit_of(figure: str, precision: str = "") -> tuple[str, str]:
    """A figure's unit and how to print it; an integer precision's operations are OP, not FLOP."""
    unit, kind = _UNIT.get(figure, ("", "plain"))
    return (unit.replace("FLOP", "OP") if precision in INTEGER_PRECISIONS else unit), kind


def figure_name(figure: str, precision: str = "") -> str:
    name = _FIGURE_NAMES.get(figure, figure)
    return name.replace("FLOP", "OP") if precision in INTEGER_PRECISIONS else name


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


# ---------------------------------------------------------------------------- reading

@dataclass
class SeriesData:
    """What the page needs of one series (``RunRecord.key()``)."""

    key: tuple[str, ...]
    model_name: str = ""
    statuses: Counter = field(default_factory=Counter)
    latest: dict[str, tuple[float, int, dict[str, Any]]] = field(default_factory=dict)
    """Per suite: the newest ok run's (ended_at, version-set id, figures)."""
    version_runs: list[tuple[float, int]] = field(default_factory=list)
    """(started_at, version-set id) where the version set changed, in recording order."""
    recent: deque = field(default_factory=deque)
    """The last runs as read (for the live verdicts)."""
    cp: Any = None
    """An :class:`agent.regression_report.Series`: every ok run's time, versions and figures."""

    @property
    def device(self) -> tuple[str, str, str, str]:
        return self.key[0], self.key[1], self.key[2], self.key[3]

    @property
    def group(self) -> tuple[str, str, str, str]:
        """Workload, precision, mode, pass: what one chart and one summary row stand for."""
        return self.key[4], self.key[5], self.key[7], self.key[8]


@dataclass
class Data:
    path: str
    series: dict[tuple[str, ...], SeriesData]
    versions: list[dict[str, str]]
    unknown: set[int]
    """Version-set ids of runs that did not say their versions."""
    figures: tuple[str, ...]
    runs: int
    statuses: Counter
    first: float | None
    last: float | None


_SELECT = ("id", "hostname", "device_type", "gpu", "uuid", "workload", "precision", "shape", "mode", "kernel_pass",
           "model_name", "suite", "status", "started_at", "ended_at", "figures", "environment")


def read(path: str, keep_recent: int) -> Data:
    """Every run of the history, read-only, in chunks, without ``details``: figures of ok runs as
    compact rows, the newest ok run per series and suite, version changes, the last ``keep_recent``
    runs of each series."""
    from agent.regression import WATCHED
    from agent.regression_report import CHUNK, Series, VersionSets, reading

    figures = (*WATCHED, *EXTRA_FIGURES)
    column = {name: 3 + j for j, name in enumerate(figures)}
    width = 3 + len(figures)
    nan = math.nan
    sql = f"SELECT {', '.join(_SELECT)} FROM runs WHERE id > ? ORDER BY id LIMIT {CHUNK}"
    series: dict[tuple[str, ...], SeriesData] = {}
    versions = VersionSets()
    statuses: Counter = Counter()
    last_id, runs, first, last = 0, 0, math.inf, -math.inf
    with reading(path) as db:
        while True:
            rows = db.execute(sql, (last_id,)).fetchall()
            if not rows:
                break
            last_id = rows[-1][0]
            runs += len(rows)
            for row in rows:
                key = row[1:10]
                s = series.get(key)
                if s is None:
                    s = series[key] = SeriesData(key, recent=deque(maxlen=keep_recent))
                    s.cp = Series(key)
                s.model_name = row[10]
                status, started = row[12], row[13]
                s.statuses[status] += 1
                statuses[status] += 1
                s.recent.append(row)
                first, last = min(first, started), max(last, started)
                vid = versions.id(row[16], row[5])
                if vid not in versions.unknown and (not s.version_runs or s.version_runs[-1][1] != vid):
                    s.version_runs.append((started, vid))
                if status != "ok":
                    continue
                parsed = json.loads(row[15])
                out = [nan] * width
                out[0], out[1], out[2] = started, row[14], vid
                for name, value in parsed.items():
                    j = column.get(name)
                    if j is not None and type(value) in (float, int):  # not bool, not text
                        out[j] = value
                s.cp.rows.append(tuple(out))
                s.cp.model_name = row[10]
                newest = s.latest.get(row[11])
                if newest is None or row[14] >= newest[0]:
                    s.latest[row[11]] = (row[14], vid, parsed)
    return Data(path, series, versions.sets, versions.unknown, figures, runs, statuses,
                first if runs else None, last if runs else None)


def _record(row: Sequence[Any]) -> Any:
    """A RunRecord of a row as :func:`read` keeps it (no params, device or details: the verdicts
    need none)."""
    from agent.results import RunRecord

    return RunRecord(suite=row[11], workload=row[5], precision=row[6], params={}, shape=row[7], mode=row[8],
                     kernel_pass=row[9], hostname=row[1], device_type=row[2], device="", gpu=row[3], uuid=row[4],
                     model_name=row[10], pci_bus_id="", status=row[12], reason="", started_at=row[13],
                     ended_at=row[14], figures=json.loads(row[15]), environment=json.loads(row[16]), id=row[0])


# ---------------------------------------------------------------------------- formatting

def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


_PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""),
             (1e-3, "m"), (1e-6, "\u00b5"), (1e-9, "n"))


def si(value: float, unit: str) -> str:
    """4 significant digits with an SI prefix: ``612.3 TFLOP/s``, ``1.250 ms``."""
    if value == 0:
        return f"0 {unit}".strip()
    magnitude = abs(value)
    for scale, prefix in _PREFIXES:
        if magnitude >= scale * 0.99995:
            break
    text = f"{value / scale:.4g}"
    if "e" in text:  # beyond the prefixes
        text = f"{value:.3g}"
        prefix = ""
    return f"{text} {prefix}{unit}".strip()


def count(value: float, unit: str) -> str:
    """A count per second or per joule: ``2,950 samples/s``, ``4.709 samples/J``, ``12.5 M samples/s``."""
    magnitude = abs(value)
    if magnitude >= 1e7:
        return f"{value / 1e6:,.4g} M {unit}" if magnitude < 1e12 else f"{value:.4g} {unit}"
    if magnitude >= 1000:
        return f"{value:,.0f} {unit}"
    return f"{value:.4g} {unit}"


def binary(value: float) -> str:
    """Bytes with a binary prefix: ``3.82 GiB``."""
    for scale, prefix in ((2 ** 50, "PiB"), (2 ** 40, "TiB"), (2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}" if value / scale < 100 else f"{value / scale:.0f} {prefix}"
    return f"{value:.0f} B"


def fmt(figure: str, value: float | None, precision: str = "") -> str:
    """A figure's value for a person; ``—`` where there is none (never 0 for a missing value)."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "\u2014"
    unit, kind = unit_of(figure, precision)
    if kind == "si":
        return si(value, unit)
    if kind == "count":
        return count(value, unit)
    if kind == "binary":
        return binary(value)
    if kind == "watts":
        return f"{value:,.0f} W" if abs(value) >= 10 else f"{value:.2g} W"
    if kind == "percent":
        return f"{value * 100:.1f}%"
    if kind == "ratio":
        return f"{value:.3f}"
    return f"{value:.4g}"


def percent(ratio: float | None) -> str:
    """A ratio as a signed change: ``−7.0%``, ``+1.2%``."""
    if ratio is None or not math.isfinite(ratio):
        return "\u2014"
    pct = (ratio - 1.0) * 100.0
    sign = "\u2212" if pct < 0 else "+"
    return f"{sign}{abs(pct):.1f}%"


def utc(seconds: float | None, *, with_seconds: bool = False) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "\u2014"
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M" + (":%S" if with_seconds else ""))


def _p(p: float | None) -> str:
    if p is None:
        return "\u2014"
    if p <= 0.0:
        return "<1e-300"
    return f"{p:.2g}" if p < 1e-3 else f"{p:.3f}"


def change_label(old: dict[str, str], new: dict[str, str], most: int | None = None) -> str:
    """``driver 550.54.15 → 560.28.03``; several changes joined by commas; beyond ``most`` of them,
    the rest are named only (``torch 2.12.1 → 2.13.0, CUDA 12.4 → 12.6 (+ cuDNN, NCCL)``)."""
    changed = [k for k in COMPONENTS if old.get(k) != new.get(k)]
    shown = changed if most is None else changed[:most]
    text = ", ".join(f"{COMPONENTS[k]} {old.get(k) or '?'} \u2192 {new.get(k) or '?'}" for k in shown)
    if len(changed) > len(shown):
        text += " (+ " + ", ".join(COMPONENTS[k] for k in changed[len(shown):]) + ")"
    return text


def _gpu_order(device: tuple[str, str, str, str]) -> tuple:
    host, kind, gpu, uuid = device
    return (host, kind != "cuda", int(gpu) if gpu.isdigit() else 1 << 30, gpu, uuid)


# ---------------------------------------------------------------------------- the model of the page

class Report:
    """Everything the page shows, computed from :class:`Data`."""

    def __init__(self, data: Data, *, since: float | None = None, settings: Any = None, now: float | None = None,
                 note: str = "") -> None:
        import numpy as np

        from agent import regression as rg

        self.np = np
        self.rg = rg
        self.data = data
        self.settings = settings or rg.Settings()
        self.now = time.time() if now is None else now
        self.since = since
        self.cutoff = self.now - since if since is not None else -math.inf
        self.note = note
        self.column = {name: 3 + j for j, name in enumerate(data.figures)}
        self.full: dict[tuple[str, ...], Any] = {}
        """Per series: its ok runs in time order, a row each (started, ended, version set, figures)."""
        self.arrays: dict[tuple[str, ...], Any] = {}
        """The same, in the shown time."""
        for key, s in data.series.items():
            a = np.array(s.cp.rows, dtype=float).reshape(-1, 3 + len(data.figures))
            a = a[np.lexsort((a[:, 1], a[:, 0]))] if len(a) else a
            self.full[key] = a
            self.arrays[key] = a[a[:, 0] >= self.cutoff] if since is not None else a
        self.devices = sorted({s.device for s in data.series.values()}, key=_gpu_order)
        self.models = {s.device: s.model_name for s in data.series.values()}
        self.hosts = sorted({d[0] for d in self.devices})
        self.colour = {d: PALETTE[i % len(PALETTE)] for i, d in enumerate(self.devices)}
        self.dash = {d: DASHES[(i // len(PALETTE)) % len(DASHES)] for i, d in enumerate(self.devices)}
        self.labels = self._device_labels()
        self.speed = {key: self._speed_figure(key) for key in data.series}
        self.groups: dict[tuple[str, str, str, str], list[tuple[str, ...]]] = {}
        for key in sorted(data.series, key=lambda k: (k[4], k[5], k[7], k[8], _gpu_order(k[:4]), k[6])):
            self.groups.setdefault(data.series[key].group, []).append(key)
        self.group_labels = self._group_labels()
        self.events = self._version_events()

    # -- labels

    def _device_labels(self) -> dict[tuple[str, str, str, str], str]:
        many_hosts = len(self.hosts) > 1
        labels = {}
        for host, kind, gpu, uuid in self.devices:
            name = "CPU" if kind == "cpu" else f"GPU {gpu}" if gpu else "all GPUs"
            labels[(host, kind, gpu, uuid)] = f"{host} {name}" if many_hosts else name
        seen = Counter(labels.values())
        for device, label in list(labels.items()):
            if seen[label] > 1 and device[3]:  # a GPU index reused by another board: tell them apart
                labels[device] = f"{label} ({device[3][:12]})"
        return labels

    def _group_labels(self) -> dict[tuple[str, str, str, str], str]:
        """``bf16 gemm``, with mode and pass only where the workload has several."""
        variants: dict[str, set[tuple[str, str]]] = {}
        for workload, _, mode, kernel_pass in self.groups:
            variants.setdefault(workload, set()).add((mode, kernel_pass))
        out = {}
        for group in self.groups:
            workload, precision, mode, kernel_pass = group
            label = " ".join(p for p in (precision, workload) if p)
            if len(variants[workload]) > 1:
                label += " (" + ", ".join(p for p in (mode, kernel_pass) if p) + ")"
            out[group] = label
        return out

    def _speed_figure(self, key: tuple[str, ...]) -> str | None:
        a = self.arrays[key]
        for figure in SPEED_FIGURES:
            if len(a) and self.np.isfinite(a[:, self.column[figure]]).any():
                return figure
        return None

    def group_speed(self, group: tuple[str, str, str, str]) -> str | None:
        """The speed figure of most of a group's series."""
        found = Counter(self.speed[k] for k in self.groups[group] if self.speed[k])
        return found.most_common(1)[0][0] if found else None

    def has_rate(self, key: Sequence[str]) -> bool:
        """Whether a series reports a rate (FLOP/s, samples/s, bytes/s): then its time restates it."""
        a = self.full.get(tuple(key))
        return a is not None and len(a) > 0 and any(
            self.np.isfinite(a[:, self.column[f]]).any() for f in self.rg.RATES)

    def series_label(self, key: Sequence[str]) -> str:
        return " ".join(p for p in (key[5], key[4], key[6]) if p)

    # -- version changes per device

    def _version_events(self) -> dict[tuple[str, str, str, str], list[tuple[float, str, dict, dict]]]:
        """Per device: (time, label, before, after) of each version change, the earliest run under
        the new versions over all the device's series."""
        versions = self.data.versions
        found: dict[tuple[str, str, str, str], dict[tuple[int, int], float]] = {}
        for s in self.data.series.values():
            changes = found.setdefault(s.device, {})
            points = sorted(s.version_runs)
            for (_, old), (at, new) in zip(points, points[1:]):
                if old != new and (changes.get((old, new)) is None or at < changes[(old, new)]):
                    changes[(old, new)] = at
        out = {}
        for device, changes in found.items():
            events = []
            for (old, new), at in changes.items():
                label = change_label(versions[old], versions[new])
                if label:
                    events.append((at, label, versions[old], versions[new]))
            out[device] = sorted(events)
        return out

    def marks(self, devices: Iterable[tuple[str, str, str, str]]) -> list[dict[str, Any]]:
        """The version changes of these devices in the shown time, one mark per change (its
        devices within :data:`MARK_CLUSTER_SECONDS` of each other)."""
        devices = list(devices)
        clusters: list[dict[str, Any]] = []
        for device in devices:
            for at, label, old, new in self.events.get(device, ()):
                if at < self.cutoff:
                    continue
                for c in clusters:
                    if c["label"] == label and abs(at - c["at"]) <= MARK_CLUSTER_SECONDS:
                        c["at"] = min(c["at"], at)
                        c["devices"].append(device)
                        break
                else:
                    clusters.append({"at": at, "label": label, "short": change_label(old, new, most=2),
                                     "devices": [device]})
        if len(clusters) > MAX_MARKS:
            clusters = sorted(clusters, key=lambda c: (len(c["devices"]), c["at"]))[-MAX_MARKS:]
        chart_hosts = {d[0] for d in devices}
        for c in clusters:
            hosts = sorted({d[0] for d in c["devices"]})
            where = ""
            if len(chart_hosts) > 1 and len(hosts) < len(chart_hosts):
                where = " (" + ", ".join(hosts) + ")"
            c["text"] = c["short"] + where
            c["hover"] = c["label"] + "<br>" + ", ".join(self.labels[d] for d in c["devices"])
        return sorted(clusters, key=lambda c: c["at"])

    # -- trend series

    def trend(self, group: tuple[str, str, str, str], figure: str, width: float | None = None
              ) -> tuple[list[dict[str, Any]], float | None, int]:
        """Per device of a group: its points of one figure (x in ms, y), raw or bucketed; the bucket
        width used (None: raw runs) and the number of shapes."""
        np = self.np
        j = self.column[figure]
        keys = self.groups[group]
        per_device: dict[tuple[str, str, str, str], list[tuple[Any, Any, int]]] = {}
        shapes: dict[str, int] = {}
        for key in keys:
            a = self.arrays[key]
            if not len(a):
                continue
            v = a[:, j]
            ok = np.isfinite(v) & (v > 0)
            if not ok.any():
                continue
            shape = shapes.setdefault(key[6], len(shapes))
            per_device.setdefault(key[:4], []).append((a[ok, 0], v[ok], shape))
        if not per_device:
            return [], None, 0
        t_all = np.concatenate([t for parts in per_device.values() for t, _, _ in parts])
        v_all = np.concatenate([v for parts in per_device.values() for _, v, _ in parts])
        s_all = np.concatenate([np.full(len(t), s) for parts in per_device.values() for t, _, s in parts])
        if len(shapes) > 1:  # each run relative to its shape's median: the buckets' geometric mean
            medians = np.array([np.median(v_all[s_all == s]) for s in range(len(shapes))])
            scale = math.exp(float(np.mean(np.log(medians))))
        else:
            medians, scale = None, 1.0
        if width is None:
            width = self._bucket(per_device, t_all, len(shapes) > 1)
        lines = []
        for device in sorted(per_device, key=_gpu_order):
            parts = per_device[device]
            t = np.concatenate([p[0] for p in parts])
            v = np.concatenate([p[1] for p in parts])
            if medians is not None:
                s = np.concatenate([np.full(len(p[0]), p[2]) for p in parts])
                v = np.log(v / medians[s])
            order = np.argsort(t, kind="stable")
            t, v = t[order], v[order]
            counts = None
            if width:
                bucket = np.floor(t / width)
                starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
                ends = np.r_[starts[1:], len(t)]
                counts = (ends - starts).tolist()
                t = np.array([(b + 0.5) * width for b in bucket[starts]])
                v = np.array([np.median(v[a:b]) for a, b in zip(starts, ends)])
            if medians is not None:
                v = scale * np.exp(v)
            lines.append({"device": device, "x": [int(round(x * 1000)) for x in t], "y": [_round(y) for y in v],
                          "counts": counts})
        return lines, width, len(shapes)

    def _bucket(self, per_device: dict, t_all: Any, multi_shape: bool) -> float | None:
        """The smallest bucket width that keeps the chart within :data:`MAX_POINTS` (None: raw runs)."""
        np = self.np
        if not multi_shape and len(t_all) <= MAX_POINTS:
            return None
        times = [np.concatenate([p[0] for p in parts]) for parts in per_device.values()]
        for width in BUCKETS:
            if multi_shape and width < MIN_MULTI_SHAPE_BUCKET:
                continue
            if sum(len(np.unique(np.floor(t / width))) for t in times) <= MAX_POINTS:
                return width
        return BUCKETS[-1]

    # -- six dimensions

    def dimensions(self) -> list[dict[str, Any]]:
        """One row per device, workload, precision, mode, pass and suite: the latest ok value of each
        series (shape), summarised over the shapes measured under the newest versions."""
        from agent.summary import geometric_mean

        groups: dict[tuple, list[tuple[tuple[str, ...], float, int, dict[str, Any]]]] = {}
        for key, s in self.data.series.items():
            for suite, (ended, vid, figures) in s.latest.items():
                if ended < self.cutoff:
                    continue
                groups.setdefault((s.device, s.group, suite), []).append((key, ended, vid, figures))
        suites = {g[2] for g in groups}
        rows = []
        for (device, group, suite), members in groups.items():
            newest = max(members, key=lambda m: m[1])
            current = self.data.versions[newest[2]]
            members = [m for m in members if self.data.versions[m[2]] == current]  # as agent/summary.py groups
            speed = self.group_speed(group) or next((f for f in SPEED_FIGURES if f in newest[3]), None)
            values: dict[str, float | None] = {}

            def of(figure: str) -> list[float]:
                return [float(m[3][figure]) for m in members
                        if isinstance(m[3].get(figure), (int, float)) and not isinstance(m[3].get(figure), bool)]

            for figure, how in ((speed, "geo"), ("peak_ratio", "geo"), ("power_watts", "mean"),
                                ("memory_bytes", "max"), ("accuracy", "min"), ("linearity_ratio", "min"),
                                ("stability_ratio", "min")):
                found = of(figure) if figure else []
                if not found or (how == "geo" and len(found) != len(members)):
                    values[figure or "speed"] = None  # a mean over some of the shapes would pass for all
                elif how == "geo":
                    values[figure] = geometric_mean(found)
                elif how == "mean":
                    values[figure] = sum(found) / len(found)
                else:
                    values[figure] = max(found) if how == "max" else min(found)
            counts = of("linearity_count")
            rows.append({"device": device, "group": group, "suite": suite if len(suites) > 1 else "",
                         "shapes": len(members), "speed_figure": speed, "values": values,
                         "linearity_count": int(counts[0]) if len(set(counts)) == 1 else None,
                         "ended": newest[1], "versions": current})
        rows.sort(key=lambda r: (self.group_labels[r["group"]], r["suite"], _gpu_order(r["device"])))
        return rows

    # -- version comparison

    def comparison(self) -> list[dict[str, Any]]:
        """Every version change in the shown time, oldest first: per group, the speed figure over the
        runs just under the old versions against those under the new ones, per series (the runs of
        each side's whole segment: between the version changes either side), summarised over the
        series that have at least :data:`MIN_SIDE_RUNS` runs each side.  Components that changed at
        the same moment are one change: nothing tells their effects apart."""
        np = self.np
        versions = self.data.versions
        unknown = np.array(sorted(self.data.unknown), dtype=int)
        found: dict[str, dict[str, Any]] = {}
        for group, keys in self.groups.items():
            figure = self.group_speed(group)
            if figure is None:
                continue
            j = self.column[figure]
            for key in keys:
                a = self.arrays[key]
                if len(a) < 2:
                    continue
                v = a[:, j]
                ok = np.isfinite(v) & (v > 0) & ~np.isin(a[:, 2].astype(int), unknown)
                a, v = a[ok], v[ok]
                vids = a[:, 2].astype(int)
                bounds = [0, *(np.flatnonzero(vids[1:] != vids[:-1]) + 1).tolist(), len(vids)]
                for i in range(1, len(bounds) - 1):
                    lo, at, hi = bounds[i - 1], bounds[i], bounds[i + 1]
                    old, new = versions[vids[lo]], versions[vids[at]]
                    label = change_label(old, new)
                    if not label:
                        continue
                    t = found.setdefault(label, {"label": label, "short": change_label(old, new, most=2),
                                                 "at": math.inf, "groups": {}})
                    t["at"] = min(t["at"], float(a[at, 0]))
                    if at - lo < MIN_SIDE_RUNS or hi - at < MIN_SIDE_RUNS:
                        continue
                    t["groups"].setdefault(group, []).append(
                        (key, float(np.median(v[lo:at])), float(np.median(v[at:hi])), at - lo, hi - at))
        out = []
        for t in sorted(found.values(), key=lambda t: t["at"]):
            cells = {}
            for group, parts in t["groups"].items():
                cells[group] = {
                    "figure": self.group_speed(group), "series": len(parts),
                    "devices": len({p[0][:4] for p in parts}),
                    "before": _geomean([p[1] for p in parts]), "after": _geomean([p[2] for p in parts]),
                    "ratio": _geomean([p[2] / p[1] for p in parts]),
                    "runs_before": sum(p[3] for p in parts), "runs_after": sum(p[4] for p in parts)}
            if cells:
                out.append({**t, "cells": cells})
        return out

    # -- regressions

    def verdicts(self) -> list[Any]:
        """The live verdicts, as the agent restores them: each series' last runs, in recording order."""
        from agent.verdicts import Verdicts

        live = Verdicts(self.settings)
        rows = sorted((row for s in self.data.series.values() for row in s.recent), key=lambda r: r[0])
        for row in rows:
            live.add(_record(row))
        return live.snapshot()

    def change_points(self) -> list[dict[str, Any]]:
        """The change points of the whole history (``report regressions``), less the figures that
        restate a shift of the series' speed, at or after the cutoff, newest first."""
        from agent.regression import WATCHED
        from agent.regression_report import History, analyse

        with_rate, without = {}, {}
        for key, s in self.data.series.items():
            if s.cp.rows:  # a series with no ok run has nothing to analyse
                (with_rate if self.has_rate(key) else without)[key] = s.cp
        found = []
        for chosen, figures in ((with_rate, [f for f in WATCHED if f not in RESTATING]), (without, list(WATCHED))):
            if chosen:
                history = History(chosen, self.data.versions, self.data.figures, 0, frozenset(self.data.unknown))
                found += analyse(history, settings=self.settings, figures=figures)
        found = [f for f in found if f["at"] >= self.cutoff]
        found.sort(key=lambda f: (-f["at"], f["hostname"], f["gpu"], f["workload"], f["shape"], f["figure"]))
        return found


def _round(value: float) -> float:
    """5 significant digits: enough for a chart, and a smaller page."""
    if not math.isfinite(value) or value == 0:
        return value
    return round(value, 4 - int(math.floor(math.log10(abs(value)))))


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


# ---------------------------------------------------------------------------- the page

CSS = """
:root { --fg: #1f2328; --muted: #59636e; --line: #d8dee4; --head: #eef1f4; --zebra: #f6f8fa;
        --bad: #b42318; --bad-bg: #fdecea; --warn: #8a5a00; --warn-bg: #fff4d6; --good: #1a7f37; --good-bg: #e6f4ea;
        --accent: #0b5cad; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; background: #fff; color: var(--fg); font: 14px/1.5 FONT; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 32px 64px; }
h1 { font-size: 26px; line-height: 1.25; margin: 0 0 2px; }
h2 { font-size: 20px; margin: 44px 0 6px; padding-bottom: 5px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 26px 0 2px; }
p { margin: 6px 0 10px; max-width: 80em; }
a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
.muted, .note { color: var(--muted); }
.note { font-size: 13px; }
.subtitle { color: var(--muted); margin: 0 0 16px; font-size: 15px; }
.demo { background: var(--warn-bg); color: var(--warn); border: 1px solid #f0d48a; border-radius: 6px;
        padding: 6px 12px; margin: 10px 0 14px; font-size: 13px; }
#errors { background: var(--bad-bg); color: var(--bad); border: 1px solid #f3b5ad; border-radius: 6px;
          padding: 6px 12px; margin: 10px 0; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 14px 0 8px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 7px 14px; min-width: 118px; background: #fbfcfd; }
.card .k { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .v { font-size: 19px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card.bad .v { color: var(--bad); } .card.good .v { color: var(--good); } .card.warn .v { color: var(--warn); }
nav.toc { border-top: 1px solid var(--line); border-bottom: 1px solid var(--line); padding: 7px 2px; margin: 14px 0 4px;
          font-size: 14px; }
nav.toc strong { margin-right: 8px; }
.wrap { overflow-x: auto; margin: 6px 0 14px; }
.cols { display: flex; flex-wrap: wrap; gap: 0 32px; align-items: flex-start; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 4px 10px; text-align: left; border-bottom: 1px solid var(--line); white-space: nowrap;
         vertical-align: top; }
th { background: var(--head); font-weight: 600; }
tbody tr:nth-child(even) td { background: var(--zebra); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.absent { color: #9aa4ae; text-align: center; }
td.wrapok { white-space: normal; min-width: 10em; }
td.series { white-space: normal; min-width: 14em; max-width: 30em; }
tr.first td { border-top: 2px solid #c3ccd5; }
td.group { font-weight: 600; }
small, .small { font-size: 12px; color: var(--muted); }
.badge { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 12px; font-weight: 600; }
.badge.regression { background: var(--bad-bg); color: var(--bad); }
.badge.suspicious { background: var(--warn-bg); color: var(--warn); }
.badge.improvement { background: var(--good-bg); color: var(--good); }
.badge.ok { background: #eef1f4; color: var(--muted); }
.worse { color: var(--bad); font-weight: 600; } .better { color: var(--good); font-weight: 600; }
.chart { border: 1px solid var(--line); border-radius: 8px; padding: 6px 6px 0; margin: 6px 0 18px; }
details { margin: 8px 0 16px; } summary { cursor: pointer; color: var(--accent); }
code { font-size: 12.5px; background: #f2f4f6; padding: 0 4px; border-radius: 4px; }
footer { margin-top: 48px; font-size: 12px; color: var(--muted); border-top: 1px solid var(--line); padding-top: 8px; }
@media print { .chart { break-inside: avoid; } }
""".replace("FONT", FONT)

ERROR_SCRIPT = """
(function () {
  var root = document.documentElement, count = 0;
  function show() {
    var banner = document.getElementById('errors');
    if (banner && count) {
      banner.hidden = false;
      banner.textContent = 'Part of this page could not be drawn (' + count + ' error(s); first: ' +
        root.getAttribute('data-first-error') + '). The tables are complete.';
    }
  }
  function note(message) {
    count += 1;
    root.setAttribute('data-errors', String(count));
    if (count === 1) root.setAttribute('data-first-error', String(message).slice(0, 300));
    show();
  }
  window.addEventListener('error', function (e) { note(e.message || 'error'); });
  window.addEventListener('unhandledrejection', function (e) { note('unhandled rejection: ' + e.reason); });
  var original = console.error;
  console.error = function () {
    note(Array.prototype.join.call(arguments, ' '));
    return original.apply(console, arguments);
  };
  document.addEventListener('DOMContentLoaded', show);
})();
"""
"""Records every uncaught error, rejected promise and console.error in ``<html data-errors>`` (the
Chromium test reads it from the DOM) and shows a banner: a chart that failed is never silent."""

DONE_SCRIPT = """
document.documentElement.setAttribute('data-drawn', String(document.querySelectorAll('.plot-container').length));
"""


class Page:
    """Renders a :class:`Report` as HTML with plotly charts."""

    def __init__(self, report: Report, pio: Any, plotlyjs: str) -> None:
        self.r = report
        self.pio = pio
        self.plotlyjs = plotlyjs
        self.charts = 0

    # -- pieces

    def chart(self, figure: dict[str, Any], height: int = CHART_HEIGHT) -> str:
        self.charts += 1
        layout = figure.setdefault("layout", {})
        layout.setdefault("height", height)
        layout.setdefault("font", {"family": FONT, "size": 12, "color": "#1f2328"})
        layout.setdefault("paper_bgcolor", "#ffffff")
        layout.setdefault("plot_bgcolor", "#ffffff")
        layout.setdefault("hoverlabel", {"font": {"family": FONT, "size": 12}})
        config = {"displaylogo": False, "responsive": True,
                  "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"],
                  "toImageButtonOptions": {"format": "png", "scale": 2}}
        body = self.pio.to_html(figure, config=config, include_plotlyjs=False, full_html=False, validate=False,
                                default_width="100%", default_height=f"{height}px", div_id=f"chart-{self.charts}")
        return f'<div class="chart">{body}</div>'

    @staticmethod
    def table(head: Sequence[tuple[str, bool]], rows: Iterable[str], cls: str = "") -> str:
        """``head``: (title, numeric); ``rows``: ready ``<tr>`` strings."""
        ths = "".join(f'<th class="num">{esc(t)}</th>' if num else f"<th>{esc(t)}</th>" for t, num in head)
        return (f'<div class="wrap"><table class="{cls}"><thead><tr>{ths}</tr></thead><tbody>'
                + "".join(rows) + "</tbody></table></div>")

    @staticmethod
    def td(text: str, *, num: bool = False, cls: str = "", raw: bool = False, title: str = "") -> str:
        if text == "\u2014":
            cls = (cls + " absent").strip()
        elif num:
            cls = (cls + " num").strip()
        attrs = (f' class="{cls}"' if cls else "") + (f' title="{esc(title)}"' if title else "")
        return f"<td{attrs}>{text if raw else esc(text)}</td>"

    def device_cell(self, device: tuple[str, str, str, str]) -> str:
        colour = self.r.colour[device]
        return (f'<td><span style="display:inline-block;width:10px;height:10px;border-radius:2px;'
                f'background:{colour};margin-right:6px"></span>{esc(self.r.labels[device])}</td>')

    def series_cell(self, key: Sequence[str]) -> str:
        """Precision, workload and shape; a long shape may break after its commas."""
        text = esc(self.r.series_label(key)).replace(",", ",<wbr>")
        return f'<td class="series">{text}</td>'

    @staticmethod
    def badge(state: str) -> str:
        return f'<span class="badge {esc(state)}">{esc(state)}</span>'

    def direction_class(self, figure: str, ratio: float | None, workload: str = "") -> str:
        """``worse``/``better`` when the change is at least the minimum effect of the figure and
        workload (``[regression.effects]`` as the verdicts use it), by the figure's direction."""
        if ratio is None or not math.isfinite(ratio):
            return ""
        worse = self.r.rg.WATCHED.get(figure, -1) * (ratio - 1.0)
        if abs(ratio - 1.0) < self.r.settings.effects_for(figure, workload)[1]:
            return ""
        return "worse" if worse > 0 else "better"

    # -- sections

    def render(self) -> str:
        r = self.r
        data = r.data
        snapshot = r.verdicts()
        shifts = r.change_points()
        state_of = self._states(snapshot, shifts)
        sections = [
            ("dimensions", "Six dimensions per device and workload", self.dimensions_section()),
            ("trends", "Trends over time", self.trends_section(state_of)),
            ("versions", "Version comparison", self.versions_section()),
            ("regressions", "Regressions", self.regressions_section(snapshot, shifts)),
        ]
        toc = " \u00b7 ".join(f'<a href="#{sid}">{esc(title)}</a>' for sid, title, _ in sections)
        header = self.header(snapshot, shifts, toc)
        body = "".join(f'<section id="{sid}"><h2>{esc(title)}</h2>{content}</section>'
                       for sid, title, content in sections)
        title = "sixdim report \u2014 " + (", ".join(r.hosts) if r.hosts else "empty history")
        footer = (f"<footer>Made by <code>sixdim report --html</code> at {esc(utc(r.now))} UTC from "
                  f"<code>{esc(data.path)}</code>. All times are UTC. The page is self-contained: plotly.js is "
                  f"embedded and nothing is fetched from the network.</footer>")
        return ("<!DOCTYPE html>\n"
                f'<html lang="en" data-errors="0" data-charts="{self.charts}">\n<head>\n<meta charset="utf-8">\n'
                '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                f"<title>{esc(title)}</title>\n<script>{ERROR_SCRIPT}</script>\n<style>{CSS}</style>\n"
                f'<script type="text/javascript">{self.plotlyjs}</script>\n'
                "</head>\n<body>\n<main>\n"
                f'<div id="errors" hidden></div>\n{header}\n'
                f"{body}\n{footer}\n</main>\n<script>{DONE_SCRIPT}</script>\n</body>\n</html>\n")

    def _states(self, snapshot: list[Any], shifts: list[dict[str, Any]]) -> dict[tuple, int]:
        """Per group, how much it needs a look: 3 a regression now, 2 suspicious, 1 a change point."""
        rank = {"regression": 3, "suspicious": 2}
        out: dict[tuple, int] = {}
        for sv in snapshot:
            group = (sv.record.workload, sv.record.precision, sv.record.mode, sv.record.kernel_pass)
            for v in sv.verdicts.values():
                out[group] = max(out.get(group, 0), rank.get(v.state, 0))
        for s in shifts:
            group = (s["workload"], s["precision"], s["mode"], s["pass"])
            out[group] = max(out.get(group, 0), 1)
        return out

    def header(self, snapshot: list[Any], shifts: list[dict[str, Any]], toc: str) -> str:
        r = self.r
        data = r.data
        models = Counter(r.models[d] for d in r.devices if d[1] == "cuda")
        gpus = ", ".join(f"{n} \u00d7 {m or 'unknown model'}" for m, n in models.most_common())
        cpus = [d for d in r.devices if d[1] != "cuda"]
        span, days = "\u2014", 0.0
        if data.first is not None and data.last >= r.cutoff:
            shown_first = max(data.first, r.cutoff)
            days = (data.last - shown_first) / 86400.0
            span = f"{utc(shown_first)} \u2192 {utc(data.last)} UTC"
        elif data.first is not None:
            span = f"no run since {utc(r.cutoff)} UTC (the last {utc(data.last)} UTC)"
        regressions = sum(v.state == "regression" for sv in snapshot for v in sv.verdicts.values())
        suspicious = sum(v.state == "suspicious" for sv in snapshot for v in sv.verdicts.values())
        failed = {k: n for k, n in data.statuses.items() if k != "ok"}
        what = [", ".join(r.hosts) or "no hosts", gpus or "no GPU"] + ([f"{len(cpus)} CPU device(s)"] if cpus else [])
        subtitle = " \u00b7 ".join(what + [span])
        parts = ["<h1>sixdim report</h1>", f'<p class="subtitle">{esc(subtitle)}</p>']
        if r.note:
            parts.append(f'<div class="demo">{esc(r.note)}</div>')
        if r.since is not None:
            parts.append(f'<p class="note">Showing runs since {esc(utc(r.cutoff))} UTC (<code>--since</code>); the '
                         "verdicts and the change-point analysis use the whole history.</p>")
        cards = [("Runs", f"{data.runs:,}", ""),
                 ("Not ok", f"{sum(failed.values()):,}", "warn" if failed else ""),
                 ("Series", f"{len(data.series):,}", ""), ("Devices", f"{len(r.devices)}", ""),
                 ("Days", f"{days:.1f}", ""),
                 ("Regressions now", f"{regressions}", "bad" if regressions else "good"),
                 ("Suspicious now", f"{suspicious}", "warn" if suspicious else ""),
                 ("Change points", f"{len(shifts)}", "")]
        parts.append('<div class="cards">' + "".join(
            f'<div class="card {cls}"><div class="k">{esc(k)}</div><div class="v">{esc(v)}</div></div>'
            for k, v, cls in cards) + "</div>")
        if failed:
            counts = ", ".join(f"{k} {n:,}" for k, n in sorted(failed.items()))
            parts.append(f'<p class="note">Runs not ok: {esc(counts)} (they carry no figures).</p>')
        parts.append(f'<nav class="toc"><strong>Contents</strong> {toc}</nav>')
        if not data.runs:
            parts.append("<p>The history has no runs yet.</p>")
            return "\n".join(parts)
        many_hosts = len(r.hosts) > 1
        rows = []
        for device in r.devices:
            keys = [k for k in data.series if k[:4] == device]
            runs = sum(sum(data.series[k].statuses.values()) for k in keys)
            now = self._latest_versions(keys)
            rows.append("<tr>" + self.device_cell(device) + (self.td(device[0]) if many_hosts else "")
                        + self.td(r.models[device] or "\u2014") + self.td(f"{runs:,}", num=True)
                        + self.td(now.get("driver") or "\u2014")
                        + self.td(_short_uuid(device[3]), cls="small", title=device[3]) + "</tr>")
        devices = self.table([("Device", False)] + ([("Host", False)] if many_hosts else [])
                             + [("Model", False), ("Runs", True), ("Driver now", False), ("UUID", False)], rows)
        vrows = []
        for component, items in self._versions_seen().items():
            names = " \u2192 ".join(name for name, _, _, _ in items)
            runs = " | ".join(f"{n:,}" for _, _, _, n in items)
            changed = ", ".join(utc(first) for _, first, _, _ in items[1:]) or "\u2014"
            vrows.append("<tr>" + self.td(COMPONENTS[component], cls="group") + self.td(names, cls="wrapok")
                         + self.td(runs, num=True) + self.td(changed) + "</tr>")
        versions = self.table([("Component", False), ("Versions", False), ("ok runs", True),
                               ("New version from (UTC)", False)], vrows) if vrows else \
            '<p class="note">No ok run in the shown time said its versions.</p>'
        parts.append(f'<div class="cols"><div><h3>Devices</h3>{devices}</div>'
                     f'<div><h3>Software versions</h3>{versions}</div></div>')
        return "\n".join(parts)

    def _latest_versions(self, keys: list[tuple[str, ...]]) -> dict[str, str]:
        best, vid = -math.inf, None
        for key in keys:
            for at, v in self.r.data.series[key].version_runs:
                if at >= best:
                    best, vid = at, v
        return self.r.data.versions[vid] if vid is not None else {}

    def _versions_seen(self) -> dict[str, list[tuple[str, float, float, int]]]:
        """Per component: each version, its first and last run and its ok runs, in the shown time."""
        np = self.r.np
        spans: dict[str, dict[str, list[float]]] = {}
        for key in self.r.data.series:
            a = self.r.arrays[key]
            if not len(a):
                continue
            vids, starts = a[:, 2].astype(int), a[:, 0]
            for vid in np.unique(vids):
                if int(vid) in self.r.data.unknown:
                    continue
                at = starts[vids == vid]
                for component in COMPONENTS:
                    name = self.r.data.versions[int(vid)][component]
                    if not name:
                        continue
                    span = spans.setdefault(component, {}).setdefault(name, [math.inf, -math.inf, 0])
                    span[0], span[1] = min(span[0], float(at.min())), max(span[1], float(at.max()))
                    span[2] += len(at)
        return {c: sorted(((n, s[0], s[1], int(s[2])) for n, s in spans[c].items()), key=lambda x: x[1])
                for c in COMPONENTS if c in spans}

    def dimensions_section(self) -> str:
        r = self.r
        rows = r.dimensions()
        if not rows:
            return "<p>No ok run in the shown time.</p>"
        any_suite = any(row["suite"] for row in rows)
        head = [("Workload", False), ("Device", False)] + ([("Suite", False)] if any_suite else []) + [
            ("Shapes", True), ("Speed", True), ("Accuracy", True), ("Linearity", True), ("Power", True),
            ("Memory", True), ("Stability", True), ("Of peak", True), ("Last run (UTC)", False)]
        out, previous = [], None
        for row in rows:
            values = row["values"]
            label = r.group_labels[row["group"]]
            first = label != previous
            previous = label
            speed = row["speed_figure"]
            precision = row["group"][1]
            speed_text = fmt(speed, values.get(speed), precision) if speed else "\u2014"
            linearity = fmt("linearity_ratio", values.get("linearity_ratio"))
            if linearity != "\u2014" and row["linearity_count"]:
                linearity += f" ({row['linearity_count']}\u00d7)"
            cells = [self.td(label if first else "", cls="group"), self.device_cell(row["device"])]
            if any_suite:
                cells.append(self.td(row["suite"]))
            cells += [self.td(str(row["shapes"]), num=True),
                      self.td(speed_text, num=True, title=figure_name(speed, precision) if speed else ""),
                      self.td(fmt("accuracy", values.get("accuracy")), num=True),
                      self.td(linearity, num=True),
                      self.td(fmt("power_watts", values.get("power_watts")), num=True),
                      self.td(fmt("memory_bytes", values.get("memory_bytes")), num=True),
                      self.td(fmt("stability_ratio", values.get("stability_ratio")), num=True),
                      self.td(fmt("peak_ratio", values.get("peak_ratio")), num=True),
                      self.td(utc(row["ended"]))]
            out.append(('<tr class="first">' if first and out else "<tr>") + "".join(cells) + "</tr>")
        intro = ("<p>The latest <code>ok</code> value of each series. Where a workload has several shapes, a row "
                 "summarises the shapes last measured under the device's newest software versions: speed and fraction "
                 "of peak are their geometric mean (as the <code>sixdim_suite_*</code> series), power the mean, "
                 "memory the largest, accuracy, linearity and stability the lowest. Speed is FLOP/s for kernels, "
                 "samples/s for models, bytes/s for copies and all-reduce (algbw), or the time of one operation "
                 "where a workload has no rate. \u2014 means the workload does not measure it.</p>")
        parts = [intro, self.table(head, out, "dims")]
        parts.append(self.shapes_table())
        return "".join(parts)

    def shapes_table(self) -> str:
        r = self.r
        rows = []
        keys = sorted(r.data.series, key=lambda k: (r.group_labels[r.data.series[k].group], _gpu_order(k[:4]), k[6]))
        total = 0
        for key in keys:
            s = r.data.series[key]
            for suite, (ended, _, figures) in sorted(s.latest.items()):
                if ended < r.cutoff:
                    continue
                total += 1
                if len(rows) >= MAX_SHAPE_ROWS:
                    continue
                speed = r.speed[key]
                cells = [self.td(r.group_labels[s.group]), self.device_cell(key[:4]), self.td(key[6] or "\u2014"),
                         self.td(suite),
                         self.td(fmt(speed, figures.get(speed), key[5]) if speed else "\u2014", num=True),
                         self.td(fmt("accuracy", figures.get("accuracy")), num=True),
                         self.td(fmt("linearity_ratio", figures.get("linearity_ratio")), num=True),
                         self.td(fmt("power_watts", figures.get("power_watts")), num=True),
                         self.td(fmt("memory_bytes", figures.get("memory_bytes")), num=True),
                         self.td(fmt("stability_ratio", figures.get("stability_ratio")), num=True),
                         self.td(fmt("peak_ratio", figures.get("peak_ratio")), num=True),
                         self.td(utc(ended))]
                rows.append("<tr>" + "".join(cells) + "</tr>")
        if not rows:
            return ""
        more = (f" The first {MAX_SHAPE_ROWS:,} of {total:,} are shown." if total > len(rows) else "")
        table = self.table([("Workload", False), ("Device", False), ("Shape", False), ("Suite", False), ("Speed", True),
                            ("Accuracy", True), ("Linearity", True), ("Power", True), ("Memory", True),
                            ("Stability", True), ("Of peak", True), ("Last run (UTC)", False)], rows)
        return (f"<details><summary>Every series: the latest ok run of each shape ({total:,})</summary>"
                f'<p class="note">{esc(more)}</p>{table}</details>')

    def trends_section(self, state_of: dict[tuple, int]) -> str:
        r = self.r
        groups = [g for g in r.groups if r.group_speed(g)]
        runs = {g: sum(len(r.arrays[k]) for k in r.groups[g]) for g in groups}
        groups = [g for g in groups if runs[g]]
        if not groups:
            return "<p>No ok run with a speed figure in the shown time.</p>"
        ranked = sorted(groups, key=lambda g: (-state_of.get(g, 0), -runs[g], r.group_labels[g]))
        shown = sorted(ranked[:MAX_CHARTS], key=lambda g: r.group_labels[g])
        parts = ["<p>The speed figure of every <code>ok</code> run, a line per device (the same colour in every "
                 "chart). "
                 "Dotted vertical lines mark software version changes, labelled with the versions either side. "
                 "A long series is drawn as the median per time bucket; a workload with several shapes as the "
                 "geometric mean over its shapes per bucket (each run divided by its shape's median, times the "
                 "shapes' geometric mean). The buttons switch to power and memory where measured; drag to zoom, "
                 "double-click to reset.</p>"]
        if len(ranked) > MAX_CHARTS:
            rest = sorted(ranked[MAX_CHARTS:], key=lambda g: r.group_labels[g])
            parts.append(f'<p class="note">{len(ranked)} workload and precision groups; the {MAX_CHARTS} that most '
                         "need a look (a regression, then a change point, then the most runs) are charted. "
                         "Not charted: "
                         f"{esc(', '.join(r.group_labels[g] for g in rest))}.</p>")
        for g in shown:
            parts.append(self.trend_chart(g, runs[g]))
        return "".join(parts)

    def trend_chart(self, group: tuple[str, str, str, str], runs: int) -> str:
        r = self.r
        speed = r.group_speed(group)
        lines, width, shapes = r.trend(group, speed)
        figures = [(speed, lines)]
        for extra in ("power_watts", "memory_bytes"):
            extra_lines, _, _ = r.trend(group, extra, width)
            if extra_lines:
                figures.append((extra, extra_lines))
        marks = r.marks({line["device"] for line in lines})
        levels = min(len(marks), 3)
        headroom = 0.11 * levels  # the top of the plot is the marks' labels', not the data's
        traces, views = [], []
        for number, (figure, found) in enumerate(figures):
            unit, kind = unit_of(figure, group[1])
            scale = 1.0 / 2 ** 30 if kind == "binary" else 1.0
            suffix = " GiB" if kind == "binary" else f" {unit}"
            tick = "" if kind == "si" else ","  # plotly picks the digits; SI prefixes, or thousands separators
            first = len(traces)
            ys: list[float] = []
            for line in found:
                device = line["device"]
                y = line["y"] if scale == 1.0 else [_round(v * scale) for v in line["y"]]
                ys += y
                hover = (f"<b>{esc(r.labels[device])}</b><br>%{{x|%Y-%m-%d %H:%M}} UTC<br>"
                         f"%{{y:{'.4~s' if kind == 'si' else ',.4~r'}}}{esc(suffix)}")
                trace = {"type": "scatter", "mode": "lines+markers", "name": esc(r.labels[device]),
                         "legendgroup": esc(r.labels[device]), "x": line["x"], "y": y,
                         "line": {"color": r.colour[device], "width": 1.3, "dash": r.dash[device]},
                         "marker": {"color": r.colour[device], "size": 4 if len(line["x"]) < 300 else 3},
                         "visible": number == 0}
                if line["counts"] is not None:
                    trace["customdata"] = line["counts"]
                    hover += "<br>median of %{customdata} run(s)"
                trace["hovertemplate"] = hover + "<extra></extra>"
                traces.append(trace)
            low, high = min(ys), max(ys)
            span = (high - low) or abs(high) * 0.02 or 1.0
            bottom = low - 0.06 * span
            top = high + 0.06 * span
            top += (top - bottom) * headroom / (1 - headroom)
            views.append({"figure": figure, "start": first, "end": len(traces), "tick": tick,
                          "title": self._axis_title(figure, shapes, group[1]), "range": [_round(bottom), _round(top)]})
        shapes_layout, annotations = [], []
        for i, mark in enumerate(marks):
            x = int(round(mark["at"] * 1000))
            shapes_layout.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                                  "line": {"color": "#555555", "width": 1.2, "dash": "dot"}, "layer": "above"})
            annotations.append({"x": x, "xref": "x", "yref": "paper", "y": 1.0 - 0.105 * (i % 3), "yanchor": "top",
                                "xanchor": "left", "xshift": 3, "yshift": -2, "showarrow": False, "align": "left",
                                "text": esc(mark["text"]), "hovertext": esc(mark["hover"]),
                                "font": {"size": 11, "color": "#1f2328"}, "bgcolor": "rgba(255,255,255,0.9)",
                                "bordercolor": "#8c959f", "borderwidth": 1, "borderpad": 2})
        view = views[0]
        many = len(lines) > 8
        layout = {
            "margin": {"l": 70, "r": 20, "t": 40 if len(views) > 1 else 12, "b": 30},
            "xaxis": {"type": "date", "gridcolor": "#eceff2", "linecolor": "#c3ccd5", "automargin": True,
                      "tickformatstops": DATE_TICKS},
            "yaxis": {"title": {"text": view["title"]}, "tickformat": view["tick"], "range": view["range"],
                      "exponentformat": "SI",
                      "gridcolor": "#eceff2", "zeroline": False, "automargin": True},
            "legend": ({"orientation": "v", "x": 1.01, "y": 1, "font": {"size": 11}} if many else
                       {"orientation": "h", "yanchor": "top", "y": -0.1, "x": 0, "font": {"size": 12}}),
            "hovermode": "closest", "shapes": shapes_layout, "annotations": annotations,
        }
        if len(views) > 1:
            buttons = []
            for v in views:
                visible = [v["start"] <= i < v["end"] for i in range(len(traces))]
                label = "Speed" if v["figure"] == speed else figure_name(v["figure"]).capitalize()
                buttons.append({"label": label, "method": "update",
                                "args": [{"visible": visible},
                                         {"yaxis.title.text": v["title"], "yaxis.tickformat": v["tick"],
                                          "yaxis.range": v["range"]}]})
            layout["updatemenus"] = [{"type": "buttons", "direction": "right", "showactive": True, "x": 0, "y": 1.0,
                                      "xanchor": "left", "yanchor": "bottom", "pad": {"b": 4, "l": 0},
                                      "buttons": buttons, "bgcolor": "#f6f8fa", "bordercolor": "#c3ccd5",
                                      "font": {"size": 12}}]
        what = figure_name(speed, group[1])
        how = "each run" if width is None else f"the median per {_duration(width)}"
        several = f", the geometric mean over {shapes} shapes" if shapes > 1 else ""
        unit = unit_of(speed, group[1])[0]
        title = f"{esc(r.group_labels[group])} \u2014 {esc('speed' if what == unit else what)} ({esc(unit)})"
        sub = (f"{runs:,} ok runs on {len(lines)} device(s); a point is {how}{several}"
               + (f"; {len(marks)} version change(s) marked" if marks else ""))
        height = max(CHART_HEIGHT, 130 + 21 * len(lines) if many else 0) + (40 if len(views) > 1 else 0)
        return (f'<h3 id="trend-{self.charts + 1}">{title}</h3><p class="note">{esc(sub)}</p>'
                + self.chart({"data": traces, "layout": layout}, height=height))

    @staticmethod
    def _axis_title(figure: str, shapes: int, precision: str = "") -> str:
        unit, kind = unit_of(figure, precision)
        name = figure_name(figure, precision)
        unit = "GiB" if kind == "binary" else unit
        text = f"{name} ({unit})" if unit and name != unit else unit or name
        return text + (" \u00b7 geo. mean" if shapes > 1 else "")

    def versions_section(self) -> str:
        r = self.r
        comparison = r.comparison()
        if not comparison:
            seen = self._versions_seen()
            single = ", ".join(f"{COMPONENTS[c]} {items[0][0]}" for c, items in seen.items() if len(items) == 1)
            return ("<p>No software version changed in the shown time"
                    + (f" ({esc(single)})" if single else "") + ": there is nothing to compare.</p>")
        parts = ["<p>Each software version change, oldest first: the speed figure of every workload under the old "
                 "versions and under the new ones (the median of each series' runs between the neighbouring changes, "
                 "then the geometric mean over the series measured on both sides: the same devices and shapes, so a "
                 "host that did not upgrade does not blur it) and the change. Components that changed at the same "
                 "moment are one change: nothing tells their effects apart. A plain grouping by one component's "
                 "version would not do: it would blame, say, a torch version for a driver change made while it was in "
                 f"use. A change of at least the minimum effect ({r.settings.min_effect * 100:.1f}%, or the workload's own "
                 "in [regression.effects]) is coloured: red slower, green faster.</p>"]
        groups = sorted({g for t in comparison for g in t["cells"]}, key=lambda g: r.group_labels[g])
        traces = []
        for n, t in enumerate(comparison):
            x, y, text, colours, hover = [], [], [], [], []
            for group in groups:
                cell = t["cells"].get(group)
                if cell is None or cell["ratio"] is None:
                    continue
                speed = 1.0 / cell["ratio"] if cell["figure"] == "seconds" else cell["ratio"]
                cls = self.direction_class("flops", speed, group[0])
                x.append(esc(r.group_labels[group]))
                y.append(round((speed - 1.0) * 100.0, 2))
                text.append(f"<b>{percent(speed)}</b>" if cls else percent(speed))
                colours.append("#b42318" if cls == "worse" else "#1a7f37" if cls == "better" else "#59636e")
                hover.append(esc(f"{fmt_pair(cell['figure'], cell['before'], cell['after'], group[1])}; "
                                 f"{cell['series']} series, {cell['runs_before']:,} | {cell['runs_after']:,} runs"))
            colour = TRANSITION_COLOURS[n % len(TRANSITION_COLOURS)]
            traces.append({"type": "bar", "name": esc(f"{t['short']} ({utc(t['at'])[:10]})"), "x": x, "y": y,
                           "text": text, "textposition": "outside", "cliponaxis": False,
                           "textfont": {"color": colours, "size": 12}, "customdata": hover,
                           "marker": {"color": colour, "line": {"color": "#333333", "width": 0.5}},
                           "hovertemplate": "%{x}<br>" + esc(t["label"]) + "<br>speed %{text}<br>%{customdata}"
                                            "<extra></extra>"})
        values = [v for trace in traces for v in trace["y"]]
        low, high = min(values + [0.0]), max(values + [0.0])
        pad = max(1.0, (high - low) * 0.22)
        layout = {"barmode": "group", "margin": {"l": 70, "r": 24, "t": 16, "b": 40},
                  "yaxis": {"title": {"text": "speed change (%)"}, "ticksuffix": "%", "zeroline": True,
                            "zerolinecolor": "#444444", "zerolinewidth": 1.2, "gridcolor": "#eceff2",
                            "range": [low - pad, high + pad]},
                  "xaxis": {"type": "category", "automargin": True},
                  "legend": {"orientation": "h", "yanchor": "top", "y": -0.14, "x": 0},
                  "showlegend": True, "bargap": 0.3, "bargroupgap": 0.06}
        parts.append(self.chart({"data": traces, "layout": layout}, height=330))
        head = [("Workload", False)] + [(f"{t['short']}", True) for t in comparison]
        rows = []
        for group in groups:
            cells = [self.td(r.group_labels[group], cls="group")]
            for t in comparison:
                cell = t["cells"].get(group)
                if cell is None:
                    cells.append(self.td("\u2014"))
                    continue
                cls = self.direction_class(cell["figure"], cell["ratio"], group[0])
                cells.append(self.td(
                    f'<span class="{cls}">{esc(percent(cell["ratio"]))}</span> {esc(figure_name(cell["figure"], group[1]))}'
                    f"<br><small>{esc(fmt_pair(cell['figure'], cell['before'], cell['after'], group[1]))}"
                    f"<br>{cell['series']} series, "
                    f"{cell['runs_before']:,} | {cell['runs_after']:,} runs</small>", num=True, raw=True))
            rows.append("<tr>" + "".join(cells) + "</tr>")
        dates = "".join(f"<li>{esc(t['label'])}: first run under the new versions {esc(utc(t['at']))} UTC</li>"
                        for t in comparison)
        parts.append(self.table(head, rows, "versions"))
        parts.append(f'<ul class="note">{dates}</ul>')
        return "".join(parts)

    def regressions_section(self, snapshot: list[Any], shifts: list[dict[str, Any]]) -> str:
        r = self.r
        rg = r.rg
        parts = ["<h3>Verdicts now</h3>",
                 "<p>The agent's live verdicts, computed as it restores them (each series' last runs): every watched "
                 "figure in <span class=\"badge regression\">regression</span>, <span class=\"badge suspicious\">"
                 "suspicious</span> or <span class=\"badge improvement\">improvement</span>. The change is the median "
                 "of the last 3 runs over the baseline (the median of the current segment's accepted runs). See "
                 "docs/REGRESSIONS.md.</p>"]
        order = {rg.REGRESSION: 0, rg.SUSPICIOUS: 1, rg.IMPROVEMENT: 2}
        items = [(sv.record, v) for sv in snapshot for v in sv.verdicts.values() if v.state in order]
        items.sort(key=lambda x: (order[x[1].state], _gpu_order(x[0].key()[:4]), x[0].workload, x[0].precision,
                                  x[0].shape, x[1].figure))
        notes = any(v.reason for _, v in items)
        head = ([("State", False), ("Device", False), ("Series", False), ("Figure", False), ("Change", True),
                 ("Now", True), ("Baseline", True), ("Runs in segment", True)] + ([("Note", False)] if notes else []))

        def row(record: Any, v: Any) -> str:
            cls = self.direction_class(v.figure, v.ratio, record.workload)
            return ("<tr>" + self.td(self.badge(v.state), raw=True) + self.device_cell(record.key()[:4])
                    + self.series_cell(record.key()) + self.td(figure_name(v.figure, record.precision))
                    + self.td(percent(v.ratio), num=True, cls=cls)
                    + self.td(fmt(v.figure, v.current, record.precision), num=True)
                    + self.td(fmt(v.figure, v.baseline, record.precision), num=True)
                    + self.td(str(v.runs), num=True) + (self.td(v.reason or "", cls="wrapok") if notes else "")
                    + "</tr>")

        suspicious = [x for x in items if x[1].state == rg.SUSPICIOUS]
        if len(suspicious) > MAX_SUSPICIOUS_SHOWN:  # many: the firm verdicts first, these one click away
            items = [x for x in items if x[1].state != rg.SUSPICIOUS]
        if items:
            parts.append(self.table(head, (row(*x) for x in items[:MAX_VERDICT_ROWS])))
            if len(items) > MAX_VERDICT_ROWS:
                parts.append(f'<p class="note">The first {MAX_VERDICT_ROWS} of {len(items):,} are listed.</p>')
        elif not suspicious:
            parts.append('<p><span class="badge ok">ok</span> No series is in regression, suspicious or improved '
                         "now.</p>")
        if len(suspicious) > MAX_SUSPICIOUS_SHOWN:
            parts.append(f"<details><summary>{len(suspicious):,} suspicious verdicts (a few runs beyond the minimum "
                         "effect, not yet a regression)</summary>"
                         + self.table(head, (row(*x) for x in suspicious[:MAX_VERDICT_ROWS]))
                         + (f'<p class="note">The first {MAX_VERDICT_ROWS} are listed.</p>'
                            if len(suspicious) > MAX_VERDICT_ROWS else "") + "</details>")
        # the latest version change of each series
        changes = [(sv.record, c) for sv in snapshot for c in sv.changes.values()
                   if c.state in (rg.REGRESSION, rg.IMPROVEMENT) and (c.at is None or c.at >= r.cutoff)
                   and not (c.figure in RESTATING and r.has_rate(sv.record.key()))]
        changes.sort(key=lambda x: (order.get(x[1].state, 3), -(x[1].at or 0), _gpu_order(x[0].key()[:4])))
        parts.append("<h3>Version changes that moved a figure</h3>")
        parts.append("<p>The latest version change of each series (while among its last runs), judged on its own as "
                     "the agent does: the first 10 runs after it against the last 10 before (Mann\u2013Whitney, "
                     "p \u2264 0.01, and at least the minimum effect); figures that restate the speed are left "
                     "out.</p>")
        if changes:
            crow = []
            for record, c in changes:
                old = {k: a for k, (a, _) in c.changes.items()}
                new = {k: b for k, (_, b) in c.changes.items()}
                crow.append("<tr>" + self.td(utc(c.at)) + self.td(self.badge(c.state), raw=True)
                            + self.td(change_label(old, new), cls="wrapok") + self.device_cell(record.key()[:4])
                            + self.series_cell(record.key()) + self.td(figure_name(c.figure, record.precision))
                            + self.td(percent(c.ratio), num=True, cls=self.direction_class(c.figure, c.ratio, record.workload))
                            + self.td(_p(c.p_value), num=True) + self.td(f"{c.before} | {c.after}", num=True) + "</tr>")
            parts.append(self.table([("When (UTC)", False), ("State", False), ("Version change", False),
                                     ("Device", False), ("Series", False), ("Figure", False), ("Change", True),
                                     ("p", True), ("Runs", True)], crow))
        else:
            parts.append("<p>None: no recent version change moved a watched figure.</p>")
        # change points over the whole history
        parts.append("<h3>Change points in the history</h3>")
        parts.append("<p>Every shift of the whole history found by the change-point analysis of "
                     "<code>sixdim report regressions</code> (E-Divisive means, version changes as known break points, "
                     "p \u2264 0.001 and at least the minimum effect), newest first, with the versions either side. "
                     "For a series with a rate, time, fraction of peak, energy efficiency and p50 latency are left "
                     "out: they restate its speed's or power's shift.</p>")
        if shifts:
            srows = []
            for s in shifts[:MAX_CHANGE_POINTS]:
                device = (s["hostname"], s["device_type"], s["gpu"], s["uuid"])
                old, new = s["versions_before"], s["versions_after"]
                label = change_label(old, new, most=2) if s["version_changed"] else "\u2014"
                full = change_label(old, new) if s["version_changed"] else ""
                srows.append("<tr>" + self.td(utc(s["at"])) + self.td(self.badge(s["state"]), raw=True)
                             + self.td(percent(s["change_ratio"]), num=True,
                                       cls="worse" if s["state"] == rg.REGRESSION else "better")
                             + (self.device_cell(device) if device in r.colour else self.td(s["gpu"]))
                             + self.series_cell((s["hostname"], s["device_type"], s["gpu"], s["uuid"],
                                                 s["workload"], s["precision"], s["shape"]))
                             + self.td(figure_name(s["figure"], s["precision"]))
                             + self.td(esc(fmt_pair(s["figure"], s["median_before"], s["median_after"], s["precision"]))
                                       + f"<br><small>{s['runs_before']:,} | {s['runs_after']:,} runs, "
                                         f"p {esc(_p(s['p_value']))}</small>", num=True, raw=True)
                             + self.td(label, cls="wrapok", title=full) + "</tr>")
            if len(shifts) > MAX_CHANGE_POINTS:
                parts.append(f'<p class="note">The newest {MAX_CHANGE_POINTS} of {len(shifts):,} are listed; '
                             "<code>sixdim report regressions</code> lists them all.</p>")
            parts.append(self.table([("When (UTC)", False), ("State", False), ("Change", True), ("Device", False),
                                     ("Series", False), ("Figure", False), ("Median before \u2192 after", True),
                                     ("Version change", False)], srows))
        else:
            parts.append("<p>None found.</p>")
        return "".join(parts)


def _short_uuid(uuid: str) -> str:
    """``GPU-3f1c9a52…``: enough to tell boards apart; the whole UUID is the cell's title."""
    return uuid[:12] + "\u2026" if len(uuid) > 13 else uuid or "\u2014"


def fmt_pair(figure: str, before: float | None, after: float | None, precision: str = "") -> str:
    """``688.3 → 638.9 TFLOP/s``: the unit once where both sides share it."""
    a, b = fmt(figure, before, precision), fmt(figure, after, precision)
    head, _, unit = a.rpartition(" ")
    if head and b.endswith(" " + unit):
        return f"{head} \u2192 {b}"
    return f"{a} \u2192 {b}"


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        days = seconds / 86400
        return "day" if days == 1 else "week" if days == 7 else f"{days:g} days"
    if seconds >= 3600:
        hours = seconds / 3600
        return "hour" if hours == 1 else f"{hours:g} hours"
    return f"{seconds / 60:g} minutes"


def build(path: str, *, since: float | None = None, settings: Any = None, now: float | None = None,
          note: str = "") -> tuple[str, dict[str, Any]]:
    """The page of the history at ``path`` and a few facts about it (runs, series, charts, seconds).
    Raises :class:`HistoryError` for a history that is missing or not one, :class:`MissingExtra`
    without plotly."""
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
