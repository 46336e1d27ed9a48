"""The HTML report's page: the model (agent/report/model.py) rendered as one self-contained HTML
document, with its CSS, plotly charts and the checks its scripts run in the browser.  What each part
shows is decided here, as tables of :class:`Row` and :class:`Cell`; the markup is the Jinja2 templates
of :mod:`sixdim.report.templates`, which escape every text.  Only plotly's figures are escaped here
(:func:`~sixdim.report.format.esc`): plotly reads their names, labels and hover texts as HTML."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from sixdim.core.catalog import FAILURE_STATUSES, NOT_RUN_STATUSES, RESTATING
from sixdim.core.results import SeriesKey
from sixdim.report.format import (
    CHART_HEIGHT,
    COMPONENTS,
    FONT,
    MAX_CHANGE_POINTS,
    MAX_CHARTS,
    MAX_SHAPE_ROWS,
    MAX_SUSPICIOUS_SHOWN,
    MAX_VERDICT_ROWS,
    SUITE_RUN,
    TRANSITION_COLOURS,
    change_label,
    duration,
    esc,
    figure_name,
    fmt,
    fmt_pair,
    gpu_order,
    p_value_text,
    percent,
    short_uuid,
    time_axis,
    unit_of,
    utc,
    value_range,
)
from sixdim.report.model import Report, rounded
from sixdim.report.templates import render

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
table.dims th, table.dims td { white-space: normal; padding: 4px 8px; }
table.dims td.num, table.dims td.absent { white-space: nowrap; }
table.dims td { overflow-wrap: break-word; }
table.dims td.device, table.dims td.shape { overflow-wrap: anywhere; } table.dims td.shape { min-width: 8em; }
.nb { white-space: nowrap; }
@media (max-width: 1100px) { table.dims td.num { white-space: normal; }
                             table.dims th, table.dims td { padding: 4px 6px; } }
@media (max-width: 900px) { main { padding: 20px 14px 48px; } table.dims { font-size: 12px; }
                            table.dims th, table.dims td { padding: 3px 4px; } }
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


@dataclass(frozen=True)
class Cell:
    """One table cell, as the ``parts`` template draws it by ``kind``: ``text`` (the text, escaped), ``badge``
    (a verdict's state), ``device`` (a colour swatch and the device's label), ``series`` (a label that may
    break after its commas), ``when`` (a UTC time that breaks only between its date and clock), ``compare``
    and ``medians`` (a change and its figures on two lines, from ``extra``)."""

    text: str = ""
    kind: str = "text"
    num: bool = False
    cls: str = ""
    title: str = ""
    colour: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def classes(self) -> str:
        """The cell's classes: ``absent`` for a text cell showing ``—`` (nothing measured), else ``num``
        for a number (right-aligned), after its own."""
        if self.kind == "text" and self.text == "\u2014":
            return (self.cls + " absent").strip()
        if self.num:
            return (self.cls + " num").strip()
        return self.cls


@dataclass(frozen=True)
class Row:
    """A table row; ``first`` marks the first row of a group (a heavier line above it)."""

    cells: list[Cell]
    first: bool = False


class Page:
    """Renders a :class:`Report` as HTML with plotly charts: what each part shows is decided here, its
    markup is in :mod:`sixdim.report.templates` (autoescaped)."""

    def __init__(self, report: Report, pio: Any, plotlyjs: str) -> None:
        self.r = report
        self.pio = pio
        self.plotlyjs = plotlyjs
        self.charts = 0

    # -- pieces

    def chart(self, figure: dict[str, Any], height: int = CHART_HEIGHT) -> Markup:
        """A plotly chart as markup: plotly writes its own HTML and script from the figure, whose
        texts (names, hover texts, labels) the callers escape, as plotly reads them as HTML."""
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
        return render("chart", body=Markup(body))

    @staticmethod
    def td(text: str, *, num: bool = False, cls: str = "", title: str = "") -> Cell:
        return Cell(text, num=num, cls=cls, title=title)

    @staticmethod
    def when_cell(seconds: float) -> Cell:
        """A time (UTC) that may break between its date and its time, nowhere else."""
        date, _, clock = utc(seconds).partition(" ")
        return Cell(kind="when", extra={"date": date, "clock": clock})

    def device_cell(self, device: tuple[str, str, str, str]) -> Cell:
        return Cell(self.r.labels[device], kind="device", colour=self.r.colour[device])

    def series_cell(self, key: SeriesKey) -> Cell:
        """Precision, workload and shape; a long shape may break after its commas."""
        return Cell(self.r.series_label(key), kind="series")

    def cause_cell(self, causes: Sequence[Any]) -> Cell:
        """The most likely cause's evidence ("power limit 700 W → 500 W") with every cause
        listed (up to 3, each with its title) in the cell's title; ``—`` where none was named (an
        improvement, or runs that recorded no conditions).  ``causes``: :class:`sixdim.verdicts.causes.Finding`
        objects or their ``to_dict()``."""
        from sixdim.verdicts.causes import Finding, describe

        findings = [c if isinstance(c, Finding) else Finding(c["cause"], c["evidence"]) for c in causes]
        if not findings:
            return self.td("\u2014")
        return self.td(findings[0].evidence, cls="wrapok", title=describe(findings, limit=3))

    @staticmethod
    def badge(state: str) -> Cell:
        return Cell(state, kind="badge")

    def direction_class(self, figure: str, ratio: float | None, workload: str = "",
                        effect_of: str | None = None) -> str:
        """``worse``/``better`` when the change is at least the minimum effect of the figure and
        workload (``[regression.effects]`` as the verdicts use it), by the figure's direction.
        ``effect_of``: the figure whose minimum effect applies, where ``figure`` only gives the
        direction (a speed shown as a rate whatever figure it came from)."""
        if ratio is None or not math.isfinite(ratio):
            return ""
        worse = self.r.rg.WATCHED.get(figure, -1) * (ratio - 1.0)
        if abs(ratio - 1.0) < self.r.settings.effects_for(effect_of or figure, workload)[1]:
            return ""
        return "worse" if worse > 0 else "better"

    # -- sections

    def render(self) -> str:
        r = self.r
        snapshot = r.verdicts()
        shifts = r.change_points()
        state_of = self._states(snapshot, shifts)
        sections = [
            {"id": "dimensions", "title": "Six dimensions per device and workload", "html": self.dimensions_section()},
            {"id": "trends", "title": "Trends over time", "html": self.trends_section(state_of)},
            {"id": "versions", "title": "Version comparison", "html": self.versions_section()},
            {"id": "regressions", "title": "Regressions", "html": self.regressions_section(snapshot, shifts)},
        ]
        header = self.header(snapshot, shifts, [(s["id"], s["title"]) for s in sections])
        title = "sixdim report \u2014 " + (", ".join(r.hosts) if r.hosts else "empty history")
        return str(render("page", charts=self.charts, title=title, error_script=Markup(ERROR_SCRIPT), css=Markup(CSS),
                          plotlyjs=Markup(self.plotlyjs), header=header, sections=sections, made=utc(r.now),
                          path=r.data.path, done_script=Markup(DONE_SCRIPT)))

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

    def header(self, snapshot: list[Any], shifts: list[dict[str, Any]], toc: list[tuple[str, str]]) -> Markup:
        r = self.r
        data = r.data
        models = Counter(r.models[d] for d in r.devices if d[1] == "cuda")
        gpus = ", ".join(f"{n} \u00d7 {m or 'unknown model'}" for m, n in models.most_common())
        cpus = [d for d in r.devices if d[1] != "cuda"]
        span, days = "\u2014", 0.0
        if data.first is not None and data.last is not None and data.last >= r.cutoff:
            shown_first = max(data.first, r.cutoff)
            days = (data.last - shown_first) / 86400.0
            span = f"{utc(shown_first)} \u2192 {utc(data.last)} UTC"
        elif data.first is not None:
            span = f"no run since {utc(r.cutoff)} UTC (the last {utc(data.last)} UTC)"
        regressions = sum(v.state == "regression" for sv in snapshot for v in sv.verdicts.values())
        suspicious = sum(v.state == "suspicious" for sv in snapshot for v in sv.verdicts.values())
        # failures apart from the cases that did not run (never failures), and interruptions apart from both:
        # rows an older sixdim wrote per interrupted case are among the skipped runs read, and belong there
        legacy = data.interrupted.legacy_rows
        failed = {k: n for k, n in data.statuses.items() if k in FAILURE_STATUSES and n}
        not_run = {k: n - (legacy if k == "skipped" else 0) for k, n in data.statuses.items() if k in NOT_RUN_STATUSES}
        not_run = {k: n for k, n in not_run.items() if n > 0}
        what = [", ".join(r.hosts) or "no hosts", gpus or "no GPU"] + ([f"{len(cpus)} CPU device(s)"] if cpus else [])
        cards = [("Runs", f"{data.runs - legacy:,}", ""),
                 ("Failures", f"{sum(failed.values()):,}", "warn" if failed else ""),
                 ("Not run", f"{sum(not_run.values()):,}", ""),
                 ("Interrupted", f"{data.interrupted.runs:,}", ""),
                 ("Series", f"{len(data.series):,}", ""), ("Devices", f"{len(r.devices)}", ""),
                 ("Days", f"{days:.1f}", ""),
                 ("Regressions now", f"{regressions}", "bad" if regressions else "good"),
                 ("Suspicious now", f"{suspicious}", "warn" if suspicious else ""),
                 ("Change points", f"{len(shifts)}", "")]
        notes = []
        if failed:
            counts = ", ".join(f"{k} {n:,}" for k, n in sorted(failed.items()))
            notes.append(f"Failures: {counts} (only incorrect runs carry figures).")
        if not_run:
            counts = ", ".join(f"{k} {n:,}" for k, n in sorted(not_run.items()))
            notes.append(f"Not run, never failures: {counts} (the device lacks what the case needs, or the guard "
                         "found the GPU busy).")
        if data.interrupted.runs:
            notes.append(f"Interrupted suite runs: {data.interrupted.runs:,}, leaving {data.interrupted.cases_left:,} "
                         "case(s) unrun (a shutdown, Ctrl-C or the agent's death; each recorded once, not as runs).")
        many_hosts = len(r.hosts) > 1
        devices, versions = [], []
        for device in (r.devices if data.runs else []):
            keys = [k for k in data.series if k[:4] == device]
            runs = sum(sum(data.series[k].statuses.values()) for k in keys)
            now = self._latest_versions(keys)
            devices.append(Row([self.device_cell(device), *([self.td(device[0])] if many_hosts else []),
                                self.td(r.models[device] or "\u2014"), self.td(f"{runs:,}", num=True),
                                self.td(now.get("driver") or "\u2014"),
                                self.td(short_uuid(device[3]), cls="small", title=device[3])]))
        for component, items in (self._versions_seen().items() if data.runs else ()):
            names = " \u2192 ".join(name for name, _, _, _ in items)
            runs_text = " | ".join(f"{n:,}" for _, _, _, n in items)
            changed = ", ".join(utc(first) for _, first, _, _ in items[1:]) or "\u2014"
            versions.append(Row([self.td(COMPONENTS[component], cls="group"), self.td(names, cls="wrapok"),
                                 self.td(runs_text, num=True), self.td(changed)]))
        return render("header", subtitle=" \u00b7 ".join(what + [span]), note=r.note,
                      since=utc(r.cutoff) if r.since is not None else "", cards=cards, notes=notes, toc=toc,
                      runs=data.runs, devices=devices, versions=versions,
                      device_head=[("Device", False)] + ([("Host", False)] if many_hosts else [])
                      + [("Model", False), ("Runs", True), ("Driver now", False), ("UUID", False)],
                      version_head=[("Component", False), ("Versions", False), ("ok runs", True),
                                    ("New version from (UTC)", False)])

    def _latest_versions(self, keys: Sequence[SeriesKey]) -> dict[str, str]:
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

    def dimensions_section(self) -> Markup:
        r = self.r
        rows = r.dimensions()
        any_suite = any(row["suite"] for row in rows)
        head = [("Workload", False), ("Device", False)] + ([("Suite", False)] if any_suite else []) + [
            ("Shapes", True), ("Speed", True), ("Accuracy", True), ("Linearity", True), ("Power", True),
            ("Memory", True), ("Stability", True), ("Of peak", True), ("Last run (UTC)", False)]
        out: list[Row] = []
        previous = None
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
                      self.when_cell(row["ended"])]
            out.append(Row(cells, first=first and bool(out)))
        shapes, total = self.shapes_rows() if rows else ([], 0)
        return render("dimensions", head=head, rows=out, shapes=shapes, total=total,
                      more=f" The first {MAX_SHAPE_ROWS:,} of {total:,} are shown." if total > len(shapes) else "",
                      shape_head=[("Workload", False), ("Device", False), ("Shape", False), ("Suite", False),
                                  ("Speed", True), ("Accuracy", True), ("Linearity", True), ("Power", True),
                                  ("Memory", True), ("Stability", True), ("Of peak", True), ("Last run (UTC)", False)])

    def shapes_rows(self) -> tuple[list[Row], int]:
        """The latest ok run of each shape in the shown time (at most :data:`MAX_SHAPE_ROWS`), and how many
        there are."""
        r = self.r
        rows: list[Row] = []
        keys = sorted(r.data.series, key=lambda k: (r.group_labels[r.data.series[k].group], gpu_order(k[:4]), k[6]))
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
                rows.append(Row([
                    self.td(r.group_labels[s.group]), self.device_cell(key.device),
                    self.td(key.shape or "\u2014", cls="shape"),
                    self.td(suite),
                    self.td(fmt(speed, figures.get(speed), key.precision) if speed else "\u2014", num=True),
                    self.td(fmt("accuracy", figures.get("accuracy")), num=True),
                    self.td(fmt("linearity_ratio", figures.get("linearity_ratio")), num=True),
                    self.td(fmt("power_watts", figures.get("power_watts")), num=True),
                    self.td(fmt("memory_bytes", figures.get("memory_bytes")), num=True),
                    self.td(fmt("stability_ratio", figures.get("stability_ratio")), num=True),
                    self.td(fmt("peak_ratio", figures.get("peak_ratio")), num=True),
                    self.when_cell(ended)]))
        return rows, total

    def trends_section(self, state_of: dict[tuple, int]) -> Markup:
        r = self.r
        groups = [g for g in r.groups if r.group_speed(g)]
        runs = {g: sum(len(r.arrays[k]) for k in r.groups[g]) for g in groups}
        groups = [g for g in groups if runs[g]]
        ranked = sorted(groups, key=lambda g: (-state_of.get(g, 0), -runs[g], r.group_labels[g]))
        shown = sorted(ranked[:MAX_CHARTS], key=lambda g: r.group_labels[g])
        rest = sorted(ranked[MAX_CHARTS:], key=lambda g: r.group_labels[g])
        return render("trends", charts=[self.trend_chart(g, runs[g]) for g in shown], groups=len(ranked),
                      most=MAX_CHARTS, not_charted=", ".join(r.group_labels[g] for g in rest))

    def trend_chart(self, group: tuple[str, str, str, str], runs: int) -> dict[str, Any]:
        """One trend chart: its number, title, note and markup, for the ``trends`` template."""
        r = self.r
        speed = r.group_speed(group)
        assert speed is not None  # :meth:`trends` charts only the groups with a speed figure
        lines, width, shapes = r.trend(group, speed)
        figures = [(speed, lines)]
        for extra in ("power_watts", "memory_bytes"):
            extra_lines, _, _ = r.trend(group, extra, width)
            if extra_lines:
                figures.append((extra, extra_lines))
        marks = r.marks({line["device"] for line in lines})
        levels = min(len(marks), 3)
        headroom = 0.11 * levels  # the top of the plot is the marks' labels', not the data's
        traces: list[dict[str, Any]] = []
        views: list[dict[str, Any]] = []
        for number, (figure, found) in enumerate(figures):
            unit, kind = unit_of(figure, group[1])
            scale = 1.0 / 2 ** 30 if kind == "binary" else 1.0
            suffix = " GiB" if kind == "binary" else f" {unit}"
            tick = "" if kind == "si" else ","  # plotly picks the digits; SI prefixes, or thousands separators
            first = len(traces)
            ys: list[float] = []
            for line in found:
                device = line["device"]
                y = line["y"] if scale == 1.0 else [rounded(v * scale) for v in line["y"]]
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
                    hover += ("<br>geometric mean of %{customdata} shape(s)" if width == SUITE_RUN
                              else "<br>median of %{customdata} run(s)")
                trace["hovertemplate"] = hover + "<extra></extra>"
                traces.append(trace)
            bottom, top = value_range(min(ys), max(ys))
            top += (top - bottom) * headroom / (1 - headroom)
            views.append({"figure": figure, "start": first, "end": len(traces), "tick": tick,
                          "title": self._axis_title(figure, shapes, group[1]),
                          "range": [rounded(bottom), rounded(top)]})
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
        times = [x / 1000 for _, found in figures for line in found for x in line["x"]] + [m["at"] for m in marks]
        layout = {
            "margin": {"l": 70, "r": 20, "t": 40 if len(views) > 1 else 12, "b": 30},
            "xaxis": {**time_axis(min(times), max(times)), "gridcolor": "#eceff2", "linecolor": "#c3ccd5",
                      "automargin": True},
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
        how = ("each run" if width is None else "each suite run" if width == SUITE_RUN
               else f"the median per {duration(float(width))}")
        several = f", the geometric mean over {shapes} shapes" if shapes > 1 else ""
        unit = unit_of(speed, group[1])[0]
        title = f"{r.group_labels[group]} \u2014 {'speed' if what == unit else what} ({unit})"
        sub = (f"{runs:,} ok runs on {len(lines)} device(s); a point is {how}{several}"
               + (f"; {len(marks)} version change(s) marked" if marks else ""))
        height = max(CHART_HEIGHT, 130 + 21 * len(lines) if many else 0) + (40 if len(views) > 1 else 0)
        number = self.charts + 1  # the chart's own number, which self.chart counts
        return {"number": number, "title": title, "note": sub,
                "html": self.chart({"data": traces, "layout": layout}, height=height)}

    @staticmethod
    def _axis_title(figure: str, shapes: int, precision: str = "") -> str:
        unit, kind = unit_of(figure, precision)
        name = figure_name(figure, precision)
        unit = "GiB" if kind == "binary" else unit
        text = f"{name} ({unit})" if unit and name != unit else unit or name
        return text + (" \u00b7 geo. mean" if shapes > 1 else "")

    def versions_section(self) -> Markup:
        r = self.r
        comparison = r.comparison()
        if not comparison:
            seen = self._versions_seen()
            single = ", ".join(f"{COMPONENTS[c]} {items[0][0]}" for c, items in seen.items() if len(items) == 1)
            return render("versions", compared=False, single=single)
        groups = sorted({g for t in comparison for g in t["cells"]}, key=lambda g: r.group_labels[g])
        traces: list[dict[str, Any]] = []
        for n, t in enumerate(comparison):
            x, y, text, colours, hover = [], [], [], [], []
            for group in groups:
                cell = t["cells"].get(group)
                if cell is None or cell["ratio"] is None:
                    continue
                speed = 1.0 / cell["ratio"] if cell["figure"] == "seconds" else cell["ratio"]
                cls = self.direction_class("flops", speed, group[0], effect_of=cell["figure"])
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
        chart = self.chart({"data": traces, "layout": layout}, height=330)
        head = [("Workload", False)] + [(f"{t['short']}", True) for t in comparison]
        rows = []
        for group in groups:
            cells = [self.td(r.group_labels[group], cls="group")]
            for t in comparison:
                cell = t["cells"].get(group)
                if cell is None:
                    cells.append(self.td("\u2014"))
                    continue
                cells.append(Cell(kind="compare", num=True, extra={
                    "cls": self.direction_class(cell["figure"], cell["ratio"], group[0]),
                    "percent": percent(cell["ratio"]), "figure": figure_name(cell["figure"], group[1]),
                    "pair": fmt_pair(cell["figure"], cell["before"], cell["after"], group[1]),
                    "counts": f"{cell['series']} series, {cell['runs_before']:,} | {cell['runs_after']:,} runs"}))
            rows.append(Row(cells))
        return render("versions", compared=True, min_effect=f"{r.settings.min_effect * 100:.1f}%", chart=chart,
                      head=head, rows=rows, dates=[(t["label"], utc(t["at"])) for t in comparison])

    def regressions_section(self, snapshot: list[Any], shifts: list[dict[str, Any]]) -> Markup:
        r = self.r
        rg = r.rg
        order = {rg.REGRESSION: 0, rg.SUSPICIOUS: 1, rg.IMPROVEMENT: 2}
        items = [(sv.record, v, sv.causes if v.state in (rg.REGRESSION, rg.SUSPICIOUS) else [])
                 for sv in snapshot for v in sv.verdicts.values() if v.state in order]
        items.sort(key=lambda x: (order[x[1].state], gpu_order(x[0].key().device), x[0].workload, x[0].precision,
                                  x[0].shape, x[1].figure))
        notes = any(v.reason for _, v, _ in items)
        head = ([("State", False), ("Device", False), ("Series", False), ("Figure", False), ("Change", True),
                 ("Now", True), ("Baseline", True), ("Runs in segment", True), ("Likely cause", False)]
                + ([("Note", False)] if notes else []))

        def row(record: Any, v: Any, causes: list[Any]) -> Row:
            cls = self.direction_class(v.figure, v.ratio, record.workload)
            return Row([self.badge(v.state), self.device_cell(record.key().device),
                        self.series_cell(record.key()), self.td(figure_name(v.figure, record.precision)),
                        self.td(percent(v.ratio), num=True, cls=cls),
                        self.td(fmt(v.figure, v.current, record.precision), num=True),
                        self.td(fmt(v.figure, v.baseline, record.precision), num=True),
                        self.td(str(v.runs), num=True), self.cause_cell(causes),
                        *([self.td(v.reason or "", cls="wrapok")] if notes else [])])

        suspicious = [x for x in items if x[1].state == rg.SUSPICIOUS]
        many_suspicious = len(suspicious) > MAX_SUSPICIOUS_SHOWN  # many: the firm verdicts first, these one click away
        if many_suspicious:
            items = [x for x in items if x[1].state != rg.SUSPICIOUS]
        # the latest version change of each series
        changes = [(sv.record, c) for sv in snapshot for c in sv.changes.values()
                   if c.state in (rg.REGRESSION, rg.IMPROVEMENT) and (c.at is None or c.at >= r.cutoff)
                   and not (c.figure in RESTATING and r.has_rate(sv.record.key()))]
        changes.sort(key=lambda x: (order.get(x[1].state, 3), -(x[1].at or 0), gpu_order(x[0].key().device)))
        crows = []
        for record, c in changes:
            old = {k: a for k, (a, _) in c.changes.items()}
            new = {k: b for k, (_, b) in c.changes.items()}
            crows.append(Row([self.td(utc(c.at)), self.badge(c.state),
                              self.td(change_label(old, new, settings=True), cls="wrapok"),
                              self.device_cell(record.key().device),
                              self.series_cell(record.key()), self.td(figure_name(c.figure, record.precision)),
                              self.td(percent(c.ratio), num=True,
                                      cls=self.direction_class(c.figure, c.ratio, record.workload)),
                              self.td(p_value_text(c.p_value), num=True), self.td(f"{c.before} | {c.after}", num=True),
                              self.cause_cell(r.change_causes(record.key(), c))]))
        # change points over the whole history
        srows = []
        listed = shifts[:MAX_CHANGE_POINTS]
        if listed:
            r.add_shift_causes(listed)  # the conditions of the listed shifts' runs only
        for s in listed:
            device = (s["hostname"], s["device_type"], s["gpu"], s["uuid"])
            old, new = s["versions_before"], s["versions_after"]
            label = change_label(old, new, most=2, settings=True) if s["version_changed"] else "\u2014"
            full = change_label(old, new, settings=True) if s["version_changed"] else ""
            srows.append(Row([
                self.td(utc(s["at"])), self.badge(s["state"]),
                self.td(percent(s["change_ratio"]), num=True, cls="worse" if s["state"] == rg.REGRESSION else "better"),
                self.device_cell(device) if device in r.colour else self.td(s["gpu"]),
                self.series_cell(SeriesKey(s["hostname"], s["device_type"], s["gpu"], s["uuid"], s["workload"],
                                           s["precision"], s["shape"], s["mode"], s["pass"])),
                self.td(figure_name(s["figure"], s["precision"])),
                Cell(kind="medians", num=True, extra={
                    "pair": fmt_pair(s["figure"], s["median_before"], s["median_after"], s["precision"]),
                    "runs": f"{s['runs_before']:,} | {s['runs_after']:,} runs", "p": p_value_text(s["p_value"])}),
                self.td(label, cls="wrapok", title=full), self.cause_cell(s["causes"])]))
        return render("regressions", most=MAX_VERDICT_ROWS, verdict_head=head,
                      verdicts=[row(*x) for x in items[:MAX_VERDICT_ROWS]], verdicts_total=len(items),
                      many_suspicious=many_suspicious,
                      suspicious=[row(*x) for x in suspicious[:MAX_VERDICT_ROWS]] if many_suspicious else [],
                      suspicious_total=len(suspicious), changes=crows, shifts=srows, shifts_total=len(shifts),
                      most_shifts=MAX_CHANGE_POINTS,
                      change_head=[("When (UTC)", False), ("State", False), ("Version change", False),
                                   ("Device", False), ("Series", False), ("Figure", False), ("Change", True),
                                   ("p", True), ("Runs", True), ("Likely cause", False)],
                      shift_head=[("When (UTC)", False), ("State", False), ("Change", True), ("Device", False),
                                  ("Series", False), ("Figure", False), ("Median before \u2192 after", True),
                                  ("Version change", False), ("Likely cause", False)])
