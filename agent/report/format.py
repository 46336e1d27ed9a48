"""How the HTML report (agent/report/html.py) names, formats and bounds what it shows: units and
figure names, numbers with SI or binary prefixes, times, version changes, and the page's limits
(charts, points, rows)."""

from __future__ import annotations

import html
import math
from datetime import datetime, timezone
from typing import Any

from sixdim.core import catalog, text
from sixdim.workloads.registry import INTEGER_PRECISIONS

MAX_CHARTS = 24
"""Trend charts at most; the rest are named in a note."""
MAX_POINTS = 1500
"""Points per trend chart and figure, summed over its lines: within it, a point per run (a point per suite
run for a workload with several shapes); beyond it, medians per time bucket."""
SUITE_RUN = "suite run"
"""The grouping of a trend chart with several shapes and at most :data:`MAX_POINTS` suite runs: a point per
suite run, the geometric mean over the shapes it measured (:meth:`sixdim.report.model.Report.trend`)."""
SUITE_RUN_GAP = 600.0
"""Seconds between two runs of one workload (their starts) beyond which they belong to different suite
runs: a suite run measures a workload's shapes one after the other, each case well within the default
per-case timeout (600 s), and a repeated shape starts a new suite run whatever the gap."""
MIN_MULTI_SHAPE_BUCKET = 3600.0
"""A workload with several shapes and more than :data:`MAX_POINTS` suite runs is drawn per bucket of at
least an hour (its shapes' geometric mean): a bucket then holds whole suite runs, not a few of their shapes."""
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
DATE_TICKS = [{"dtickrange": [None, 1000], "value": "%b %-d %H:%M:%S.%L"},
              {"dtickrange": [1000, 60000], "value": "%b %-d %H:%M:%S"},
              {"dtickrange": [60000, 86400000], "value": "%b %-d %H:%M"},
              {"dtickrange": [86400000, "M1"], "value": "%b %-d"},
              {"dtickrange": ["M1", None], "value": "%b %Y"}]
"""Date axis labels on one line (the year is in the page's time span), for a chart over more than one
day: each label as precise as the ticks' spacing (plotly's ``dtick``), so no two ticks read the same."""
DAY_TICKS = [{"dtickrange": [None, 1000], "value": "%H:%M:%S.%L"},
             {"dtickrange": [1000, 60000], "value": "%H:%M:%S"},
             {"dtickrange": [60000, 86400000], "value": "%H:%M"},
             {"dtickrange": [86400000, "M1"], "value": "%b %-d"},
             {"dtickrange": ["M1", None], "value": "%b %Y"}]
"""The same for a chart within one UTC day: times only, the date once, in the axis title
(:func:`time_axis`), rather than the same date on every tick."""
MIN_TIME_SPAN = 600.0
"""Seconds a trend chart's time axis spans at least: a single run, or runs seconds apart, get a few
minutes around them (ticks a minute or more apart), never an axis of milliseconds."""
MIN_HALF_SPAN = 0.05
"""A trend chart's value axis spans at least ±5% of the middle of the data (:func:`value_range`)."""

COMPONENTS = {"driver": "driver", "torch": "torch", "cuda_runtime": "CUDA", "cudnn": "cuDNN", "nccl": "NCCL",
              "vbios": "VBIOS", "onnxruntime": "ONNX Runtime", "power_limit": "power limit", "clocks": "clocks",
              "ecc": "ECC", "mig": "MIG"}
"""The version keys of :data:`sixdim.verdicts.detector.VERSION_KEYS` (the software versions and the GPU
settings), as the page names them, in the order a change names them."""
SETTINGS = {"power_limit": "power limit", "clocks": "applications clocks", "ecc": "ECC", "mig": "MIG"}
"""The GPU settings among the break points (``sixdim.core.conditions.SETTING_KEYS``), as the regression
tables name a change of one ("power limit 700 W → 500 W"); the version comparison and the charts' marks
name software versions only."""
MIN_SIDE_RUNS = 3
"""Runs a series needs either side of a version change to take part in the comparison."""
TRANSITION_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#9d755d", "#72b7b2", "#eeca3b", "#ff9da6")
EXTRA_FIGURES = ("linearity_ratio", "linearity_count")
"""Figures read besides the watched ones (the six dimensions need them)."""

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd",
           "#e6550d", "#31a354", "#756bb1", "#636363")
"""One colour per device, the same in every chart (beyond 20 devices, dashes tell them apart)."""
DASHES = ("solid", "dash", "dot", "dashdot")
FONT = ('system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", '
        '"Liberation Sans", sans-serif')


def unit_of(figure: str, precision: str = "") -> tuple[str, str]:
    """A figure's unit and how to print it (the catalog's); an integer precision's operations are OP."""
    style = catalog.FIGURES_BY_KEY[figure].style if figure in catalog.FIGURES_BY_KEY else "plain"
    return catalog.figure_unit(figure, precision in INTEGER_PRECISIONS), style


def figure_name(figure: str, precision: str = "") -> str:
    return catalog.figure_name(figure, precision in INTEGER_PRECISIONS)


# ---------------------------------------------------------------------------- formatting

def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


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
        return text.si(value, unit)
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


def percent(ratio: float | None, missing: str = "\u2014") -> str:
    """A ratio as a signed change: ``−7.0%``, ``+1.2%``; ``missing`` where there is none (the terminal reports
    print ``-``)."""
    if ratio is None or not math.isfinite(ratio):
        return missing
    pct = (ratio - 1.0) * 100.0
    sign = "\u2212" if pct < 0 else "+"
    return f"{sign}{abs(pct):.1f}%"


def utc(seconds: float | None, *, with_seconds: bool = False) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "\u2014"
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M" + (":%S" if with_seconds else ""))


def p_value_text(p: float | None) -> str:
    if p is None:
        return "\u2014"
    if p <= 0.0:
        return "<1e-300"
    return f"{p:.2g}" if p < 1e-3 else f"{p:.3f}"


def change_label(old: dict[str, str], new: dict[str, str], most: int | None = None, settings: bool = False) -> str:
    """``driver 550.54.15 → 560.28.03``; several changes joined by commas; beyond ``most`` of them,
    the rest are named only (``torch 2.12.1 → 2.13.0, CUDA 12.4 → 12.6 (+ cuDNN, NCCL)``).
    ``settings``: name a change of a GPU setting too (:data:`SETTINGS`), after the versions."""
    names = {**COMPONENTS, **SETTINGS} if settings else COMPONENTS
    changed = [k for k in names if old.get(k) != new.get(k)]
    shown = changed if most is None else changed[:most]
    text = ", ".join(f"{names[k]} {old.get(k) or '?'} \u2192 {new.get(k) or '?'}" for k in shown)
    if len(changed) > len(shown):
        text += " (+ " + ", ".join(names[k] for k in changed[len(shown):]) + ")"
    return text


def gpu_order(device: tuple[str, str, str, str]) -> tuple:
    host, kind, gpu, uuid = device
    return (host, kind != "cuda", int(gpu) if gpu.isdigit() else 1 << 30, gpu, uuid)


def short_uuid(uuid: str) -> str:
    """``GPU-3f1c9a52…``: enough to tell boards apart; the whole UUID is the cell's title."""
    return uuid[:12] + "\u2026" if len(uuid) > 13 else uuid or "\u2014"


def fmt_pair(figure: str, before: float | None, after: float | None, precision: str = "") -> str:
    """``688.3 → 638.9 TFLOP/s``: the unit once where both sides share it."""
    a, b = fmt(figure, before, precision), fmt(figure, after, precision)
    head, _, unit = a.rpartition(" ")
    if head and b.endswith(" " + unit):
        return f"{head} \u2192 {b}"
    return f"{a} \u2192 {b}"


def duration(seconds: float) -> str:
    if seconds >= 86400:
        days = seconds / 86400
        return "day" if days == 1 else "week" if days == 7 else f"{days:g} days"
    if seconds >= 3600:
        hours = seconds / 3600
        return "hour" if hours == 1 else f"{hours:g} hours"
    return f"{seconds / 60:g} minutes"


def time_axis(first: float, last: float) -> dict[str, Any]:
    """A trend chart's time axis (plotly's ``xaxis`` settings) for runs from ``first`` to ``last`` (seconds):

    - the range is the runs' span padded by 3% each side, and at least :data:`MIN_TIME_SPAN` wide
      (centred on the runs), so every point lies inside it and the ticks are never milliseconds apart;
    - within one UTC day (the whole range), the ticks are times only (:data:`DAY_TICKS`) and the date is
      the axis title, once; over more days, each tick names its day (:data:`DATE_TICKS`);
    - either way each label is as precise as the ticks' spacing (a minute apart: minutes; seconds
      apart: seconds), so no two ticks read the same."""
    pad = max(0.03 * (last - first), (MIN_TIME_SPAN - (last - first)) / 2)
    low, high = first - pad, last + pad
    day = datetime.fromtimestamp(low, timezone.utc).date()
    axis: dict[str, Any] = {"type": "date", "range": [int(round(low * 1000)), int(round(high * 1000))]}
    if day == datetime.fromtimestamp(high, timezone.utc).date():
        axis["tickformatstops"] = DAY_TICKS
        axis["title"] = {"text": f"{day:%b} {day.day}, {day.year} (UTC)", "font": {"size": 12}}
    else:
        axis["tickformatstops"] = DATE_TICKS
    return axis


def value_range(low: float, high: float) -> tuple[float, float]:
    """A trend chart's value axis (before room for the version marks' labels) for data from ``low`` to
    ``high``: the data's range padded by 6% of it each side, widened where that is less than
    ±:data:`MIN_HALF_SPAN` (5%) of the data's middle, to that, centred on the middle.

    Why 5%: the verdicts' smallest effect is 1.8% by default (3% for the 3-run rule), so a shift that
    matters takes a fifth of the plot's height or more and stays visible, while a healthy device's
    run-to-run noise (about 1%) stays a small wiggle instead of filling the chart, as a range fitted
    to a few close values (or a single one: ±0.1%) would make it look.  A chart whose data vary more
    than ±5% keeps the data's own range.

    Zero: not forced in (that would flatten a 7% regression into a sliver of the chart); it is the
    bottom only where the padded range would go below it, since every charted figure (a rate, a time,
    power, memory) is positive: the axis never shows negative values."""
    span = high - low
    bottom, top = low - 0.06 * span, high + 0.06 * span
    middle = (low + high) / 2
    least = MIN_HALF_SPAN * abs(middle) or 1.0
    if (top - bottom) / 2 < least:
        bottom, top = middle - least, middle + least
    if low >= 0 > bottom:
        bottom = 0.0
    return bottom, top
