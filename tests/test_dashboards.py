"""The Grafana dashboards generated with grafanalib: current, known to Grafana's own models, linted,
PromQL that promtool parses, the annotations' logic, the query list for the end-to-end test, the CLI."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from sixdim import cli
from sixdim.core import catalog, conditions
from sixdim.dashboards import build, command, grafana
from sixdim.monitoring import rules
from sixdim.monitoring.options import Options
from tests import dashboard_lint as lint
from tests import dashboard_queries as queries
from tests.dcgm_names import default_names_in, renamed

ROOT = Path(__file__).resolve().parent.parent
JSON_DIR = ROOT / command.COMMITTED_DIR
CONFIGMAP = ROOT / command.COMMITTED_CONFIGMAP
DOC = ROOT / "docs" / "DASHBOARDS.md"

BOARDS = build.dashboards()
DCGM_BOARDS = build.dashboards(Options(dcgm_label_names=True))

GPU_ONLY_METRICS = {m.name for m in catalog.ALL_METRICS if m.name.startswith("sixdim_gpu_")} | {
    m.name for m in (catalog.WORKLOAD_MEMORY_RESERVED, catalog.WORKLOAD_DEVICE_MEMORY, catalog.WORKLOAD_POWER_CAPPED,
                     catalog.WORKLOAD_THERMAL_SLOWDOWN, catalog.WORKLOAD_HARDWARE_SLOWDOWN,
                     catalog.SUMMARY_THERMAL_SLOWDOWN, catalog.SUMMARY_HARDWARE_SLOWDOWN, catalog.PEER_RATIO,
                     catalog.SUITE_PEER_RATIO, catalog.PEER_CAUSE)}
"""What only a host with a GPU exports: NVML telemetry and identity, CUDA memory, clock events, on-host peers."""


def all_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in queries.panels(board) if p["type"] != "row"]


# --------------------------------------------------------------------------- the ConfigMaps
# (the committed copies are kept current by `sixdim generate --check`: tests/test_generate.py)

def test_the_configmaps_hold_every_dashboard_labelled_for_the_sidecar():
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where PyYAML has it: half a megabyte
    documents = [d for d in yaml.load_all(command.configmap(), Loader=loader) if d]
    assert [d["kind"] for d in documents] == ["ConfigMap"] * len(BOARDS)
    held = {}
    for doc in documents:
        assert doc["apiVersion"] == "v1"
        assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert doc["metadata"]["annotations"]["grafana_folder"] == "sixdim"
        name = doc["metadata"]["name"]
        assert re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", name), name
        (name, text), = doc["data"].items()
        held[name] = json.loads(text)
        # Client-side kubectl apply keeps a copy in an annotation limited to 256 KiB.
        assert len(text) < 200_000, f"{name} is {len(text)} bytes"
    assert held == BOARDS


@pytest.mark.slow
def test_generation_is_deterministic():
    assert command.files() == command.files(Options())
    assert command.configmap() == command.configmap()


# --------------------------------------------------------------------------- Grafana's own models

def _round_trip(board: dict[str, Any]) -> dict[str, Any]:
    sdk = pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk==0.0.21 (the test extra)")
    assert sdk is not None
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the classic Dashboard model "prefers" v2
        from grafana_foundation_sdk.models.dashboard import Dashboard
    register_default_plugins()  # typed panel options, field config and Prometheus queries, so they are checked too
    return json.loads(json.dumps(Dashboard.from_json(copy.deepcopy(board)), cls=JSONEncoder))


ROUND_TRIP_ALLOWED: set[str] = set()
"""Paths (indexes as []) where a difference after the round trip is the SDK normalising, not a field
it does not know. Empty: every field we write comes back unchanged.  (The SDK adds defaults of its own,
which is no unknown field of ours, so only what we wrote is compared.)"""


def _lost(ours: Any, back: Any, path: str = "") -> list[str]:
    """What of ours did not come back unchanged: a field the model does not know, or a value it changed."""
    if isinstance(ours, dict):
        if not isinstance(back, dict):
            return [f"{path}: became {type(back).__name__}"]
        out = []
        for key, value in ours.items():
            if key not in back:
                out.append(f"{path}/{key}: unknown to Grafana's model (dropped)")
            else:
                out += _lost(value, back[key], f"{path}/{key}")
        return out
    if isinstance(ours, list):
        if not isinstance(back, list) or len(back) != len(ours):
            return [f"{path}: list changed"]
        return [p for i, (a, b) in enumerate(zip(ours, back)) for p in _lost(a, b, f"{path}[{i}]")]
    return [] if ours == back else [f"{path}: {ours!r} -> {back!r}"]


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_field_is_known_to_the_foundation_sdk_dashboard_model(name):
    lost = [p for p in _lost(BOARDS[name], _round_trip(BOARDS[name]))
            if re.sub(r"\[\d+\]", "[]", p.split(":")[0]) not in ROUND_TRIP_ALLOWED]
    assert not lost, f"{name}: fields Grafana's dashboard model does not know:\n" + "\n".join(lost)


def test_the_round_trip_finds_legacy_grafanalib_fields():
    board = copy.deepcopy(BOARDS["sixdim-fleet.json"])
    board["rows"], board["hideControls"] = [], False
    gauge = next(p for p in all_panels(board) if p["type"] == "bargauge")
    gauge["options"]["fieldOptions"] = {"calcs": ["mean"]}
    table = next(p for p in all_panels(board) if p["type"] == "table")
    table["fontSize"] = "100%"
    table["targets"][0]["metric"] = ""
    lost = {p.split(":")[0] for p in _lost(board, _round_trip(board))}
    gauge_at = board["panels"].index(gauge)
    table_at = board["panels"].index(table)
    assert {"/rows", "/hideControls", f"/panels[{gauge_at}]/options/fieldOptions", f"/panels[{table_at}]/fontSize",
            f"/panels[{table_at}]/targets[0]/metric"} <= lost


def test_grafanalib_output_is_what_the_fixes_are_for():
    """If a grafanalib release stops emitting these, the fixes in dashboards/grafana.py can go."""
    from grafanalib import core as G
    raw = grafana._plain(G.Dashboard(title="t", panels=[G.BarGauge(title="b"), G.Stat(title="s")]).to_json_data())
    assert raw["schemaVersion"] < lint.MIN_SCHEMA_VERSION and "rows" in raw and "hideControls" in raw
    assert "fieldOptions" in raw["panels"][0]["options"]
    assert raw["panels"][1]["fieldConfig"]["defaults"]["thresholds"]["steps"] == ""


# --------------------------------------------------------------------------- lint

@pytest.mark.parametrize("boards", [BOARDS, DCGM_BOARDS], ids=["model_name", "modelName"])
def test_the_dashboards_pass_the_lint(boards):
    assert lint.lint_all(boards) == []


def _first(board: dict[str, Any], kind: str, having: str = "") -> dict[str, Any]:
    return next(p for p in all_panels(board) if p["type"] == kind and having in json.dumps(p["targets"]))


def _var(board: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in board["templating"]["list"] if v["name"] == name)


def _set_query(variable: dict[str, Any], text: str) -> None:
    variable["query"]["query"] = variable["definition"] = text


MUTATIONS = {
    "template-datasource": lambda b: b["templating"]["list"].pop(0),
    "template-variables": lambda b: _var(b, "gpu").update(allValue=None),
    "template-variables/metric": lambda b: _set_query(_var(b, "model"), f"label_values({catalog.GPU_INFO.name}, "
                                                                         f"{catalog.MODEL_NAME})"),
    "template-variables/missing": lambda b: b["templating"]["list"].remove(_var(b, "precision")),
    "panel-datasource": lambda b: _first(b, "timeseries").update(datasource="Prometheus"),
    "panel-datasource/target": lambda b: _first(b, "timeseries")["targets"][0].update(datasource="${DS}"),
    "panel-type": lambda b: _first(b, "timeseries").update(type="graph"),
    "panel-title-description": lambda b: _first(b, "stat").update(description=""),
    "panel-units": lambda b: _first(b, "timeseries")["fieldConfig"]["defaults"].update(unit=""),
    "panel-units/unknown": lambda b: _first(b, "table")["fieldConfig"]["defaults"].update(unit="FLOP/s"),
    "panel-no-targets": lambda b: _first(b, "stat").update(targets=[]),
    "target-rate-interval": lambda b: _rewrite(b, "rate(", "$__rate_interval", "5m"),
    "target-rate-interval/increase": lambda b: _rewrite(b, "increase(", "$__range", "1d"),
    "target-counter-agg": lambda b: _rewrite(b, catalog.WORKLOAD_RUNS.name, "increase(", "sum_over_time("),
    "target-legend": lambda b: _first(b, "timeseries")["targets"][0].update(legendFormat="{{instance}}"),
    "target-legend/gpu": lambda b: _first(b, "timeseries", catalog.WORKLOAD_FLOPS.name)["targets"][0].update(
        legendFormat="{{hostname}} {{shape}}"),
    "target-legend/empty": lambda b: _first(b, "timeseries")["targets"][0].update(legendFormat=""),
    "target-metrics": lambda b: _first(b, "timeseries")["targets"][0].update(expr="DCGM_FI_DEV_POWER_USAGE"),
    "target-job-instance": lambda b: _rewrite(b, catalog.HISTORY_UP.name, "{", '{job="sixdim", '),
    "target-job-instance/fixed": lambda b: _rewrite(b, catalog.HISTORY_UP.name, 'job=~"$job"', 'job=~"sixdim"'),
    "target-scope": lambda b: _rewrite(b, catalog.HISTORY_UP.name, 'cluster=~"$cluster", ', ""),
    "target-scope/job": lambda b: _rewrite(b, catalog.HISTORY_UP.name, 'job=~"$job", ', ""),
    "target-scope/up": lambda b: _rewrite(b, "group_left", 'up{cluster=~"$cluster", job=~"$job", '
                                          'instance=~"$instance"}', "up"),
    "target-scope/variable": lambda b: _set_query(_var(b, "model"), f"label_values({catalog.WORKLOAD_RUNS.name}, "
                                                                      f"{catalog.MODEL_NAME})"),
    "template-variables/cluster": lambda b: b["templating"]["list"].remove(_var(b, "cluster")),
    "template-variables/job": lambda b: b["templating"]["list"].remove(_var(b, "instance")),
    "dashboard-schema": lambda b: b.update(schemaVersion=12),
    "dashboard-schema/inputs": lambda b: b.update(__inputs=[{"name": "DS_PROMETHEUS"}]),
    "dashboard-links": lambda b: b.update(links=[]),
    "panel-layout": lambda b: all_panels(b)[1].update(id=all_panels(b)[0]["id"]),
    "panel-layout/overlap": lambda b: all_panels(b)[1].update(gridPos=dict(all_panels(b)[0]["gridPos"])),
    "panel-markers": lambda b: _first(b, "stat").update(description="Query Z may be empty: never."),
}


def _rewrite(board: dict[str, Any], having: str, old: str, new: str) -> None:
    for panel in all_panels(board):
        for target in panel["targets"]:
            if having in target["expr"] and old in target["expr"]:
                target["expr"] = target["expr"].replace(old, new, 1)
                return
    raise AssertionError(f"no query with {having!r} and {old!r}")


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_lint_catches_a_broken_rule(mutation):
    """Mutation check: break each rule in a copy and the lint names it."""
    boards = copy.deepcopy(BOARDS)
    board = boards["sixdim-agent.json" if any(w in mutation for w in ("job", "rate", "scope")) else "sixdim-fleet.json"]
    if mutation == "target-legend/gpu":
        board = boards["sixdim-gpu.json"]
    MUTATIONS[mutation](board)
    rule = mutation.split("/")[0]
    found = lint.lint_all(boards)
    assert any(p.startswith(rule + ":") for p in found), f"{mutation}: the lint found only {found}"


def test_the_lint_reads_result_labels():
    assert lint.result_labels("count(count by (hostname) (x)) or vector(0)") == set()
    assert lint.result_labels('bottomk(5, min by (hostname, gpu) (a / on (b) group_left () c))') == {"hostname", "gpu"}
    assert {"hostname", "gpu"} <= lint.result_labels(f"max without (driver_version) ({catalog.WORKLOAD_FLOPS.name})")
    assert lint.result_labels(f"max by (hostname) ({lint.promql.PROCESS_RESIDENT_MEMORY} * on (job, instance) "
                              f"group_left (hostname) {catalog.BUILD_INFO.name})") == {"hostname"}
    assert lint.metric_names('rate(a_total{x="b"}[5m]) / on (c) group_left () d offset 5m') == {"a_total", "d"}


# --------------------------------------------------------------------------- PromQL

def _check_exprs(promtool: str, tmp_path: Path, exprs: list[str]) -> None:
    rules = [{"record": f"sixdim_dashboard_check:q{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "exprs.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboards", "rules": rules}]}, indent=1))  # JSON is YAML
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("boards", [BOARDS, DCGM_BOARDS], ids=["model_name", "modelName"])
def test_every_query_parses(boards, tmp_path, promtool):
    exprs = [queries.substitute(q.expr) for board in boards.values() for q in queries.all_queries(board)]
    assert all("$" not in e for e in exprs)
    _check_exprs(promtool, tmp_path, exprs)


SERIES_LABELS = {catalog.UUID: "GPU-1", catalog.DEVICE_TYPE: "cuda", catalog.GPU: "0", catalog.MODEL_NAME: "H100",
                 catalog.PCI_BUS_ID: "0000:01:00.0", catalog.SUITE: "quick", catalog.WORKLOAD: "gemm",
                 catalog.PRECISION: "bf16", catalog.MODE: "training", catalog.PASS: "forward",
                 catalog.CUDA_VERSION: "12.4", catalog.TORCH_VERSION: "2.4.0"}


def _series(metric: str, **labels: str) -> str:
    return metric + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _annotation(board: dict[str, Any], name: str) -> str:
    return queries.substitute(next(a["expr"] for a in board["annotations"]["list"] if a.get("name") == name))


def test_the_version_change_annotation_marks_an_upgrade_and_nothing_else(tmp_path, promtool):
    """Host a runs under driver 550 for an hour, then 560; host b starts (under 560) after an hour."""
    shapes = catalog.SUMMARY_SHAPES.name
    expr = _annotation(BOARDS["sixdim-gpu.json"], "Software versions changed")
    changed = {catalog.HOSTNAME: "a", catalog.DRIVER_VERSION: "560", catalog.CUDA_VERSION: "12.4",
               catalog.TORCH_VERSION: "2.4.0"}
    spec = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": _series(shapes, **{**SERIES_LABELS, catalog.HOSTNAME: "a", catalog.DRIVER_VERSION: "550"}),
                 "values": "3x59"},
                {"series": _series(shapes, **{**SERIES_LABELS, catalog.HOSTNAME: "a", catalog.DRIVER_VERSION: "560"}),
                 "values": "_x59 3x120"},
                {"series": _series(shapes, **{**SERIES_LABELS, catalog.HOSTNAME: "b", catalog.DRIVER_VERSION: "560"}),
                 "values": "_x59 3x120"},
            ],
            "promql_expr_test": [
                {"expr": expr, "eval_time": "30m", "exp_samples": []},
                {"expr": expr, "eval_time": "61m", "exp_samples": [
                    {"labels": "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(changed.items())) + "}", "value": 1}]},
                {"expr": expr, "eval_time": "85m", "exp_samples": [
                    {"labels": "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(changed.items())) + "}", "value": 1}]},
                {"expr": expr, "eval_time": f"{60 + 31}m", "exp_samples": []},
                {"expr": expr, "eval_time": "150m", "exp_samples": []},
            ],
        }],
    }
    path = tmp_path / "annotation-test.yml"
    path.write_text(json.dumps(spec, indent=1))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_verdict_annotation_marks_a_new_verdict(tmp_path, promtool):
    change = catalog.VERSION_CHANGE_RATIO.name
    expr = _annotation(BOARDS["sixdim-gpu.json"], "Version-change verdicts")
    labels = {**SERIES_LABELS, catalog.HOSTNAME: "a", catalog.DRIVER_VERSION: "560", catalog.SHAPE: "m=1",
              catalog.FIGURE: "flops", catalog.CHANGE_COMPONENT: "driver", catalog.CHANGE_FROM: "550",
              catalog.CHANGE_TO: "560"}
    labels.pop(catalog.SUITE)
    out = {k: labels[k] for k in (catalog.HOSTNAME, catalog.DEVICE_TYPE, catalog.GPU, catalog.WORKLOAD,
                                  catalog.FIGURE, catalog.CHANGE_COMPONENT, catalog.CHANGE_FROM, catalog.CHANGE_TO)}
    spec = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": _series(change, **labels, verdict="insufficient_data"), "values": "_x9 0.9x50"},
            {"series": _series(change, **labels, verdict="regression"), "values": "_x60 0.9x60"},
        ],
        "promql_expr_test": [
            {"expr": expr, "eval_time": "5m", "exp_samples": []},
            {"expr": expr, "eval_time": "65m", "exp_samples": [{"labels": "{" + ", ".join(
                f'{k}="{v}"' for k, v in sorted({**out, "verdict": "regression"}.items())) + "}", "value": 1}]},
            {"expr": expr, "eval_time": "100m", "exp_samples": []},
        ]}]}
    path = tmp_path / "verdict-test.yml"
    path.write_text(json.dumps(spec, indent=1))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_fleet_peer_panels_find_the_slow_gpu(tmp_path, promtool):
    """Three H100s on three hosts, one at 80% of the others: the stat counts it, the bars show it.  A
    fourth at 50%, whose mean lost one of the 4 shapes (failing there), is compared with nothing, as
    SixdimSlowerThanPeers judges it."""
    found = {q.panel_title: queries.substitute(q.expr) for q in queries.all_queries(BOARDS["sixdim-fleet.json"])}
    stat = found["Slower than same-model peers"]
    bars = found["Slowest devices against their same-model peers (fleet)"]
    flops, shapes = catalog.SUMMARY_FLOPS.name, catalog.SUMMARY_SHAPES.name
    series = []
    for host, value, covered in (("a", 100, 4), ("b", 100, 4), ("c", 80, 4), ("d", 50, 3)):
        labels = {**SERIES_LABELS, catalog.HOSTNAME: host, catalog.UUID: f"GPU-{host}", catalog.DRIVER_VERSION: "560"}
        series += [{"series": _series(flops, **labels), "values": f"{value}x10"},
                   {"series": _series(shapes, **labels), "values": f"{covered}x10"}]
    device = {catalog.DEVICE_TYPE: "cuda", catalog.GPU: "0", catalog.MODEL_NAME: "H100", catalog.WORKLOAD: "gemm"}
    (tmp_path / "rules.yml").write_text(rules.render())  # the panels read the recorded peer ratios
    spec = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            {"expr": stat, "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 1}]},
            {"expr": bars, "eval_time": "5m", "exp_samples": [
                {"labels": "{" + ", ".join(f'{k}="{v}"' for k, v in sorted({**device, catalog.HOSTNAME: host}.items()))
                 + "}", "value": value} for host, value in (("a", 1), ("b", 1), ("c", 0.8))]},
        ]}]}
    path = tmp_path / "peers-test.yml"
    path.write_text(json.dumps(spec, indent=1))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _promtool_test(promtool: str, tmp_path: Path, series: list[dict[str, str]], tests: list[dict[str, Any]]) -> None:
    spec = {"rule_files": [], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]}
    path = tmp_path / "panel-test.yml"
    path.write_text(json.dumps(spec, indent=1))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _labels(**labels: str) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def test_the_gpu_health_row_reads_every_health_metric_with_the_gpu_identity():
    board = BOARDS["sixdim-gpu.json"]
    row, health = None, []
    for panel in queries.panels(board):
        if panel["type"] == "row":
            row = panel["title"]
        elif row == build.HEALTH_ROW:
            health.append(panel)
    read = {name for panel in health for t in panel["targets"] for name in lint.metric_names(t["expr"])}
    assert {m.name for m in catalog.GPU_HEALTH_METRICS} <= read
    assert {m.name for m in (catalog.WORKLOAD_POWER_CAPPED, catalog.WORKLOAD_THERMAL_SLOWDOWN,
                             catalog.WORKLOAD_HARDWARE_SLOWDOWN)} <= read
    for panel in health:
        assert panel["description"].startswith(grafana.GPU_ONLY + ":"), panel["title"]
    ecc = next(p for p in health if p["title"] == "ECC mode, row remapping and page retirement")
    assert ecc["fieldConfig"]["overrides"][-1]["matcher"] == {"id": "byFrameRefID", "options": "D"}
    assert catalog.GPU_ECC_ENABLED.name in ecc["targets"][3]["expr"]


def test_the_share_of_results_throttled_is_per_gpu(tmp_path, promtool):
    """Four results on GPU 0, one power capped and two thermally slowed; GPU 1 never throttled."""
    found = {(q.panel_title, q.ref_id): queries.substitute(q.expr)
             for q in queries.all_queries(BOARDS["sixdim-gpu.json"])}
    result = {k: v for k, v in SERIES_LABELS.items() if k != catalog.SUITE}
    series, device = [], {catalog.HOSTNAME: "a", catalog.DEVICE_TYPE: "cuda", catalog.MODEL_NAME: "H100"}
    for gpu, flags in (("0", ((1, 1, 0), (0, 1, 0), (0, 0, 0), (0, 0, 0))), ("1", ((0, 0, 0),))):
        for i, values in enumerate(flags):
            labels = {**result, **device, catalog.GPU: gpu, catalog.UUID: f"GPU-{gpu}", catalog.SHAPE: f"m={i}",
                      catalog.DRIVER_VERSION: "560"}
            for metric, value in zip((catalog.WORKLOAD_POWER_CAPPED, catalog.WORKLOAD_THERMAL_SLOWDOWN,
                                      catalog.WORKLOAD_HARDWARE_SLOWDOWN), values):
                series.append({"series": _series(metric.name, **labels), "values": f"{value}x10"})
    title = "Share of results throttled, per GPU"
    _promtool_test(promtool, tmp_path, series, [
        {"expr": found[title, ref], "eval_time": "5m", "exp_samples": [
            {"labels": _labels(**device, gpu=gpu), "value": value} for gpu, value in (("0", v0), ("1", 0))]}
        for ref, v0 in (("A", 0.25), ("B", 0.5), ("C", 0))])


def test_the_causes_table_lists_each_series_cause_and_rank(tmp_path, promtool):
    expr = next(queries.substitute(q.expr) for q in queries.all_queries(BOARDS["sixdim-fleet.json"])
                if q.panel_title == build.CAUSES_TITLE)
    result = {k: v for k, v in SERIES_LABELS.items() if k != catalog.SUITE}
    labels = {**result, catalog.HOSTNAME: "a", catalog.DRIVER_VERSION: "560", catalog.SHAPE: "m=1"}
    series = [{"series": _series(catalog.REGRESSION_CAUSE.name, **labels, cause=cause, rank=rank), "values": "1x10"}
              for cause, rank in (("power_limit", "1"), ("thermal", "2"))]
    shown = {k: labels[k] for k in (catalog.HOSTNAME, catalog.DEVICE_TYPE, catalog.GPU, catalog.MODEL_NAME,
                                    catalog.WORKLOAD, catalog.PRECISION, catalog.SHAPE, catalog.MODE, catalog.PASS)}
    _promtool_test(promtool, tmp_path, series, [{"expr": expr, "eval_time": "5m", "exp_samples": [
        {"labels": _labels(**shown, cause=cause, rank=rank), "value": 1}
        for cause, rank in (("power_limit", "1"), ("thermal", "2"))]}])
    table = next(p for p in all_panels(BOARDS["sixdim-fleet.json"]) if p["title"] == build.CAUSES_TITLE)
    titles = table["fieldConfig"]["overrides"][-1]["properties"][0]["value"][0]["options"]
    assert titles["power_limit"]["text"] == "power limit lowered" and set(titles) == set(conditions.CAUSE_NAMES)


@pytest.mark.parametrize("cluster", [Options().cluster_label, "site"])
def test_every_grouping_and_matching_keeps_the_cluster_label(cluster):
    """As in the alert rules: every ``by (...)`` and ``on (...)`` of every panel, variable and annotation
    query holds the options' cluster label, so a host name found in two clusters of one Prometheus stays
    two series, and the fleet's peer medians are taken within a cluster."""
    checked = 0
    for board in build.dashboards(Options(cluster_label=cluster)).values():
        for q in queries.all_queries(board):
            for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", q.expr):
                assert cluster in [name.strip() for name in clause.split(",")], (board["uid"], q.panel_title, q.expr)
                checked += 1
    assert checked > 100


# --------------------------------------------------------------------------- the queries and their markers

def test_all_queries_lists_every_target_variable_and_annotation():
    for board in BOARDS.values():
        found = queries.all_queries(board)
        targets = sum(len(p["targets"]) for p in all_panels(board))
        annotations = sum(1 for a in board["annotations"]["list"] if "expr" in a)
        assert len([q for q in found if q.kind == queries.PANEL]) == targets
        scope = [lint.promql.CLUSTER_VARIABLE] + (list(lint.promql.TARGET_VARIABLES)
                                                  if board["uid"] == build.AGENT else [])
        assert [q.panel_title for q in found if q.kind == queries.VARIABLE] == scope + [
            v.name for v in lint.promql.VARIABLES]
        assert len([q for q in found if q.kind == queries.ANNOTATION]) == annotations
        assert all(q.dashboard == board["uid"] for q in found)
        assert all(q.may_be_empty for q in found if q.kind == queries.ANNOTATION)


def test_variables_read_series_every_host_exports():
    for board in BOARDS.values():
        for q in queries.all_queries(board):
            if q.kind == queries.VARIABLE:
                assert lint.metric_names(q.expr) <= lint.EVERY_HOST_METRICS, q
                assert not q.gpu_only
    gpu = next(q for q in queries.all_queries(BOARDS["sixdim-fleet.json"]) if q.panel_title == "gpu")
    assert gpu.label == catalog.GPU and gpu.may_be_empty  # empty on a CPU host: All (.*) matches gpu=""


def test_gpu_only_markers_match_the_metrics_a_query_reads():
    for board in BOARDS.values():
        for q in queries.all_queries(board):
            names = lint.metric_names(q.expr)
            gpu_only_reads = names & GPU_ONLY_METRICS
            if gpu_only_reads and not (names - GPU_ONLY_METRICS - {catalog.BUILD_INFO.name}):
                assert q.gpu_only, f"{q.dashboard} {q.panel_title!r} {q.ref_id}: reads {gpu_only_reads} unmarked"
            if q.gpu_only:
                assert gpu_only_reads, f"{q.dashboard} {q.panel_title!r}: GPU-only but reads {names}"


def test_markers_are_parsed_from_the_descriptions():
    panel, per_query = queries.markers(
        "GPU-only: needs a GPU.\n\nWhat it shows.\n\nQuery B (samples/s) may be empty: model suites only.")
    assert panel == {"gpu_only": "needs a GPU"}
    assert per_query == {"B": {"may_be_empty": "model suites only"}}
    six = [q for q in queries.all_queries(BOARDS["sixdim-fleet.json"])
           if q.panel_title == "Six dimensions now, per device and workload"]
    assert [q.ref_id for q in six if q.may_be_empty is None] == ["A", "C", "F"]


def test_substitute_replaces_variables_and_macros():
    text = 'rate(x{hostname=~"$hostname", gpu=~"${gpu}", m=~"${model:regex}"}[$__rate_interval]) offset $__range'
    assert queries.substitute(text, {"gpu": "0|1"}, rate_interval="2m", range_="6h") == (
        'rate(x{hostname=~".*", gpu=~"0|1", m=~".*"}[2m]) offset 6h')


# --------------------------------------------------------------------------- content

def test_units_follow_the_metric_names():
    expected = {"_watts": "watt", "_joules": "joule", "_bytes": "bytes", "_hertz": "hertz", "_ratio": "percentunit",
                "_flops": "flops", "_bytes_per_second": "Bps", "_celsius": "celsius"}
    checked = 0
    for board in BOARDS.values():
        for panel in all_panels(board):
            if len(panel["targets"]) != 1 or panel["type"] in ("table", "stat"):
                continue  # a table's columns have their own units; a stat here counts series
            names = lint.metric_names(panel["targets"][0]["expr"])
            if len(names) != 1:
                continue
            name = names.pop()
            suffix = max((s for s in expected if name.endswith(s)), key=len, default=None)
            if suffix:
                checked += 1
                unit = panel["fieldConfig"]["defaults"]["unit"]
                assert unit == expected[suffix], f"{board['uid']} {panel['title']!r}: {name} shown in {unit!r}"
    assert checked > 20


def test_every_dashboard_has_the_variables_links_and_current_schema():
    uids = {b["uid"] for b in BOARDS.values()}
    assert uids == set(build.UIDS) and set(BOARDS) == {f"{uid}.json" for uid in build.UIDS}
    for board in BOARDS.values():
        assert board["schemaVersion"] >= 39
        names = [v["name"] for v in board["templating"]["list"]]
        targets = ["job", "instance"] if board["uid"] == build.AGENT else []  # the agents' own dashboard only
        assert names == ["datasource", "cluster", *targets, "hostname", "model", "gpu", "workload", "precision"]
        kinds = {p["type"] for p in all_panels(board)}
        assert kinds <= {"timeseries", "stat", "table", "bargauge", "state-timeline", "heatmap"}
        assert "graph" not in json.dumps(board).replace("graphTooltip", "").replace('"graphMode"', "")


def test_panel_titles_are_unique_within_a_dashboard():
    for board in BOARDS.values():
        titles = [p["title"] for p in all_panels(board)]
        assert len(titles) == len(set(titles)), board["uid"]


def test_the_panel_types_in_use():
    kinds = {p["type"] for board in BOARDS.values() for p in all_panels(board)}
    assert kinds == {"timeseries", "stat", "table", "bargauge", "state-timeline", "heatmap"}


def test_the_dcgm_variant_uses_modelName():
    for name, board in DCGM_BOARDS.items():
        text = json.dumps(board)
        assert catalog.MODEL_NAME not in text.replace("MODEL_NAME", ""), name
        assert catalog.MODEL_NAME_DCGM in text, name


def test_the_dcgm_variant_is_the_default_with_dcgm_exporters_label_names():
    """--dcgm-label-names gives dcgm-exporter's Hostname and modelName in every query, variable, legend, link,
    annotation and table column, and changes nothing else: the default variant, whose every query runs against a
    real Prometheus (tests/test_dashboards_e2e.py), with those names renamed.  The host variable keeps its name
    (``$hostname``, ``var-hostname``), so links and bookmarks work with either."""
    host_variable = f'"name": "{build.HOST_VAR.name}"'
    for name in BOARDS:
        default, dcgm = json.dumps(BOARDS[name], indent=1), json.dumps(DCGM_BOARDS[name], indent=1)
        assert default_names_in(dcgm.replace(host_variable, "")) == [], name
        assert dcgm == renamed(default).replace(renamed(host_variable), host_variable), name
        matcher = json.dumps(f'{catalog.HOSTNAME_DCGM}=~"${build.HOST_VAR.name}"')[1:-1]  # as JSON writes it
        assert matcher in dcgm and f"{{{{{catalog.HOSTNAME_DCGM}}}}}" in dcgm, name


def test_the_cluster_variable_tells_two_hosts_of_the_same_name_apart(tmp_path, promtool):
    """Host a in cluster eu-1 and host a in cluster us-1, with a GPU each: every cluster at once counts two hosts
    and two devices; the cluster variable at one of them counts one, and the GPU detail shows that cluster's GPU
    only, though the host variable names both."""
    fleet = {q.panel_title: q.expr for q in queries.all_queries(BOARDS["sixdim-fleet.json"])}
    gpu = {(q.panel_title, q.ref_id): q.expr for q in queries.all_queries(BOARDS["sixdim-gpu.json"])}
    cluster = Options().cluster_label
    series = []
    for where, flops in (("eu-1", 100), ("us-1", 200)):
        device = {**SERIES_LABELS, catalog.HOSTNAME: "a", catalog.UUID: f"GPU-{where}", catalog.DRIVER_VERSION: "560",
                  cluster: where}
        shape = {k: v for k, v in device.items() if k != catalog.SUITE}
        series += [{"series": _series(catalog.BUILD_INFO.name, **{catalog.HOSTNAME: "a", cluster: where}),
                    "values": "1x10"},
                   {"series": _series(catalog.SUMMARY_SHAPES.name, **device), "values": "4x10"},
                   {"series": _series(catalog.WORKLOAD_FLOPS.name, **shape, shape="m=1"), "values": f"{flops}x10"}]

    def at(expr: str, **variables: str) -> str:
        return queries.substitute(expr, {"hostname": "a", **variables})

    result = {**{k: v for k, v in SERIES_LABELS.items() if k not in catalog.VERSION_LABELS + (catalog.SUITE,)},
              catalog.HOSTNAME: "a", catalog.SHAPE: "m=1"}  # a per-shape series, its versions dropped
    _promtool_test(promtool, tmp_path, series, [
        {"expr": at(fleet["Hosts reporting"]), "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 2}]},
        {"expr": at(fleet["Devices with results"]), "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 2}]},
        *({"expr": at(fleet[title], cluster=where), "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 1}]}
          for title in ("Hosts reporting", "Devices with results") for where in ("eu-1", "us-1")),
        {"expr": at(gpu["FLOP/s per shape", "A"], cluster="us-1"), "eval_time": "5m", "exp_samples": [
            {"labels": _labels(**{**result, catalog.UUID: "GPU-us-1", cluster: "us-1"}), "value": 200}]},
    ])


def test_no_metric_name_is_typed_in_the_generator():
    for path in (ROOT / "dashboards").glob("*.py"):
        assert not re.search(r"sixdim_[a-z]", path.read_text()), f"{path.name}: a metric name typed as a string"


def test_the_docs_describe_every_dashboard_and_panel():
    text = " ".join(DOC.read_text().split())
    for board in BOARDS.values():
        assert board["title"] in text, board["title"]
        assert f"`{board['uid']}`" in text
        for panel in all_panels(board):
            assert panel["title"] in text, f"{board['title']}: panel {panel['title']!r} is not in docs/DASHBOARDS.md"


# --------------------------------------------------------------------------- the command

@pytest.mark.slow
def test_the_command_writes_every_dashboard(tmp_path, capsys):
    out = tmp_path / "grafana" / "dashboards"
    configmap = tmp_path / "k8s" / "dashboards.yaml"
    assert cli.main(["dashboards", "--out", str(out), "--configmap", str(configmap)]) == 0
    assert {p.name: p.read_text() for p in out.iterdir()} == command.files()
    assert configmap.read_text() == command.configmap()


def test_the_command_lists_the_dashboards_without_out(capsys):
    assert cli.main(["dashboards"]) == 0
    printed = capsys.readouterr().out
    for board in BOARDS.values():
        assert board["title"] in printed


def test_the_command_writes_the_dcgm_variant(tmp_path):
    assert cli.main(["dashboards", "--dcgm-label-names", "--out", str(tmp_path)]) == 0
    written = {p.name: json.loads(p.read_text()) for p in tmp_path.iterdir()}
    assert written == DCGM_BOARDS


def test_the_command_fails_clearly_on_a_folder_it_cannot_write(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert cli.main(["dashboards", "--out", str(blocker)]) == 2
    assert "--out" in capsys.readouterr().err
    assert cli.main(["dashboards", "--out", str(blocker / "below")]) == 2
    assert "cannot write --out" in capsys.readouterr().err
    assert cli.main(["dashboards", "--configmap", str(blocker / "x.yaml")]) == 2
    assert "cannot write --configmap" in capsys.readouterr().err


def test_the_help_names_the_files_and_the_committed_copies(capsys):
    with pytest.raises(SystemExit):
        cli.main(["dashboards", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "sixdim-fleet.json" in text and command.COMMITTED_DIR in text and "--dcgm-label-names" in text
