"""The alert rules, generated from the metric catalog and one set of options.

Every metric and label name comes from :mod:`sixdim.core.catalog`, so a rename there changes the
rules too (and the committed files fail their currency test until they are regenerated).  The
layout follows the monitoring mixins (kubernetes-mixin, node-mixin): CamelCase alert names with the
``Sixdim`` prefix, a ``severity`` label (critical, warning or info) and ``summary``,
``description`` and ``runbook_url`` annotations, the runbook being a section of docs/ALERTS.md.

One alert per incident: the rules aggregate per GPU and workload, so a GPU that regressed on 40
shapes raises one ``SixdimRegression`` whose value (and description) is 40; the Alertmanager
example (deploy/alertmanager/alertmanager.yml) then groups by cluster, host and workload.

Every ``by (...)`` and ``on (...)`` starts with the options' cluster label (:meth:`Alerts.by`), and the
queries in the texts match it, so two clusters in one Prometheus or Thanos never share an alert, a
peer group or a host name looked up for a text.
"""

from __future__ import annotations

from typing import Any

from sixdim.core import catalog
from sixdim.core.durations import format_duration
from sixdim.monitoring import recording
from sixdim.monitoring.options import Options
from sixdim.monitoring.promql import (
    INSTANCE,
    JOB,
    PROCESS_START_TIME,
    PROMETHEUS_UP,
    REGRESSION,
    REGRESSION_CODE,
    indent,
    label,
    quote,
    status,
)

SLOWDOWN_WINDOW = 3600
"""Seconds a thermal or hardware slowdown keeps its alert after the result that showed it was replaced.
The slowdown alerts have no ``for``: the flag is NVML's own report of a clock event during a result's
measured window, an event of that result rather than a noisy sample, and ``max_over_time`` holds it for
this window, so a ``for`` shorter than the window would filter nothing."""
PEER_FOR = "1h"
"""SixdimSlowerThanPeers: a GPU must stay below its peers this long (several runs of the quick suite), so
one slow run on a busy host does not page."""
REGRESSION_FOR = "5m"
"""SixdimRegression fires only once its verdict was exported this long (several scrapes), never on a
single sample: a verdict changes only when a run is recorded, so a real one stays exported until the
next run (15 minutes for the quick suite) and pays 5 minutes on top of the runs the detector already
waited for, and a state seen in one scrape only does not page.  A suite run more often than this whose
verdict alternates with every run stays pending, as a verdict that never holds should."""
REGRESSION_KEEP_FIRING_FOR = "1h"
"""How long SixdimRegression keeps firing after its verdict cleared: a verdict that goes back and forth
with every run (every 15 minutes for the quick suite) stays one alert instead of a notification and a
resolution each run (Prometheus >= 2.42)."""
VERSION_CHANGE_FOR = "5m"
"""SixdimVersionChangeRegression, as SixdimRegression: the version verdict must be exported for several
scrapes before it fires, never on a single sample."""
VERSION_CHANGE_KEEP_FIRING_FOR = "1h"
"""How long SixdimVersionChangeRegression keeps firing after its verdict left ``regression``: the verdict
is judged again with each of the first runs after the change until it settles (docs/REGRESSIONS.md), and a
p-value near the threshold can take it from regression to ok and back; the change is one incident, so
one alert (a rollout's 320 GPUs, one notification, deploy/alertmanager/README.md)."""
DRIFT_WORSE = 1
"""``sixdim_drift_state`` of a figure drifting the worse way."""
DRIFT_FOR = "30m"
"""SixdimDrift: the drift verdict exported this long (two runs of the quick suite) before it fires."""
ROLLOUT_FOR = "30m"
"""SixdimRolloutSlower: a version stays slower this long (two runs of the quick suite on each host, the medians
recomputed at each) before it fires: a rollout is judged over hours, not minutes."""
AGENT_DOWN_FOR = "5m"
AGENT_MOSTLY_DOWN_WINDOW = 900
"""SixdimAgentDown also counts an agent down for most of this window (seconds) as down: one that is up for
a scrape between longer outages (down 4 minutes in every 5) would otherwise reset the ``for`` each time."""
HISTORY_DOWN_FOR = "10m"
CANNOT_RUN_FOR = "5m"
"""SixdimAgentCannotRun: ``sixdim_agent_can_run`` 0 this long.  It stays 0 from a suite run that could not start
until that suite's next run works (15 minutes with the default schedule), so one failed run fires it; the
``for`` only lets a failure that clears at once (a run every minute) pass."""
CONFIG_RELOAD_FAILED_FOR = "10m"
"""How long a failed configuration reload must last before it pages (a fix and another SIGHUP usually
follow within minutes)."""
HISTORY_LOSS_WINDOW = 3600
STALE_KEEP = 86400
"""A benchmark whose last-success series disappears (the agent down, a lost history) keeps its stale
alert this long past the stale threshold: the lookback is ``stale_after`` plus this.  The recorded host
name of each target (:func:`sixdim.monitoring.recording.target_hostname_rule`) looks as far back where it
has no value of its own yet (the rules just loaded, or Prometheus stopped for longer than its lookback),
so that SixdimAgentDown can inhibit those stale alerts of its host for as long as they last; with its own
value it keeps the name for as long as the agent is down."""


class Alerts:
    """The alerts for one set of options."""

    def __init__(self, options: Options) -> None:
        options.validate()
        self.o = options
        self.model = self.n(catalog.MODEL_NAME)
        self.device = tuple(self.n(name) for name in catalog.DEVICE_LABELS)
        self.versions = catalog.VERSION_LABELS

    # --- helpers
    def n(self, name: str) -> str:
        """A label's name as the agents export it: dcgm-exporter's ``Hostname`` and ``modelName`` with
        --dcgm-label-names (:func:`sixdim.core.catalog.exported_label`), in every expression, matcher and text."""
        return catalog.exported_label(name, self.o.dcgm_label_names)

    def label(self, metric: catalog.MetricDef, name: str) -> str:
        """A label of a catalog metric, checked against its definition, as exported."""
        return self.n(label(metric, name))

    def by(self, *labels: str) -> str:
        """A label list for ``by (...)`` and ``on (...)``: the cluster label first, then ``labels`` as exported."""
        return ", ".join((self.o.cluster_label,) + tuple(self.n(name) for name in labels))

    def host(self) -> str:
        """The host name in a text, with its cluster where the alert has one: host-a (cluster eu-1)."""
        return (f"{self.lab(catalog.HOSTNAME)}{{{{ with $labels.{self.o.cluster_label} }}}} (cluster {{{{ . }}}})"
                f"{{{{ end }}}}")

    def same_cluster(self) -> tuple[str, str]:
        """A matcher for queries in texts (``cluster=%q,``) and its printf argument: the alert's own cluster,
        or, where it has none, the series without the label (``cluster=""`` matches those)."""
        return f"{self.o.cluster_label}=%q,", f"$labels.{self.o.cluster_label} "

    def ref(self, name: str) -> str:
        """A label as a template expression (``$labels.gpu``), for ``if`` and ``with``."""
        return "$labels." + self.n(name)

    def lab(self, name: str) -> str:
        """A label's value in a template."""
        return "{{ " + self.ref(name) + " }}"

    def gpu_ref(self) -> str:
        """The device in words: GPU 3 (NVIDIA H100 80GB HBM3, GPU-...) of host-a; on a host without a
        GPU (empty ``gpu`` label), the CPU (AMD EPYC) of host-a."""
        return (f"{{{{ if {self.ref(catalog.GPU)} }}}}GPU {self.lab(catalog.GPU)} ({self.lab(catalog.MODEL_NAME)}, "
                f"{self.lab(catalog.UUID)}){{{{ else }}}}the CPU ({self.lab(catalog.MODEL_NAME)}){{{{ end }}}} "
                f"of {self.host()}")

    def workload_precision(self) -> str:
        """``gemm bf16``; ``gemm`` alone where the series has no precision (an empty label), never
        ``gemm`` and two spaces."""
        return f"{self.lab(catalog.WORKLOAD)}{{{{ with {self.ref(catalog.PRECISION)} }}}} {{{{ . }}}}{{{{ end }}}}"

    def where(self) -> str:
        """For summaries: host-a GPU 3, or host-a alone on a host without a GPU."""
        return f"{self.host()}{{{{ with {self.ref(catalog.GPU)} }}}} GPU {{{{ . }}}}{{{{ end }}}}"

    def versions_in_labels(self) -> str:
        """driver 550.54.15, CUDA 12.4, torch 2.4.0; the driver and CUDA only where the series has them
        (a CPU host has neither)."""
        return (f"{{{{ with {self.ref(catalog.DRIVER_VERSION)} }}}}driver {{{{ . }}}}, {{{{ end }}}}"
                f"{{{{ with {self.ref(catalog.CUDA_VERSION)} }}}}CUDA {{{{ . }}}}, {{{{ end }}}}"
                f"torch {self.lab(catalog.TORCH_VERSION)}")

    def versions_now(self) -> str:
        """For alerts whose series carry no versions: the driver and torch the agent reports now, as a
        sentence with its leading space; nothing at all when the agent reports nothing (it is down)."""
        cluster, arg = self.same_cluster()
        gpu_info = (f"{catalog.GPU_INFO.name}{{{cluster}{self.label(catalog.GPU_INFO, catalog.HOSTNAME)}=%q,"
                    f"{self.label(catalog.GPU_INFO, catalog.UUID)}=%q}}")
        build_info = f"{catalog.BUILD_INFO.name}{{{cluster}{self.label(catalog.BUILD_INFO, catalog.HOSTNAME)}=%q}}"
        return (f"{{{{ with query (printf `{build_info}` {arg}{self.ref(catalog.HOSTNAME)}) }}}} Now running"
                f"{{{{ with query (printf `{gpu_info}` {arg}{self.ref(catalog.HOSTNAME)} {self.ref(catalog.UUID)}) }}}}"
                f" driver {{{{ . | first | label \"{label(catalog.GPU_INFO, catalog.DRIVER_VERSION)}\" }}}}"
                "{{ end }}"
                f" with torch {{{{ . | first | label \"{label(catalog.BUILD_INFO, catalog.TORCH_VERSION)}\" }}}}."
                "{{ end }}")

    def runbook(self, alert: str) -> str:
        return f"{self.o.runbook_base}#{alert.lower()}"

    def alert(self, name: str, expr: str, severity: str, summary: str, description: str,
              for_: str | None = None, keep_firing_for: str | None = None) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": name, "expr": expr}
        if for_:
            rule["for"] = for_
        if keep_firing_for:
            rule["keep_firing_for"] = keep_firing_for
        rule["labels"] = {"severity": severity}
        rule["annotations"] = {"summary": summary, "description": description, "runbook_url": self.runbook(name)}
        return rule

    def runs_added(self, statuses: tuple[str, ...], window: int) -> str:
        """Runs of the given statuses added to ``sixdim_workload_runs_total`` within the window, exactly.

        The counter comes from the history (it survives restarts and never goes down), so the runs
        added are its value minus its smallest value in the window.  A series that first appeared in
        the window (a device's first failed run creates its ``status="failed"`` series at 1) counts
        from 0, but only if it appeared while the agent was already being scraped (fewer samples
        than the host's ``sixdim_history_up``): an agent back after a long absence re-exports old
        counts as new series all at once, and those are not new runs."""
        runs = catalog.WORKLOAD_RUNS
        matcher = "|".join(status(s) for s in statuses)
        op = "=~" if len(statuses) > 1 else "="
        x = f"{runs.name}{{{label(runs, catalog.STATUS)}{op}{quote(matcher)}}}"
        w = format_duration(window)
        host = self.by(self.label(catalog.HISTORY_UP, catalog.HOSTNAME))
        return (f"(\n"
                f"    {x}\n"
                f"  unless\n"
                f"    {x} offset {w}\n"
                f")\n"
                f"and\n"
                f"(\n"
                f"    count_over_time({x}[{w}])\n"
                f"  < on ({host}) group_left ()\n"
                f"    max by ({host}) (count_over_time({catalog.HISTORY_UP.name}[{w}]))\n"
                f")\n"
                f"or\n"
                f"  {x}\n"
                f"-\n"
                f"  min_over_time({x}[{w}])")

    def shapes_where(self, state: catalog.MetricDef, value: int) -> tuple[tuple[str, ...], str]:
        """The cases of a verdict gauge (one per shape, mode and pass) and the expression that counts,
        per GPU, workload, precision and versions, the shapes where it equals ``value``: a GPU that
        regressed (or drifts) on 40 shapes is one alert whose value is 40."""
        group = self.device + (label(state, catalog.WORKLOAD), label(state, catalog.PRECISION)) + self.versions
        case = group + (label(state, catalog.SHAPE), label(state, catalog.MODE), label(state, catalog.PASS))
        expr = (f"count by ({self.by(*group)}) (\n"
                f"  count by ({self.by(*case)}) (\n"
                f"    {state.name} == {value}\n"
                f"  )\n"
                f")")
        return case, expr

    # --- the alerts
    def regression(self) -> dict[str, Any]:
        state = catalog.REGRESSION_STATE
        _, expr = self.shapes_where(state, REGRESSION_CODE)
        figure = label(state, catalog.FIGURE)
        cluster, arg = self.same_cluster()
        group = (catalog.HOSTNAME, catalog.UUID, catalog.WORKLOAD, catalog.PRECISION, *self.versions)
        matchers = ",".join(f"{self.label(state, name)}=%q" for name in group)
        values = " ".join(self.ref(name) for name in group)
        figures_query = f"count by ({self.by(figure)}) ({state.name}{{{cluster}{matchers}}} == {REGRESSION_CODE})"
        figures = (f"{{{{ range $i, $s := query (printf `{figures_query}` {arg}{values}) "
                   f"| sortByLabel \"{figure}\" }}}}{{{{ if $i }}}}, {{{{ end }}}}"
                   f"{{{{ $s.Labels.{figure} }}}}{{{{ end }}}}")
        regressed = f"{state.name}{{{cluster}{matchers}}} == {REGRESSION_CODE}"
        return self.alert(
            "SixdimRegression", expr, "warning",
            f"{self.lab(catalog.WORKLOAD)} regressed on {self.where()}",
            f"{self.workload_precision()} on {self.gpu_ref()} regressed on "
            f"{{{{ $value }}}} shape(s), counting each mode and pass (figures: {figures}), under "
            f"{self.versions_in_labels()}. The agent calls a regression only after it persisted over several "
            f"runs against the series' own baseline.{self.causes(regressed, arg + values, group[:4])}",
            for_=REGRESSION_FOR,
            keep_firing_for=REGRESSION_KEEP_FIRING_FOR)

    def causes(self, judged: str, args: str, labels: tuple[str, ...]) -> str:
        """The likely causes of the series the alert counts (``sixdim_regression_cause`` at rank 1), counted,
        most named first: " Likely cause: power_limit (40 series)."  ``judged``: a selector of those series
        (printf verbs for the alert's labels, ``args`` their values), so the series counted here are the
        alert's own: a suspicious series of the same GPU and workload, which has a cause too, is not
        (it made "regressed on 1 shape(s) ... Likely cause: none (2 series)").  ``labels``: the alert's
        labels that narrow the causes read before the match (a version change's alert has no precision).
        Nothing where the agent names none (an older agent, or the series not yet judged)."""
        cause = catalog.REGRESSION_CAUSE
        name = label(cause, catalog.CAUSE)
        cluster, arg = self.same_cluster()
        series = self.by(*(self.label(cause, n) for n in (catalog.HOSTNAME, catalog.UUID, catalog.WORKLOAD,
                                                            catalog.PRECISION, catalog.SHAPE, catalog.MODE,
                                                            catalog.PASS)))
        matchers = "".join(f"{self.label(cause, n)}=%q," for n in labels)
        values = " ".join(self.ref(n) for n in labels)
        query = (f"sort_desc(count by ({self.by(name)}) ({cause.name}{{{cluster}{matchers}{catalog.CAUSE_RANK}=\"1\"}} "
                 f"and on ({series}) ({judged})))")
        return (f"{{{{ with query (printf `{query}` {arg}{values} {args}) }}}} Likely cause: "
                f"{{{{ range $i, $s := . }}}}{{{{ if $i }}}}, {{{{ end }}}}{{{{ $s.Labels.{name} }}}} "
                f"({{{{ $s.Value }}}} series){{{{ end }}}} (see the runbook).{{{{ end }}}}")

    def drift(self) -> dict[str, Any]:
        """Shapes of one GPU, workload and precision whose figure drifts the worse way: a GPU degrading
        slowly, named as a drift (the regression verdict never calls it one).  ``DRIFT_FOR`` because
        a drift is confirmed over tens of runs and does not end in minutes; no hurry to page."""
        state = catalog.DRIFT_STATE
        case, expr = self.shapes_where(state, DRIFT_WORSE)
        total = catalog.DRIFT_TOTAL_RATIO
        cluster, arg = self.same_cluster()
        worst = (f"min by ({self.by()}) (abs({total.name}{{{cluster}{self.n(catalog.HOSTNAME)}=%q,{catalog.UUID}=%q,"
                 f"{catalog.WORKLOAD}=%q,{catalog.PRECISION}=%q}} - 1) and on ({self.by(*case)}, "
                 f"{label(state, catalog.FIGURE)}) ({state.name} == {DRIFT_WORSE}))")
        change = (f"{{{{ with query (printf `{worst}` {arg}{self.ref(catalog.HOSTNAME)} {self.ref(catalog.UUID)} "
                  f"{self.ref(catalog.WORKLOAD)} {self.ref(catalog.PRECISION)}) }}}}, by at least "
                  f"{{{{ . | first | value | humanizePercentage }}}} over its last runs{{{{ end }}}}")
        return self.alert(
            "SixdimDrift", expr, "info",
            f"{self.lab(catalog.WORKLOAD)} drifts worse on {self.where()}",
            f"{self.workload_precision()} on {self.gpu_ref()} is drifting the worse "
            f"way on {{{{ $value }}}} shape(s){change}, under {self.versions_in_labels()}: a steady slope over its "
            f"recent runs, not a step. See {catalog.DRIFT_RATE.name} for the slope.", for_=DRIFT_FOR)

    def incorrect(self) -> dict[str, Any]:
        """Incorrect results within the window, at the first evaluation (no ``for``): an incorrect result is a
        definitive event the history records (the run's output failed its float64 check), not a noisy
        sample, and its counter never goes back, so a ``for`` would only delay the critical page."""
        runs = catalog.WORKLOAD_RUNS
        group = self.device + (label(runs, catalog.WORKLOAD),)
        w = format_duration(self.o.incorrect_window)
        expr = (f"sum by ({self.by(*group)}) (\n"
                f"{indent(self.runs_added(('incorrect',), self.o.incorrect_window), 2)}\n"
                f") > 0")
        return self.alert(
            "SixdimIncorrectResult", expr, "critical",
            f"Incorrect {self.lab(catalog.WORKLOAD)} results on {self.where()}",
            f"{self.lab(catalog.WORKLOAD)} on {self.gpu_ref()} produced {{{{ $value }}}} result(s) in the last {w} "
            f"whose output failed its check against a float64 reference: the device may be computing "
            f"wrong results silently.{self.versions_now()}")

    def stale(self) -> dict[str, Any]:
        last = catalog.WORKLOAD_LAST_SUCCESS
        group = self.device + (label(last, catalog.WORKLOAD),)
        lookback = format_duration(self.o.stale_after + STALE_KEEP)
        expr = (f"time()\n"
                f"-\n"
                f"  max by ({self.by(*group)}) (\n"
                f"    last_over_time({last.name}[{lookback}])\n"
                f"  )\n"
                f"> {self.o.stale_after}")
        return self.alert(
            "SixdimBenchmarkStale", expr, "warning",
            f"No successful {self.lab(catalog.WORKLOAD)} run on {self.where()}",
            f"The newest ok run of {self.lab(catalog.WORKLOAD)} on {self.gpu_ref()} ended "
            f"{{{{ $value | humanizeDuration }}}} ago (threshold {format_duration(self.o.stale_after)}): its "
            f"results and verdicts are not current.{self.versions_now()}")

    def failing(self) -> dict[str, Any]:
        runs = catalog.WORKLOAD_RUNS
        group = self.device + (label(runs, catalog.WORKLOAD),)
        w = format_duration(self.o.failure_window)
        expr = (f"sum by ({self.by(*group)}) (\n"
                f"{indent(self.runs_added(('failed', 'timeout'), self.o.failure_window), 2)}\n"
                f") >= {self.o.failures}")
        return self.alert(
            "SixdimBenchmarkFailing", expr, "warning",
            f"{self.lab(catalog.WORKLOAD)} keeps failing on {self.where()}",
            f"{{{{ $value }}}} run(s) of {self.lab(catalog.WORKLOAD)} on {self.gpu_ref()} failed or timed out in "
            f"the last {w} (threshold {self.o.failures}).{self.versions_now()}")

    def slowdown(self, name: str, metric: catalog.MetricDef, summary: catalog.MetricDef, what: str) -> dict[str, Any]:
        """Per-shape flags (suites exported per shape) or summary flags (every suite)."""
        group = self.device + self.versions
        w = format_duration(SLOWDOWN_WINDOW)
        expr = (f"count by ({self.by(*group)}) (\n"
                f"  max_over_time({metric.name}[{w}]) == 1\n"
                f"  or\n"
                f"  max_over_time({summary.name}[{w}]) == 1\n"
                f")")
        return self.alert(
            name, expr, "warning",
            f"{what.capitalize()} during benchmarks on {self.where()}",
            f"A {what} held the clocks of {self.gpu_ref()} down during the measured window of "
            f"{{{{ $value }}}} benchmark result(s) in the last {w}, under {self.versions_in_labels()}. "
            f"Results measured under it understate the GPU.")

    def peers(self) -> dict[str, Any]:
        """Each GPU's summary speed against its peers' median, among the summaries that cover the
        group's shapes: the recorded ratios (:mod:`sixdim.monitoring.recording`), where the peer
        group is large enough."""
        peers = recording.peers_by(self.o)
        arms = []
        for metric in recording.PEER_METRICS:
            arms.append(f"(\n"
                        f"    {recording.peer_ratio(metric).name} < {self.o.peer_ratio}\n"
                        f"  and on ({peers})\n"
                        f"    {recording.peer_count(metric).name} >= {self.o.min_peers}\n"
                        f")")
        group = self.device + (catalog.WORKLOAD,) + self.versions
        expr = (f"min by ({self.by(*group)}) (\n"
                + indent("\nor\n".join(arms), 2) + "\n)")
        return self.alert(
            "SixdimSlowerThanPeers", expr, "warning",
            f"{self.lab(catalog.WORKLOAD)} on {self.where()} is slower "
            f"than its peers",
            f"{self.lab(catalog.WORKLOAD)} on {self.gpu_ref()} runs at {{{{ $value | humanizePercentage }}}} of the "
            f"median of its peers in its slowest suite, precision, mode and pass (FLOP/s or samples/s, "
            f"geometric mean over the suite's shapes; peers: every GPU of the same model with the same "
            f"suite, precision, mode, pass and versions whose mean covers as many shapes as most do, at least "
            f"{self.o.min_peers} GPUs; threshold "
            f"{self.o.peer_ratio:g}), under {self.versions_in_labels()}.", for_=PEER_FOR)

    def version_change(self) -> dict[str, Any]:
        change = catalog.VERSION_CHANGE_RATIO
        names = (catalog.WORKLOAD, catalog.FIGURE, catalog.CHANGE_COMPONENT, catalog.CHANGE_FROM, catalog.CHANGE_TO)
        group = self.device + tuple(label(change, name) for name in names)
        verdict = f"{label(change, catalog.CHANGE_VERDICT)}={quote(REGRESSION)}"
        expr = (f"quantile by ({self.by(*group)}) (\n"
                f"  0.5, {change.name}{{{verdict}}}\n"
                f")")
        cluster, arg = self.same_cluster()
        count_query = (f"count({change.name}{{{cluster}{self.n(catalog.HOSTNAME)}=%q,{catalog.UUID}=%q,"
                       f"{catalog.WORKLOAD}=%q,{catalog.FIGURE}=%q,{catalog.CHANGE_COMPONENT}=%q,"
                       f"{catalog.CHANGE_FROM}=%q,{catalog.CHANGE_TO}=%q,{verdict}}})")
        values = (f"{self.ref(catalog.HOSTNAME)} $labels.{catalog.UUID} $labels.{catalog.WORKLOAD} "
                  f"$labels.{catalog.FIGURE} $labels.{catalog.CHANGE_COMPONENT} $labels.{catalog.CHANGE_FROM} "
                  f"$labels.{catalog.CHANGE_TO}")
        count = (f"{{{{ with query (printf `{count_query}` {arg}{values}) }}}}"
                 f"{{{{ . | first | value }}}}{{{{ end }}}}")
        judged = (f"{change.name}{{{cluster}{self.n(catalog.HOSTNAME)}=%q,{catalog.UUID}=%q,{catalog.WORKLOAD}=%q,"
                  f"{catalog.FIGURE}=%q,{catalog.CHANGE_COMPONENT}=%q,{catalog.CHANGE_FROM}=%q,"
                  f"{catalog.CHANGE_TO}=%q,{verdict}}}")
        return self.alert(
            "SixdimVersionChangeRegression", expr, "warning",
            f"{self.lab(catalog.CHANGE_COMPONENT)} {self.lab(catalog.CHANGE_FROM)} to {self.lab(catalog.CHANGE_TO)} "
            f"made {self.lab(catalog.WORKLOAD)} worse on {self.host()}",
            f"After {self.lab(catalog.CHANGE_COMPONENT)} changed from {self.lab(catalog.CHANGE_FROM)} to "
            f"{self.lab(catalog.CHANGE_TO)} on {self.gpu_ref()}, {self.lab(catalog.WORKLOAD)}'s "
            f"{self.lab(catalog.FIGURE)} is {{{{ $value | humanizePercentage }}}} of its value before the change "
            f"(median over the {count} result series the agent judged worse)."
            f"{self.causes(judged, arg + values, (catalog.HOSTNAME, catalog.UUID, catalog.WORKLOAD))}",
            for_=VERSION_CHANGE_FOR,
            keep_firing_for=VERSION_CHANGE_KEEP_FIRING_FOR)

    def rollout(self) -> dict[str, Any]:
        """A set of versions of a GPU model and case whose fleet median is slower than the fastest version's by
        the threshold, each side run by enough hosts (the recorded ratios): a rollout's new driver, CUDA or
        torch that costs speed, named with its hosts and the version it is compared with."""
        o = self.o
        arms = [f"{recording.rollout_ratio(metric).name} < {1 - o.rollout_threshold:g}"
                for metric in recording.ROLLOUT_METRICS]
        sides = recording.rollout_by(o)
        expr = f"min by ({sides}) (\n" + indent("\nor\n".join(arms), 2) + "\n)"
        cluster, arg = self.same_cluster()
        group = recording.ROLLOUT_GROUP
        matchers = "".join(f"{self.n(name)}=%q," for name in group)
        values = " ".join(self.ref(name) for name in group)
        version_matchers = ",".join(f"{name}=%q" for name in catalog.VERSION_LABELS)
        version_values = " ".join(self.ref(name) for name in catalog.VERSION_LABELS)
        metrics = recording.ROLLOUT_METRICS
        hosts_query = " or ".join(f"{recording.rollout_hosts(m).name}{{{cluster}{matchers}{version_matchers}}}"
                                  for m in metrics)
        best_query = " or ".join(f"{recording.rollout_ratio(m).name}{{{cluster}{matchers.rstrip(',')}}} == 1"
                                 for m in metrics)
        hosts = (f"{{{{ with query (printf `{hosts_query}` {' '.join([arg + values + ' ' + version_values] * 3)}) }}}}"
                 f" ({{{{ . | first | value }}}} hosts){{{{ end }}}}")
        best_versions = ", ".join(f"{short} {{{{ . | first | label \"{name}\" }}}}" for name, short in (
            (catalog.DRIVER_VERSION, "driver"), (catalog.CUDA_VERSION, "CUDA"), (catalog.CUDNN_VERSION, "cuDNN"),
            (catalog.NCCL_VERSION, "NCCL"), (catalog.TORCH_VERSION, "torch")))
        best_args = " ".join([arg + values] * 3)
        best = f"{{{{ with query (printf `{best_query}` {best_args}) }}}} than under {best_versions}{{{{ end }}}}"
        mine = ", ".join(f"{short} {self.lab(name)}" for name, short in (
            (catalog.DRIVER_VERSION, "driver"), (catalog.CUDA_VERSION, "CUDA"), (catalog.CUDNN_VERSION, "cuDNN"),
            (catalog.NCCL_VERSION, "NCCL"), (catalog.TORCH_VERSION, "torch")))
        return self.alert(
            "SixdimRolloutSlower", expr, "warning",
            f"{self.workload_precision()} is slower on {self.lab(catalog.MODEL_NAME)} under "
            f"driver {self.lab(catalog.DRIVER_VERSION)}{{{{ with $labels.{o.cluster_label} }}}} (cluster {{{{ . }}}})"
            f"{{{{ end }}}}",
            f"On {self.lab(catalog.MODEL_NAME)} GPUs{{{{ with $labels.{o.cluster_label} }}}} in cluster {{{{ . }}}}"
            f"{{{{ end }}}}, {self.workload_precision()} ({self.lab(catalog.SUITE)} suite, {self.lab(catalog.MODE)}, "
            f"{self.lab(catalog.PASS)}) runs at {{{{ $value | humanizePercentage }}}} of the fastest version's median "
            f"under {mine}{hosts}, slower{best} (threshold: {o.rollout_threshold:.1%} slower; versions run by at "
            f"least {o.rollout_min_hosts} hosts). A median over GPUs: `sixdim fleet` judges the same question with "
            f"hosts as the unit, a confidence interval and the same hosts before and after they upgraded "
            f"(docs/FLEET.md).", for_=ROLLOUT_FOR)

    def agent_down(self) -> dict[str, Any]:
        """A target down for ``AGENT_DOWN_FOR``, named by the host name recorded for it
        (:data:`sixdim.monitoring.recording.TARGET_HOSTNAME`, which keeps the name for as long as the agent
        is down), so that Alertmanager groups and inhibits it with that host's other alerts; a target never
        scraped successfully has no host name to give and keeps only its target labels."""
        job = quote(self.o.job)
        up = f"{PROMETHEUS_UP}{{{JOB}={job}}}"
        host = self.label(catalog.BUILD_INFO, catalog.HOSTNAME)
        w = format_duration(AGENT_MOSTLY_DOWN_WINDOW)
        # Both arms without the metric name (max without () drops it), so that `or` keeps one series per target.
        down = (f"(\n"
                f"    max without () ({up} == 0)\n"
                f"  or\n"
                f"    avg_over_time({up}[{w}]) < 0.5\n"
                f")")
        expr = (f"(\n"
                f"    (\n"
                f"  {indent(down, 4)}\n"
                f"    )\n"
                f"  * on ({self.by(JOB, INSTANCE)}) group_left ({host})\n"
                f"    {recording.TARGET_HOSTNAME.name}\n"
                f")\n"
                f"or on ({self.by(JOB, INSTANCE)})\n"
                f"  {down}")
        return self.alert(
            "SixdimAgentDown", expr, "warning",
            f"sixdim agent {{{{ $labels.{INSTANCE} }}}} is down",
            f"Prometheus cannot scrape the sixdim agent at {{{{ $labels.{INSTANCE} }}}} (job {{{{ $labels.{JOB} }}}}"
            f"{{{{ with $labels.{host} }}}}, host {{{{ . }}}}{{{{ end }}}}"
            f"{{{{ with $labels.{self.o.cluster_label} }}}}, cluster {{{{ . }}}}{{{{ end }}}}) for {AGENT_DOWN_FOR}: "
            f"no benchmarks "
            f"are recorded or exported from it, and its other alerts cannot fire.", for_=AGENT_DOWN_FOR)

    def history_down(self) -> dict[str, Any]:
        host = self.by(self.label(catalog.HISTORY_UP, catalog.HOSTNAME))
        pending = catalog.HISTORY_PENDING
        expr = (f"max by ({host}) ({pending.name})\n"
                f"and on ({host})\n"
                f"max by ({host}) ({catalog.HISTORY_UP.name}) == 0")
        return self.alert(
            "SixdimHistoryDown", expr, "warning",
            f"sixdim on {self.host()} cannot write its history",
            f"The last write to the history database of the agent on {self.host()} failed, and "
            f"writes have not recovered for {HISTORY_DOWN_FOR}; {{{{ $value }}}} result(s) wait in memory and in the "
            f"spool file. They are written once the database accepts writes again.", for_=HISTORY_DOWN_FOR)

    def cannot_run(self) -> dict[str, Any]:
        can_run = catalog.AGENT_CAN_RUN
        host = self.by(self.label(can_run, catalog.HOSTNAME))
        expr = f"max by ({host}) ({can_run.name}) == 0"
        return self.alert(
            "SixdimAgentCannotRun", expr, "warning",
            f"sixdim on {self.host()} cannot run its suites",
            f"A suite run of the agent on {self.host()} could not start or failed unexpectedly, and no later run "
            f"of that suite has worked for {CANNOT_RUN_FOR} (a full or read-only state folder: its device's lock "
            f"file cannot be written). No benchmarks are recorded meanwhile; the agent's /healthz answers 503 with "
            f"the reason, and the next scheduled run works once the cause is gone.", for_=CANNOT_RUN_FOR)

    def history_loss(self) -> dict[str, Any]:
        """Dropped or corrupt history errors within the window.

        ``increase`` alone misses the usual corrupt case: a power loss, the host back after more
        than the window, the broken file found at start, so the counter's first sample is already
        1 and ``increase`` has nothing before it to compare with.  An agent process that started
        within the window counted all of its errors within the window, so for such a process its
        counter's value counts whole; the alert takes the larger of the two.  No ``for``: results dropped
        or a history moved aside are definitive events the agent counted, not noisy samples."""
        errors = catalog.HISTORY_WRITE_ERRORS
        host, reason = self.by(self.label(errors, catalog.HOSTNAME)), label(errors, "reason")
        w = format_duration(HISTORY_LOSS_WINDOW)
        series = f"{errors.name}{{{reason}=~\"dropped|corrupt\"}}"
        increase = f"sum by ({host}, {reason}) (increase({series}[{w}]))"
        young = (f"sum by ({host}, {reason}) (\n"
                 f"    {series}\n"
                 f"  and on ({self.by(JOB, INSTANCE)})\n"
                 f"    time() - {PROCESS_START_TIME} < {HISTORY_LOSS_WINDOW}\n"
                 f")")
        arms = (indent(young, 4), "  >=", indent(increase, 4), "  or", indent(increase, 4), "  or", indent(young, 4))
        expr = "(\n" + "\n".join(arms) + "\n) > 0"
        return self.alert(
            "SixdimHistoryDataLoss", expr, "warning",
            f"sixdim on {self.host()} lost history data",
            f"The agent on {self.host()} counted about {{{{ printf \"%.0f\" $value }}}} history write "
            f"error(s) of reason {{{{ $labels.{reason} }}}} in the last {w}: dropped means results waiting for the "
            f"database were dropped because too many waited; corrupt means a broken database file was moved "
            f"aside at start and a new one begun.")

    def config_reload_failed(self) -> dict[str, Any]:
        success, last = catalog.CONFIG_RELOAD_SUCCESS, catalog.CONFIG_LAST_RELOAD
        host = self.by(self.label(success, catalog.HOSTNAME))
        expr = (f"time() - max by ({host}) ({last.name})\n"
                f"and on ({host})\n"
                f"max by ({host}) ({success.name}) == 0")
        return self.alert(
            "SixdimConfigReloadFailed", expr, "warning",
            f"sixdim on {self.host()} runs an old configuration",
            f"The last configuration reload (SIGHUP) of the agent on {self.host()} failed at least "
            f"{CONFIG_RELOAD_FAILED_FOR} ago: it still runs the configuration it loaded "
            f"{{{{ humanizeDuration $value }}}} ago, and would refuse the file on disk at its next restart.",
            for_=CONFIG_RELOAD_FAILED_FOR)

    def groups(self) -> list[dict[str, Any]]:
        return [
            {"name": "sixdim-results", "rules": [
                self.regression(),
                self.drift(),
                self.incorrect(),
                self.version_change(),
                self.slowdown("SixdimThermalSlowdown", catalog.WORKLOAD_THERMAL_SLOWDOWN,
                              catalog.SUMMARY_THERMAL_SLOWDOWN, "thermal slowdown"),
                self.slowdown("SixdimHardwareSlowdown", catalog.WORKLOAD_HARDWARE_SLOWDOWN,
                              catalog.SUMMARY_HARDWARE_SLOWDOWN, "hardware slowdown"),
            ]},
            {"name": "sixdim-fleet", "rules": [self.peers(), self.rollout()]},
            {"name": "sixdim-runs", "rules": [self.stale(), self.failing()]},
            {"name": "sixdim-agent", "rules": [
                # recorded in the group of the alert that reads it: evaluated just before it, in the same round
                recording.target_hostname_rule(self.o, self.o.stale_after + STALE_KEEP),
                self.agent_down(), self.cannot_run(), self.history_down(), self.history_loss(),
                self.config_reload_failed()]},
        ]
