"""The series budget: what a configuration exports on a host, counted, and enforced by ``--check-config``."""

from __future__ import annotations

import dataclasses
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sixdim.collectors.host import RaplReader
from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import ConfigError, Suite, load
from sixdim.config.loader import tomllib
from sixdim.config.schema import SERIES_BUDGET
from sixdim.config.suites import parse_suites, preset_entries
from sixdim.core import catalog
from sixdim.daemon import series
from sixdim.daemon.check import check
from sixdim.run.devices import Device
from sixdim.workloads import registry
from tests.conftest import free_port
from tests.daemon import Daemon, write_config
from tests.fakenvml import FakeGpu, FakeNvml
from tests.helpers import call_sixdim

ROOT = Path(__file__).resolve().parent.parent
NIGHTLY_SHAPES = """
[[suites]]
name = "nightly"
preset = "full"
cron = "0 3 * * *"
export = "shapes"
"""


def _count(suites, gpus: int = series.DEFAULT_GPUS) -> series.SeriesCount:
    host = series.host_devices(gpus)
    return series.count_series(suites, [series.suite_devices(s, host) for s in suites], host)


def test_the_default_configuration_on_an_8_gpu_h100_host_is_within_the_budget():
    count = _count(load(None, env={}).suites)
    assert count.total <= SERIES_BUDGET, count.parts
    # every part is there, and the quick suite's per-shape export is most of it
    assert all(count.parts[part] > 0 for part in count.parts), count.parts
    assert count.per_shape > count.total / 2
    assert count.parts["GPU telemetry"] == 8 * (count.parts["GPU telemetry"] // 8)


def test_the_readme_example_configuration_is_within_the_budget():
    readme = (ROOT / "README.md").read_text()
    example = next(b for b in re.findall(r"```toml\n(.*?)```", readme, re.S) if "[[suites]]" in b)
    suites = parse_suites(tomllib.loads(example)["suites"], "README.md")
    assert any(s.export == "summary" and s.workloads[0].params.get("set") == "full" for s in suites)
    count = _count(suites)
    assert count.total <= SERIES_BUDGET, count.parts


def test_a_full_suite_exported_per_shape_is_far_over_it_and_as_a_summary_within_it():
    full = Suite(name="nightly", workloads=preset_entries("full"), cron="0 3 * * *")
    summary, shapes = _count([full]), _count([dataclasses.replace(full, export="shapes")])
    assert summary.total <= SERIES_BUDGET < 10 * SERIES_BUDGET < shapes.total
    assert summary.per_shape == 0 and shapes.per_shape > 0.9 * shapes.total


def test_every_workload_has_its_figures_and_every_metric_is_counted():
    """A new workload, or a new metric in the catalog, must be placed in the count."""
    known = set(catalog.FIGURES_BY_KEY)
    for name, spec in registry.WORKLOADS.items():
        assert spec.figures, name
        assert set(spec.figures) <= known, (name, set(spec.figures) - known)
    counted = {m.name for m in catalog.RESULT_METRICS + catalog.SUMMARY_METRICS + catalog.VERDICT_METRICS}
    counted |= {m.name for m in (catalog.WORKLOAD_RUNS, catalog.WORKLOAD_LAST_SUCCESS, catalog.WORKLOAD_SKIPS,
                                 catalog.WORKLOAD_CASE_SECONDS, *catalog.SUITE_RUN_METRICS,
                                 *catalog.SUITE_COST_METRICS)}
    counted |= {m.name for m in catalog.ALL_METRICS if m.name.startswith("sixdim_gpu_")}
    counted |= set(series.HOST_AND_AGENT) | {catalog.HOST_RAPL_ENERGY.name}
    assert {m.name for m in catalog.ALL_METRICS} <= counted, {m.name for m in catalog.ALL_METRICS} - counted


def _gpu_config(tmp_path: Path, text: str, budget: str = ""):
    path = tmp_path / "gpu.toml"
    path.write_text(f"[agent]\n{budget}\n{text}")
    path.chmod(0o644)
    return load(str(path), env={"SIXDIM_HISTORY": str(tmp_path / "h.db"), "SIXDIM_STATE_DIR": str(tmp_path / "s")})


def _h100s(count: int = 8) -> NvmlCollector:
    return NvmlCollector("h", module=FakeNvml([FakeGpu(uuid=f"GPU-{i:04d}", bus_id=f"00000000:{0x17 + i:02X}:00.0")
                                              for i in range(count)]))


@pytest.mark.slow  # counts the full preset's 100,000 cases three times over: about 5 s
def test_check_config_prints_the_count_and_refuses_a_per_shape_full_suite_until_opted_in(tmp_path):
    lines = check(_gpu_config(tmp_path, NIGHTLY_SHAPES.replace('"shapes"', '"summary"')), _h100s())
    [line] = [line for line in lines if line.startswith("series:")]
    assert re.fullmatch(r"series: +[\d,]+ Prometheus series at most \(budget 20,000\); 0 of them per shape \(0%\)",
                        line), line
    with pytest.raises(ConfigError) as refused:
        check(_gpu_config(tmp_path, NIGHTLY_SHAPES), _h100s())
    message = str(refused.value)
    total = int(re.search(r"expected at least ([\d,]+),", message)[1].replace(",", ""))
    rapl = RaplReader()  # check() counts this host's RAPL domains, the 8-GPU model two
    assert total == _count([_gpu_config(tmp_path, NIGHTLY_SHAPES).suites[0]]).total - 2 + len(rapl.read())
    assert "\n" not in message and "got 20000 (the default budget" in message
    assert "agent.series_budget" in message and "--series-budget" in message
    lines = check(_gpu_config(tmp_path, NIGHTLY_SHAPES, f"series_budget = {total}"), _h100s())  # the opt-in
    assert any(line.startswith(f"series:        {total:,} Prometheus series at most (budget {total:,})")
               for line in lines), lines


def test_check_config_exits_2_with_one_line_naming_the_count_and_the_budget(tmp_path, cli_env):
    path = tmp_path / "sixdim.toml"
    path.write_text(NIGHTLY_SHAPES)
    path.chmod(0o600)
    done = call_sixdim("serve", "--check-config", "--config", str(path), env=cli_env)
    assert done.returncode == 2, done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("sixdim: error:")]
    assert re.fullmatch(rf"sixdim: error: {re.escape(str(path))}: agent\.series_budget: expected at least [\d,]+, "
                        r"the Prometheus series this configuration exports on this host \([\d,]+ of them per shape: "
                        r"export = \"shapes\"\), got 20000 \(the default budget; .*SIXDIM_SERIES_BUDGET\)",
                        error), error
    allowed = call_sixdim("serve", "--check-config", "--config", str(path), "--series-budget", "10000000", env=cli_env)
    assert allowed.returncode == 0, allowed.stderr
    assert "(budget 10,000,000)" in allowed.stdout
    by_variable = call_sixdim("serve", "--check-config", "--config", str(path),
                              env={**cli_env, "SIXDIM_SERIES_BUDGET": "10000000"})
    assert by_variable.returncode == 0, by_variable.stderr


SCRAPED = """
[[suites]]
name = "fast"
interval_seconds = 3600
export = "shapes"
devices = ["cpu"]
timeout_seconds = 120
workloads = [{name = "gemm", params = {m = 64, n = 64, k = 64, precisions = ["fp32"], min_round_seconds = 0.01, warmup_seconds = 0.01, power_seconds = 0.0}},
             {name = "launch_latency", params = {launches_per_round = 200}}]

[[suites]]
name = "nightly"
interval_seconds = 3600
devices = ["cpu"]
timeout_seconds = 120
workloads = [{name = "gemm", params = {m = 96, n = 64, k = 64, precisions = ["fp32"], min_round_seconds = 0.01, warmup_seconds = 0.01, power_seconds = 0.0}},
             {name = "memory_bandwidth", params = {directions = ["d2d"], size_bytes = 1048576, min_round_seconds = 0.01, warmup_seconds = 0.01, power_seconds = 0.0}}]
"""  # noqa: E501 - a TOML inline table cannot span lines


@pytest.mark.slow
def test_the_count_matches_a_real_daemons_scrape_series_for_series(tmp_path, cli_env):
    """A real ``sixdim serve`` on the CPU runs two suites (one per shape, one summary-only) once; its
    /metrics holds exactly the series the counter gives, once the counter is told what the upper bounds
    assume (the statuses seen, no skip, no interruption, nothing running, verdicts not yet steady) and
    the figures each workload really reported, which stay within its upper bound."""
    config = write_config(tmp_path / "sixdim.toml", tmp_path / "history.db", SCRAPED)
    suites = load(str(config), env=cli_env).suites
    cases = sum(len(registry.get(e.name).cases(e.params, "cpu")) for s in suites for e in s.workloads)
    daemon = Daemon(config, free_port(), cli_env, tmp_path / "serve.log")
    try:
        daemon.wait_ready()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            done = sum(s.value for s in daemon.samples("sixdim_suite_cases_done"))
            if done >= cases and not any(s.value for s in daemon.samples("sixdim_suite_running")):
                break
            time.sleep(0.5)
        time.sleep(2)  # the results part is rendered again after the board changes
        families = list(text_string_to_metric_families(daemon.metrics()))
    finally:
        assert daemon.stop() == 0
    scraped = Counter({f.name: len(f.samples) for f in families})
    samples = [s for f in families for s in f.samples]
    statuses = sorted({s.labels["status"] for s in samples if s.name == catalog.WORKLOAD_RUNS.name})
    assert statuses == ["ok"], statuses  # every case ran: an exact count
    reported: dict[str, set[str]] = {}
    for metric in catalog.RESULT_METRICS:
        for sample in samples:
            if sample.name == metric.name and metric.figure != "ended_at":
                reported.setdefault(sample.labels["workload"], set()).add(metric.figure or "")
    for entry in (e for s in suites for e in s.workloads):  # the upper bound holds what a real run reports
        spec = registry.get(entry.name)
        assert reported.get(spec.name, set()) <= series.possible_figures(spec, spec.resolve(entry.params, "cpu"),
                                                                         "cpu")
    # the summary-only suite's memory_bandwidth has no per-shape series: its figures from its summary
    reported.setdefault("memory_bandwidth", set()).update(
        m.figure for m in catalog.SUMMARY_METRICS for s in samples
        if s.name == m.name and s.labels["workload"] == "memory_bandwidth" and m.figure != "shapes")
    rapl = RaplReader()
    count = series.count_series(suites, [[Device("cpu")]] * len(suites), [],
                                rapl_domains=len(rapl.read()) if rapl.available else 0, statuses=statuses,
                                skip_reasons=0, interrupted=False, running=False, steady=False,
                                figures={name: frozenset(figures) for name, figures in reported.items()},
                                energy=rapl.available)
    assert sum(scraped.values()) == count.total, (dict(scraped), count.parts)
    shape_results = sum(scraped[m.name] for m in catalog.RESULT_METRICS)
    assert shape_results == count.parts["per-shape results"]
    assert sum(scraped[m.name] for m in catalog.SUMMARY_METRICS) == count.parts["summaries"]
