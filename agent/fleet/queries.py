"""What ``sixdim fleet`` asks Prometheus, and the rows it gets back.

Hosts are the unit of comparison, so Prometheus aggregates each host's GPUs before anything is sent: one
row per host, case and software versions, holding the median over the host's GPUs and how many GPUs it
covers (a bad GPU of one host moves its host's median little and counts once).  Three kinds of query:

* **now**, one request per metric: every host's median per case and versions, at the time asked (each series'
  newest sample within Prometheus's lookback), and for a per-shape metric its GPU count;
* **shapes**, one request for every summary metric at once: how many of each host's GPUs cover each number of
  shapes (``count_values`` over ``sixdim_suite_shapes``, one pass), per case and versions; every summary series
  has its shapes twin, so this gives the GPU count of every summary metric too;
* **paired**: for the hosts on a new version now, each GPU's value now over its value ``before`` ago, when it
  was still on the old version, aggregated per host (median of the GPUs' ratios).  Both are instant selectors
  (the old one with ``offset``), so Prometheus reads one sample per series and time, however dense the
  history, and the query names only the hosts on the new version.

Summaries are compared only where they cover as many shapes as their group's median (the rule of the peer
recording rules, applied per host: :func:`covering`): a geometric mean over other shapes is another number.
The rule is applied here, not in PromQL: joining every shapes series with its group's median in each query
read the 400,000 shapes series of a 1,000-host fleet twelve times per answer and took three quarters of its
time (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from sixdim.core import catalog
from sixdim.monitoring.promql import quote

STAT = "sixdim_fleet_stat"
"""The label that tells the median rows from the count rows of one answer."""
MEDIAN, GPUS = "median", "gpus"

DEFAULT_METRICS: tuple[catalog.MetricDef, ...] = (
    catalog.SUMMARY_FLOPS, catalog.SUMMARY_SAMPLES, catalog.SUMMARY_BANDWIDTH,
    catalog.WORKLOAD_FLOPS, catalog.WORKLOAD_SAMPLES, catalog.WORKLOAD_BANDWIDTH)
"""The speeds compared by default: each suite's summaries and, where a suite exports them, its shapes."""

LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_MATCHER = re.compile(r'^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*$')


def judged_metrics() -> dict[str, catalog.MetricDef]:
    """Every result or summary metric with a direction that is worse (what ``--metric`` may name)."""
    return {m.name: m for m in catalog.RESULT_METRICS + catalog.SUMMARY_METRICS
            if m.figure in catalog.WATCHED}


def check_matchers(text: str) -> list[str]:
    """``--selector``'s label matchers (``cluster="eu-1",suite=~"quick|full"``), each checked."""
    out: list[str] = []
    current, quoted, escaped = "", False, False
    for ch in text.strip().strip("{}"):
        if escaped:
            current, escaped = current + ch, False
            continue
        if ch == "\\" and quoted:
            current, escaped = current + ch, True
            continue
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            out.append(current)
            current = ""
            continue
        current += ch
    if current.strip():
        out.append(current)
    for matcher in out:
        if not _MATCHER.match(matcher):
            raise ValueError(f'expected PromQL label matchers such as cluster="eu-1",suite=~"quick|full", '
                             f"got {matcher.strip()!r}")
    return [m.strip() for m in out]


@dataclass(frozen=True)
class Layout:
    """Which labels make a host, a group and a side, as the agents export them."""

    cluster: str
    host: str
    model: str
    pooled: bool = False
    """Clusters pooled into one comparison (``--across-clusters``); a host is still its cluster and name."""

    def host_labels(self) -> tuple[str, ...]:
        return (self.cluster, self.host)

    def group_labels(self, metric: catalog.MetricDef) -> tuple[str, ...]:
        """The model, device type and the case's labels (workload, precision, shape or suite, mode, pass)."""
        case = tuple(label for label in metric.labels
                     if label not in catalog.DEVICE_LABELS and label not in catalog.VERSION_LABELS)
        return ((() if self.pooled else (self.cluster,)) + (self.model, catalog.DEVICE_TYPE) + case)

    def exported(self, label: str) -> str:
        return {catalog.HOSTNAME: self.host, catalog.MODEL_NAME: self.model}.get(label, label)


def _selector(metric: catalog.MetricDef, matchers: list[str], extra: tuple[str, ...] | list[str] = ()) -> str:
    inside = ",".join([*matchers, *extra])
    return f"{metric.name}{{{inside}}}" if inside else metric.name


def _both(by: str, expr: str) -> str:
    """The median and the count over ``expr`` per ``by``, in one answer told apart by :data:`STAT`."""
    return (f'label_replace(quantile by ({by}) (0.5, {expr}), "{STAT}", "{MEDIAN}", "", "")\n'
            f'or\nlabel_replace(count by ({by}) ({expr}), "{STAT}", "{GPUS}", "", "")')


def is_summary(metric: catalog.MetricDef) -> bool:
    return metric in catalog.SUMMARY_METRICS


def _by_host(layout: Layout, metric: catalog.MetricDef) -> str:
    return ", ".join(dict.fromkeys(layout.host_labels() + layout.group_labels(metric) + catalog.VERSION_LABELS))


def now_query(metric: catalog.MetricDef, layout: Layout, matchers: list[str]) -> str:
    """Each host's median over its GPUs per case and versions, as they are now; with the GPU count for a
    per-shape metric (a summary's comes from :func:`shapes_query`)."""
    by, expr = _by_host(layout, metric), _selector(metric, matchers)
    if is_summary(metric):
        return f'label_replace(quantile by ({by}) (0.5, {expr}), "{STAT}", "{MEDIAN}", "", "")'
    return _both(by, expr)


SHAPES_VALUE = "sixdim_fleet_shapes"
"""The label ``count_values`` puts each shape count in."""


def shapes_query(layout: Layout, matchers: list[str]) -> str:
    """How many GPUs of each host cover each number of shapes, per summary case and versions (read by
    :func:`shape_rows`)."""
    return (f'count_values by ({_by_host(layout, catalog.SUMMARY_SHAPES)}) ("{SHAPES_VALUE}", '
            f"{_selector(catalog.SUMMARY_SHAPES, matchers)})")


def shape_rows(answer: list[dict], layout: Layout) -> list[HostRow]:
    """A :func:`shapes_query` answer as host rows: the median over the host's GPUs of their shape counts, and
    how many GPUs."""
    group_labels = layout.group_labels(catalog.SUMMARY_SHAPES)
    tallies: dict[tuple, list[tuple[float, int]]] = {}
    for series in answer:
        labels = series["metric"]
        key = _row_key(labels, group_labels, layout, with_versions=True)
        tallies.setdefault(key, []).append((float(labels.get(SHAPES_VALUE, "nan")), int(float(series["value"][1]))))
    out = []
    for (group, host, versions), counts in tallies.items():
        gpus = sum(n for _, n in counts)
        seen, middle = 0, counts[0][0]
        for value, n in sorted(counts):  # the median GPU's count (the lower middle for an even number)
            seen += n
            if 2 * seen >= gpus:
                middle = value
                break
        out.append(HostRow(group, host, versions, middle, gpus))
    return out


def version_matchers(versions: dict[str, str]) -> list[str]:
    """Matchers selecting exactly these version label values (an empty value matches an absent label)."""
    return [f"{label}={quote(value)}" for label, value in versions.items()]


def paired_query(metric: catalog.MetricDef, layout: Layout, matchers: list[str], old: dict[str, str],
                 new: dict[str, str], hosts: list[str], before: str) -> str:
    """Per host that runs ``new`` now: the median over its GPUs of (value now / value ``before`` ago under
    ``old``), and how many GPUs have both."""
    host_filter = [f"{layout.host}=~{quote('|'.join(re.escape(h) for h in sorted(set(hosts))))}"]
    versions = ", ".join(catalog.VERSION_LABELS)
    after = _selector(metric, matchers, version_matchers(new) + host_filter)
    earlier = _selector(metric, matchers, version_matchers(old) + host_filter)
    ratio = (f"(\n  max without ({versions}) ({after})\n/\n"
             f"  max without ({versions}) ({earlier} offset {before})\n)")
    by = ", ".join(dict.fromkeys(layout.host_labels() + layout.group_labels(metric)))
    return f'label_replace(quantile by ({by}) (0.5, {ratio}), "{STAT}", "{MEDIAN}", "", "")'


def covering(rows: list[HostRow], shapes: list[HostRow]) -> tuple[list[HostRow], int]:
    """A summary metric's host rows with their GPU counts from ``shapes`` (the :func:`shapes_query` rows), and
    only where the host's median shape count is its group's (the most common among its hosts, the larger on a
    tie: a suite whose shape failed everywhere under the new version still compares the hosts that ran it
    all); with how many host rows were left out.  Groups are compared across versions, so the count is the
    group's over every version."""
    counts = {(r.group, r.host, r.versions): r for r in shapes}
    typical: dict[tuple, Counter] = {}
    for r in shapes:
        typical.setdefault(r.group, Counter())[r.median] += 1
    wanted = {group: max(counter.items(), key=lambda item: (item[1], item[0]))[0] for group, counter in typical.items()}
    out, left_out = [], 0
    for r in rows:
        twin = counts.get((r.group, r.host, r.versions))
        if twin is None or twin.median != wanted.get(r.group):
            left_out += 1
            continue
        out.append(HostRow(r.group, r.host, r.versions, r.median, twin.gpus))
    return out, left_out


@dataclass(frozen=True)
class HostRow:
    """One host's median over its GPUs and their count, for one group and one set of versions."""

    group: tuple[str, ...]
    host: tuple[str, str]
    versions: tuple[str, ...]
    median: float
    gpus: int


def _row_key(labels: dict[str, str], group_labels: tuple[str, ...], layout: Layout, *,
             with_versions: bool) -> tuple[tuple[str, ...], tuple[str, str], tuple[str, ...]]:
    """A series' group, host and versions, as a :class:`HostRow` holds them."""
    return (tuple(labels.get(label, "") for label in group_labels),
            (labels.get(layout.cluster, ""), labels.get(layout.host, "")),
            tuple(labels.get(label, "") for label in catalog.VERSION_LABELS) if with_versions else ())


def rows(answer: list[dict], metric: catalog.MetricDef, layout: Layout, *, with_versions: bool = True) -> list[HostRow]:
    """The rows of a :func:`now_query` or :func:`paired_query` answer: the median and count rows joined."""
    group_labels = layout.group_labels(metric)
    medians: dict[tuple, float] = {}
    counts: dict[tuple, int] = {}
    for series in answer:
        labels = series["metric"]
        key = _row_key(labels, group_labels, layout, with_versions=with_versions)
        value = float(series["value"][1])
        if labels.get(STAT) == GPUS:
            counts[key] = int(value)
        else:
            medians[key] = value
    return [HostRow(group, host, versions, value, counts.get((group, host, versions), 0))
            for (group, host, versions), value in medians.items()]
