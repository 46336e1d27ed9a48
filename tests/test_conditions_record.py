"""Conditions as the executor records them, settings as break points, and the history's schema 4 (issue 26)."""

from __future__ import annotations

import json
import random
import sqlite3
from dataclasses import replace

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.core.conditions import CONDITIONS, UNAVAILABLE, setting_versions
from sixdim.run.devices import resolve
from sixdim.run.executor import Executor, GuardSettings
from sixdim.store.history import History
from sixdim.verdicts.detector import REGRESSION
from sixdim.verdicts.live import Verdicts
from tests.fakenvml import FakeGpu, FakeNvml
from tests.guard_workloads import spec as sleeping_spec
from tests.helpers import make_record


@pytest.mark.slow
def test_a_gpu_run_records_every_condition_or_why_not(tmp_path):
    """A run on a (fake) H100 at a lowered power limit: the snapshot in base units, the span's throttle
    shares and clock from the samples, the setting in the environment, and every listed condition
    either recorded or given a reason."""
    gpu = FakeGpu(power_limit_mw=500_000, clock_event_mask=0x4)  # software power cap all through the span
    nvml = NvmlCollector("h", module=FakeNvml([gpu]))
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=nvml, rapl=None,
                        guard=GuardSettings(enabled=False))
    [device] = resolve(["cuda:0"], nvml)
    [record] = executor.execute(sleeping_spec("steady", [{"seconds": 0.6}]), {}, device)
    assert record.status == "ok", record.reason
    c = record.conditions
    assert c["power_limit_watts"] == 500.0 and c["power_limit_default_watts"] == 700.0
    assert c["pcie_generation"] == 5 and c["pcie_width"] == 16 and c["nvlink_active_links"] == 18
    assert c["sw_power_cap_ratio"] == 1.0 and c["hw_slowdown_ratio"] == 0.0
    assert c["sm_clock_hertz"] == pytest.approx(1980e6) and c["temperature_celsius"] == pytest.approx(35)
    assert 0.0 <= c["other_cpu_ratio"] <= 1.0 and c["usable_cpus"] >= 1
    for condition in CONDITIONS:
        assert condition.name in c or c[UNAVAILABLE].get(condition.name), condition.name
    assert record.environment["power_limit"] == "500 W" and record.environment["ecc"] == "on"
    stored = next(iter(History(tmp_path / "h.db")))
    assert stored.conditions == json.loads(json.dumps(c))  # kept in the history as recorded


def test_setting_versions_name_the_settings_read():
    assert setting_versions({"power_limit_watts": 700.0, "applications_sm_clock_hertz": 1.98e9,
                             "applications_memory_clock_hertz": 2.619e9, "ecc_enabled": 1, "mig_enabled": 0}) == {
        "power_limit": "700 W", "clocks": "1980/2619 MHz", "ecc": "on", "mig": "off"}
    assert setting_versions({"unavailable": {"power_limit_watts": "Not Supported"}}) == {}


def _runs(n: int, seconds: float, limit: float, start: float, seed: int, recovered_at: int | None = None):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        record = make_record(seconds=seconds * (1 + rnd.gauss(0, 0.005)), ended_at=start + 900 * i)
        conditions = {"power_limit_watts": limit, "sw_power_cap_ratio": 0.9 if limit < 700 else 0.05,
                      "sm_clock_hertz": 1.98e9 if limit == 700 else 1.6e9, "other_cpu_ratio": 0.01}
        environment = dict(record.environment)
        if i != recovered_at:  # a run recovered after a crash says its versions but read no setting
            environment.update(setting_versions(conditions))
        out.append(replace(record, conditions=conditions, environment=environment))
    return out


def test_a_lowered_power_limit_is_a_break_point_named_like_a_version_and_the_cause():
    """The limit 700 W -> 500 W makes the GEMM 20% slower: a new segment starts at it (no step inside a
    segment), the version verdict names it like a driver change, and its regression's cause is named."""
    verdicts = Verdicts()
    for record in _runs(40, 0.010, 700.0, 1e9, 1) + _runs(12, 0.012, 500.0, 1e9 + 40 * 900, 2, recovered_at=3):
        verdicts.add(record)
    [series] = verdicts.snapshot()
    change = series.changes["flops"]  # seconds restates it: flops is the watched figure
    assert change.changes == {"power_limit": ("700 W", "500 W")}, change.changes  # the recovered run is none
    assert change.state == REGRESSION
    assert series.causes[0].cause == "power_limit"
    assert series.causes[0].evidence == "power limit 700 W → 500 W"
    assert series.causes[-1].cause == "version" and "power_limit 700 W → 500 W" in series.causes[-1].evidence


def test_a_schema_3_history_opens_and_its_runs_have_no_conditions(tmp_path):
    """A history written before conditions were recorded (schema 3) is migrated in place: its runs read
    back with empty conditions (no cause is made up for them), and new runs keep theirs."""
    path = tmp_path / "old.db"
    History(path).add(make_record())
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE runs DROP COLUMN conditions")
    db.execute("PRAGMA user_version=3")
    db.commit()
    db.close()
    history = History(path)
    history.add(replace(make_record(ended_at=3000.0), conditions={"power_limit_watts": 700.0}))
    assert [r.conditions for r in history] == [{}, {"power_limit_watts": 700.0}]


def test_the_html_report_names_every_version_key_and_setting():
    from sixdim.report.format import COMPONENTS
    from sixdim.verdicts.detector import VERSION_KEYS

    assert set(COMPONENTS) == set(VERSION_KEYS)


PHASED = {"window": 0.5, "settle": 0.3, "phase": 0.8}
"""tests.fault_workloads.phased's timings here (seconds)."""


@pytest.mark.slow
def test_throttling_is_summarised_over_the_timed_span_and_the_power_phase_apart(tmp_path):
    """The power cap engages only in the power phase: the timed span's share is 0 and the power phase's 1,
    each from its own samples, so a figure says which span its conditions are."""
    from sixdim.workloads.spec import Case, WorkloadSpec

    gpu = FakeGpu(clock_event_mask=0x0)
    nvml = NvmlCollector("h", module=FakeNvml([gpu]))
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=nvml, rapl=None,
                        guard=GuardSettings(enabled=False))
    spec = WorkloadSpec(name="phased", description="test", entry="tests.fault_workloads:phased",
                        uses_torch=False, expander=lambda s, p, d: [Case(PHASED, precision="fp32", shape="case=0")])

    def progress(line: str) -> None:
        if "power phase" in line:
            gpu.clock_event_mask = 0x4

    [device] = resolve(["cuda:0"], nvml)
    [record] = executor.execute(spec, {}, device, on_progress=progress)
    assert record.status == "ok", record.reason
    assert record.conditions["sw_power_cap_ratio"] == 0.0
    assert record.conditions["power_phase_sw_power_cap_ratio"] == 1.0
    assert record.conditions["power_phase_sm_clock_hertz"] == pytest.approx(1980e6)


def test_a_case_without_a_power_phase_says_why():
    from sixdim.run.executor import Sampled, run_conditions
    from sixdim.run.telemetry import TelemetrySample

    samples = [TelemetrySample(time=t / 10, clock_event_mask=0, sm_clock_hertz=1.9e9) for t in range(20)]
    c = run_conditions(Sampled(samples, conditions={"power_limit_watts": 700.0}), (0.2, 1.5), "cuda",
                       None, "no energy counter for this device")
    assert c[UNAVAILABLE]["power_phase_sw_power_cap_ratio"] == "no energy counter for this device"
    assert c["sw_power_cap_ratio"] == 0.0 and "power_phase_sm_clock_hertz" not in c
