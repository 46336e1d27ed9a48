"""What the dashboards must show: every metric an alert or its runbook reads is on a panel, every per-shape
panel says what it needs, failures are counted apart from the cases not run, and each suite's progress has
a row (issue 29, items 7 and 8).

An alert that fires with nothing to look at is half an alert: the runbook (docs/ALERTS.md) tells the
operator to look at a figure, and a dashboard panel must show it.  A suite of one's own exports only its
summaries unless it says ``export = "shapes"``, so a per-shape panel is empty for it: the panel shows the
suite's summaries instead where the catalog has them, or its description says exactly what it needs.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sixdim.core import catalog
from sixdim.dashboards import build, grafana
from sixdim.monitoring import recording, rules
from tests import dashboard_lint as lint
from tests import dashboard_queries as queries

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / rules.COMMITTED
RUNBOOK = ROOT / "docs" / "ALERTS.md"

BOARDS = build.dashboards()
PANEL_QUERIES = [q for board in BOARDS.values() for q in queries.all_queries(board) if q.kind == queries.PANEL]
ON_PANELS = {name for q in PANEL_QUERIES for name in lint.metric_names(q.expr)}
"""Every metric some panel's query reads."""

PER_SHAPE = {m.name for m in build.PER_SHAPE_METRICS}
VERDICTS = {m.name for m in catalog.VERDICT_METRICS}
SUMMARIES = {m.name for m in catalog.SUMMARY_METRICS}
RECORDED = {m.name: m for m in recording.RECORDED}
KNOWN = lint.KNOWN_METRICS

NOT_ON_A_PANEL = {
    catalog.WORKLOAD_LAST_RUN.name: "the per-shape twin of sixdim_workload_last_success_timestamp_seconds (both "
                                    "are the end of the newest ok run), which every workload has, exported per "
                                    "shape or not: Time since each workload last ran reads that one",
}
"""Catalog metrics deliberately on no panel, and why; no alert or runbook reads them."""


@functools.cache
def _rule_groups() -> list[dict[str, Any]]:
    """The committed rules file's groups, parsed once: every recorded series' lookup reads them, and parsing the
    file for each cost seconds."""
    return yaml.safe_load(RULES.read_text())["groups"]


def _alert_rules() -> list[dict[str, Any]]:
    groups = _rule_groups()
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def _recorded_inputs(name: str, seen: set[str] | None = None) -> set[str]:
    """A recorded series and, through its recording rule, every series it is made of."""
    seen = set() if seen is None else seen
    if name in seen:
        return set()
    seen.add(name)
    rule = next((r for g in _rule_groups() for r in g["rules"]
                 if r.get("record") == name), None)
    if rule is None:
        return {name}
    out = {name}
    for inner in lint.metric_names(rule["expr"]):
        out |= _recorded_inputs(inner, seen)
    return out


def alert_metrics() -> dict[str, set[str]]:
    """Every metric each alert rule reads, the series behind the recorded ones included."""
    out: dict[str, set[str]] = {}
    for rule in _alert_rules():
        names: set[str] = set()
        for name in lint.metric_names(rule["expr"]):
            names |= _recorded_inputs(name)
        out[rule["alert"]] = names
    return out


_RUNBOOK_NAME = re.compile(r"\b(?:sixdim_|process_)[A-Za-z0-9_:<>]*[A-Za-z0-9_>]")


def runbook_metrics() -> dict[str, set[str]]:
    """Every metric docs/ALERTS.md names, by the name as written; a pattern such as
    ``sixdim_peer_group:<summary>:count`` stands for each recorded series it matches."""
    out: dict[str, set[str]] = {}
    for written in sorted(set(_RUNBOOK_NAME.findall(RUNBOOK.read_text()))):
        if "<" in written:
            pattern = re.compile("^" + re.sub(r"<[^>]*>", ".+", re.escape(written)) + "$")
            out[written] = {name for name in KNOWN if pattern.match(name)}
        else:
            out[written] = {written}
    return out


# --------------------------------------------------------------------------- alerts and the runbook on panels

def test_every_metric_an_alert_uses_is_on_a_panel():
    found = alert_metrics()
    assert len(found) == 15 and all(found.values()), found  # every alert of the rules file, each reading something
    missing = {alert: sorted(names - ON_PANELS) for alert, names in found.items() if names - ON_PANELS}
    assert not missing, f"alert inputs on no dashboard panel: {missing}"


def test_every_metric_the_runbook_names_is_on_a_panel():
    found = runbook_metrics()
    unknown = sorted(written for written, names in found.items() if not names <= KNOWN or not names)
    assert not unknown, f"docs/ALERTS.md names metrics that neither the catalog nor the rules define: {unknown}"
    missing = {written: sorted(names - ON_PANELS) for written, names in found.items() if names - ON_PANELS}
    assert not missing, f"metrics docs/ALERTS.md tells the operator to look at, on no dashboard panel: {missing}"
    # what the issue named: inputs of alerts and the runbook that no panel showed
    for metric in (catalog.SUMMARY_THERMAL_SLOWDOWN, catalog.SUMMARY_HARDWARE_SLOWDOWN, catalog.BASELINE_VALUE,
                   catalog.DRIFT_STATE, catalog.DRIFT_RATE, catalog.DRIFT_TOTAL_RATIO, catalog.PEER_CAUSE):
        assert metric.name in set().union(*found.values()) | set().union(*alert_metrics().values()), metric.name


def test_every_catalog_metric_is_on_a_panel_or_says_why_not():
    names = {m.name for m in catalog.ALL_METRICS}
    missing = sorted(names - ON_PANELS - set(NOT_ON_A_PANEL))
    assert not missing, f"catalog metrics on no dashboard panel: {missing}"
    assert not set(NOT_ON_A_PANEL) & ON_PANELS, "a metric exempted in NOT_ON_A_PANEL is on a panel now: drop it"
    used = set().union(*alert_metrics().values(), *runbook_metrics().values())
    assert not set(NOT_ON_A_PANEL) & used


def test_what_the_issue_found_on_no_panel_is_on_one():
    for metric in (catalog.SUMMARY_SECONDS, catalog.HOST_LOAD, catalog.GPU_PROCESSES, catalog.GPU_ENERGY,
                   catalog.WORKLOAD_SPEEDUP, catalog.WORKLOAD_TOKENS, *catalog.SUITE_RUN_METRICS):
        assert metric.name in ON_PANELS, metric.name


def test_the_docs_name_the_panels_of_every_alert():
    """docs/DASHBOARDS.md's table of each alert and the panels that show its inputs names every alert of
    the rules file and only panels that exist."""
    text = (ROOT / "docs" / "DASHBOARDS.md").read_text()
    table = text[text.index("## Where an alert's inputs are shown"):]
    table = table[:table.index("\n\n", table.index("| alert |"))]
    rows = [line for line in table.splitlines() if line.startswith("| Sixdim")]
    named = {name.strip() for row in rows for name in row.split("|")[1].split(",")}
    assert named == set(alert_metrics()), named ^ set(alert_metrics())
    titles = {p["title"] for board in BOARDS.values() for p in queries.panels(board) if p["type"] != "row"}
    for row in rows:
        for title in re.findall(r"\*\*(.+?)\*\*", row):
            assert title in titles, f"docs/DASHBOARDS.md names a panel that does not exist: {title!r}"


def test_the_runbook_patterns_expand_to_recorded_series():
    found = runbook_metrics()
    counts = next(names for written, names in found.items() if "<" in written)
    assert counts == {recording.peer_count(m).name for m in recording.PEER_METRICS}


# --------------------------------------------------------------------------- per-shape panels say what they need

def _marked(q: queries.Query) -> str:
    return f"{q.dashboard} {q.panel_title!r} {q.ref_id}"


def test_a_query_of_per_shape_series_says_it_needs_export_shapes():
    checked = 0
    for q in PANEL_QUERIES:
        names = lint.metric_names(q.expr) - {catalog.BUILD_INFO.name}
        if names and names <= PER_SHAPE:
            checked += 1
            assert q.per_shape, f"{_marked(q)} reads only per-shape series {sorted(names)} but is not marked"
        if q.per_shape:
            assert names & (PER_SHAPE | VERDICTS), f"{_marked(q)}: marked per-shape but reads {sorted(names)}"
            assert build.EXPORT_SHAPES in q.per_shape, _marked(q)
    assert checked > 40


def test_summary_only_queries_show_the_summaries_of_workloads_not_exported_per_shape():
    found = [q for q in PANEL_QUERIES if q.summary_only]
    assert {q.panel_title for q in found} >= {"FLOP/s per shape", "Samples/s per shape", "Time per operation",
                                                "Bytes per second", "Fraction of the published peak"}
    for q in found:
        names = lint.metric_names(q.expr)
        assert names & SUMMARIES and names & PER_SHAPE and " unless on " in q.expr, _marked(q)
        assert not q.per_shape, _marked(q)


def test_the_markers_tell_which_configuration_needs_data():
    description = ("Per-shape: needs a suite with export = \"shapes\".\n\nWhat it shows.\n\n"
                   "Query B (suite mean) is summary-only: for suites without it.")
    panel, per_query = queries.markers(description)
    assert panel == {"per_shape": 'needs a suite with export = "shapes"'}
    assert per_query == {"B": {"summary_only": "for suites without it"}}
    flops = [q for q in PANEL_QUERIES if q.dashboard == build.GPU_DETAIL and q.panel_title == "FLOP/s per shape"]
    assert [(q.required(queries.DEFAULT), q.required(queries.README)) for q in flops] == [(True, False),
                                                                                          (False, True)]
    with pytest.raises(ValueError):
        flops[0].required("nightly")


def test_the_six_dimensions_table_names_what_its_per_shape_columns_need():
    six = {q.ref_id: q for q in PANEL_QUERIES if q.panel_title == "Six dimensions now, per device and workload"}
    assert [ref for ref, q in sorted(six.items()) if q.per_shape] == ["E", "F", "G", "H", "I"]  # power ... stability
    assert six["F"].required(queries.DEFAULT) and not six["F"].required(queries.README)  # peak memory


# --------------------------------------------------------------------------- failures apart from cases not run

def _exprs(uid: str) -> dict[tuple[str, str], str]:
    return {(q.panel_title, q.ref_id or ""): queries.substitute(q.expr, rate_interval="5m", range_="1h")
            for q in queries.all_queries(BOARDS[f"{uid}.json"]) if q.kind == queries.PANEL}


def test_no_panel_counts_every_status_but_ok_as_one():
    for q in PANEL_QUERIES:
        assert not re.search(rf'{catalog.STATUS}\s*!=\s*"ok"', q.expr), _marked(q)


def test_the_fleet_counts_failures_apart_from_cases_not_run_and_interruptions(tmp_path, promtool):
    found = _exprs(build.FLEET)
    device = {catalog.HOSTNAME: "a", catalog.UUID: "", catalog.GPU: "", catalog.MODEL_NAME: "EPYC",
              catalog.PCI_BUS_ID: "", catalog.DEVICE_TYPE: "cpu"}
    runs = catalog.WORKLOAD_RUNS.name
    series = [{"series": _series(runs, **device, workload="gemm", status=status), "values": values}
              for status, values in (("ok", "0+1x60"), ("failed", "0x30 1x30"), ("timeout", "0x60"),
                                     ("unsupported", "0x30 2x30"), ("skipped", "0x30 1x30"))]
    series.append({"series": _series(catalog.SUITE_INTERRUPTIONS.name, **device, suite="nightly"),
                   "values": "0x30 1x30"})
    shown = {k: device[k] for k in (catalog.HOSTNAME, catalog.DEVICE_TYPE, catalog.GPU, catalog.MODEL_NAME)}
    _promtool_test(promtool, tmp_path, series, [
        {"expr": found["Failures in the time range", "A"], "eval_time": "60m", "exp_samples": [
            {"labels": _labels(**shown, workload="gemm", status="failed"), "value": 1}]},
        {"expr": found["Cases not run and interrupted suite runs in the time range", "A"], "eval_time": "60m",
         "exp_samples": [{"labels": _labels(**shown, workload="gemm", status=status), "value": value}
                         for status, value in (("skipped", 1), ("unsupported", 2))]},
        {"expr": found["Cases not run and interrupted suite runs in the time range", "B"], "eval_time": "60m",
         "exp_samples": [{"labels": _labels(**shown, suite="nightly"), "value": 1}]},
        {"expr": found["Failed or timed out", "A"], "eval_time": "60m", "exp_samples": [
            {"labels": "{}", "value": 1}]},
    ])
    statuses = {q.panel_title: q.expr for q in PANEL_QUERIES if q.dashboard == build.FLEET and q.ref_id == "A"}
    assert f'status=~"{"|".join(catalog.FAILURE_STATUSES)}"' in statuses["Failures, by status"]
    assert f'status=~"{"|".join(catalog.NOT_RUN_STATUSES)}"' in statuses["Cases not run and interrupted suite runs"]


# --------------------------------------------------------------------------- suite progress

def test_the_suite_progress_row_reads_every_progress_metric():
    board = BOARDS[f"{build.AGENT}.json"]
    row, read = None, set()
    for panel in queries.panels(board):
        if panel["type"] == "row":
            row = panel["title"]
        elif row == build.SUITES_ROW:
            read |= {name for t in panel["targets"] for name in lint.metric_names(t["expr"])}
    assert {m.name for m in catalog.SUITE_RUN_METRICS} - {catalog.SUITE_INTERRUPTIONS.name} <= read
    assert catalog.SUITE_INTERRUPTIONS.name in ON_PANELS


def test_the_suite_progress_table_shows_cases_done_failures_and_cases_not_run(tmp_path, promtool):
    found = _exprs(build.AGENT)
    device = {catalog.HOSTNAME: "a", catalog.UUID: "", catalog.GPU: "", catalog.MODEL_NAME: "EPYC",
              catalog.PCI_BUS_ID: "", catalog.DEVICE_TYPE: "cpu", catalog.SUITE: "nightly"}
    done = catalog.SUITE_CASES_DONE.name
    series = [{"series": _series(done, **device, status=status), "values": f"{value}x10"}
              for status, value in (("ok", 5), ("failed", 1), ("incorrect", 0), ("timeout", 1), ("unsupported", 2),
                                    ("skipped", 1))]
    series += [{"series": _series(catalog.SUITE_CASES.name, **device), "values": "20x10"},
               {"series": _series(catalog.SUITE_RUNNING.name, **device), "values": "1x10"},
               {"series": _series(catalog.SUITE_RUNNING.name, **{**device, catalog.SUITE: "new"}), "values": "0x10"}]
    shown = {k: device[k] for k in (catalog.HOSTNAME, catalog.DEVICE_TYPE, catalog.GPU, catalog.MODEL_NAME,
                                    catalog.SUITE)}
    title = "Suite progress now"
    expected = {"B": 10, "C": 20, "D": 0.5, "E": 2, "F": 3}
    _promtool_test(promtool, tmp_path, series, [
        {"expr": found[title, ref], "eval_time": "5m", "exp_samples": [{"labels": _labels(**shown), "value": value}]}
        for ref, value in expected.items()] + [
        {"expr": found[title, "A"], "eval_time": "5m", "exp_samples": [
            {"labels": _labels(**shown), "value": 1}, {"labels": _labels(**{**shown, "suite": "new"}), "value": 0}]}])


# --------------------------------------------------------------------------- a summary-only suite in a per-shape panel

def test_a_per_shape_panel_shows_the_summaries_of_a_suite_not_exported_per_shape(tmp_path, promtool):
    """The README's example: big-gemm exports gemm per shape, nightly exports summaries only (gemm, conv).
    FLOP/s per shape shows gemm's shapes (A) and conv's summary (B), not gemm's summaries again."""
    found = _exprs(build.GPU_DETAIL)
    device = {catalog.HOSTNAME: "a", catalog.UUID: "GPU-1", catalog.GPU: "0", catalog.MODEL_NAME: "H100",
              catalog.PCI_BUS_ID: "0000:01:00.0", catalog.DEVICE_TYPE: "cuda", catalog.DRIVER_VERSION: "560",
              catalog.CUDA_VERSION: "12.4", catalog.TORCH_VERSION: "2.4.0", catalog.PRECISION: "bf16",
              catalog.MODE: "inference", catalog.PASS: "forward"}
    flops, summary = catalog.WORKLOAD_FLOPS.name, catalog.SUMMARY_FLOPS.name
    series = [{"series": _series(flops, **device, workload="gemm", shape="m=16384"), "values": "9e14x10"},
              {"series": _series(summary, **device, workload="gemm", suite="big-gemm"), "values": "9e14x10"},
              {"series": _series(summary, **device, workload="gemm", suite="nightly"), "values": "5e14x10"},
              {"series": _series(summary, **device, workload="conv", suite="nightly"), "values": "2e14x10"}]
    kept = {k: v for k, v in device.items() if k not in catalog.VERSION_LABELS}
    _promtool_test(promtool, tmp_path, series, [
        {"expr": found["FLOP/s per shape", "A"], "eval_time": "5m", "exp_samples": [
            {"labels": _labels(**kept, workload="gemm", shape="m=16384"), "value": 9e14}]},
        {"expr": found["FLOP/s per shape", "B"], "eval_time": "5m", "exp_samples": [
            {"labels": _labels(**kept, workload="conv", suite="nightly"), "value": 2e14}]}])


# --------------------------------------------------------------------------- helpers

def _series(metric: str, **labels: str) -> str:
    return metric + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _labels(**labels: str) -> str:
    """A result's labels as promtool prints them: an empty label is no label."""
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if v) + "}"


def _promtool_test(promtool: str, tmp_path: Path, series: list[dict[str, str]], tests: list[dict[str, Any]]) -> None:
    spec = {"rule_files": [], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]}
    path = tmp_path / "panel-test.yml"
    path.write_text(json.dumps(spec, indent=1))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_markers_are_the_generator_s():
    assert (grafana.PER_SHAPE, grafana.SUMMARY_ONLY) == ("Per-shape", "Summary-only")


# --------------------------------------------------------------------------- what benchmarking costs the devices

def test_the_cost_panels_give_each_device_s_share_of_time_and_energy(tmp_path, promtool):
    """GPU 0 of host a spends 1/128 of its time on the frequent suite and 1/512 on the quick one (about 0.8%
    and 0.2%), and 8 W and 2 W of its 512 W over them; the host's CPU 1/256 of its time, with no energy
    counter. The figures are powers of two, so PromQL's arithmetic is exact and promtool's comparison too."""
    found = _exprs(build.AGENT)
    gpu = {catalog.HOSTNAME: "a", catalog.GPU: "0", catalog.UUID: "GPU-1", catalog.MODEL_NAME: "H100",
           catalog.PCI_BUS_ID: "0000:01:00.0"}
    cuda, cpu = {**gpu, catalog.DEVICE_TYPE: "cuda"}, {catalog.HOSTNAME: "a", catalog.GPU: "", catalog.UUID: "",
                                                       catalog.MODEL_NAME: "EPYC", catalog.PCI_BUS_ID: "",
                                                       catalog.DEVICE_TYPE: "cpu"}
    watts, minute, hour = 512, 60, 3600
    costs = {"frequent": (2 ** -7, 8), "quick": (2 ** -9, 2)}  # (seconds per second, joules per second)
    series = [{"series": _series(catalog.GPU_ENERGY.name, **gpu), "values": f"1e6+{watts * minute}x60"}]
    for suite, (seconds, joules) in costs.items():
        series += [{"series": _series(catalog.SUITE_DEVICE_SECONDS.name, **cuda, suite=suite),
                    "values": f"0+{seconds * minute!r}x60"},
                   {"series": _series(catalog.SUITE_ENERGY.name, **cuda, suite=suite),
                    "values": f"0+{joules * minute}x60"}]
    series.append({"series": _series(catalog.SUITE_DEVICE_SECONDS.name, **cpu, suite="frequent"),
                   "values": f"0+{2 ** -8 * minute!r}x60"})
    shown = {k: cuda[k] for k in (catalog.HOSTNAME, catalog.DEVICE_TYPE, catalog.GPU, catalog.MODEL_NAME)}
    cpu_shown = {k: cpu[k] for k in shown}
    per_suite = [{"labels": _labels(**shown, suite="frequent"), "value": 2 ** -7 * hour},
                 {"labels": _labels(**shown, suite="quick"), "value": 2 ** -9 * hour},
                 {"labels": _labels(**cpu_shown, suite="frequent"), "value": 2 ** -8 * hour}]
    _promtool_test(promtool, tmp_path, series, [
        {"expr": found["Benchmark share of device time", "A"], "eval_time": "30m", "exp_samples": [
            {"labels": _labels(**shown), "value": 2 ** -7 + 2 ** -9},
            {"labels": _labels(**cpu_shown), "value": 2 ** -8}]},
        {"expr": found["Benchmark share of GPU energy", "A"], "eval_time": "30m", "exp_samples": [
            {"labels": _labels(**{k: gpu[k] for k in (catalog.HOSTNAME, catalog.GPU, catalog.UUID,
                                                     catalog.MODEL_NAME)}), "value": (8 + 2) / watts}]},
        {"expr": found["Benchmark device time per hour, by suite", "A"], "eval_time": "30m", "exp_samples": per_suite},
        {"expr": found["Benchmark cost in the time range, by suite", "A"], "eval_time": "60m",
         "exp_samples": per_suite},  # an hour's increase: the hour's seconds
        {"expr": found["Benchmark cost in the time range, by suite", "B"], "eval_time": "60m", "exp_samples": [
            {"labels": _labels(**shown, suite="frequent"), "value": 8 * hour},
            {"labels": _labels(**shown, suite="quick"), "value": 2 * hour}]},
    ])
    board = BOARDS[f"{build.AGENT}.json"]
    row, titles = None, []
    for panel in queries.panels(board):
        if panel["type"] == "row":
            row = panel["title"]
        elif row == build.COST_ROW:
            titles.append(panel["title"])
            assert panel["fieldConfig"]["defaults"]["unit"] == {
                "Benchmark device time per hour, by suite": "s", "Benchmark cost in the time range, by suite": "none"
            }.get(panel["title"], "percentunit"), panel["title"]
    assert titles == ["Benchmark share of device time", "Benchmark share of GPU energy",
                      "Benchmark device time per hour, by suite", "Benchmark cost in the time range, by suite"]
    energy = next(q for q in PANEL_QUERIES if q.panel_title == "Benchmark share of GPU energy")
    assert energy.gpu_only and not energy.required(queries.DEFAULT)  # marked as the GPU-only panels are
    assert {m.name for m in catalog.SUITE_COST_METRICS} <= ON_PANELS
