"""Series whose parameters differ are different series, everywhere (issue 29, item 9).

A launch-latency suite of 2,000 launches per round and one of 500 measure different things (the round's one
synchronisation is amortised over more or fewer launches); a memory-bandwidth suite that copied 64 MiB and
later 4 MiB has two shape sets.  Each must be its own series in the history, on /metrics and in the report,
and a suite's summary a geometric mean over one shape set only.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest

from sixdim.core import catalog
from sixdim.core.results import SHAPE_SET, RunRecord
from sixdim.verdicts.summary import summarize
from sixdim.workloads import registry
from sixdim.workloads.spec import METHOD_PARAMS, Param, ParamError, WorkloadSpec

BASES: dict[str, list[dict[str, Any]]] = {
    "gemm": [{}, {"m": 64, "n": 32, "k": 16}],  # explicit shapes: then m, n, k and op name the case
    "command": [{"argv": ["python", "train.py"]}, {"argv": ["python", "train.py"], "log_files": ["runs/"],
                                                   "formats": ["tensorboard"]},
                {"argv": ["python train.py"]}],
    "onnx": [{}, {"model": "/nonexistent/model.onnx"}],
    "linearity": [{}, {"nnodes": 2, "rdzv_endpoint": "head:29500"}],
}
"""The base configurations each workload's parameters are varied from (a parameter may matter only in one)."""

IGNORED = {("allreduce", "cuda", "ranks"): "CPU only: on GPUs every local GPU is a rank",
           ("onnx", "cpu", "size"): "", ("onnx", "cuda", "size"): ""}
"""Parameters a device type ignores."""


def variants(param: Param, current: Any) -> list[Any]:
    """Other valid-looking values of a parameter, to see whether changing it changes the cases."""
    def one(value: Any) -> list[Any]:
        if param.choices:
            return [c for c in param.choices if c != value]
        if param.kind is bool:
            return [not value]
        if param.kind is int:
            return [value + 1, value * 2 + 3]
        if param.kind is float:
            return [value * 1.5 + 0.01, value + 1.0]
        return [f"{value}x" if value else "x", "NAME=3"]

    if param.many:
        items = list(current)
        out: list[Any] = [items[:1]] if len(items) > 1 else []
        if param.choices:
            out += [items + [c] for c in param.choices if c not in items]
        elif param.kind is int:
            out += [items + [max(items, default=0) + 5]]
        else:
            out += [items + ["A=1"], items + ["batch=3"], items + ["x"]]
        return out
    return one(current)


def case_keys(spec: WorkloadSpec, params: dict[str, Any], device: str) -> list[tuple[str, ...]]:
    return sorted((c.shape, c.precision, c.mode, c.kernel_pass) for c in spec.cases(params, device))  # type: ignore[arg-type]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_parameter_either_names_the_measurement_or_is_declared_a_method_parameter(device):
    """Changing a parameter that is not a method parameter (repetitions, warm-up, seeds, faults) must change
    the cases' shapes: otherwise two suites that differ in it would share a series."""
    unnamed = []
    for spec in registry.WORKLOADS.values():
        bases = BASES.get(spec.name, [{}])
        for param in spec.params:
            if param.name in METHOD_PARAMS | spec.method_params or (spec.name, device, param.name) in IGNORED:
                continue
            changed = tried = False
            for base in bases:
                reference = case_keys(spec, base, device)
                current = spec.resolve(base, device)[param.name]  # type: ignore[arg-type]
                for value in variants(param, current):
                    try:
                        keys = case_keys(spec, {**base, param.name: value}, device)
                    except ParamError:
                        continue
                    tried = True
                    if keys != reference:
                        changed = True
                        break
                if changed:
                    break
            if not changed:
                unnamed.append(f"{spec.name}.{param.name}" + ("" if tried else " (no valid variant)"))
    assert not unnamed, f"parameters that change what is measured but not the series ({device}): {unnamed}"


def test_a_parameter_kept_at_its_default_keeps_the_series_it_had():
    """Only a suite that sets a label parameter gets a new series: existing histories continue."""
    launches = registry.LAUNCH_LATENCY
    assert {c.shape for c in launches.cases({}, "cpu")} == {"elements=1"}
    assert {c.shape for c in launches.cases({"launches_per_round": 500}, "cpu")} == {
        "elements=1,launches_per_round=500"}
    assert {c.shape for c in launches.cases({"launches_per_round": 2000}, "cuda")} == {
        "elements=1,launches_per_round=2000"}  # the GPU default is 10,000
    model = registry.MODEL
    shapes = {(c.mode, c.shape) for c in model.cases({"models": ["lstm"], "precisions": ["fp32"],
                                                       "inference_batch": 2}, "cpu")}
    assert shapes == {("training", "model=lstm,size=small"), ("inference", "model=lstm,size=small,batch=2")}


def test_commands_of_one_program_are_different_series_and_a_secret_does_not_split_or_show():
    spec = registry.COMMAND
    a = spec.cases({"argv": ["python", "train_a.py"]}, "cpu")[0].shape
    b = spec.cases({"argv": ["python", "train_b.py"]}, "cpu")[0].shape
    assert a.startswith("python@") and b.startswith("python@") and a != b
    one = spec.cases({"argv": ["python", "t.py", "--token=s3cr3t-AAAA"]}, "cpu")[0].shape
    two = spec.cases({"argv": ["python", "t.py", "--token=other-BBBB"]}, "cpu")[0].shape
    assert one == two and "s3cr3t" not in one  # the token is redacted before the digest
    assert spec.cases({"argv": ["python", "t.py"], "label": "mine"}, "cpu")[0].shape == "mine"


def test_each_case_names_its_shape_set_and_a_changed_set_gets_a_new_id():
    spec = registry.MEMORY_BANDWIDTH
    big = spec.cases({"size_bytes": 64 * 2**20}, "cpu")
    small = spec.cases({"size_bytes": 4 * 2**20}, "cpu")
    assert all(SHAPE_SET in c.params for c in big + small)
    assert {c.params[SHAPE_SET] for c in big}.isdisjoint({c.params[SHAPE_SET] for c in small})
    gemm = registry.GEMM
    # dropping a precision leaves the other precision's shape set as it was: its summary continues
    both = {(c.mode, c.params[SHAPE_SET]) for c in gemm.cases({"precisions": ["fp32", "bf16"]}, "cpu")
            if c.precision == "fp32"}
    alone = {(c.mode, c.params[SHAPE_SET]) for c in gemm.cases({"precisions": ["fp32"]}, "cpu")}
    assert both == alone and len(alone) == 2  # one shape set per mode (DeepBench's training and inference sets)


# ---------------------------------------------------------------------------- summaries

def records(spec: WorkloadSpec, overrides: dict[str, Any], suite: str, at: float, value: float) -> list[RunRecord]:
    """ok records as the executor makes them, of every case of one run (bytes/s = ``value`` × size)."""
    out = []
    for i, case in enumerate(spec.cases(overrides, "cpu")):
        size = float(case.params.get("size_bytes", 1))
        out.append(RunRecord(
            suite=suite, workload=spec.name, precision=case.precision, params=case.params, shape=case.shape,
            mode=case.mode, kernel_pass=case.kernel_pass, hostname="h", device_type="cpu", device="cpu", gpu="",
            uuid="", model_name="CPU", pci_bus_id="", status="ok", reason="", started_at=at + i,
            ended_at=at + i + 1, figures={"bytes_per_second": value * size, "seconds": 1.0 / value},
            environment={"torch": "2.13.0"}, id=int(at) + i))
    return out


def test_a_summary_is_over_the_newest_shape_set_not_the_last_results_of_dropped_shapes():
    """memory_bandwidth copied 64 MiB, then the suite was changed to 4 MiB: the summary is over the 4 MiB
    copies alone (today's code took the geometric mean of both, an 8x jump that is no one's speed)."""
    spec = registry.MEMORY_BANDWIDTH
    old = records(spec, {"size_bytes": 64 * 2**20, "directions": ["d2d"]}, "nightly", 1000.0, 1.0)
    new = records(spec, {"size_bytes": 4 * 2**20, "directions": ["d2d"]}, "nightly", 5000.0, 1.0)
    [summary] = summarize(old + new)
    assert summary.shapes == 1
    assert summary.shape_names == frozenset({"size=4194304"})
    assert summary.figures["bytes_per_second"] == pytest.approx(4 * 2**20)


def test_summaries_of_results_without_a_shape_set_still_work():
    """Results recorded before shape sets were named form one set of their own."""
    spec = registry.MEMORY_BANDWIDTH
    old = records(spec, {"directions": ["d2d", "h2d"]}, "nightly", 1000.0, 1.0)
    for record in old:
        record.params.pop(SHAPE_SET)
    summaries = summarize(old)
    assert sorted(s.record.kernel_pass for s in summaries) == ["d2d", "h2d"] and all(s.shapes == 1 for s in summaries)


# ---------------------------------------------------------------------------- /metrics

def test_per_shape_series_carry_their_suite_and_two_suites_are_two_series():
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from sixdim.http.board import Board
    from sixdim.http.exporter import SixdimCollector

    spec = registry.LAUNCH_LATENCY
    board = Board()
    fast = records(spec, {"kinds": ["launch"], "launches_per_round": 2000}, "quick", 1000.0, 1.0)
    slow = records(spec, {"kinds": ["launch"], "launches_per_round": 500}, "nightly", 2000.0, 0.4)
    both = records(spec, {"kinds": ["launch"], "launches_per_round": 2000}, "nightly", 3000.0, 0.9)
    for record in fast + slow + both:
        board.add(record)
    reg = CollectorRegistry()
    reg.register(SixdimCollector(board, [], "h", part="results"))
    samples = [s for family in text_string_to_metric_families(generate_latest(reg).decode())
               for s in family.samples if s.name == catalog.WORKLOAD_SECONDS.name]
    seen = sorted((s.labels["suite"], s.labels["shape"], round(s.value, 3)) for s in samples)
    assert seen == [("nightly", "elements=1", round(1 / 0.9, 3)),
                    ("nightly", "elements=1,launches_per_round=500", 2.5),
                    ("quick", "elements=1", 1.0)]


def test_the_catalog_gives_per_shape_results_a_suite_label_and_verdicts_none():
    assert catalog.SUITE in catalog.WORKLOAD_SECONDS.labels
    assert catalog.SUITE not in catalog.REGRESSION_STATE.labels  # a verdict judges the measurement, any suite


# ---------------------------------------------------------------------------- the report

@pytest.fixture(scope="module")
def mixed_history(tmp_path_factory) -> str:
    """Ten hourly launch-latency runs alternating between a 500-launch suite (2.5x slower per launch) and a
    2,000-launch one, and a memory-bandwidth suite changed from 64 MiB to 4 MiB copies."""
    from sixdim.store.history import History

    path = str(tmp_path_factory.mktemp("mixed") / "history.db")
    history = History(path)
    rows: list[RunRecord] = []
    for n, at in zip(itertools.count(), range(0, 36000, 3600)):
        rows += records(registry.LAUNCH_LATENCY, {"kinds": ["launch"], "launches_per_round": 2000 if n % 2 else 500},
                        "quick" if n % 2 else "nightly", 1000.0 + at, 1.0 if n % 2 else 0.4)
    copies = registry.MEMORY_BANDWIDTH
    rows += records(copies, {"size_bytes": 64 * 2**20, "directions": ["d2d"]}, "nightly", 1000.0, 1.0)
    rows += records(copies, {"size_bytes": 4 * 2**20, "directions": ["d2d"]}, "nightly", 9000.0, 1.0)
    for record in rows:
        record.id = None
        history.add(record)
    history.close()
    return path


def test_the_report_keeps_differently_configured_suites_apart(mixed_history):
    """Two launch-latency suites (2,000 and 500 launches) are two series in the report, not one line
    that reads as a 2.5x regression; memory bandwidth's row is over the newest shape set."""
    from sixdim.report.data import read
    from sixdim.report.model import Report

    report = Report(read(mixed_history, keep_recent=10), now=50000.0)
    latency = [key for key in report.data.series if key.workload == "launch_latency"]
    assert sorted(k.shape for k in latency) == ["elements=1", "elements=1,launches_per_round=500"]
    [bandwidth] = [row for row in report.dimensions() if row["group"][0] == "memory_bandwidth"]
    assert bandwidth["shapes"] == 1
    assert bandwidth["values"]["bytes_per_second"] == pytest.approx(4 * 2**20)
    assert json.loads(json.dumps(bandwidth["values"]))  # plain numbers


@pytest.mark.slow
def test_in_chromium_the_launch_latency_chart_shows_no_false_regression(mixed_history, tmp_path, capsys):
    """The page as a person sees it: the launch-latency chart, drawn by plotly in headless Chromium, stays
    within 10% over the ten runs (on the previous code its one line swung 2.5x between the two suites)."""
    pytest.importorskip("plotly")
    from sixdim.report.html import build
    from tests.conftest import required_tool
    from tests.test_html_report import console_messages, errors_in, open_in_chromium
    from tests.test_report_short_history import PROBE, _artifacts

    chromium = required_tool("chromium", "chromium")
    page, _ = build(mixed_history, now=50000.0)
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", PROBE, 1))
    png = _artifacts(tmp_path) / "report-two-suites.png"
    dom, stderr = open_in_chromium(chromium, probed, screenshot=png, window="1400,2400")
    with capsys.disabled():
        print(f"\nHTML report of two differently configured suites (headless Chromium): {png}")
    assert console_messages(stderr) == [] and errors_in(dom) == 0
    charts = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1))
    [latency] = [c for c in charts if len(c["y"]) == 10]  # the ten launch-latency runs
    assert max(latency["y"]) / min(latency["y"]) < 1.1, latency["y"]
    assert "launches_per_round=500" in dom  # the per-shape table names both series
