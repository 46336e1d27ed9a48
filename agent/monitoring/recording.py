"""Recording rules: what the alerts and the dashboards would otherwise each evaluate again.

A GPU's speed against its peers' median (every GPU of the same model with the same suite, workload,
precision, mode, pass and versions, among the summaries that cover the group's shapes) is what
SixdimSlowerThanPeers fires on and what two fleet panels show.  Written out, it is a quantile over
the fleet joined back to each series, for FLOP/s and for samples/s; evaluated three times per rule
round before, it is now recorded once per metric (``sixdim_peer_group:<summary>:ratio_to_median``
and ``sixdim_peer_group:<summary>:count``) and read by both.  The names follow Prometheus's
``level:metric:operations`` convention.  A peer group's count counts the ratio series the rule before it
recorded in the same evaluation (one per summary that covers the group's shapes), rather than filtering the
summaries again: the coverage filter (:func:`~sixdim.monitoring.promql.covering_shapes`) is most of the
group's cost, tests/bench/recording_cost.py measures it, and tests/test_recording_cost.py checks in a real
Prometheus that the series recorded are those of the filter written out.

The dashboards therefore need these rules loaded in the Prometheus they query, as the alerts do:
the one rules file ``sixdim rules`` writes holds both.

Each scrape target's host name is recorded too (``sixdim_target:sixdim_build_info:hostname``, by
:func:`target_hostname_rule`, in the alerts' ``sixdim-agent`` group): the rule reads its own last value
while the agent is down, so SixdimAgentDown names the host however long the agent stays down, and the
agent dashboard's scrape panel shows the name of a host that is down.

Peers are compared within one cluster: every grouping and matching keeps the options' cluster label
(``--cluster-label``, default ``cluster``), so a fleet of several clusters in one Prometheus or Thanos
gets one peer group per cluster, as kubernetes-mixin keeps its ``clusterLabel``.
"""

from __future__ import annotations

from typing import Any

from sixdim.core import catalog
from sixdim.core.durations import format_duration
from sixdim.monitoring.options import Options
from sixdim.monitoring.promql import INSTANCE, JOB, PROMETHEUS_UP, covering_shapes, quote

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


TARGET_HOSTNAME = catalog.MetricDef(
    "sixdim_target:sixdim_build_info:hostname", "gauge",
    "The host name each scrape target of the agents last reported in sixdim_build_info, kept while the target is "
    "down and for as long as Prometheus still has it as a target (its up series); always 1; a recording rule.",
    (catalog.HOSTNAME,))
"""Labels: the target's (job, instance, and the cluster label where the scrape adds one) and the host name (as the
agents export it: ``Hostname`` with --dcgm-label-names)."""

ROLLOUT_METRICS: tuple[catalog.MetricDef, ...] = (catalog.SUMMARY_FLOPS, catalog.SUMMARY_SAMPLES,
                                                 catalog.SUMMARY_BANDWIDTH)
"""The summary speeds whose versions are compared across the fleet during a rollout."""
ROLLOUT_GROUP: tuple[str, ...] = tuple(label for label in PEER_LABELS if label not in catalog.VERSION_LABELS)
"""A rollout group: the GPU model, device type and case (suite, workload, precision, mode, pass); its versions
are its sides."""


def rollout_median(metric: catalog.MetricDef) -> catalog.MetricDef:
    """The median of a summary over the fleet's GPUs of one model and case, per set of versions."""
    return catalog.MetricDef(
        f"sixdim_rollout:{metric.name}:median", "gauge",
        f"The median of {metric.name} over every GPU of the same model, case (suite, workload, precision, mode, "
        "pass) and versions in the cluster, among the summaries covering the group's median shape count; a "
        "recording rule.", tuple(label for label in metric.labels if label in PEER_LABELS))


def rollout_hosts(metric: catalog.MetricDef) -> catalog.MetricDef:
    """How many hosts a version of a rollout group has."""
    return catalog.MetricDef(
        f"sixdim_rollout:{metric.name}:hosts", "gauge",
        f"Hosts with {metric.name} under each set of versions, per GPU model and case in the cluster; a recording "
        "rule.", rollout_median(metric).labels)


def rollout_ratio(metric: catalog.MetricDef) -> catalog.MetricDef:
    """Each version's median over the fastest version's, among the versions with enough hosts."""
    return catalog.MetricDef(
        f"sixdim_rollout:{metric.name}:ratio_to_best", "gauge",
        f"The median of {metric.name} under each set of versions over the highest such median of the same GPU "
        "model and case in the cluster, among the versions run by at least --rollout-min-hosts hosts, ratio: 1 for "
        "the fastest version, below 1 for a slower one; a recording rule.", rollout_median(metric).labels)


RECORDED: tuple[catalog.MetricDef, ...] = tuple(
    d for m in PEER_METRICS for d in (peer_ratio(m), peer_count(m))) + tuple(
    d for m in ROLLOUT_METRICS for d in (rollout_median(m), rollout_hosts(m), rollout_ratio(m))) + (TARGET_HOSTNAME,)
"""Every recorded series, defined once: the rules write them, the alerts and dashboards read them."""


def peers_by(options: Options) -> str:
    """The peer-group labels as exported, the cluster label first, for ``by (...)`` and ``on (...)``."""
    return ", ".join((options.cluster_label,) + tuple(catalog.exported_label(label, options.dcgm_label_names)
                                                      for label in PEER_LABELS))


def rollout_by(options: Options, *, versions: bool = True) -> str:
    """A rollout group's labels as exported (with its versions, or without), the cluster label first."""
    labels = ROLLOUT_GROUP + (catalog.VERSION_LABELS if versions else ())
    return ", ".join((options.cluster_label,) + tuple(catalog.exported_label(label, options.dcgm_label_names)
                                                      for label in labels))


def rollout_rules(options: Options) -> list[dict[str, Any]]:
    """Per rollout group and set of versions: the median over the GPUs, the hosts, and the ratio to the fastest
    version with enough hosts (what SixdimRolloutSlower fires on and the Rollout view shows).  Medians over
    GPUs, not hosts: a bad GPU moves a median over hundreds little, and PromQL has no rank test;
    ``sixdim fleet`` judges with hosts as the unit and a confidence interval."""
    sides, group = rollout_by(options), rollout_by(options, versions=False)
    host = catalog.exported_label(catalog.HOSTNAME, options.dcgm_label_names)
    out: list[dict[str, Any]] = []
    for metric in ROLLOUT_METRICS:
        covered = covering_shapes(metric.name, catalog.SUMMARY_SHAPES.name, group)
        median, hosts = rollout_median(metric).name, rollout_hosts(metric).name
        enough = f"(\n    {median}\n  and on ({sides})\n    {hosts} >= {options.rollout_min_hosts}\n  )"
        out.append({"record": median, "expr": f"quantile by ({sides}) (0.5, {covered})"})
        out.append({"record": hosts, "expr": f"count by ({sides}) (\n  count by ({sides}, {host}) ({covered})\n)"})
        out.append({"record": rollout_ratio(metric).name,
                    "expr": f"  {enough}\n/ on ({group}) group_left ()\n  max by ({group}) {enough}"})
    return out


def rules(options: Options | None = None) -> list[dict[str, Any]]:
    """The recording rules, in file order."""
    options = options or Options()
    peers = peers_by(options)
    out: list[dict[str, Any]] = []
    for metric in PEER_METRICS:
        full = covering_shapes(metric.name, catalog.SUMMARY_SHAPES.name, peers)
        out.append({"record": peer_ratio(metric).name,
                    "expr": f"{full}\n/ on ({peers}) group_left ()\nquantile by ({peers}) (0.5, {full})"})
        # the ratio just recorded has one series per covering summary: counting it counts them, without the
        # coverage filter's join and quantile a third time (rules of a group run in order, at one time)
        out.append({"record": peer_count(metric).name,
                    "expr": f"count by ({peers}) (\n  {peer_ratio(metric).name}\n)"})
    return out + rollout_rules(options)


def target_hostname_rule(options: Options, fallback_seconds: int) -> dict[str, Any]:
    """The recording rule that remembers each target's host name, in three arms, the first that has the
    target winning (``or on`` the target's labels):

    1. the host name the agent reports now (``sixdim_build_info``);
    2. else the rule's own last value: a recording rule that reads itself carries its value from one
       evaluation to the next for as long as the target is down, days or months, where a lookup of
       ``sixdim_build_info`` over a fixed window loses the name once the window has passed;
    3. else the name the agent reported within ``fallback_seconds``, for the evaluations where the rule has
       no value of its own yet: the rules were just loaded, or Prometheus was stopped for longer than its
       lookback (5 minutes) while the agent was down.

    It is kept only while Prometheus still scrapes the target (``up`` exists), so a target taken out of
    the scrape configuration is forgotten.  An agent back under a new host name records the new one at
    once (arm 1), and the old series ends: one series per target, always."""
    job = quote(options.job)
    target = ", ".join((options.cluster_label, JOB, INSTANCE))
    host = catalog.exported_label(catalog.HOSTNAME, options.dcgm_label_names)
    build = f"{catalog.BUILD_INFO.name}{{{JOB}={job}}}"
    name = TARGET_HOSTNAME.name
    expr = (f"(\n"
            f"    max by ({target}, {host}) ({build})\n"
            f"  or on ({target})\n"
            f"    {name}\n"
            f"  or on ({target})\n"
            f"    max by ({target}, {host}) (\n"
            f"      topk by ({target}) (1, last_over_time({build}[{format_duration(fallback_seconds)}]))\n"
            f"    )\n"
            f")\n"
            f"and on ({target})\n"
            f"  {PROMETHEUS_UP}{{{JOB}={job}}}")
    return {"record": name, "expr": expr}


def group(options: Options | None = None) -> dict[str, Any]:
    """The recording rules' group, with its own ``interval`` where the options set one."""
    options = options or Options()
    interval = {} if options.recording_interval is None else {"interval": format_duration(options.recording_interval)}
    return {"name": GROUP, **interval, "rules": rules(options)}
