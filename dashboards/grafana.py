"""grafanalib, brought up to date: the panels, variables and layout our dashboards are made of.

grafanalib (0.7.1, January 2024) is the generator: every panel, target, variable, annotation, link
and dashboard below is a grafanalib object, serialised by its ``DashboardEncoder``.  What it emits
by default is dated for Grafana 11 and 12, so :func:`render` corrects its output here, in the
generating code, never by editing JSON by hand (docs/DASHBOARDS.md lists each fix and why):

* ``schemaVersion`` 39 instead of grafanalib's 12 (Grafana's newer APIs skip migrations below 37);
* every datasource a ``{"type": "prometheus", "uid": "${datasource}"}`` object pointing at a
  ``datasource``-type variable, on panels, targets, variables and annotations, so that a provisioned
  dashboard and an imported one both work (no ``${DS_PROMETHEUS}`` input left unresolved);
* the dashboard's legacy keys (``rows``, ``hideControls``, ``sharedCrosshair``, ``style``,
  ``__inputs``, ``gnetId``, ``id``) and the panels' (``span``, ``height``, ``minSpan``, ``error``,
  ``editable``) removed, and ``null`` values dropped (Grafana's model has no use for them and the
  Foundation SDK's decoder crashes on ``datasource: null``);
* targets without Graphite's ``target``, ``query``, ``metric`` and ``step``, and without
  ``intervalFactor: 2`` and ``maxDataPoints: 100``, both of which halve or cap the resolution;
* BarGauge's pre-7 ``options.fieldOptions`` (thresholds as graph thresholds, ``"null"`` as a string)
  turned into ``fieldConfig.defaults`` and ``options.reduceOptions``; Table's ``columns``,
  ``fontSize`` and top-level ``mappings`` moved or removed; Heatmap's pre-9 fields (``cards``,
  ``dataFormat``, ``xAxis``, ``yAxis``, ...) replaced by the current ``options``; Stat's
  ``steps: ""`` and ``calcs: ["mean"]`` replaced by real thresholds and the last value (a mean over
  the time range is how a dashboard ends up showing a "current" figure that is nothing of the sort);
* variables without ``useTags``, ``tagsQuery``, ``tagValuesQuery`` and the interval-only ``auto*``
  keys, with Grafana's current Prometheus variable query object and ``definition``.

Only current panel types are offered: timeseries, stat, table, bargauge, state-timeline and heatmap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import attr
from grafanalib import core as G
from grafanalib._gen import DashboardEncoder

SCHEMA_VERSION = 39
"""Grafana 10.4's schema; Grafana 11 and 12 migrate it forward on load (the requirement is >= 39)."""

DATASOURCE_VARIABLE = "datasource"
DATASOURCE_TYPE = "prometheus"
DATASOURCE = {"type": DATASOURCE_TYPE, "uid": "${" + DATASOURCE_VARIABLE + "}"}
"""Every panel, target, variable and annotation points at the datasource variable."""

ALL = "$__all"
ALL_VALUE = ".*"
"""The All option of every query variable: a regex, so that ``label=~"$var"`` matches an empty label
too (a CPU host's ``gpu`` and ``UUID``, a copy workload's ``precision``)."""

GPU_ONLY = "GPU-only"
MAY_BE_EMPTY = "May be empty"
PER_SHAPE = "Per-shape"
SUMMARY_ONLY = "Summary-only"
"""Markers at the start of a panel description's lines (read back by tests/dashboard_queries.py): the whole panel
(``GPU-only: <why>.``, ``May be empty: <why>.``, ``Per-shape: <what it needs>.``) or one query (``Query B
(what) is GPU-only: ...``, ``Query B (what) may be empty: ...``, ``Query B (what) is per-shape: ...``,
``Query B (what) is summary-only: ...``).

* GPU-only: data only where a GPU is.
* May be empty: legitimately empty on a host running the default configuration or the README's example
  (no regression open, no inference suite, no energy counter, ...).
* Per-shape: reads series exported per shape, which a suite exports only with ``export = "shapes"`` (the
  embedded quick suite does; a suite of one's own exports only its summaries unless it says so); the
  text names what it needs.
* Summary-only: shows the summaries of the workloads that no suite exports per shape, so it is empty where
  every workload is (the default configuration) and has data for a suite exported as summaries only.

Unmarked, a query returns data on every host that runs the default configuration or the README's example,
a CPU-only one included."""

CURRENT_PANEL_TYPES = ("timeseries", "stat", "table", "bargauge", "state-timeline", "heatmap", "row")


# ----------------------------------------------------------------------------- targets

@dataclass(frozen=True)
class Q:
    """One query of a panel: the PromQL, its legend and, when it may legitimately return nothing on a
    host running the default configuration or the README's example, why (``gpu_only``, ``may_be_empty``,
    ``per_shape`` or ``summary_only``)."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False
    name: str = ""
    """What the query shows, in the panel description's per-query markers and table column titles."""
    gpu_only: str | None = None
    may_be_empty: str | None = None
    unit: str | None = None
    """A unit for this query's values only (a field override by query), when the panel mixes units."""
    per_shape: str | None = None
    """What the query needs when it reads series exported per shape only (``export = "shapes"``)."""
    summary_only: str | None = None
    """Why the query shows only the summaries of workloads no suite exports per shape."""


def _target(query: Q, ref: str) -> G.Target:
    return G.Target(expr=query.expr, legendFormat=query.legend, refId=ref, instant=query.instant,
                    format=G.TABLE_TARGET_FORMAT if query.table else G.TIME_SERIES_TARGET_FORMAT,
                    datasource=DATASOURCE)


def _fix_target(target: dict[str, Any]) -> dict[str, Any]:
    """grafanalib's Target emits Graphite's and Grafana 6's keys too; keep what Prometheus reads."""
    for legacy in ("query", "target", "metric", "step", "intervalFactor", "interval"):
        target.pop(legacy, None)
    if not target.get("hide"):
        target.pop("hide", None)
    target["range"] = not target["instant"]
    target["editorMode"] = "code"
    return target


# ----------------------------------------------------------------------------- panels

@dataclass
class PanelSpec:
    """A panel before layout: the grafanalib object plus its width and height on the 24-column grid."""

    panel: G.Panel
    w: int
    h: int


def _ref(i: int) -> str:
    return chr(ord("A") + i)


def _description(text: str, queries: Sequence[Q], gpu_only: str | None, may_be_empty: str | None,
                 per_shape: str | None = None) -> str:
    """The panel description: the whole-panel markers first, then what the panel shows, then the markers
    of single queries, each marker a paragraph of its own."""
    lines = []
    if gpu_only:
        lines.append(f"{GPU_ONLY}: {gpu_only}.")
    if may_be_empty:
        lines.append(f"{MAY_BE_EMPTY}: {may_be_empty}.")
    if per_shape:
        lines.append(f"{PER_SHAPE}: {per_shape}.")
    lines.append(text.strip())
    for i, query in enumerate(queries):
        what = f" ({query.name})" if query.name else ""
        if query.gpu_only and not gpu_only:
            lines.append(f"Query {_ref(i)}{what} is {GPU_ONLY}: {query.gpu_only}.")
        if query.may_be_empty and not may_be_empty:
            lines.append(f"Query {_ref(i)}{what} {MAY_BE_EMPTY.lower()}: {query.may_be_empty}.")
        if query.per_shape and not per_shape:
            lines.append(f"Query {_ref(i)}{what} is {PER_SHAPE.lower()}: {query.per_shape}.")
        if query.summary_only:
            lines.append(f"Query {_ref(i)}{what} is {SUMMARY_ONLY.lower()}: {query.summary_only}.")
    return "\n\n".join(lines)


def _thresholds(steps: Sequence[tuple[float | None, str]]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": color, "value": value} for value, color in steps]}


BASE_THRESHOLDS = ((None, "green"),)


def _query_overrides(queries: Sequence[Q]) -> list[dict[str, Any]]:
    """A unit and a display name per query, for panels that mix figures (a table's columns)."""
    out = []
    for i, query in enumerate(queries):
        properties = []
        if query.unit:
            properties.append({"id": "unit", "value": query.unit})
        if query.table and query.name:
            properties.append({"id": "displayName", "value": query.name})
        if properties:
            value = "Value" if len(queries) == 1 else f"Value #{_ref(i)}"  # how Grafana names a table's values
            matcher = ({"id": "byName", "options": value} if query.table
                       else {"id": "byFrameRefID", "options": _ref(i)})
            out.append({"matcher": matcher, "properties": properties})
    return out


def query_mappings(index: int, mappings: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """An override giving the panel's ``index``-th query (A, B, ...) value mappings of its own."""
    return {"matcher": {"id": "byFrameRefID", "options": _ref(index)},
            "properties": [{"id": "mappings", "value": list(mappings)}]}


def _common(title: str, description: str, queries: Sequence[Q], gpu_only: str | None,
            may_be_empty: str | None, per_shape: str | None = None) -> dict[str, Any]:
    if not queries:
        raise ValueError(f"panel {title!r} has no query")
    return dict(title=title, dataSource=DATASOURCE,
                description=_description(description, queries, gpu_only, may_be_empty, per_shape),
                targets=[_target(q, _ref(i)) for i, q in enumerate(queries)])


LEGEND_CALCS = ("lastNotNull", "min", "max")
"""A time series legend's columns unless a panel says otherwise."""


def timeseries(title: str, description: str, queries: Sequence[Q], unit: str, *, w: int = 12, h: int = 8,
               gpu_only: str | None = None, may_be_empty: str | None = None, per_shape: str | None = None,
               bars: bool = False, stack: bool = False, results: bool = False, log: bool = False,
               soft_min: int | None = None, soft_max: int | None = None, mappings: Sequence[dict[str, Any]] = (),
               overrides: Sequence[dict[str, Any]] = (), calcs: Sequence[str] = LEGEND_CALCS) -> PanelSpec:
    """A time series.  A result series holds the latest run's value until the next run replaces it,
    so ``results`` draws it as steps (``stepAfter``): a level that changes at each run.  ``calcs``: the
    legend's columns (Grafana's reducers), the last value, the lowest and the highest by default."""
    panel = G.TimeSeries(
        **_common(title, description, queries, gpu_only, may_be_empty, per_shape),
        unit=unit, drawStyle="bars" if bars else "line", fillOpacity=60 if bars else (10 if stack else 0),
        stacking={"mode": "normal", "group": "A"} if stack else {"mode": "none", "group": "A"},
        showPoints="never" if results else "auto", pointSize=5, lineWidth=1,
        lineInterpolation="stepAfter" if results else "linear",
        scaleDistributionType="log" if log else "linear", scaleDistributionLog=10 if log else 2,
        legendDisplayMode="table", legendPlacement="bottom", legendCalcs=list(calcs),
        tooltipMode="multi", tooltipSort="desc", axisSoftMin=soft_min, axisSoftMax=soft_max,
        mappings=list(mappings), overrides=_query_overrides(queries) + list(overrides),
        extraJson={"fieldConfig": {"defaults": {"custom": {"spanNulls": False}}}},
    )
    return PanelSpec(panel, w, h)


def stat(title: str, description: str, queries: Sequence[Q], unit: str, *, w: int = 4, h: int = 4,
         thresholds: Sequence[tuple[float | None, str]] = BASE_THRESHOLDS, gpu_only: str | None = None,
         may_be_empty: str | None = None, mappings: Sequence[dict[str, Any]] = (),
         color_mode: str = "value", per_shape: str | None = None) -> PanelSpec:
    """A single figure, the last value of its query (never a mean or a sum over the time range)."""
    panel = G.Stat(
        **_common(title, description, queries, gpu_only, may_be_empty, per_shape),
        format=unit, reduceCalc="lastNotNull", graphMode="none", colorMode=color_mode, textMode="value_and_name",
        mappings=list(mappings), noValue="0" if unit in ("none", "short") else "no data",
        overrides=_query_overrides(queries),
        extraJson={"fieldConfig": {"defaults": {"thresholds": _thresholds(thresholds)}}},
    )
    return PanelSpec(panel, w, h)


def table(title: str, description: str, queries: Sequence[Q], unit: str, *, w: int = 24, h: int = 9,
          gpu_only: str | None = None, may_be_empty: str | None = None, per_shape: str | None = None,
          hide: Iterable[str] = (),
          rename: dict[str, str] | None = None, sort_by: str | None = None, descending: bool = False,
          merge: bool | None = None, transformations: Sequence[dict[str, Any]] = (),
          mappings: Sequence[dict[str, Any]] = (), overrides: Sequence[dict[str, Any]] = (),
          links: Sequence[dict[str, Any]] = (), thresholds: Sequence[tuple[float | None, str]] = BASE_THRESHOLDS,
          cell: str = "auto", max_points: int | None = None) -> PanelSpec:
    """A table of instant queries, one row per series and one column per label and query (merged
    when there are several queries); ``hide`` names label columns to leave out."""
    queries = [Q(**{**q.__dict__, "instant": True, "table": True}) for q in queries]
    steps: list[dict[str, Any]] = []
    if merge if merge is not None else len(queries) > 1:
        steps.append({"id": "merge", "options": {}})
    steps.extend(transformations)
    excluded = {"Time": True, **{name: True for name in hide}}
    steps.append({"id": "organize", "options": {"excludeByName": dict(sorted(excluded.items())),
                                                 "renameByName": dict(sorted((rename or {}).items()))}})
    panel = G.Table(
        **_common(title, description, queries, gpu_only, may_be_empty, per_shape),
        unit=unit, filterable=True, displayMode=cell, mappings=list(mappings),
        overrides=_query_overrides(queries) + list(overrides),
        sortBy=[G.TableSortByField(displayName=sort_by, desc=descending)] if sort_by else [],
        transformations=steps, maxDataPoints=max_points or GRAFANALIB_MAX_DATA_POINTS,
        extraJson={"fieldConfig": {"defaults": {"links": list(links), "thresholds": _thresholds(thresholds)}}},
    )
    return PanelSpec(panel, w, h)


def bargauge(title: str, description: str, queries: Sequence[Q], unit: str, *, w: int = 12, h: int = 8,
             minimum: float | None = None, maximum: float | None = None,
             thresholds: Sequence[tuple[float | None, str]] = BASE_THRESHOLDS, gpu_only: str | None = None,
             may_be_empty: str | None = None, per_shape: str | None = None) -> PanelSpec:
    """Bars of the last value of each series (instant queries)."""
    queries = [Q(**{**q.__dict__, "instant": True}) for q in queries]
    panel = G.BarGauge(
        **_common(title, description, queries, gpu_only, may_be_empty, per_shape),
        format=unit, calc="lastNotNull", displayMode=G.GAUGE_DISPLAY_MODE_GRADIENT, min=minimum, max=maximum,
        orientation=G.ORIENTATION_HORIZONTAL, thresholds=[],
        extraJson={"fieldConfig": {"defaults": {"thresholds": _thresholds(thresholds)}, "overrides": []}},
    )
    return PanelSpec(panel, w, h)


def state_timeline(title: str, description: str, queries: Sequence[Q], *, mappings: Sequence[dict[str, Any]],
                   w: int = 24, h: int = 8, unit: str = "none", gpu_only: str | None = None,
                   may_be_empty: str | None = None, overrides: Sequence[dict[str, Any]] = (),
                   per_shape: str | None = None) -> PanelSpec:
    """States over time, coloured by value mappings (up/down, a verdict, a throttle reason); a query whose
    states read otherwise gets its own mappings in ``overrides`` (:func:`query_mappings`)."""
    panel = G.StateTimeline(
        **_common(title, description, queries, gpu_only, may_be_empty, per_shape),
        colorMode="fixed", mappings=list(mappings), mergeValues=True, showValue="never", rowHeight=0.8,
        fillOpacity=80, tooltipMode="multi", legendDisplayMode="list",
        overrides=_query_overrides(queries) + list(overrides),
        extraJson={"fieldConfig": {"defaults": {"unit": unit, "color": {"mode": "thresholds"},
                                                "thresholds": _thresholds(BASE_THRESHOLDS)}}},
    )
    return PanelSpec(panel, w, h)


def heatmap(title: str, description: str, queries: Sequence[Q], unit: str, *, w: int = 12, h: int = 8,
            log: bool = False, gpu_only: str | None = None, may_be_empty: str | None = None,
            per_shape: str | None = None) -> PanelSpec:
    """How many series fall in each bucket of a value over time (Grafana calculates the buckets)."""
    panel = CurrentHeatmap(**_common(title, description, queries, gpu_only, may_be_empty, per_shape), unit=unit,
                           log=log)
    return PanelSpec(panel, w, h)


@attr.s
class CurrentHeatmap(G.Heatmap):
    """grafanalib's Heatmap emits the pre-9 heatmap (``cards``, ``dataFormat``, ``xAxis``, ...), which
    Grafana 11 only migrates; this one emits Grafana 9+'s ``options`` (buckets calculated by Grafana)."""

    unit = attr.ib(default="none", validator=attr.validators.instance_of(str))
    log = attr.ib(default=False, validator=attr.validators.instance_of(bool))

    def to_json_data(self) -> dict[str, Any]:
        data = _plain(super().to_json_data())
        for legacy in ("cards", "color", "dataFormat", "heatmap", "hideZeroBuckets", "highlightCards", "legend",
                       "reverseYBuckets", "tooltip", "xAxis", "xBucketNumber", "xBucketSize", "yAxis",
                       "yBucketBound", "yBucketNumber", "yBucketSize"):
            data.pop(legacy, None)
        scale = {"type": "log", "log": 2} if self.log else {"type": "linear"}
        data["options"] = {
            "calculate": True,
            "calculation": {"yBuckets": {"mode": "count", "value": "20", "scale": scale}},
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges", "fill": "dark-orange", "scale": "exponential",
                      "exponent": 0.5, "steps": 64, "reverse": False},
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
            "filterValues": {"le": 1e-9},
            "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
            "showValue": "never",
            "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False},
            "yAxis": {"axisPlacement": "left", "unit": self.unit, "reverse": False},
            "selectionMode": "x",
        }
        data["fieldConfig"] = {"defaults": {"unit": self.unit, "custom": {
            "scaleDistribution": {"type": "linear"}, "hideFrom": {"legend": False, "tooltip": False, "viz": False}}},
            "overrides": []}
        return data


# ----------------------------------------------------------------------------- variables, annotations, links

def datasource_variable() -> G.Template:
    return G.Template(name=DATASOURCE_VARIABLE, label="Data source", query=DATASOURCE_TYPE, type="datasource",
                      refresh=G.REFRESH_ON_DASHBOARD_LOAD, hide=G.SHOW)


@dataclass(frozen=True)
class Variable:
    """A query variable: ``label_values(<selector>, <label>)``, multi-valued with a regex All."""

    name: str
    label: str
    title: str
    selector: str
    description: str
    numeric_sort: bool = False
    may_be_empty: str | None = None

    def template(self) -> G.Template:
        # mypy's attrs plugin knows only QueryVariable's own fields: the others are grafanalib's Template's,
        # and grafanalib ships no types
        return QueryVariable(  # type: ignore[call-arg]
            name=self.name, label=self.title, query=f"label_values({self.selector}, {self.label})",
            dataSource=DATASOURCE, includeAll=True, multi=True, allValue=ALL_VALUE, default=ALL,
            refresh=G.REFRESH_ON_TIME_RANGE_CHANGE,
            sort=G.SORT_NUMERIC_ASC if self.numeric_sort else G.SORT_ALPHA_IGNORE_CASE_ASC,
            description=(f"{MAY_BE_EMPTY}: {self.may_be_empty}.\n" if self.may_be_empty else "") + self.description)


@attr.s
class QueryVariable(G.Template):
    """grafanalib's Template writes the query as a string and the tag and interval keys of Grafana 6;
    this one writes Grafana's current Prometheus variable query object, its ``definition``, a
    description and All selected."""

    description = attr.ib(default="", validator=attr.validators.instance_of(str))

    def to_json_data(self) -> dict[str, Any]:
        data = _plain(super().to_json_data())
        definition = data["query"]
        data["definition"] = definition
        data["query"] = {"qryType": 1, "query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"}
        data["current"] = {"selected": True, "text": ["All"], "value": [ALL]}
        data["description"] = self.description
        data["regex"] = ""
        return data


def annotation(name: str, expr: str, title: str, text: str, tags: Sequence[str], color: str) -> dict[str, Any]:
    """A Prometheus annotation: an event for each run of samples of ``expr`` (grafanalib has no
    annotation class, only the ``Annotations`` list, so this is the JSON Grafana stores)."""
    return {"datasource": DATASOURCE, "enable": True, "expr": expr, "hide": False, "iconColor": color, "name": name,
            "step": "60s", "tagKeys": ",".join(tags), "textFormat": text, "titleFormat": title,
            "useValueForTime": False}


BUILT_IN_ANNOTATION = {
    "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
    "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"}


def dashboard_links(tag: str) -> list[G.DashboardLink]:
    """A drop-down of every dashboard with the tag, keeping the time range and the variables."""
    return [G.DashboardLink(asDropdown=True, includeVars=True, keepTime=True, tags=[tag], title="sixdim dashboards",
                            type="dashboards", icon="external link", tooltip="The other sixdim dashboards")]


# ----------------------------------------------------------------------------- layout and rendering

@dataclass
class Row:
    title: str
    panels: list[PanelSpec] = field(default_factory=list)
    collapsed: bool = False


def layout(rows: Sequence[Row]) -> list[Any]:
    """Rows and their panels on Grafana's 24-column grid, left to right, wrapping; stable ids."""
    out: list[Any] = []
    y, next_id = 0, 1
    for row in rows:
        placed = []
        row_y = y
        y += 1
        x, line_h = 0, 0
        for spec in row.panels:
            if x + spec.w > 24:
                y, x, line_h = y + line_h, 0, 0
            spec.panel.gridPos = G.GridPos(h=spec.h, w=spec.w, x=x, y=y)
            x += spec.w
            line_h = max(line_h, spec.h)
            placed.append(spec.panel)
        y += line_h
        row_panel = G.RowPanel(title=row.title, gridPos=G.GridPos(h=1, w=24, x=0, y=row_y), collapsed=row.collapsed,
                               panels=placed if row.collapsed else [], id=next_id)
        next_id += 1
        for panel in placed:
            panel.id = next_id
            next_id += 1
        out.append(row_panel)
        if not row.collapsed:
            out.extend(placed)
    return out


def _plain(value: Any) -> Any:
    """grafanalib objects as plain JSON data."""
    return json.loads(json.dumps(value, cls=DashboardEncoder))


_DASHBOARD_LEGACY = ("__inputs", "rows", "hideControls", "sharedCrosshair", "style", "gnetId", "id")
_PANEL_LEGACY = ("span", "height", "minSpan", "error", "editable", "cacheTimeout", "repeatDirection",
                 "hideTimeOverride")
GRAFANALIB_MAX_DATA_POINTS = 100
"""grafanalib's default maxDataPoints, which caps every graph at 100 points: removed (Grafana then uses
the panel's width); a value of our own is kept."""


def _drop_nulls(value: Any, keep_null: bool = False) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v, keep_null=(k == "steps")) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        if keep_null:  # threshold steps: the base step's value is null (minus infinity), as Grafana writes it
            return [{k: v for k, v in step.items()} for step in value]
        return [_drop_nulls(v) for v in value]
    return value


def _fix_panel(panel: dict[str, Any]) -> dict[str, Any]:
    for legacy in _PANEL_LEGACY:
        panel.pop(legacy, None)
    if panel.get("maxDataPoints") == GRAFANALIB_MAX_DATA_POINTS:
        panel.pop("maxDataPoints")
    if not panel.get("repeat"):
        panel.pop("repeat", None)
        panel.pop("maxPerRow", None)
    kind = panel["type"]
    if kind not in CURRENT_PANEL_TYPES:
        raise ValueError(f"panel {panel.get('title')!r}: {kind!r} is not a current Grafana panel type")
    if kind == "row":
        panel.pop("datasource", None)
        panel.pop("targets", None)
        panel.pop("fieldConfig", None)
        panel.pop("transformations", None)
        panel.pop("links", None)
        panel.pop("description", None)
        panel.pop("transparent", None)
        panel["panels"] = [_fix_panel(p) for p in panel.get("panels", [])]
        return panel
    panel["targets"] = [_fix_target(t) for t in panel.get("targets", [])]
    defaults = panel.setdefault("fieldConfig", {}).setdefault("defaults", {})
    panel["fieldConfig"].setdefault("overrides", [])
    if not (defaults.get("thresholds") or {}).get("steps"):  # grafanalib's default is no step at all
        defaults["thresholds"] = _thresholds(BASE_THRESHOLDS)
    if kind == "bargauge":
        old = panel["options"].pop("fieldOptions")
        defaults.update({"unit": old["defaults"]["unit"], "min": old["defaults"]["min"],
                         "max": old["defaults"]["max"], "decimals": old["defaults"]["decimals"]})
        defaults.setdefault("mappings", [])
        defaults.setdefault("color", {"mode": "thresholds"})
        panel["options"].pop("showThresholdLabels", None)
        panel["options"].pop("showThresholdMarkers", None)
        panel["options"].update({"reduceOptions": {"calcs": old["calcs"], "fields": "", "values": False},
                                 "showUnfilled": True, "valueMode": "color", "namePlacement": "auto",
                                 "sizing": "auto", "minVizHeight": 16, "minVizWidth": 8, "maxVizHeight": 300,
                                 "legend": {"showLegend": False, "displayMode": "list", "placement": "bottom",
                                            "calcs": []}})
    elif kind == "table":
        for legacy in ("columns", "fontSize", "styles", "color"):
            panel.pop(legacy, None)
        defaults["mappings"] = panel.pop("mappings", [])
        custom = defaults.setdefault("custom", {})
        custom["cellOptions"] = {"type": custom.pop("displayMode", "auto")}
        custom["inspect"] = False
        panel["options"].update({"cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"], "fields": ""}})
    elif kind == "stat":
        defaults.pop("custom", None)
        defaults.setdefault("color", {"mode": "thresholds"})
        panel["options"].update({"wideLayout": True, "showPercentChange": False, "percentChangeColorMode": "standard"})
    elif kind == "timeseries":
        defaults["custom"]["axisCenteredZero"] = False
        defaults["custom"]["axisColorMode"] = "text"
        defaults["custom"]["insertNulls"] = False
        panel["options"]["legend"]["showLegend"] = True
    elif kind == "state-timeline":
        panel["options"]["legend"]["showLegend"] = True
    return panel


def render(dashboard: G.Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana 11/12 JSON data: grafanalib's output with the fixes above."""
    data = _plain(dashboard.to_json_data())
    for legacy in _DASHBOARD_LEGACY:
        data.pop(legacy, None)
    data["panels"] = [_fix_panel(p) for p in data["panels"]]
    data["timepicker"] = {"refresh_intervals": data["timepicker"]["refresh_intervals"]}
    for link in data["links"]:
        if link["type"] == "dashboards":
            link.pop("url", None)
    for variable in data["templating"]["list"]:
        for legacy in ("useTags", "tagsQuery", "tagValuesQuery", "auto", "auto_min", "auto_count"):
            variable.pop(legacy, None)
        if variable["type"] == "datasource":
            variable["current"] = {}
            variable["regex"] = ""
            variable.pop("datasource", None)
            variable.pop("allValue", None)
    return _drop_nulls(data)


def dumps(data: dict[str, Any]) -> str:
    """Deterministic JSON text: sorted keys, two-space indent, a final newline."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=True) + "\n"


_UID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


def check_uid(uid: str) -> str:
    if not _UID.match(uid):
        raise ValueError(f"a Grafana dashboard uid is 1 to 40 letters, digits, '-' or '_', got {uid!r}")
    return uid
