"""A small dashboard lint of our own, after grafana/dashboard-linter's rules, plus sixdim's.

``lint(dashboard, others)`` returns a list of problems (empty when the dashboard is clean).  The
rules, each named in its messages:

* ``template-datasource``: a ``datasource`` variable of type datasource for Prometheus;
* ``template-variables``: the cluster, hostname, model, gpu, workload and precision query variables (and job and
  instance where the dashboard has them), each on the datasource variable, multi-valued with a regex All
  (``.*``), reading a series every host exports (a CPU-only one included), refreshed on time-range change;
* ``panel-datasource``: every panel's and target's datasource is ``{type: prometheus, uid: ${datasource}}``;
* ``panel-type``: current panel types only (no Angular graph, singlestat, ...);
* ``panel-title-description``: a title and a description;
* ``panel-units``: a unit Grafana knows (or a custom ``si:``/``suffix:``/``count:`` one) on every panel
  and on every unit override;
* ``panel-no-targets``: at least one query;
* ``target-rate-interval``: ``rate()``/``irate()`` over ``$__rate_interval``; ``increase()`` over
  ``$__rate_interval`` or ``$__range`` (a total in the time range), never a fixed window;
* ``target-counter-agg``: a counter (``*_total``) only inside ``rate``, ``irate`` or ``increase``;
* ``target-legend``: a legend on every series that is not a table's, never only ``{{instance}}`` or
  ``{{job}}``, with ``{{hostname}}`` where the series has a host and ``{{gpu}}`` where it has a GPU;
* ``target-metrics``: only metrics of the catalog, prometheus_client's ``process_*`` and ``up``;
* ``target-job-instance``: no ``job`` or ``instance`` matchers but the dashboard's own ``job=~"$job"`` and
  ``instance=~"$instance"`` (a fixed job ties the dashboard to one scrape configuration);
* ``target-scope``: every series selector of every panel, variable and annotation query (but the cluster
  variable's own) is filtered by the cluster variable (``<cluster label>=~"$cluster"``), and on a dashboard with
  job and instance variables by those too (grafana/dashboard-linter's target-job and target-instance rules,
  for the variables this dashboard has);
* ``dashboard-schema``: schemaVersion >= 39, a uid, a title, the ``sixdim`` tag, no ``__inputs``
  and no ``${DS_...}`` reference;
* ``dashboard-links``: a link to the other sixdim dashboards (by their common tag, keeping the time
  range and the variables);
* ``panel-layout``: unique panel ids, panels within 24 columns and not overlapping;
* ``panel-markers``: per-query markers name queries that exist.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sixdim.core import catalog
from sixdim.dashboards import grafana as gf
from sixdim.dashboards import promql
from sixdim.monitoring import recording
from tests.dashboard_queries import markers, panels, variable_query

MIN_SCHEMA_VERSION = 39
ANGULAR_TYPES = ("graph", "singlestat", "table-old", "natel-discrete-panel", "flant-statusmap-panel",
                 "grafana-piechart-panel", "grafana-worldmap-panel", "grafana-clock-panel")

GRAFANA_UNITS = frozenset((
    # From Grafana's packages/grafana-data/src/valueFormats/categories.ts (the ones a benchmark may use).
    "none", "short", "percent", "percentunit", "sci", "locale", "string",
    "flops", "mflops", "gflops", "tflops", "pflops",
    "bytes", "decbytes", "kbytes", "mbytes", "gbytes", "bits", "decbits",
    "Bps", "binBps", "bps", "KBs", "MBs", "GBs", "TBs",
    "watt", "kwatt", "mwatt", "joule", "watth", "kwatth", "volt", "amp",
    "celsius", "fahrenheit", "kelvin",
    "hertz", "ns", "µs", "ms", "s", "m", "h", "d", "dtdurations", "dtdurationms", "dthms", "dtdhms",
    "dateTimeAsIso", "dateTimeFromNow", "ops", "reqps", "cps", "iops",
    "bool", "bool_yes_no", "bool_on_off",
))
CUSTOM_UNIT = re.compile(r"^(si|suffix|prefix|count):\S.*$")
"""Grafana's custom units (``getValueFormat``): ``si:FLOP/J`` scales with SI prefixes."""

EVERY_HOST_METRICS = frozenset(m.name for m in (
    catalog.BUILD_INFO, catalog.WORKLOAD_RUNS, catalog.WORKLOAD_LAST_SUCCESS, catalog.HISTORY_UP,
    catalog.COLLECTOR_UP) + catalog.SUMMARY_METRICS)
"""Series every agent exports (after its first run), a CPU-only one included: what variables read."""

REQUIRED_VARIABLES = {v.name: v.label for v in promql.VARIABLES}

KNOWN_METRICS = (frozenset(m.name for m in catalog.ALL_METRICS) | frozenset(promql.PROCESS_METRICS) | {promql.UP}
                 | frozenset(m.name for m in recording.RECORDED))

_KEYWORDS = frozenset(("by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
                       "offset", "bool", "inf", "nan", "Inf", "NaN", "atan2"))
_AGGREGATIONS = frozenset(("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                           "bottomk", "topk", "quantile"))


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`|\{(?:"(?:[^"\\]|\\.)*"|[^}"])*\}|\[[^\]]*\]'
                     r"|[A-Za-z_:][A-Za-z0-9_:]*")


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric name, its matchers' text, ``""`` where it has none) for each series selector of a known metric."""
    tokens = list(_TOKENS.finditer(expr))
    out = []
    for i, token in enumerate(tokens):
        if token.group() not in KNOWN_METRICS or expr[token.end():].lstrip().startswith("("):
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        adjacent = after is not None and not expr[token.end():after.start()].strip()
        braces = after.group() if adjacent and after.group().startswith("{") else ""
        out.append((token.group(), braces))
    return out


def scope_matchers(dashboard: Mapping[str, Any]) -> list[str]:
    """The matchers every selector of the dashboard must have: the cluster variable's label matched by it, and the
    job and instance variables' where the dashboard has them."""
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    out = []
    cluster = variables.get(promql.CLUSTER_VARIABLE)
    if cluster:
        match = re.match(r"^label_values\((\w+),\s*(\w+)\)$", variable_query(cluster))
        out.append(f'{match.group(2) if match else "?"}=~"${promql.CLUSTER_VARIABLE}"')
    out += [f'{name}=~"${name}"' for name in promql.TARGET_VARIABLES if name in variables]
    return out


def _strip_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (identifiers that are neither functions, keywords,
    label names in braces or in by/on lists, nor durations)."""
    text = _strip_strings(expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w$.])([A-Za-z_:][A-Za-z0-9_:]*)", text):
        name, rest = match.group(1), text[match.end():]
        if name in _KEYWORDS or re.match(r"\s*\(", rest):
            continue
        names.add(name)
    return names


def _calls(expr: str, functions: Iterable[str]) -> list[tuple[str, str]]:
    """(function, its range) for each call of the functions whose argument ends in a range [...]."""
    text = _strip_strings(expr)
    out = []
    for match in re.finditer(r"\b(" + "|".join(functions) + r")\s*\(", text):
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        inner = text[match.end():i - 1]
        ranges = re.findall(r"\[([^\]]*)\]\s*$", inner.strip())
        out.append((match.group(1), ranges[0] if ranges else ""))
    return out


def _flatten(text: str) -> str:
    """The text with whatever is inside brackets ((), {}, []) blanked, the outermost brackets kept."""
    out, depth = [], 0
    for ch in text:
        if ch in "({[":
            depth += 1
            out.append(ch if depth == 1 else " ")
        elif ch in ")}]":
            depth -= 1
            out.append(ch if depth == 0 else " ")
        else:
            out.append(ch if depth == 0 else " ")
    return "".join(out)


def _unwrap(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and _flatten(text).rstrip().endswith(")") and _flatten(text).find(")") == len(text) - 1:
        text = text[1:-1].strip()
    return text


_BINARY = re.compile(r"\b(?:or|and|unless)\b|==|!=|>=|<=|[-+*/%^<>]")
_MODIFIERS = re.compile(r"^\s*(?:bool\s+)?(?:(?:on|ignoring)\s*\([^)]*\)\s*)?"
                        r"(?:(?:group_left|group_right)\s*(?:\([^)]*\))?\s*)?")
_CALL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?:(by|without)\s*\(([^)]*)\)\s*)?\(")


def _split_args(text: str) -> list[str]:
    flat = _flatten(text)
    parts, start = [], 0
    for i, ch in enumerate(flat):
        if ch == ",":
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def result_labels(expr: str) -> set[str]:
    """The labels an expression's series carry, as far as a quick reading can tell: an aggregation
    keeps those of its ``by (...)`` (all, for topk, bottomk and ``without``), a function those of
    its vector argument, a binary operation those of either side, a selector its metric's."""
    text = _unwrap(_strip_strings(expr))
    flat = _flatten(text)
    cuts = [m for m in _BINARY.finditer(flat) if not re.search(r"[0-9.]e$", flat[:m.start()])]
    if cuts:
        labels: set[str] = set()
        start = 0
        for cut in cuts + [None]:
            operand = text[start:cut.start() if cut else len(text)]
            operand = operand[_MODIFIERS.match(operand).end():]
            if operand.strip():
                labels |= result_labels(operand)
            start = cut.end() if cut else len(text)
        return labels
    call = _CALL.match(text)
    if call:
        name, mode, grouping = call.group(1), call.group(2), call.group(3)
        close = _flatten(text).find(")", call.end() - 1)
        args = _split_args(text[call.end():close])
        trailing = re.match(r"^\s*(by|without)\s*\(([^)]*)\)", text[close + 1:])
        if trailing:
            mode, grouping = trailing.group(1), trailing.group(2)
        if name in _AGGREGATIONS:
            if mode == "by":
                return {label.strip() for label in grouping.split(",") if label.strip()}
            if mode == "without" or name in ("topk", "bottomk"):
                return result_labels(args[-1])
            return set()
        vectors = [a for a in args if a.strip() and not re.match(r'^\s*(""|[0-9.eE+-]+)\s*$', a)]
        return set().union(*(result_labels(a) for a in vectors)) if vectors else set()
    return _metric_labels(text)


def _metric_labels(expr: str) -> set[str]:
    labels: set[str] = set()
    by_name = {m.name: m for m in catalog.ALL_METRICS}
    for name in metric_names(expr):
        if name in by_name:
            labels |= {catalog.exported_label(label, dcgm) for label in by_name[name].labels for dcgm in (False, True)}
    return labels


def _units(panel: Mapping[str, Any]) -> list[str]:
    config = panel.get("fieldConfig", {})
    units = [config.get("defaults", {}).get("unit", "")]
    for override in config.get("overrides", []):
        units += [p.get("value", "") for p in override.get("properties", []) if p.get("id") == "unit"]
    return units


def _valid_unit(unit: Any) -> bool:
    return isinstance(unit, str) and (unit in GRAFANA_UNITS or bool(CUSTOM_UNIT.match(unit)))


def _is_datasource(value: Any) -> bool:
    return value == gf.DATASOURCE


def lint(dashboard: Mapping[str, Any], others: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """Problems with one dashboard; ``others`` are the dashboards it should link to."""
    title = dashboard.get("title", "?")
    problems: list[str] = []

    def problem(rule: str, where: str, message: str) -> None:
        problems.append(f"{rule}: {title}: {where}: {message}")

    # --- the dashboard
    if not isinstance(dashboard.get("schemaVersion"), int) or dashboard["schemaVersion"] < MIN_SCHEMA_VERSION:
        problem("dashboard-schema", "schemaVersion", f"{dashboard.get('schemaVersion')!r} < {MIN_SCHEMA_VERSION}")
    if not dashboard.get("uid") or not dashboard.get("title"):
        problem("dashboard-schema", "uid/title", "missing")
    if "sixdim" not in dashboard.get("tags", []):
        problem("dashboard-schema", "tags", "no sixdim tag")
    if "__inputs" in dashboard or "${DS_" in json.dumps(dashboard):
        problem("dashboard-schema", "datasource", "an __inputs or ${DS_...} reference (fails when provisioned)")
    if "rows" in dashboard:
        problem("dashboard-schema", "rows", "legacy rows")

    # --- variables
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    source = variables.get(gf.DATASOURCE_VARIABLE)
    if not source or source.get("type") != "datasource" or source.get("query") != gf.DATASOURCE_TYPE:
        problem("template-datasource", "templating", "no datasource variable of type datasource for prometheus")
    targets = {name: name for name in promql.TARGET_VARIABLES if name in variables}
    cluster = variables.get(promql.CLUSTER_VARIABLE, {})
    cluster_label = re.sub(r"^label_values\(\w+,\s*(\w+)\)$", r"\1", variable_query(cluster)) if cluster else "?"
    if cluster and not match_variable(variable_query(cluster)):
        problem("template-variables", promql.CLUSTER_VARIABLE, f"not label_values(<metric>, <label>): "
                f"{variable_query(cluster)!r}")
    if len(targets) == 1:
        problem("template-variables", next(iter(targets)), "job and instance go together")
    for name, label in {promql.CLUSTER_VARIABLE: cluster_label, **targets, **REQUIRED_VARIABLES}.items():
        variable = variables.get(name)
        if variable is None:
            problem("template-variables", name, "missing")
            continue
        text = variable_query(variable)
        match = re.match(r"^label_values\((\w+)(\{.*\})?,\s*(\w+)\)$", text, re.S)
        if variable.get("type") != "query" or not match:
            problem("template-variables", name, f"not a label_values() query variable: {text!r}")
            continue
        if match.group(1) not in EVERY_HOST_METRICS:
            problem("template-variables", name, f"reads {match.group(1)}, which not every host exports")
        if match.group(3) != catalog.exported_label(label, False) and match.group(3) != catalog.exported_label(
                label, True):
            problem("template-variables", name, f"lists label {match.group(3)!r}, not {label!r}")
        if not _is_datasource(variable.get("datasource")):
            problem("template-variables", name, "datasource is not the datasource variable")
        if not (variable.get("includeAll") and variable.get("multi") and variable.get("allValue") == gf.ALL_VALUE):
            problem("template-variables", name, "not multi-valued with a regex All (.*)")
        if variable.get("refresh") != 2:
            problem("template-variables", name, "not refreshed on time-range change")

    # --- every query in the scope of the cluster (and job and instance) variables
    scope = scope_matchers(dashboard)
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            own = [m for m in scope if m.endswith(f'"${variable.get("name")}"')]
            earlier = scope[:scope.index(own[0])] if own else scope
            problems.extend(_lint_scope(title, f"variable {variable.get('name')}", variable_query(variable), earlier))
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if "expr" in annotation:
            problems.extend(_lint_scope(title, f"annotation {annotation.get('name')!r}", annotation["expr"], scope))

    # --- links
    tags = set(dashboard.get("tags", []))
    links = [link for link in dashboard.get("links", []) if link.get("type") == "dashboards"]
    reached = {o.get("uid") for o in others
               if any(set(link.get("tags", [])) <= set(o.get("tags", [])) for link in links)}
    missing = {o.get("uid") for o in others} - reached - {dashboard.get("uid")}
    if not links or missing:
        problem("dashboard-links", "links", f"no link to {sorted(missing) or 'the other dashboards'}")
    for link in links:
        if not (link.get("keepTime") and link.get("includeVars")) or not set(link.get("tags", [])) <= tags:
            problem("dashboard-links", "links", "the link does not keep the time range and variables")

    # --- panels
    ids: set[int] = set()
    cells: dict[tuple[int, int], str] = {}
    for panel in panels(dashboard):
        where = f"panel {panel.get('title')!r}"
        kind = panel.get("type")
        pid = panel.get("id")
        if pid in ids:
            problem("panel-layout", where, f"duplicate id {pid}")
        ids.add(pid)
        pos = panel.get("gridPos") or {}
        if pos.get("x", 0) + pos.get("w", 0) > 24:
            problem("panel-layout", where, "wider than the 24 columns")
        for x in range(pos.get("x", 0), pos.get("x", 0) + pos.get("w", 0)):
            for y in range(pos.get("y", 0), pos.get("y", 0) + pos.get("h", 0)):
                if (x, y) in cells:
                    problem("panel-layout", where, f"overlaps {cells[(x, y)]!r}")
                    break
                cells[(x, y)] = panel.get("title", "")
            else:
                continue
            break
        if kind in ANGULAR_TYPES or kind not in gf.CURRENT_PANEL_TYPES:
            problem("panel-type", where, f"{kind!r} is not a current panel type")
        if kind == "row":
            continue
        if not panel.get("title"):
            problem("panel-title-description", where, "no title")
        if not (panel.get("description") or "").strip():
            problem("panel-title-description", where, "no description")
        if not _is_datasource(panel.get("datasource")):
            problem("panel-datasource", where, f"datasource {panel.get('datasource')!r}")
        for unit in _units(panel):
            if not _valid_unit(unit):
                problem("panel-units", where, f"no or invalid unit {unit!r}")
        targets = panel.get("targets", [])
        if not targets:
            problem("panel-no-targets", where, "no query")
        refs = {t.get("refId") for t in targets}
        _, per_query = markers(panel.get("description", ""))
        for ref in per_query:
            if ref not in refs:
                problem("panel-markers", where, f"a marker for query {ref}, which does not exist")
        for target in targets:
            problems.extend(_lint_target(title, where, panel, target, scope))
    return problems


def match_variable(text: str) -> re.Match[str] | None:
    return re.match(r"^label_values\((\w+)(\{.*\})?,\s*(\w+)\)$", text, re.S)


def _lint_scope(title: str, where: str, expr: str, scope: Sequence[str]) -> list[str]:
    """``target-scope`` and ``target-job-instance`` for one query."""
    out = []
    for name, braces in selectors(expr):
        missing = [m for m in scope if m not in braces]
        if missing:
            out.append(f"target-scope: {title}: {where}: {name} is not filtered by {', '.join(missing)}")
    for match in re.finditer(r'\b(job|instance)\s*(=|!=|=~|!~)\s*("(?:[^"\\]|\\.)*")', expr):
        if f'{match.group(1)}=~"${match.group(1)}"' not in scope or match.group(2) + match.group(3) != (
                f'=~"${match.group(1)}"'):
            out.append(f"target-job-instance: {title}: {where}: a job or instance matcher, {match.group()}, that is "
                       "not the dashboard's own variable")
    return out


def _lint_target(title: str, where: str, panel: Mapping[str, Any], target: Mapping[str, Any],
                 scope: Sequence[str] = ()) -> list[str]:
    out: list[str] = []
    expr = target.get("expr", "")
    at = f"{where} query {target.get('refId')}"

    def problem(rule: str, message: str) -> None:
        out.append(f"{rule}: {title}: {at}: {message}")

    if not expr.strip():
        problem("panel-no-targets", "empty expression")
        return out
    if not _is_datasource(target.get("datasource")):
        problem("panel-datasource", f"datasource {target.get('datasource')!r}")
    for function, window in _calls(expr, ("rate", "irate")):
        if window != promql.RATE_INTERVAL:
            problem("target-rate-interval", f"{function}() over [{window}], not [$__rate_interval]")
    for _function, window in _calls(expr, ("increase",)):
        if window not in (promql.RATE_INTERVAL, promql.RANGE):
            problem("target-rate-interval", f"increase() over [{window}], not $__rate_interval or $__range")
    stripped = _strip_strings(expr)
    for match in re.finditer(r"\b([A-Za-z_:][A-Za-z0-9_:]*_total)\b", stripped):
        before = stripped[:match.start()]
        if not re.search(r"\b(rate|irate|increase)\s*\(\s*$", before):
            problem("target-counter-agg", f"counter {match.group(1)} outside rate(), irate() or increase()")
    for name in metric_names(expr):
        if name not in KNOWN_METRICS:
            problem("target-metrics", f"{name} is neither a catalog metric, a process_* metric nor up")
    out.extend(_lint_scope(title, at, expr, scope))
    if target.get("format") == "table" or panel.get("type") == "table":
        return out
    legend = target.get("legendFormat", "")
    if not legend.strip():
        problem("target-legend", "no legend")
        return out
    templates = set(re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", legend))
    if templates and templates <= {"instance", "job"}:
        problem("target-legend", f"legend {legend!r} names only the scrape target")
    labels = result_labels(expr)
    hosts = {catalog.exported_label(catalog.HOSTNAME, dcgm) for dcgm in (False, True)}  # either naming
    if labels & hosts and not templates & hosts:
        problem("target-legend", f"legend {legend!r} lacks {{{{{catalog.HOSTNAME}}}}}")
    if catalog.GPU in labels and catalog.GPU not in templates:
        problem("target-legend", f"legend {legend!r} lacks {{{{{catalog.GPU}}}}}")
    return out


def lint_all(dashboards: Mapping[str, Mapping[str, Any]]) -> list[str]:
    boards = list(dashboards.values())
    return [p for board in boards for p in lint(board, boards)]
