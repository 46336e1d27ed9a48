"""The rules and dashboards touch no more series than they need (issue 31): every selector names its
metric, and every regular-expression matcher is either a Grafana template variable (the user's choice of
hosts, models, GPUs, workloads, precisions) or an alternation of literal values (``status=~"failed|timeout"``),
never a pattern that scans every value of a label (``.*``, ``.+``) or every metric name (``__name__=~``).

A fleet Prometheus holds the series of every exporter; a rule evaluated every 30 s over a regex on every
series would cost the whole fleet's index, whatever sixdim itself exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "sixdim-rules.yml"
DASHBOARDS = sorted((ROOT / "dashboards" / "json").glob("*.json"))

MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~)\s*"((?:[^"\\]|\\.)*)"')
LITERALS = re.compile(r"[A-Za-z0-9_.:\-]+(\|[A-Za-z0-9_.:\-]+)*")
VARIABLE = re.compile(r"\$\{?[A-Za-z_]+\}?")


def rule_expressions() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(rule.get("alert") or rule.get("record"), rule["expr"]) for group in groups for rule in group["rules"]]


def dashboard_expressions() -> list[tuple[str, str]]:
    out = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        panels = list(board.get("panels", []))
        while panels:
            panel = panels.pop()
            panels.extend(panel.get("panels", []))
            out += [(f"{path.stem}: {panel.get('title')}", t["expr"])
                    for t in panel.get("targets", []) if t.get("expr")]
        out += [(f"{path.stem}: variable {v['name']}", v["query"] if isinstance(v["query"], str) else
                 v["query"].get("query", "")) for v in board.get("templating", {}).get("list", []) if v.get("query")]
    return out


def bad_matchers(expr: str, variables_allowed: bool) -> list[str]:
    bad = []
    for label, op, value in MATCHER.findall(expr):
        if label == "__name__":
            bad.append(f"{label}{op}{value!r}")
        elif variables_allowed and VARIABLE.fullmatch(value):
            continue
        elif not LITERALS.fullmatch(value):
            bad.append(f"{label}{op}{value!r}")
    return bad


def test_the_rules_match_labels_by_value_never_by_an_open_pattern():
    expressions = rule_expressions()
    assert len(expressions) >= 15  # every recording rule and alert
    found = {name: bad for name, expr in expressions if (bad := bad_matchers(expr, variables_allowed=False))}
    assert not found, found


def test_the_dashboards_match_by_template_variables_or_literal_values_only():
    expressions = dashboard_expressions()
    assert len(expressions) > 100
    found = {name: bad for name, expr in expressions if (bad := bad_matchers(expr, variables_allowed=True))}
    assert not found, found


def test_the_check_sees_an_open_pattern():
    assert bad_matchers('sum(sixdim_workload_seconds{workload=~".*"})', variables_allowed=True)
    assert bad_matchers('count({__name__=~"sixdim_.*"})', variables_allowed=True)
    assert not bad_matchers('sixdim_workload_runs_total{status=~"failed|timeout", hostname=~"$hostname"}',
                            variables_allowed=True)
