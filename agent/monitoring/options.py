"""One set of options for everything sixdim generates for Prometheus and Grafana.

As in a monitoring mixin, one configuration drives the alert rules, the recording rules and the
dashboards: ``sixdim rules``, ``sixdim dashboards`` and ``sixdim generate`` take the same flags
(:func:`add_arguments`), so a dashboard that says "below 0.8, as SixdimSlowerThanPeers judges it"
is built with the 0.8 the alert fires at.  The defaults are what the committed files hold.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from sixdim.core import catalog
from sixdim.core.durations import format_duration, whole_seconds
from sixdim.monitoring.promql import INSTANCE, JOB

DEFAULT_RUNBOOK_BASE = "https://github.com/sixdim/sixdim/blob/main/docs/ALERTS.md"
DURATIONS = ("stale_after", "failure_window", "incorrect_window")
"""The options that are durations (whole seconds; flags in the one duration grammar)."""
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
"""A Prometheus label name (names starting with ``__`` are reserved for Prometheus itself)."""


@dataclass(frozen=True)
class Options:
    """What the generated rules and dashboards can tune."""

    stale_after: int = 2 * 3600
    """SixdimBenchmarkStale: seconds without an ok run of a workload on a device."""
    failures: int = 3
    """SixdimBenchmarkFailing: failed or timed-out runs (cases) within ``failure_window``."""
    failure_window: int = 6 * 3600
    incorrect_window: int = 86400
    """SixdimIncorrectResult fires while an incorrect result was recorded within this many seconds."""
    peer_ratio: float = 0.9
    """SixdimSlowerThanPeers and the peer panels: a GPU below this fraction of its peers' median."""
    min_peers: int = 3
    """GPUs (the one judged included) a peer group needs before it is compared."""
    rollout_threshold: float = 0.02
    """SixdimRolloutSlower, the Rollout view and ``sixdim fleet --exit-code``: a version slower than the fastest
    version of the same GPU model and case by at least this fraction (docs/FLEET.md says how it was chosen)."""
    rollout_min_hosts: int = 3
    """Hosts a version needs before the rollout rules compare it (``sixdim fleet --min-hosts``'s default too)."""
    recording_interval: int | None = None
    """Seconds between evaluations of the fleet-wide recording rules (peer groups, rollout), written as their
    group's ``interval``; None: Prometheus's global ``evaluation_interval``.  Each evaluation joins every summary
    series of the fleet to its group's shape count: seconds of Prometheus's time per evaluation at a thousand
    hosts (docs/BENCHMARKS.md, "The fleet rules' cost"), while the benchmarks they summarise run hourly.  Under
    5 minutes: a recorded series is found only within Prometheus's 5-minute lookback of its last evaluation."""
    job: str = "sixdim"
    """The scrape job of the agents (SixdimAgentDown)."""
    cluster_label: str = "cluster"
    """The label that tells clusters apart where several share one Prometheus or Thanos, as
    kubernetes-mixin's ``clusterLabel``: every aggregation and every join of the rules and dashboards keeps
    it, so each cluster gets its own alerts and its own peer groups.  The agent does not export it: the
    scrape configuration adds it (a target label, or a relabelling), or Thanos adds its external label.
    Absent, it groups everything as one cluster, as before.  Every dashboard has a ``cluster`` variable over it
    that filters every series selector, so one cluster's host is told apart from another's of the same name."""
    dcgm_label_names: bool = False
    """Name the host and model labels as dcgm-exporter does (``Hostname``, ``modelName``;
    :data:`sixdim.core.catalog.DCGM_LABEL_NAMES`), as the agents started with --dcgm-label-names export them: every
    expression, matcher, alert text, dashboard variable and legend follows."""
    runbook_base: str = DEFAULT_RUNBOOK_BASE

    def validate(self) -> None:
        """:class:`ValueError` naming the first option out of its range."""
        for name in DURATIONS:
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ValueError(f"{name}: expected a positive number of seconds, got {getattr(self, name)!r}")
        if not isinstance(self.failures, int) or self.failures < 1:
            raise ValueError(f"failures: expected a whole number of at least 1, got {self.failures!r}")
        if not 0 < self.peer_ratio < 1:
            raise ValueError(f"peer_ratio: expected a ratio between 0 and 1, got {self.peer_ratio!r}")
        if not isinstance(self.rollout_threshold, float) or not 0 < self.rollout_threshold < 1:
            raise ValueError(f"rollout_threshold: expected a fraction between 0 and 1, got {self.rollout_threshold!r}")
        if not isinstance(self.rollout_min_hosts, int) or self.rollout_min_hosts < 2:
            raise ValueError(f"rollout_min_hosts: expected a whole number of at least 2, got "
                             f"{self.rollout_min_hosts!r}")
        if self.recording_interval is not None and (not isinstance(self.recording_interval, int)
                                                    or not 0 < self.recording_interval < 300):
            raise ValueError(f"recording_interval: expected a duration under 5m (Prometheus's lookback: a longer "
                             f"one leaves the recorded series missing between evaluations), got "
                             f"{self.recording_interval!r} s")
        if not isinstance(self.min_peers, int) or self.min_peers < 2:
            raise ValueError(f"min_peers: expected a whole number of at least 2, got {self.min_peers!r}")
        if not self.job or any(ch in self.job for ch in "\"\\\n"):
            raise ValueError(f"job: expected a non-empty job name without quotes or backslashes, got {self.job!r}")
        if (not isinstance(self.cluster_label, str) or not LABEL_NAME.match(self.cluster_label)
                or self.cluster_label.startswith("__") or self.cluster_label in _labels_in_use()):
            raise ValueError(f"cluster_label: expected a Prometheus label name (letters, digits and _, not "
                             f"starting with a digit or __) that sixdim's series do not carry already, got "
                             f"{self.cluster_label!r}")
        if not re.match(r"^https?://\S+$", self.runbook_base) or "#" in self.runbook_base:
            raise ValueError(f"runbook_base: expected an http(s) URL without a #fragment, got {self.runbook_base!r}")

    def as_flags(self) -> str:
        """The options as flags, written into each generated file's header."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                if value:
                    out.append(flag)
            elif value is None:  # not set: Prometheus's own default
                continue
            elif f.name in DURATIONS or f.name == "recording_interval":
                out.append(f"{flag} {format_duration(value)}")
            else:
                out.append(f"{flag} {value}")
        return " ".join(out)


def _labels_in_use() -> frozenset[str]:
    """The labels sixdim's series carry already (the catalog's, in either naming, and the target labels): a
    cluster label named like one of them would merge two different things."""
    names = {label for metric in catalog.ALL_METRICS for label in metric.labels}
    return frozenset(names | set(catalog.DCGM_LABEL_NAMES.values()) | {JOB, INSTANCE})


# ----------------------------------------------------------------------------- the flags

def _arg(convert: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc) if str(exc) else f"expected {what}, got {text!r}") from None
    parse.__name__ = what
    return parse


def _whole(low: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"expected a whole number of at least {low}, got {text!r}") from None
        if value < low:
            raise ValueError(f"expected a whole number of at least {low}, got {text!r}")
        return value
    return convert


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise ValueError(f"expected a ratio between 0 and 1 (exclusive), such as 0.9, got {text!r}")
    return value


def _checked(field: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        try:
            Options(**{field: text}).validate()  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(str(exc).removeprefix(f"{field}: ")) from None
        return text
    return convert


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options as flags, the same on every command that generates rules or dashboards."""
    d = Options()
    group = parser.add_argument_group(
        "options of the generated rules and dashboards (the same for 'sixdim rules', 'sixdim dashboards' and "
        "'sixdim generate', so the alerts and the panels that explain them agree)")
    group.add_argument("--stale-after", type=_arg(whole_seconds, "duration"), default=d.stale_after,
                       metavar="DURATION",
                       help="SixdimBenchmarkStale: fire when a workload has had no ok run on a device for this "
                            f"long; make it longer than your longest suite interval (default: "
                            f"{format_duration(d.stale_after)})")
    group.add_argument("--failures", type=_arg(_whole(1), "count"), default=d.failures, metavar="N",
                       help="SixdimBenchmarkFailing: failed or timed-out runs (cases) of a workload on a device "
                            f"within --failure-window that fire it (default: {d.failures})")
    group.add_argument("--failure-window", type=_arg(whole_seconds, "duration"), default=d.failure_window,
                       metavar="DURATION",
                       help=f"the window --failures counts in (default: {format_duration(d.failure_window)})")
    group.add_argument("--incorrect-window", type=_arg(whole_seconds, "duration"), default=d.incorrect_window,
                       metavar="DURATION",
                       help="SixdimIncorrectResult fires while an incorrect result was recorded within this "
                            f"long (default: {format_duration(d.incorrect_window)})")
    group.add_argument("--peer-ratio", type=_arg(_ratio, "ratio"), default=d.peer_ratio, metavar="RATIO",
                       help="SixdimSlowerThanPeers and the dashboards' peer panels: a GPU whose summary FLOP/s or "
                            f"samples/s is below RATIO times the median of its peers (default: {d.peer_ratio})")
    group.add_argument("--min-peers", type=_arg(_whole(2), "count"), default=d.min_peers, metavar="N",
                       help="compare only where at least N GPUs (the one judged included) of the same model have "
                            f"the same summary series (default: {d.min_peers})")
    group.add_argument("--rollout-threshold", type=_arg(_ratio, "ratio"), default=d.rollout_threshold,
                       metavar="FRACTION",
                       help="SixdimRolloutSlower and the Rollout view: a set of versions whose median is below the "
                            "fastest version's of the same GPU model and case by at least this fraction (default: "
                            f"{d.rollout_threshold})")
    group.add_argument("--rollout-min-hosts", type=_arg(_whole(2), "count"), default=d.rollout_min_hosts,
                       metavar="N", help="compare a version only where at least N hosts run it (default: "
                                         f"{d.rollout_min_hosts})")
    group.add_argument("--recording-interval", type=_arg(whole_seconds, "duration"), default=d.recording_interval,
                       metavar="DURATION",
                       help="evaluate the fleet-wide recording rules (peer groups, rollout) this often rather than "
                            "at Prometheus's global evaluation_interval: each evaluation reads every summary series "
                            "of the fleet, seconds of Prometheus's time at a thousand hosts; under 5m, Prometheus's "
                            "lookback (2m suits hourly benchmarks; default: the global interval)")
    group.add_argument("--job", type=_arg(_checked("job"), "job name"), default=d.job, metavar="NAME",
                       help=f"the Prometheus scrape job of the agents, for SixdimAgentDown (default: {d.job})")
    group.add_argument("--cluster-label", type=_arg(_checked("cluster_label"), "label name"),
                       default=d.cluster_label, metavar="LABEL",
                       help="the label that tells clusters apart in a Prometheus or Thanos holding several: every "
                            "aggregation and join of the rules and dashboards keeps it, so each cluster gets its "
                            "own alerts and peer groups, and the dashboards' cluster variable filters by it; the "
                            "scrape configuration (or Thanos) adds it, the agent does not (default: "
                            f"{d.cluster_label})")
    group.add_argument("--dcgm-label-names", action="store_true",
                       help="the agents run with --dcgm-label-names: name the host and model labels as "
                            "dcgm-exporter does, Hostname and modelName, so that on(Hostname, gpu) joins "
                            "sixdim's series with dcgm-exporter's (default: hostname, model_name)")
    group.add_argument("--runbook-base", type=_arg(_checked("runbook_base"), "URL"), default=d.runbook_base,
                       metavar="URL",
                       help="URL of docs/ALERTS.md; each runbook_url is URL#<alert name in lower case> "
                            f"(default: {d.runbook_base})")


def from_args(args: argparse.Namespace) -> Options:
    """The options :func:`add_arguments` parsed."""
    return Options(**{f.name: getattr(args, f.name) for f in fields(Options)})
