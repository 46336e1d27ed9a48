"""The recording rules count each peer group from the ratio series recorded just before, not by filtering the
summaries again, and tests/bench/recording_cost.py times a form that records the shape-count medians once; each
must record what the rules recorded before (every series, its labels and its value), in a real Prometheus.

The fleet is small (two GPU models, 6 hosts each, 2 GPUs, a driver rollout half done) with mixed shape coverage:
a GPU that lost a shape, a host with an extra shape on every case, a case whose peer groups split evenly between
two counts (median 3.5: no summary covers it, so the groups disappear), and hosts short of a shape on one case.
tests/bench/recording_cost.py times the two forms at 240 and 1,000 hosts.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest

from sixdim.core import catalog
from sixdim.monitoring import recording
from tests.bench import recording_cost as cost
from tests.fleet_sim import Fleet

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (shutil.which("prometheus") and shutil.which("promtool")),
                                 reason="needs Prometheus's prometheus and promtool on PATH")]

CASES = (
    (catalog.SUMMARY_FLOPS.name, "gemm", "bf16", "training", 6.2e14),
    (catalog.SUMMARY_FLOPS.name, "conv", "fp16", "training", 2.1e14),
    (catalog.SUMMARY_SAMPLES.name, "resnet50", "fp16", "training", 3.0e3),
    (catalog.SUMMARY_BANDWIDTH.name, "copy", "fp32", "training", 2.8e12),
)
FLEET = Fleet(hosts_per_model=6, gpus=2, cases=CASES)


def coverage(host: str, gpu: int, workload: str) -> float:
    """Mixed shape coverage: most GPUs cover 4 shapes."""
    if workload == "conv":
        return 3.0 + gpu  # every group split evenly: median 3.5, nothing covers it
    if host == "h100-0000" and gpu == 1 and workload == "gemm":
        return 3.0  # lost a shape
    if host == "a100-0002":
        return 5.0  # an extra shape on every case
    if host in ("h100-0001", "h100-0004") and workload == "resnet50":
        return 2.0
    return 4.0


def recorded(server: cost.Server, prefix: str, at: float) -> dict[tuple, str]:
    """Every series recorded under the names :func:`tests.bench.recording_cost.renamed` gives with ``prefix`` at
    ``at``: (name as ``sixdim`` records it, labels) -> value as Prometheus wrote it."""
    levels = [prefix + level.removeprefix("sixdim") for level in cost.LEVELS]
    selector = "{__name__=~\"" + "|".join(f"{level}.*" for level in levels) + "\"}"
    answer = cost.get(f"{server.url}/api/v1/query?" + urllib.parse.urlencode({"query": selector, "time": f"{at:.3f}"}))
    assert answer["status"] == "success", answer
    out: dict[tuple, str] = {}
    for series in answer["data"]["result"]:
        labels = dict(series["metric"])
        name = labels.pop("__name__")
        name = "sixdim" + name.removeprefix(prefix)
        out[(name, tuple(sorted(labels.items())))] = series["value"][1]
    return out


def test_the_cheaper_forms_record_what_the_rules_recorded_before():
    work = Path(tempfile.mkdtemp(prefix="sixdim-recording-equal-"))
    try:
        source, tsdb = work / "fleet.om", work / "tsdb"
        cost.write_fleet(FLEET, source, float(int(time.time()) - 60), coverage)
        cost.backfill(shutil.which("promtool"), source, tsdb)
        groups = {recording.GROUP: recording.rules(), "before": cost.renamed(cost.before_rules(), "before"),
                  "medians": cost.renamed(cost.median_rules(), "medians")}
        started = time.time()
        with cost.prometheus(tsdb, work, groups, "1s") as server:
            cost.evaluated(server, list(groups), 1, started, timeout=60)
            at = time.time()
            now, before, medians = (recorded(server, prefix, at) for prefix in ("sixdim", "before", "medians"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    assert {name for name, _ in now} == {m.name for m in recording.RECORDED} - {recording.TARGET_HOSTNAME.name}
    assert now == before
    assert {key: value for key, value in medians.items()
            if key[0] not in (cost.PEER_SHAPES, cost.ROLLOUT_SHAPES)} == before
    assert {name for name, _ in medians} - {name for name, _ in before} == {cost.PEER_SHAPES, cost.ROLLOUT_SHAPES}
    # the comparison is not empty-handed: every series the rules record has values, and the filter left some out
    gpus = {metric.name: sum(float(v) for (n, _), v in before.items() if n == recording.peer_count(metric).name)
            for metric in recording.PEER_METRICS}
    hosts = FLEET.hosts_per_model * 2
    assert gpus[catalog.SUMMARY_FLOPS.name] == hosts * FLEET.gpus - 1 - FLEET.gpus  # gemm's lost shape, a100-0002
    assert gpus[catalog.SUMMARY_SAMPLES.name] < hosts * FLEET.gpus
    assert not [key for key in before if ("workload", "conv") in key[1]]  # median 3.5: nothing covers it
