"""The alert rules generated from the catalog: current, valid for promtool, unit-tested, documented."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sixdim import cli
from sixdim.core import catalog, durations
from sixdim.monitoring import alerts as alerts_module
from sixdim.monitoring import options, promql, recording, rules
from tests.conftest import required_tool
from tests.dcgm_names import default_names_in, renamed

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / rules.COMMITTED
UNIT_TESTS = (ROOT / "deploy" / "prometheus" / "tests" / "sixdim-rules-test.yml",
              ROOT / "deploy" / "prometheus" / "tests" / "sixdim-rules-test-days.yml")
"""promtool's unit tests of the committed rules: those of minutes and hours (evaluated every minute), and those
of days (evaluated every 5 minutes, the same windows and durations at a fifth of promtool's time)."""
ALERTMANAGER = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
RUNBOOKS = ROOT / "docs" / "ALERTS.md"

METRIC_NAMES = {metric.name for metric in catalog.ALL_METRICS}
RECORDED_NAMES = {d.name for d in recording.RECORDED}
CLUSTER = options.Options().cluster_label
LABEL_NAMES = ({label for metric in catalog.ALL_METRICS for label in metric.labels}
               | {promql.JOB, promql.INSTANCE, CLUSTER})
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset"}
AGGREGATIONS = ("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                "quantile")


def alerts(options: options.Options | None = None) -> list[dict]:
    """Every alerting rule of the generated groups, in file order."""
    return [rule for group in rules.groups(options) for rule in group["rules"] if "alert" in rule]


def promtool_check(promtool: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)


def metrics_in(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label matchers,
    grouping clauses, ranges and offsets are removed, minus function names and keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\boffset\s+\w+", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end():].lstrip()
        if following.startswith("(") or match.group() in PROMQL_WORDS:
            continue  # a function or an aggregation
        names.add(match.group())
    return names


def labels_in(expr: str) -> set[str]:
    """Label names in grouping clauses and label matchers."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    names = set()
    for clause in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", text):
        names |= {name.strip() for name in clause.split(",") if name.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", text):
        names |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    return names


def runbook_anchors() -> set[str]:
    """GitHub's anchors of the level-2 headings of docs/ALERTS.md."""
    headings = re.findall(r"^## (.+)$", RUNBOOKS.read_text(), re.M)
    return {re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


# --------------------------------------------------------------------------- the file
# (the committed copies are kept current by `sixdim generate --check`: tests/test_generate.py)

def test_render_is_deterministic_and_names_its_options():
    assert rules.render() == rules.render(rules.Options())
    header = [line for line in rules.render().splitlines() if line.startswith("# Options:")]
    assert header == ["# Options: --stale-after 2h --failures 3 --failure-window 6h --incorrect-window 1d "
                      f"--peer-ratio 0.9 --min-peers 3 --rollout-threshold 0.02 --rollout-min-hosts 3 --job sixdim "
                      "--cluster-label cluster "
                      f"--runbook-base {options.DEFAULT_RUNBOOK_BASE}"]


def test_promtool_accepts_the_committed_rules(promtool):
    result = promtool_check(promtool, COMMITTED)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {sum(len(group['rules']) for group in rules.groups())} rules found" in result.stdout
    assert len(recording.rules()) + 1 + len(alerts()) == sum(len(group["rules"]) for group in rules.groups())


def test_the_fleet_rules_get_their_own_interval_only_when_asked(tmp_path, promtool):
    """--recording-interval: the fleet-wide recording group (the joins that cost Prometheus seconds at a thousand
    hosts) evaluated less often; every other group keeps Prometheus's global interval, as all do by default."""
    assert all("interval" not in group for group in rules.groups())
    spaced = rules.groups(rules.Options(recording_interval=120))
    assert [group.get("interval") for group in spaced] == ["2m"] + [None] * (len(spaced) - 1)
    assert spaced[0]["name"] == recording.GROUP
    path = tmp_path / "spaced.yml"
    path.write_text(rules.render(rules.Options(recording_interval=120)))
    result = promtool_check(promtool, path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--recording-interval 2m" in path.read_text().splitlines()[3]  # the header names it
    for seconds in (0, 300, 3600):  # at or past the 5-minute lookback, the recorded series would go missing
        with pytest.raises(ValueError, match="recording_interval"):
            rules.Options(recording_interval=seconds).validate()
    done = subprocess.run([sys.executable, "-m", "sixdim", "rules", "--recording-interval", "10m"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "under 5m" in done.stderr


@pytest.mark.slow
def test_promtool_unit_tests_pass(promtool):
    """deploy/prometheus/tests/sixdim-rules-test*.yml: every alert fires where it should, with its exact
    labels and annotations, and stays silent where it should not (40 regressed shapes: one alert)."""
    result = subprocess.run([promtool, "test", "rules", *map(str, UNIT_TESTS)], capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(UNIT_TESTS), result.stdout


def test_every_alert_has_unit_tests_that_fire_and_stay_silent():
    text = "\n".join(path.read_text() for path in UNIT_TESTS)
    cases = re.findall(r"- eval_time: (\S+)\n\s+alertname: (\w+)\n\s+exp_alerts:( \[\])?", text)
    for alert in alerts():
        name = alert["alert"]
        assert any(n == name and not empty for _, n, empty in cases), f"{name}: no case where it fires"
        assert any(n == name and empty for _, n, empty in cases), f"{name}: no case where it stays silent"
    assert "regressed on 40 shape(s)" in text  # one alert for 40 shapes, naming how many


# --------------------------------------------------------------------------- the rules themselves

def test_every_alert_follows_the_mixin_layout_and_has_a_runbook_section():
    anchors = runbook_anchors()
    names = [alert["alert"] for alert in alerts()]
    assert len(names) == len(set(names))
    for alert in alerts():
        name = alert["alert"]
        assert re.fullmatch(r"Sixdim(?:[A-Z][a-z]+|GPU)+", name), name
        assert alert["labels"]["severity"] in ("critical", "warning", "info"), name
        annotations = alert["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        base, _, anchor = annotations["runbook_url"].partition("#")
        assert base == options.DEFAULT_RUNBOOK_BASE and anchor == name.lower(), annotations["runbook_url"]
        assert anchor in anchors, f"docs/ALERTS.md has no section '## {name}'"


FLEET_WIDE = {"SixdimRolloutSlower": "a version of a GPU model and case across the fleet, named by its versions"}
"""Alerts about no host: they name the GPU model and what they compare instead."""


def test_descriptions_name_the_host_the_device_and_the_value():
    for alert in alerts():
        description = alert["annotations"]["description"]
        if alert["alert"] in FLEET_WIDE:
            assert f"$labels.{catalog.MODEL_NAME} " in description and "$labels.driver_version" in description
            assert "$value" in description
            continue
        assert "$labels.hostname" in description or "$labels.instance" in description, alert["alert"]
        if catalog.UUID in alert["expr"] and alert["alert"] != "SixdimAgentDown":
            for label in (catalog.GPU, catalog.UUID, catalog.MODEL_NAME):
                assert f"$labels.{label} " in description, (alert["alert"], label)
        if alert["alert"] not in ("SixdimAgentDown", "SixdimAgentCannotRun"):  # a 0/1 state: the value says nothing
            assert "$value" in description, alert["alert"]


FIRES_AT_ONCE = {
    "SixdimIncorrectResult": "a definitive event the history records (a failed float64 check)",
    "SixdimHistoryDataLoss": "a definitive event the agent counts (results dropped, a history moved aside)",
    "SixdimThermalSlowdown": "NVML's clock event during a result, held an hour by max_over_time",
    "SixdimHardwareSlowdown": "NVML's clock event during a result, held an hour by max_over_time",
    "SixdimBenchmarkStale": "no ok run for --stale-after: persistence is the condition itself",
    "SixdimBenchmarkFailing": "--failures failed runs within --failure-window: persistence is the condition itself",
}
"""The alerts without a ``for``, and why none of them fires on one noisy sample (docs/ALERTS.md says it for
each); every other alert needs its condition to hold for its ``for`` first."""


def test_severities_and_immediacy():
    by_name = {alert["alert"]: alert for alert in alerts()}
    assert by_name["SixdimIncorrectResult"]["labels"]["severity"] == "critical"
    assert {name for name, alert in by_name.items() if "for" not in alert} == set(FIRES_AT_ONCE)
    # no alert fires on a single sample of a verdict: promtool tests a verdict seen for less than its for
    assert by_name["SixdimRegression"]["for"] == alerts_module.REGRESSION_FOR == "5m"
    assert by_name["SixdimVersionChangeRegression"]["for"] == alerts_module.VERSION_CHANGE_FOR == "5m"
    # ...and a verdict that clears and comes back with the next run must not page again (promtool tests it)
    assert by_name["SixdimRegression"]["keep_firing_for"] == "1h"
    assert by_name["SixdimVersionChangeRegression"]["keep_firing_for"] == "1h"
    text = RUNBOOKS.read_text()
    for name, alert in by_name.items():
        section = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        timing = [f"`for: {alert['for']}`"] if "for" in alert else ["no `for`"]
        timing += [f"`keep_firing_for: {alert['keep_firing_for']}`"] if "keep_firing_for" in alert else []
        for words in timing:
            assert words in section, f"docs/ALERTS.md, {name}: does not say {words}"
    assert {"SixdimRegression", "SixdimIncorrectResult", "SixdimBenchmarkStale", "SixdimBenchmarkFailing",
            "SixdimThermalSlowdown", "SixdimHardwareSlowdown", "SixdimSlowerThanPeers",
            "SixdimVersionChangeRegression", "SixdimAgentDown", "SixdimAgentCannotRun", "SixdimHistoryDown",
            "SixdimHistoryDataLoss", "SixdimConfigReloadFailed", "SixdimDrift", "SixdimRolloutSlower"} == set(by_name)
    assert by_name["SixdimDrift"]["labels"]["severity"] == "info" and by_name["SixdimDrift"]["for"] == "30m"


def test_every_metric_and_label_in_the_rules_is_in_the_catalog():
    for alert in alerts():
        selected = metrics_in(alert["expr"])
        assert selected, alert["alert"]
        known = METRIC_NAMES | {promql.PROMETHEUS_UP, promql.PROCESS_START_TIME} | RECORDED_NAMES
        assert selected <= known, (alert["alert"], selected - known)
        assert labels_in(alert["expr"]) <= LABEL_NAMES, (alert["alert"], labels_in(alert["expr"]) - LABEL_NAMES)
        for text in alert["annotations"].values():
            queried = set(re.findall(r"\bsixdim_[a-z_:]+[a-z_]", text.replace("sixdim_rules", "")))
            assert queried <= METRIC_NAMES | RECORDED_NAMES, (alert["alert"], queried - METRIC_NAMES - RECORDED_NAMES)
            assert set(re.findall(r"\$labels\.(\w+)", text)) <= LABEL_NAMES, alert["alert"]
    assert promql.REGRESSION_CODE == 3 and "sixdim_regression_state == 3" in rules.render()


def groupings(expr: str) -> list[list[str]]:
    """The label lists of every ``by (...)`` and ``on (...)`` clause of an expression."""
    return [[name.strip() for name in clause.split(",") if name.strip()]
            for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr)]


def bare_aggregations(expr: str) -> list[str]:
    """Aggregations with neither ``by`` nor ``without``: they would merge every cluster into one series."""
    return re.findall(rf"\b(?:{'|'.join(AGGREGATIONS)})\s*\(", expr)


def annotation_queries(text: str) -> list[str]:
    """The PromQL queries an annotation's template runs (``query (printf `...` ...)``)."""
    return re.findall(r"query \(printf `([^`]*)`", text)


@pytest.mark.parametrize("cluster", [CLUSTER, "site"])
def test_every_grouping_and_matching_keeps_the_cluster_label(cluster):
    """Where several clusters share one Prometheus or Thanos, no aggregation or join may merge them: every
    ``by (...)`` and ``on (...)`` of every rule and of every query in the alert texts holds the cluster
    label, no rule aggregates without ``by`` or ``without``, and every query in a text matches the
    alert's own cluster (``cluster=%q``, with ``$labels.cluster``)."""
    generated = rules.groups(options.Options(cluster_label=cluster))
    checked = 0
    for rule in (rule for group in generated for rule in group["rules"]):
        name = rule.get("alert") or rule["record"]
        clauses = groupings(rule["expr"])
        assert clauses, name  # every rule groups or joins something
        for clause in clauses:
            assert cluster in clause, (name, clause)
            checked += 1
        assert not bare_aggregations(rule["expr"]), (name, bare_aggregations(rule["expr"]))
        for text in rule.get("annotations", {}).values():
            for query in annotation_queries(text):
                assert f"{cluster}=%q" in query, (name, query)
                assert all(cluster in clause for clause in groupings(query)), (name, query)
            assert f"$labels.{cluster} " in text or not annotation_queries(text), name
        if cluster != CLUSTER:  # the label comes from the options, never typed
            used = [rule["expr"], *(q for t in rule.get("annotations", {}).values() for q in annotation_queries(t))]
            assert not any(re.search(rf"\b{CLUSTER}\b", text) for text in used), name
    assert checked > 40


def test_the_metric_parser_finds_metrics_and_skips_functions():
    expr = ('count by (a, b) (max_over_time(sixdim_x{c=~"d|e"}[1h]) == 1) and on (a) '
            'sum(rate(up{job="x"}[5m])) offset 1d or time() - y')
    assert metrics_in(expr) == {"sixdim_x", "up", "y"}
    assert labels_in(expr) == {"a", "b", "c", "job"}


def test_the_dcgm_variant_uses_modelName_and_passes_promtool(tmp_path, promtool):
    text = rules.render(rules.Options(dcgm_label_names=True))
    assert catalog.MODEL_NAME not in text
    assert f"$labels.{catalog.MODEL_NAME_DCGM} " in text and f"{catalog.MODEL_NAME_DCGM}, device_type" in text
    assert "--dcgm-label-names" in text.splitlines()[3]
    path = tmp_path / "dcgm.yml"
    path.write_text(text)
    result = promtool_check(promtool, path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dcgm_variant_is_the_default_with_dcgm_exporters_label_names():
    """--dcgm-label-names names the host Hostname and the model modelName, as dcgm-exporter does, in every
    expression, matcher, grouping, recorded series and alert text (the queries the texts run included), and
    changes nothing else: the default rules, unit-tested by promtool, with those names renamed."""
    default, dcgm = rules.render(rules.Options()), rules.render(rules.Options(dcgm_label_names=True))
    assert default_names_in(dcgm) == []
    header = 4  # the generated file's comment, which names the options
    assert dcgm.splitlines()[header:] == renamed(default).splitlines()[header:]
    assert dcgm.splitlines()[:header] != default.splitlines()[:header]
    by_name = {alert["alert"]: alert for alert in alerts(rules.Options(dcgm_label_names=True))}
    assert f"by ({CLUSTER}, {catalog.HOSTNAME_DCGM})" in by_name["SixdimHistoryDown"]["expr"]
    assert f"$labels.{catalog.HOSTNAME_DCGM} " in by_name["SixdimRegression"]["annotations"]["description"]


def dcgm_unit_tests(tmp_path: Path) -> list[Path]:
    """deploy/prometheus/tests/sixdim-rules-test*.yml for the rules generated with --dcgm-label-names: every
    series, expected label and query with dcgm-exporter's names (the annotations, which print label values,
    unchanged)."""
    rules_file = tmp_path / "sixdim-rules-dcgm.yml"
    rules_file.write_text(rules.render(rules.Options(dcgm_label_names=True)))
    paths = []
    for unit_tests in UNIT_TESTS:
        text = renamed(unit_tests.read_text())
        assert default_names_in(text) == [] and catalog.HOSTNAME_DCGM in text
        spec = yaml.safe_load(text)
        spec["rule_files"] = [str(rules_file)]
        paths.append(tmp_path / unit_tests.name.replace("sixdim-rules", "sixdim-rules-dcgm"))
        paths[-1].write_text(yaml.safe_dump(spec, sort_keys=False))
    assert sum(path.read_text().count(catalog.HOSTNAME_DCGM) for path in paths) > 100
    return paths


@pytest.mark.slow
def test_promtool_unit_tests_pass_for_the_dcgm_variant(tmp_path, promtool):
    """The same unit tests, every series named as agents with --dcgm-label-names export it, against the rules
    generated with --dcgm-label-names: each alert fires with the same labels (Hostname, modelName) and the same
    texts, whose host names and the queries they run read the dcgm names."""
    result = subprocess.run([promtool, "test", "rules", *map(str, dcgm_unit_tests(tmp_path))], capture_output=True,
                            text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert result.stdout.count("SUCCESS") == len(UNIT_TESTS), result.stdout


def test_options_reach_the_expressions(tmp_path, promtool):
    options = rules.Options(stale_after=26 * 3600, failures=5, failure_window=12 * 3600, incorrect_window=7200,
                            peer_ratio=0.8, min_peers=4, job="gpu-bench", cluster_label="site",
                            runbook_base="https://wiki.example/alerts")
    by_name = {alert["alert"]: alert for alert in alerts(options)}
    assert by_name["SixdimBenchmarkStale"]["expr"].endswith("> 93600")
    assert "[2d2h]" in by_name["SixdimBenchmarkStale"]["expr"]  # the lookback: the threshold plus a day
    failing = by_name["SixdimBenchmarkFailing"]["expr"]
    assert failing.endswith(">= 5") and "[12h]" in failing
    assert "offset 2h" in by_name["SixdimIncorrectResult"]["expr"]
    assert "< 0.8" in by_name["SixdimSlowerThanPeers"]["expr"] and ">= 4" in by_name["SixdimSlowerThanPeers"]["expr"]
    assert 'up{job="gpu-bench"}' in by_name["SixdimAgentDown"]["expr"]
    # the recorded host name: kept while the agent is down; where the rule has no value of its own yet, looked
    # up as far back as stale alerts last
    [hostname] = [rule for group in rules.groups(options) for rule in group["rules"]
                  if rule.get("record") == recording.TARGET_HOSTNAME.name]
    assert 'sixdim_build_info{job="gpu-bench"}[2d2h]' in hostname["expr"] and 'up{job="gpu-bench"}' in hostname["expr"]
    assert recording.TARGET_HOSTNAME.name in by_name["SixdimAgentDown"]["expr"]
    assert by_name["SixdimAgentDown"]["annotations"]["runbook_url"] == "https://wiki.example/alerts#sixdimagentdown"
    assert "on (site, job, instance)" in by_name["SixdimAgentDown"]["expr"]
    assert "by (site, hostname, gpu, UUID" in by_name["SixdimRegression"]["expr"]
    assert "{{ with $labels.site }} (cluster {{ . }}){{ end }}" in by_name["SixdimRegression"]["annotations"]["summary"]
    path = tmp_path / "tuned.yml"
    path.write_text(rules.render(options))
    result = promtool_check(promtool, path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("text, seconds", [("2h", 7200), ("90m", 5400), ("1d12h", 129600), ("1w", 604800),
                                           ("45s", 45), ("1.5h", 5400), ("7200", 7200), ("1h30m", 5400)])
def test_durations_round_trip(text, seconds):
    assert durations.whole_seconds(text) == seconds
    assert durations.whole_seconds(durations.format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "0", "0h", "2x", "-1h", "h", "30m1h", "1h1h", "1.5", "0.5s"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError):
        durations.whole_seconds(text)


def test_one_duration_grammar_for_the_rules_and_the_reports(capsys):
    """What ``sixdim rules`` accepts, ``report regressions --since`` accepts too (and the reverse)."""
    for text in ("1d12h", "1.5d", "36h", "129600"):
        assert cli.main(["rules", "--stale-after", text]) == 0
        assert "(threshold 1d12h)" in capsys.readouterr().out
        assert durations.parse_duration(text) == 129600
    with pytest.raises(SystemExit) as exit:
        cli.main(["rules", "--stale-after", "0.5s"])
    assert exit.value.code == 2
    assert "whole number of seconds" in capsys.readouterr().err


@pytest.mark.parametrize("options", [
    rules.Options(failures=0), rules.Options(peer_ratio=1.0), rules.Options(peer_ratio=0.0),
    rules.Options(min_peers=1), rules.Options(job=""), rules.Options(job='a"b'),
    rules.Options(runbook_base="docs/ALERTS.md"), rules.Options(runbook_base="https://x/ALERTS.md#top"),
    rules.Options(stale_after=0), rules.Options(cluster_label=""), rules.Options(cluster_label="1dc"),
    rules.Options(cluster_label="data-center"), rules.Options(cluster_label="__cluster"),
    rules.Options(cluster_label="hostname"), rules.Options(cluster_label="instance"),
    rules.Options(cluster_label="modelName"), rules.Options(cluster_label="Hostname")])
def test_bad_options_are_refused(options):
    with pytest.raises(ValueError):
        rules.render(options)


# --------------------------------------------------------------------------- the command

def test_rules_out_writes_the_same_bytes_as_render(tmp_path, capsys):
    out = tmp_path / "new" / "folder" / "sixdim-rules.yml"
    assert cli.main(["rules", "--out", str(out)]) == 0
    assert out.read_bytes() == rules.render().encode()
    assert capsys.readouterr().out == ""
    assert cli.main(["rules", "--dcgm-label-names", "--stale-after", "26h"]) == 0
    assert capsys.readouterr().out == rules.render(rules.Options(dcgm_label_names=True, stale_after=26 * 3600))


@pytest.mark.slow
def test_the_sixdim_command_writes_the_committed_file(tmp_path, cli_env):
    out = tmp_path / "rules.yml"
    result = subprocess.run([sys.executable, "-m", "sixdim", "rules", "--out", str(out)], capture_output=True,
                            text=True, env=cli_env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == COMMITTED.read_bytes()
    usage = subprocess.run([sys.executable, "-m", "sixdim", "rules", "--help"], capture_output=True, text=True,
                           env=cli_env, timeout=60)
    assert "(default: 2h)" in usage.stdout and "--peer-ratio" in usage.stdout


@pytest.mark.parametrize("argv, message", [
    (["--stale-after", "2x"], "--stale-after: expected a duration"),
    (["--stale-after", "0s"], "--stale-after: expected a duration above zero"),
    (["--failures", "0"], "--failures: expected a whole number of at least 1"),
    (["--peer-ratio", "1.5"], "--peer-ratio: expected a ratio between 0 and 1"),
    (["--min-peers", "1"], "--min-peers: expected a whole number of at least 2"),
    (["--runbook-base", "ALERTS.md"], "--runbook-base: expected an http(s) URL"),
    (["--cluster-label", "data-center"], "--cluster-label: expected a Prometheus label name"),
    (["--cluster-label", "hostname"], "that sixdim's series do not carry already, got 'hostname'"),
])
def test_a_bad_option_value_exits_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["rules", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unwritable_out_path_exits_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["rules", "--out", str(blocker / "rules.yml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sixdim: error: cannot write --out {blocker / 'rules.yml'}: ")
    assert not list(tmp_path.glob(".rules.yml.*"))


# --------------------------------------------------------------------------- Alertmanager

def test_the_alertmanager_example_is_valid():
    amtool = required_tool("amtool", "prometheus-alertmanager")
    result = subprocess.run([amtool, "check-config", str(ALERTMANAGER)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    routed = subprocess.run([amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER}",
                             "alertname=SixdimIncorrectResult", "severity=critical"], capture_output=True, text=True)
    assert routed.stdout.strip() == "sixdim-pager", routed.stdout + routed.stderr
    routed = subprocess.run([amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER}",
                             "alertname=SixdimRegression", "severity=warning"], capture_output=True, text=True)
    assert routed.stdout.strip() == "sixdim-chat", routed.stdout + routed.stderr


def test_the_alertmanager_example_names_real_alerts_and_labels():
    text = ALERTMANAGER.read_text()
    by_name = {alert["alert"]: alert for alert in alerts()}
    mentioned = set(re.findall(r"\bSixdim[A-Za-z]+", text))
    assert mentioned and mentioned <= set(by_name), mentioned - set(by_name)
    for clause in re.findall(r"(?:group_by|equal): \[([^\]]*)\]", text):
        for label in (name.strip() for name in clause.split(",")):
            assert label == "alertname" or label in LABEL_NAMES, label
    assert "group_by: [cluster, hostname, workload]" in text
    # every grouping and every inhibition keeps the cluster first, as the rules do
    clauses = re.findall(r"(?:group_by|equal): \[([^\]]*)\]", text)
    assert clauses and all(clause.split(",")[0].strip() == CLUSTER for clause in clauses), clauses
    severities = {alert["labels"]["severity"] for alert in by_name.values()}
    for severity in severities:
        assert severity in text


def test_the_alertmanager_example_says_how_to_group_the_dcgm_variant(tmp_path):
    """Its comment's command, run as written on a copy, gives a configuration amtool accepts whose every grouping
    and inhibition label is one the --dcgm-label-names alerts carry (Hostname), none left on the default name."""
    amtool = required_tool("amtool", "prometheus-alertmanager")
    text = ALERTMANAGER.read_text()
    command = re.search(r"`(sed -i '[^']*') alertmanager\.yml`", text)
    assert command, "the example's comment has no sed command for the dcgm names"
    copy = tmp_path / "alertmanager.yml"
    copy.write_text(text)
    subprocess.run(f"{command.group(1)} alertmanager.yml", shell=True, cwd=tmp_path, check=True)
    result = subprocess.run([amtool, "check-config", str(copy)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    carried = {label for alert in alerts(rules.Options(dcgm_label_names=True))
               for label in labels_in(alert["expr"])} | {"alertname"}
    clauses = re.findall(r"(?:group_by|equal): \[([^\]]*)\]", copy.read_text())
    used = {name.strip() for clause in clauses for name in clause.split(",")}
    assert catalog.HOSTNAME_DCGM in used and catalog.HOSTNAME not in used and used <= carried, used - carried

