#!/usr/bin/env python3
"""What the ``sixdim-recording`` rule group costs Prometheus per evaluation, in three forms, at 240 and 1,000
hosts x 8 GPUs: as it was (``before``), as it is (``now``), and with the shape-count medians recorded (``medians``).

Usage (from the repository root; Prometheus's tools on PATH, ``export PATH=/work/main/.tools/usr/bin:$PATH``):

    python -m tests.bench.recording_cost [--hosts 240 1000] [--cases 7 7] [--rounds 2] [--out FILE]

Every peer and rollout rule keeps only the summaries that cover their group's median shape count
(:func:`sixdim.monitoring.promql.covering_shapes`): a join of every ``sixdim_suite_shapes`` series of the fleet to
a quantile over them, written inline in each rule, twelve times per evaluation before (:func:`before_rules`).  Now
each peer group's count counts the ratio series recorded just before it instead, ten times.  ``medians``
(:func:`median_rules`, not adopted: its two extra recorded series would have to be on a dashboard panel, as
tests/test_dashboards_coverage.py asks of every alert input) records the two medians first in the group and
joins to them.  tests/test_recording_cost.py checks that all three record the same series and values.

The fleet is tests/fleet_sim.py's (a driver rollout half done, with its 7 cases, as tests/test_fleet_e2e.py
scrapes it at 240 hosts; ``--cases 50`` takes tests/bench/fleet_bench.py's 50), written as OpenMetrics at one
moment a minute back and backfilled with the real ``promtool tsdb create-blocks-from openmetrics``.  The real
``prometheus`` then evaluates the rules at its wall clock with a lookback of two hours, so each evaluation reads
that one sample per series, as a scraped fleet's latest.  After a warm-up, the forms are loaded in turn
(``--rounds`` times each, alternating, a reload between) and once a form has evaluated twice, ``/api/v1/rules``
gives the group's and every rule's evaluation time; the medians over the rounds are printed as a markdown table
(``--out FILE`` writes it too).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from statistics import median
from typing import Any

import yaml

from sixdim.core import catalog
from sixdim.monitoring import recording
from sixdim.monitoring.options import Options
from sixdim.monitoring.promql import covering_shapes
from tests.bench.fleet_bench import backfill, load_average, prometheus_process, speed_cases
from tests.conftest import free_port
from tests.fleet_sim import Fleet, _help, _labels

INTERVAL = "2s"
"""Short: a group that takes longer runs back to back, so each round waits for little more than two evaluations."""
LOOKBACK = "2h"
"""Long enough that the one backfilled sample is every evaluation's latest for the whole run."""
LEVELS = ("sixdim_peer_group:", "sixdim_rollout:", "sixdim_rollout_group:")
"""The recorded series' name prefixes, which :func:`renamed` changes so that the forms can run side by side."""
PEER_SHAPES = f"sixdim_peer_group:{catalog.SUMMARY_SHAPES.name}:median"
ROLLOUT_SHAPES = f"sixdim_rollout_group:{catalog.SUMMARY_SHAPES.name}:median"
"""The two series :func:`median_rules` records: the median shape count of each peer group and rollout group."""

Coverage = Callable[[str, int, str], float]
"""A GPU's shape count: (host name, GPU index, workload) -> ``sixdim_suite_shapes``."""


def full_coverage(host: str, gpu: int, workload: str) -> float:
    return 4.0


def before_rules(options: Options | None = None) -> list[dict[str, Any]]:
    """The recording rules as they were before each peer group's count read the recorded ratio: the coverage
    filter, with its quantile, written inline in every peer and rollout rule
    (:func:`sixdim.monitoring.promql.covering_shapes`).  The rollout ratio rules read only the recorded medians and
    hosts and are unchanged."""
    options = options or Options()
    peers = recording.peers_by(options)
    sides, group = recording.rollout_by(options), recording.rollout_by(options, versions=False)
    host = catalog.exported_label(catalog.HOSTNAME, options.dcgm_label_names)
    shapes = catalog.SUMMARY_SHAPES.name
    out: list[dict[str, Any]] = []
    for metric in recording.PEER_METRICS:
        full = covering_shapes(metric.name, shapes, peers)
        out.append({"record": recording.peer_ratio(metric).name,
                    "expr": f"{full}\n/ on ({peers}) group_left ()\nquantile by ({peers}) (0.5, {full})"})
        out.append({"record": recording.peer_count(metric).name, "expr": f"count by ({peers}) (\n  {full}\n)"})
    ratios = {rule["record"]: rule for rule in recording.rollout_rules(options)}
    for metric in recording.ROLLOUT_METRICS:
        covered = covering_shapes(metric.name, shapes, group)
        out.append({"record": recording.rollout_median(metric).name, "expr": f"quantile by ({sides}) (0.5, {covered})"})
        out.append({"record": recording.rollout_hosts(metric).name,
                    "expr": f"count by ({sides}) (\n  count by ({sides}, {host}) ({covered})\n)"})
        out.append(ratios[recording.rollout_ratio(metric).name])
    return out


def median_rules(options: Options | None = None) -> list[dict[str, Any]]:
    """The rules as they are, with each grouping's median shape count recorded once, before the rules that filter
    by it, and read from there: Prometheus evaluates a group's rules in order at one time, so the later rules read
    the value of this evaluation."""
    options = options or Options()
    shapes = catalog.SUMMARY_SHAPES.name
    peer = f"quantile by ({recording.peers_by(options)}) (0.5, {shapes})"
    group = f"quantile by ({recording.rollout_by(options, versions=False)}) (0.5, {shapes})"
    rules = [{"record": rule["record"], "expr": rule["expr"].replace(peer, PEER_SHAPES).replace(group, ROLLOUT_SHAPES)}
             for rule in recording.rules(options)]
    first = next(i for i, rule in enumerate(rules) if rule["record"].startswith("sixdim_rollout:"))
    return ([{"record": PEER_SHAPES, "expr": peer}] + rules[:first]
            + [{"record": ROLLOUT_SHAPES, "expr": group}] + rules[first:])


def renamed(rules: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """``rules`` recording under names starting ``prefix`` instead of ``sixdim`` (and reading their own), so
    that several forms can run in one Prometheus without writing the same series."""
    def rename(text: str) -> str:
        for level in LEVELS:
            text = text.replace(level, prefix + level.removeprefix("sixdim"))
        return text
    return [{"record": rename(rule["record"]), "expr": rename(rule["expr"])} for rule in rules]


def write_fleet(fleet: Fleet, path: Path, moment: float, coverage: Coverage = full_coverage) -> int:
    """The fleet's summaries during the rollout (phase 1) at ``moment`` as OpenMetrics, each GPU's shape count
    from ``coverage``: the number of series written."""
    by_family: dict[str, list[str]] = {}
    for host in fleet.hosts:
        for metric, labels, value in fleet.values(host, 1):
            if metric == catalog.SUMMARY_SHAPES.name:
                value = coverage(host.name, int(labels[catalog.GPU]), labels[catalog.WORKLOAD])
            key = f'{metric}{{cluster="{fleet.cluster}",{_labels(metric, labels)}}}'
            by_family.setdefault(metric, []).append(f"{key} {value!r} {moment:.3f}")
    written = 0
    with open(path, "w", buffering=1 << 20) as out:
        for metric, lines in by_family.items():
            lines = list(dict.fromkeys(lines))
            out.write(f"# HELP {metric} {_help(metric)}\n# TYPE {metric} gauge\n")
            out.write("\n".join(lines) + "\n")
            written += len(lines)
        out.write("# EOF\n")
    return written


def rule_file(path: Path, groups: dict[str, list[dict[str, Any]]], interval: str) -> None:
    path.write_text(yaml.safe_dump({"groups": [{"name": name, "interval": interval, "rules": rules}
                                               for name, rules in groups.items()]}, sort_keys=False))


def get(url: str, timeout: float = 30) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


@dataclass
class Server:
    url: str
    pid: int
    rules: Path


@contextmanager
def prometheus(tsdb: Path, work: Path, groups: dict[str, list[dict[str, Any]]], interval: str) -> Iterator[Server]:
    """The real Prometheus on the backfilled TSDB, loopback only, no scrapes, evaluating ``groups`` every
    ``interval``; reloadable (:func:`reload`)."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise FileNotFoundError("prometheus is not on PATH")
    rules = work / "rules.yml"
    rule_file(rules, groups, interval)
    config = work / "prometheus.yml"
    config.write_text(f"global: {{evaluation_interval: {interval}}}\nrule_files: [{json.dumps(str(rules))}]\n")
    port = free_port()
    argv = [binary, f"--config.file={config}", f"--storage.tsdb.path={tsdb}", "--storage.tsdb.retention.time=30d",
            f"--web.listen-address=127.0.0.1:{port}", f"--query.lookback-delta={LOOKBACK}",
            "--web.enable-lifecycle"]
    with prometheus_process(argv, work / "prometheus.log", port) as process:
        yield Server(f"http://127.0.0.1:{port}", process.pid, rules)


def reload(server: Server, groups: dict[str, list[dict[str, Any]]], interval: str) -> None:
    rule_file(server.rules, groups, interval)
    request = urllib.request.Request(f"{server.url}/-/reload", method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        if response.status != 200:
            raise RuntimeError(f"reload answered {response.status}")


def rule_groups(server: Server) -> dict[str, dict[str, Any]]:
    """``/api/v1/rules``' groups by name."""
    return {g["name"]: g for g in get(f"{server.url}/api/v1/rules?type=record")["data"]["groups"]}


def evaluated(server: Server, names: list[str], times: int, after: float, timeout: float) -> dict[str, dict]:
    """The groups ``names`` once each has finished ``times`` evaluations that started after ``after`` (epoch
    seconds), every rule healthy; their ``/api/v1/rules`` entries."""
    seen: dict[str, set[str]] = {name: set() for name in names}
    deadline = time.monotonic() + timeout
    while True:
        groups = rule_groups(server)
        for name in names:
            group = groups.get(name)
            if group is None or not group["rules"]:
                continue
            bad = [r for r in group["rules"] if r["health"] == "err"]
            if bad:
                raise RuntimeError(f"{name}: {bad[0]['name']}: {bad[0].get('lastError')}")
            # a group's last evaluation starts with its first rule's; a finished one has every rule's
            last = group["rules"][-1]["lastEvaluation"]
            if all(r["health"] == "ok" for r in group["rules"]) and _epoch(group["rules"][0]["lastEvaluation"]) > after:
                seen[name].add(last)
        if all(len(s) >= times for s in seen.values()):
            return {name: groups[name] for name in names}
        if time.monotonic() > deadline:
            raise RuntimeError(f"rules not evaluated {times} times in {timeout:.0f} s: {seen}")
        time.sleep(0.2)


def _epoch(stamp: str) -> float:
    """An RFC 3339 time from the rules API (nanoseconds, ``Z`` or an offset) as epoch seconds."""
    head, _, rest = stamp.partition(".")
    digits = "".join(c for c in rest if c.isdigit())
    zone = rest[len(digits):] or "Z"
    zone = "+00:00" if zone == "Z" else zone
    return datetime.fromisoformat(f"{head}{zone}").timestamp() + (float(f"0.{digits}") if digits else 0.0)


@dataclass
class Measured:
    group_seconds: float
    rule_seconds: dict[str, float]


def measure(server: Server, name: str, rules: list[dict[str, Any]], interval: str, times: int) -> Measured:
    """Load ``rules`` as the one group ``name``, wait for ``times`` evaluations, read the last one's times."""
    reload(server, {name: rules}, interval)
    group = evaluated(server, [name], times, time.time(), timeout=1800)[name]
    return Measured(group["evaluationTime"], {r["name"]: r["evaluationTime"] for r in group["rules"]})


def bench(hosts: int, cases: int, rounds: int, work: Path) -> tuple[dict[str, list[Measured]], int]:
    """Every form on one fleet, ``rounds`` each, alternating."""
    fleet = Fleet(hosts_per_model=hosts // 2, cases=speed_cases(cases) if cases != 7 else Fleet.cases)
    moment = float(int(time.time()) - 60)
    source, tsdb = work / f"fleet-{hosts}.om", work / f"tsdb-{hosts}"
    series = write_fleet(fleet, source, moment)
    backfill(shutil.which("promtool") or "promtool", source, tsdb)
    source.unlink()
    forms = {"before": before_rules(), "now": recording.rules(), "medians": median_rules()}
    runs: dict[str, list[Measured]] = {form: [] for form in forms}
    with prometheus(tsdb, work, {}, INTERVAL) as server:
        measure(server, recording.GROUP, forms["now"], INTERVAL, 1)  # warm-up: loads the blocks' postings and chunks
        for _ in range(rounds):
            for form, rules in forms.items():
                runs[form].append(measure(server, recording.GROUP, rules, INTERVAL, 2))
    return runs, series


def table(hosts: int, series: int, runs: dict[str, list[Measured]], load: str) -> list[str]:
    def med(form: str, rule: str | None = None) -> str:
        measured = [r.group_seconds if rule is None else r.rule_seconds.get(rule) for r in runs[form]]
        values = [value for value in measured if value is not None]
        return f"{median(values):.3f} s" if values else "-"

    def ratio(form: str) -> str:
        return f"{median(r.group_seconds for r in runs[form]) / median(r.group_seconds for r in runs['before']):.2f}"

    forms = list(runs)
    rows = [f"### {hosts} hosts x 8 GPUs ({series:,} series backfilled; load average {load})", "",
            "| | " + " | ".join(forms) + " |", "|---|" + "---:|" * len(forms),
            f"| group `{recording.GROUP}` | " + " | ".join(med(form) for form in forms) + " |",
            "| group, over before | " + " | ".join(ratio(form) for form in forms) + " |"]
    names = list(dict.fromkeys(name for form in ("medians", "before") for m in runs[form] for name in m.rule_seconds))
    rows += [f"| `{name}` | " + " | ".join(med(form, name) for form in forms) + " |" for name in names]
    return rows + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[240, 1000])
    parser.add_argument("--cases", type=int, nargs="+", default=[7, 7],
                        help="summary cases for each --hosts (7: tests/fleet_sim.py's own)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if len(args.cases) != len(args.hosts):
        parser.error("one --cases per --hosts")
    lines = [f"Median of {args.rounds} evaluations each, Prometheus /api/v1/rules evaluationTime, "
             f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC.", ""]
    for hosts, cases in zip(args.hosts, args.cases):
        work = Path(tempfile.mkdtemp(prefix="sixdim-recording-cost-"))
        try:
            load = load_average()
            runs, series = bench(hosts, cases, args.rounds, work)
            lines += table(hosts, series, runs, f"{load} at the start, {load_average()} at the end")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print("\n".join(lines), flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
