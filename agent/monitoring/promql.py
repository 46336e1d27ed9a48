"""PromQL pieces the alert rules, the recording rules and the dashboards all build from.

Every metric and label name comes from :mod:`sixdim.core.catalog`; the few series the rules read
that the catalog does not define (Prometheus's ``up``, prometheus_client's process start time, the
target labels) are named here, once.
"""

from __future__ import annotations

from sixdim.core import catalog

PROMETHEUS_UP = "up"
"""Prometheus's own per-target metric, one of the two metrics in the rules that are not sixdim's."""
PROCESS_START_TIME = "process_start_time_seconds"
"""prometheus_client's process metric, which the agent exports beside the catalog's: when the agent
process started, for counters that count since then."""
JOB, INSTANCE = "job", "instance"
"""The target labels Prometheus adds to every scraped series."""

REGRESSION = "regression"
REGRESSION_CODE = dict(catalog.REGRESSION_STATE_VALUES)[REGRESSION]
"""``sixdim_regression_state``'s value for a regression (3)."""


def label(metric: catalog.MetricDef, name: str) -> str:
    """A label of a catalog metric, checked against its definition."""
    if name not in metric.labels:
        raise KeyError(f"{metric.name} has no label {name!r} (labels: {', '.join(metric.labels)})")
    return name


def status(name: str) -> str:
    """A run status, checked against the catalog."""
    if name not in catalog.RUN_STATUSES:
        raise KeyError(f"unknown run status {name!r}")
    return name


def quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def covering_shapes(expr: str, shapes: str, peers: str) -> str:
    """``expr`` (summary series) where the summary covers as many shapes (``shapes``, the
    ``sixdim_suite_shapes`` selector) as the median of its peer group (``peers``, a label list): a
    geometric mean that lost a shape covers other shapes than its peers' and compares with nothing,
    and one with an extra shape leaves out itself, not the rest.  PromQL compares counts, not sets.
    The peer recording rules (:mod:`sixdim.monitoring.recording`) use it."""
    return f"({expr} and ({shapes} == on ({peers}) group_left () quantile by ({peers}) (0.5, {shapes})))"


def indent(text: str, spaces: int) -> str:
    """``text`` with every non-empty line indented, for multi-line expressions in the rule files."""
    return "\n".join(" " * spaces + line if line else line for line in text.splitlines())
