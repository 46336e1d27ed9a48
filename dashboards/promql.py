"""PromQL for the dashboards, built from the metric catalog.

Every metric and label name comes from :mod:`sixdim.core.catalog` (or, for the two kinds of series that are
not sixdim's, from the constants below, each written once): a rename in the catalog renames it here,
and the committed JSON fails its staleness test until it is regenerated.  The host and model labels are
``hostname`` and ``model_name``, or dcgm-exporter's ``Hostname`` and ``modelName`` with ``dcgm_label_names``,
as in agent/monitoring/rules.py.

Each dashboard variable filters the series that carry its label, as a regex (``label=~"$var"``): the
All value is ``.*``, which also matches a label that is empty (a CPU host's ``gpu``, a copy
workload's ``precision``) or absent.  Every series selector, the recorded series' and the ones the catalog does
not define included, is filtered by the ``cluster`` variable (the options' cluster label, which the scrape
adds: absent, All matches every series), and on a dashboard with target variables by ``job`` and ``instance``
too: one cluster's host is told apart from another's of the same name.

Every ``by (...)`` and ``on (...)`` list starts with the options' cluster label (:meth:`PromQL.by`), as
the alert rules' do: where several clusters share one Prometheus or Thanos, a host name found in two
clusters stays two rows and two lines, and the fleet's peer medians are taken within each cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sixdim.core import catalog
from sixdim.monitoring import recording
from sixdim.monitoring.promql import INSTANCE, JOB, PROCESS_START_TIME, PROMETHEUS_UP, quote

# prometheus_client's own process metrics, which the agent exports beside the catalog's, and
# Prometheus's per-target ``up``: the only series the dashboards read that the catalog does not define.
PROCESS_RESIDENT_MEMORY = "process_resident_memory_bytes"
PROCESS_CPU_SECONDS = "process_cpu_seconds_total"
PROCESS_OPEN_FDS = "process_open_fds"
PROCESS_MAX_FDS = "process_max_fds"
PROCESS_METRICS = (PROCESS_RESIDENT_MEMORY, PROCESS_CPU_SECONDS, PROCESS_OPEN_FDS, PROCESS_MAX_FDS,
                   PROCESS_START_TIME)
UP = PROMETHEUS_UP
TARGET_LABELS = (JOB, INSTANCE)

RATE_INTERVAL = "$__rate_interval"
RANGE = "$__range"
INTERVAL = "$__interval"


@dataclass(frozen=True)
class Var:
    """A dashboard variable and the catalog label it filters."""

    name: str
    label: str


CLUSTER_VARIABLE = "cluster"
"""The cluster variable's name, whatever the cluster label is called (``--cluster-label``)."""
TARGET_VARIABLES = (JOB, INSTANCE)
"""The scrape target's variables (named as their labels), on the dashboards where a target matters."""

HOST_VAR = Var("hostname", catalog.HOSTNAME)
MODEL_VAR = Var("model", catalog.MODEL_NAME)
GPU_VAR = Var("gpu", catalog.GPU)
WORKLOAD_VAR = Var("workload", catalog.WORKLOAD)
PRECISION_VAR = Var("precision", catalog.PRECISION)
VARIABLES = (HOST_VAR, MODEL_VAR, GPU_VAR, WORKLOAD_VAR, PRECISION_VAR)
"""The query variables of every dashboard, in the order they are shown and chained."""

STATES = dict(catalog.REGRESSION_STATE_VALUES)


class PromQL:
    """Expressions for one label-name convention (``hostname`` and ``model_name``, or dcgm-exporter's ``Hostname``
    and ``modelName``) and one cluster label (the options' ``cluster_label``); with ``targets``, for a dashboard
    that has the scrape target's variables (``job``, ``instance``) as well."""

    def __init__(self, dcgm_label_names: bool = False, cluster_label: str = "cluster", targets: bool = False) -> None:
        self.dcgm = dcgm_label_names
        self.cluster = cluster_label
        self.targets = targets

    # --- names
    def lab(self, label: str) -> str:
        """A label as exported."""
        return catalog.exported_label(label, self.dcgm)

    def labels(self, *labels: str) -> str:
        """Labels as exported, as a list (for ``without (...)``, which keeps the cluster by itself)."""
        return ", ".join(self.lab(label) for label in labels)

    def by(self, *labels: str) -> str:
        """Labels as exported for ``by (...)`` and ``on (...)``: the cluster label first, then ``labels``."""
        return ", ".join((self.cluster,) + tuple(self.lab(label) for label in labels))

    @property
    def model(self) -> str:
        return self.lab(catalog.MODEL_NAME)

    def legend(self, *labels: str, text: str = "") -> str:
        """A legend of label templates, then the text: ``{{hostname}} {{gpu}} ...``."""
        return " ".join([f"{{{{{self.lab(label)}}}}}" for label in labels] + ([text] if text else []))

    # --- selectors
    def scope(self, *, skip: Iterable[str] = ()) -> list[str]:
        """The matchers every selector starts with: the cluster variable's, then (with ``targets``) the job's and
        the instance's, but those whose variable is in ``skip``."""
        names = [(self.cluster, CLUSTER_VARIABLE)] + ([(v, v) for v in TARGET_VARIABLES] if self.targets else [])
        return [f'{label}=~"${name}"' for label, name in names if name not in set(skip)]

    def series(self, name: str) -> str:
        """A series the catalog does not define (``up``, the process metrics), filtered by the scope."""
        return f"{name}{{{', '.join(self.scope())}}}"

    def sel(self, metric: catalog.MetricDef, *, skip: Iterable[str] = (), **matchers: tuple[str, str]) -> str:
        """The metric filtered by the scope (:meth:`scope`) and by every dashboard variable whose label it carries
        (but those in ``skip``, variable names or labels), and by extra ``label=(op, value)`` matchers, each label
        checked against the catalog."""
        skipped = set(skip)
        parts = self.scope(skip=skipped) + [f'{self.lab(v.label)}=~"${v.name}"' for v in VARIABLES
                                             if v.label in metric.labels and v.label not in skipped]
        for label, (op, value) in matchers.items():
            if label not in metric.labels:
                raise KeyError(f"{metric.name} has no label {label!r}")
            if op not in ("=", "!=", "=~", "!~"):
                raise ValueError(f"unknown matcher {op!r}")
            parts.append(f"{self.lab(label)}{op}{quote(value)}")
        return f"{metric.name}{{{', '.join(parts)}}}"

    def statuses(self, *names: str) -> tuple[str, str]:
        """A matcher for run statuses, each checked against the catalog."""
        for name in names:
            if name not in catalog.RUN_STATUSES:
                raise KeyError(f"unknown run status {name!r}")
        return ("=", names[0]) if len(names) == 1 else ("=~", "|".join(names))

    # --- building blocks
    def without_versions(self, expr: str) -> str:
        """A result series under every software version as one line: an upgrade continues the same
        series (the annotations mark it) instead of starting a differently labelled one."""
        return f"max without ({self.labels(*catalog.VERSION_LABELS)}) ({expr})"

    def geomean(self, labels: Iterable[str], expr: str) -> str:
        """The geometric mean by the labels: exp(avg(ln(x))), as the summaries themselves are."""
        return f"exp(avg by ({self.by(*labels)}) (ln({expr})))"

    def with_host(self, expr: str) -> str:
        """A series of the agent's process (labelled by its scrape target only) with the host name the
        agent reports, and only for the hosts selected: joined on the target with the build-info series."""
        build = catalog.BUILD_INFO
        return (f"{expr} * on ({self.by(*TARGET_LABELS)}) group_left ({self.lab(catalog.HOSTNAME)}) "
                f"{self.sel(build)}")

    def rate(self, expr: str) -> str:
        return f"rate({expr}[{RATE_INTERVAL}])"

    def increase(self, expr: str, window: str = RATE_INTERVAL) -> str:
        if window not in (RATE_INTERVAL, RANGE):
            raise ValueError(f"increase() runs over $__rate_interval or $__range, not {window!r}")
        return f"increase({expr}[{window}])"

    def result_key(self) -> str:
        """What identifies a result series apart from its versions and figure (for ``and on``)."""
        return self.by(catalog.HOSTNAME, catalog.UUID, catalog.WORKLOAD, catalog.PRECISION, catalog.SHAPE,
                       catalog.MODE, catalog.PASS)

    def peer_group(self) -> tuple[str, ...]:
        """Which summary series are peers: the same model, device type, suite, workload, precision,
        mode, pass and versions (as SixdimSlowerThanPeers groups them)."""
        return recording.PEER_LABELS

    def fleet_peer_ratio(self, metric: catalog.MetricDef) -> str:
        """A summary's speed over the median of the same summary on every GPU of the same model in the
        fleet (not only the selected hosts and GPUs: those are its peers), over the same shapes: the
        recorded ratio (:mod:`sixdim.monitoring.recording`) of the selected series."""
        return self.sel(recording.peer_ratio(metric))

    def enough_peers(self, metric: catalog.MetricDef, minimum: int) -> str:
        """Peer groups of at least ``minimum`` GPUs (the recorded count)."""
        return f"{self.sel(recording.peer_count(metric))} >= {minimum}"

    def version_changes(self, window: str) -> str:
        """A host's result series under a combination of versions that it did not export ``window``
        ago, while it did export results then: the first results after a driver, CUDA or torch change
        (a host that just started, or a version combination seen before, is not a change)."""
        shapes = catalog.SUMMARY_SHAPES
        combo = self.by(catalog.HOSTNAME, *catalog.VERSION_LABELS)
        host = self.by(catalog.HOSTNAME)
        now = self.sel(shapes, skip=(catalog.WORKLOAD, catalog.PRECISION))
        before = f"{now} offset {window}"
        return (f"count by ({combo}) ({now})\n"
                f"unless\n"
                f"count by ({combo}) ({before})\n"
                f"and on ({host})\n"
                f"count by ({host}) ({before})")

    def new_change_verdicts(self, window: str) -> str:
        """Version-change verdicts that appeared or changed within ``window``."""
        change = catalog.VERSION_CHANGE_RATIO
        labels = self.by(catalog.HOSTNAME, catalog.DEVICE_TYPE, catalog.GPU, catalog.WORKLOAD, catalog.FIGURE,
                         catalog.CHANGE_COMPONENT, catalog.CHANGE_FROM, catalog.CHANGE_TO, catalog.CHANGE_VERDICT)
        now = self.sel(change, skip=(catalog.PRECISION,))
        return (f"count by ({labels}) ({now})\n"
                f"unless\n"
                f"count by ({labels}) ({now} offset {window})")
