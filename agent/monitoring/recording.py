"""Recording rules: what the alerts and the dashboards would otherwise each evaluate again.

A GPU's speed against its peers' median (every GPU of the same model with the same suite, workload,
precision, mode, pass and versions, among the summaries that cover the group's shapes) is what
SixdimSlowerThanPeers fires on and what two fleet panels show.  Written out, it is a quantile over
the fleet joined back to each series, for FLOP/s and for samples/s; evaluated three times per rule
round before, it is now recorded once per metric (``sixdim_peer_group:<summary>:ratio_to_median``
and ``sixdim_peer_group:<summary>:count``) and read by both.  The names follow Prometheus's
``level:metric:operations`` convention.

The dashboards therefore need these rules loaded in the Prometheus they query, as the alerts do:
the one rules file ``sixdim rules`` writes holds both.
"""

from __future__ import annotations

from typing import Any

from sixdim.core import catalog
from sixdim.monitoring.promql import covering_shapes

GROUP = "sixdim-recording"
PEER_METRICS: tuple[catalog.MetricDef, ...] = (catalog.SUMMARY_FLOPS, catalog.SUMMARY_SAMPLES)
"""The summary speeds compared with peers."""
PEER_LABELS: tuple[str, ...] = (catalog.MODEL_NAME, catalog.DEVICE_TYPE, catalog.SUITE, catalog.WORKLOAD,
                                catalog.PRECISION, catalog.MODE, catalog.PASS) + catalog.VERSION_LABELS
"""Which summary series are peers (catalog names; the model label is exported as the options say)."""


def peer_ratio(metric: catalog.MetricDef) -> catalog.MetricDef:
    """The recorded ratio of each summary series to its peer group's median (labels: the summary's)."""
    return catalog.MetricDef(
        f"sixdim_peer_group:{metric.name}:ratio_to_median", "gauge",
        f"{metric.name} over the median of its peer group (the same model, device type, suite, workload, "
        "precision, mode, pass and versions), among the summaries covering the group's median shape count; "
        "a recording rule.", metric.labels)


def peer_count(metric: catalog.MetricDef) -> catalog.MetricDef:
    """The recorded size of each peer group (labels: the peer group's)."""
    return catalog.MetricDef(
        f"sixdim_peer_group:{metric.name}:count", "gauge",
        f"GPUs in each peer group of {metric.name} whose summary covers the group's median shape count; a "
        "recording rule.", tuple(label for label in metric.labels if label in PEER_LABELS))


RECORDED: tuple[catalog.MetricDef, ...] = tuple(d for m in PEER_METRICS for d in (peer_ratio(m), peer_count(m)))
"""Every recorded series, defined once: the rules write them, the alerts and dashboards read them."""


def peers_by(dcgm_label_names: bool) -> str:
    """The peer-group labels as exported, for ``by (...)`` and ``on (...)``."""
    return ", ".join(catalog.exported_label(label, dcgm_label_names) for label in PEER_LABELS)


def rules(dcgm_label_names: bool = False) -> list[dict[str, Any]]:
    """The recording rules, in file order."""
    peers = peers_by(dcgm_label_names)
    out: list[dict[str, Any]] = []
    for metric in PEER_METRICS:
        full = covering_shapes(metric.name, catalog.SUMMARY_SHAPES.name, peers)
        out.append({"record": peer_ratio(metric).name,
                    "expr": f"{full}\n/ on ({peers}) group_left ()\nquantile by ({peers}) (0.5, {full})"})
        out.append({"record": peer_count(metric).name, "expr": f"count by ({peers}) (\n  {full}\n)"})
    return out


def group(dcgm_label_names: bool = False) -> dict[str, Any]:
    return {"name": GROUP, "rules": rules(dcgm_label_names)}
