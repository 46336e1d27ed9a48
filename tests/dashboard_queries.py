"""Every PromQL query a dashboard's JSON holds, with what may legitimately return nothing.

For the end-to-end test that runs each query against a real Prometheus scraping an agent: it reads the
generated JSON (what ships), not the generator.

* ``all_queries(dashboard_json)`` lists every panel target (rows' collapsed panels included), every
  query variable and every Prometheus annotation as a :class:`Query`.
* ``substitute(expr, ...)`` replaces the dashboard variables (All: ``.*``) and Grafana's
  ``$__rate_interval``, ``$__interval`` and ``$__range`` so the text is plain PromQL.

A query that is not ``gpu_only`` and has no ``may_be_empty`` reason returns data on every host running
the default configuration, a CPU-only one included, unless it is ``summary_only``; and on every host
running the README's example configuration (a suite of its own exported as summaries only, beside one
exported per shape) unless it is ``per_shape``; once the host has recorded a run and Prometheus holds two
scrapes within ``$__rate_interval``.  The markers come from the panel description, whose lines start
with ``GPU-only: <why>.``, ``May be empty: <why>.`` or ``Per-shape: <what it needs>.`` for the whole
panel, or ``Query B (what) is GPU-only: <why>.``, ``Query B (what) may be empty: <why>.``, ``Query B
(what) is per-shape: <what it needs>.`` or ``Query B (what) is summary-only: <why>.`` for one query; a
variable's from its description (``May be empty: <why>.``); an annotation's from
build.ANNOTATION_MAY_BE_EMPTY (an annotation marks events, and there is none on a steady host).

A variable's ``expr`` is the series selector inside ``label_values(selector, label)`` (PromQL: run it
and read ``label`` from the series it returns, or ask ``/api/v1/label/<label>/values?match[]=``);
``label`` names the label.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sixdim.dashboards.grafana import GPU_ONLY, MAY_BE_EMPTY, PER_SHAPE, SUMMARY_ONLY

PANEL, VARIABLE, ANNOTATION = "panel", "variable", "annotation"


@dataclass(frozen=True)
class Query:
    dashboard: str
    """The dashboard's uid (``sixdim-fleet``, ...)."""
    panel_title: str
    """The panel's title; a variable's name; an annotation's name."""
    expr: str
    """PromQL with the dashboard's variables and Grafana's macros still in it (see :func:`substitute`)."""
    gpu_only: bool
    """Data only where a GPU is: empty on a CPU-only host."""
    may_be_empty: str | None
    """Why it may legitimately return nothing on a steady host, or None when it must return data."""
    kind: str
    """``panel``, ``variable`` or ``annotation``."""
    panel_id: int | None = None
    ref_id: str | None = None
    label: str | None = None
    """A variable's label (``label_values(expr, label)``)."""
    instant: bool = False
    """A panel target evaluated at one time (tables, bar gauges) rather than over the time range."""
    legend: str | None = None
    per_shape: str | None = None
    """What it needs when it reads series exported per shape only: empty for a suite exported as summaries
    only (a suite of one's own without ``export = "shapes"``)."""
    summary_only: str | None = None
    """Why it shows only the summaries of workloads no suite exports per shape: empty where all are."""

    def required(self, configuration: str) -> bool:
        """Whether the query must return data on a host running ``configuration``: ``default`` (the
        embedded quick suite, every metric per shape) or ``readme`` (the README's example: a suite of one's
        own exported as summaries only, beside one exported per shape), on a CPU."""
        if configuration not in CONFIGURATIONS:
            raise ValueError(f"configuration must be one of {CONFIGURATIONS}, not {configuration!r}")
        if self.gpu_only or self.may_be_empty:
            return False
        return not (self.summary_only if configuration == DEFAULT else self.per_shape)


DEFAULT, README = "default", "readme"
CONFIGURATIONS = (DEFAULT, README)


_KINDS = {GPU_ONLY: "gpu_only", MAY_BE_EMPTY: "may_be_empty", PER_SHAPE: "per_shape", SUMMARY_ONLY: "summary_only"}
_QUERY_KINDS = {f"is {GPU_ONLY}": "gpu_only", MAY_BE_EMPTY.lower(): "may_be_empty",
                f"is {PER_SHAPE.lower()}": "per_shape", f"is {SUMMARY_ONLY.lower()}": "summary_only"}
_PANEL_MARK = re.compile(rf"^({'|'.join(re.escape(k) for k in _KINDS)}): (.+?)\.?$")
_QUERY_MARK = re.compile(rf"^Query ([A-Z]+)(?: \([^)]*\))? "
                         rf"({'|'.join(re.escape(k) for k in _QUERY_KINDS)}): (.+?)\.?$")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$", re.S)


def markers(description: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The panel's markers ({"gpu_only"|"may_be_empty"|"per_shape"|"summary_only": why}) and each query's, by
    refId."""
    panel: dict[str, str] = {}
    per_query: dict[str, dict[str, str]] = {}
    for paragraph in description.split("\n"):
        line = paragraph.strip()
        if m := _PANEL_MARK.match(line):
            panel[_KINDS[m.group(1)]] = m.group(2)
        elif m := _QUERY_MARK.match(line):
            per_query.setdefault(m.group(1), {})[_QUERY_KINDS[m.group(2)]] = m.group(3)
    return panel, per_query


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included, rows themselves included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def variable_query(variable: Mapping[str, Any]) -> str:
    query = variable.get("query")
    if isinstance(query, Mapping):
        query = query.get("query", "")
    return str(query or variable.get("definition", ""))


def all_queries(dashboard: Mapping[str, Any]) -> list[Query]:
    from sixdim.dashboards.build import ANNOTATION_MAY_BE_EMPTY

    uid = dashboard["uid"]
    out: list[Query] = []
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        text = variable_query(variable)
        match = _LABEL_VALUES.match(text)
        if not match:
            raise ValueError(f"{uid}: variable {variable['name']}: not label_values(selector, label): {text!r}")
        mark, _ = markers(variable.get("description", ""))
        out.append(Query(uid, variable["name"], match.group(1).strip(), False, mark.get("may_be_empty"), VARIABLE,
                         label=match.group(2)))
    for panel in panels(dashboard):
        if panel.get("type") == "row":
            continue
        mark, per_query = markers(panel.get("description", ""))
        for target in panel.get("targets", []):
            ref = target.get("refId")
            own = per_query.get(ref, {})
            gpu_only = "gpu_only" in mark or "gpu_only" in own
            empty = mark.get("may_be_empty") or own.get("may_be_empty")
            out.append(Query(uid, panel["title"], target["expr"], gpu_only, empty, PANEL, panel_id=panel.get("id"),
                             ref_id=ref, instant=bool(target.get("instant")), legend=target.get("legendFormat"),
                             per_shape=mark.get("per_shape") or own.get("per_shape"),
                             summary_only=mark.get("summary_only") or own.get("summary_only")))
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if "expr" not in annotation:
            continue
        out.append(Query(uid, annotation["name"], annotation["expr"], False,
                         ANNOTATION_MAY_BE_EMPTY.get(annotation["name"]), ANNOTATION))
    return out


DEFAULT_VARIABLE_VALUE = ".*"


def substitute(expr: str, variables: Mapping[str, str] | None = None, *, rate_interval: str = "1m",
               interval: str = "15s", range_: str = "1h") -> str:
    """Plain PromQL: Grafana's macros replaced by durations, each ``$var`` / ``${var}`` /
    ``${var:format}`` by its value in ``variables`` (a regex, as the ``=~`` matchers expect), else ``.*``
    (the All option)."""
    values = dict(variables or {})
    macros = {"__rate_interval": rate_interval, "__interval": interval, "__range": range_}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name in macros:
            return macros[name]
        return values.get(name, DEFAULT_VARIABLE_VALUE)

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)", replace, expr)
