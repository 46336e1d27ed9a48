"""What watching costs: the per-case model of device time (:mod:`sixdim.daemon.cost`) and the lines
``sixdim serve --check-config`` prints with it."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.config import Suite, load
from sixdim.daemon import cost
from sixdim.daemon.check import check
from sixdim.store.history import History
from tests.fakenvml import FakeNvml
from tests.helpers import make_record

H100_RUN = Path(__file__).resolve().parent.parent / "docs" / "gpu-runs" / "2026-11-25-h100" / "quick.json"
SCHEDULE = re.compile(r"^schedule: about (?P<seconds>[\d.]+) s of each device's hour \((?P<share>[\d.]+)%\)")
ON_H100 = re.compile(r"^schedule on an H100-class GPU: about (?P<seconds>[\d.]+) s of each GPU's hour "
                     r"\((?P<share>[\d.]+)%\).*?: (?P<parts>.*) \(from the H100 case times of "
                     r"docs/gpu-runs/2026-11-25-h100, with the terms issue 41 moved .* derived, not measured on "
                     r"this host\); and each run's worker start-up besides, about (?P<start>[\d.]+) s on the H100")
SUITE = re.compile(r"^suite (?P<name>\S+) costs about (?P<seconds>[\d.]+) s of device time a run on cpu "
                   r"\((?P<source>.*?)\); (?P<rate>[\d/.]+ (?:of a )?runs? an hour): (?P<hourly>[\d.]+) s an hour")


def _records() -> list[dict]:
    return json.loads(H100_RUN.read_text())


def _default_lines(tmp_path: Path) -> list[str]:
    config = load(None, env={"SIXDIM_HISTORY": str(tmp_path / "history.db"),
                             "SIXDIM_STATE_DIR": str(tmp_path / "state"), "SIXDIM_HOSTNAME": "node1"})
    return check(config, NvmlCollector("node1", module=FakeNvml([])))  # no GPU: the CPU, as on this host


def _one(pattern: re.Pattern, lines: list[str]) -> re.Match:
    [match] = [m for m in map(pattern.match, lines) if m]
    return match


# ---------------------------------------------------------------------------- the H100 model

def test_the_h100_constants_are_the_fit_of_the_h100_records():
    """The constants in cost.H100 are what :func:`cost.fit` gives for the H100 quick-suite run (rounded)."""
    fitted = cost.fit(_records(), cost.H100)
    for name, value in fitted.setup_seconds.items():
        assert cost.H100.setup_seconds[name] == pytest.approx(value, abs=0.005), name
    assert cost.H100.first_case_seconds == pytest.approx(fitted.first_case_seconds, abs=0.01)
    assert cost.H100.operand_seconds_per_element == pytest.approx(fitted.operand_seconds_per_element, rel=0.01)
    assert cost.H100.copy_seconds_per_byte == pytest.approx(fitted.copy_seconds_per_byte, rel=0.01)
    for kind, value in fitted.launch_seconds.items():
        assert cost.H100.launch_seconds[kind] == pytest.approx(value, rel=0.01)
    assert cost.H100.power_extra_seconds == pytest.approx(fitted.power_extra_seconds, abs=0.001)


def test_the_h100_model_gives_the_recorded_case_times():
    """Each case's device time within 15% (the all-reduce probe, first in its worker, 20%), the run's
    287 s within 1%: the stated error of the estimate on the GPU it was fitted to."""
    records = _records()
    firsts = cost.worker_firsts([r["workload"] for r in records])
    assert firsts == {0, 50}  # the kernels' worker, and all-reduce's own (a host-wide workload)
    measured = estimated = 0.0
    for index, record in enumerate(records):
        wall = record["details"]["case_wall"][1] - record["details"]["case_wall"][0]
        guess = cost.case_seconds(record["workload"], record["params"], cost.H100, power_counter=True,
                                  first=index in firsts)
        assert guess is not None
        bound = 0.20 if record["workload"] == "allreduce" else 0.15
        assert abs(guess - wall) <= bound * wall, (index, record["workload"], record["shape"], wall, guess)
        measured, estimated = measured + wall, estimated + guess
    assert measured == pytest.approx(287.4, abs=0.1)
    assert estimated == pytest.approx(measured, rel=0.01)


def test_the_model_follows_the_timing_parameters():
    """The tiers' short timing and no power phase cost what the code does: the same 8192³ case less its
    power phase (3 s and its ends), less 0.4 s of warm-up and (2.5 + 1 + 5) x 0.15 s of rounds."""
    [square] = [r for r in _records() if r["precision"] == "bf16" and r["shape"].startswith("m=8192")]
    params = square["params"]
    default = cost.case_seconds("gemm", params, cost.H100, power_counter=True)
    short = cost.case_seconds("gemm", {**params, "warmup_seconds": 0.1, "min_round_seconds": 0.05,
                                       "power_seconds": 0.0}, cost.H100, power_counter=True)
    assert default - short == pytest.approx(3.0 + cost.H100.power_extra_seconds + 0.4 + 8.5 * 0.15)
    # a power phase under 1 s is not run, nor one without an energy counter
    assert cost.case_seconds("gemm", {**params, "power_seconds": 0.5}, cost.H100, power_counter=True) \
        == pytest.approx(default - 3.0 - cost.H100.power_extra_seconds)
    assert cost.case_seconds("gemm", params, cost.H100, power_counter=False) \
        == pytest.approx(default - 3.0 - cost.H100.power_extra_seconds)
    assert cost.case_seconds("model", {}, cost.H100, power_counter=True) is None  # no constants: no guess


def test_runs_an_hour_come_from_the_interval_or_the_cron():
    now = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
    assert cost.runs_per_hour(Suite("s", (), interval_seconds=900), now) == 4
    assert cost.runs_per_hour(Suite("s", (), cron="17 3 * * *"), now) == pytest.approx(1 / 24)
    assert cost.runs_per_hour(Suite("s", (), cron="*/10 * * * *"), now) == pytest.approx(6)
    assert cost.runs_per_hour(Suite("s", (), cron="0 3 * * 1"), now) == pytest.approx(1 / 168)


# ---------------------------------------------------------------------------- check-config's lines

def test_the_default_schedule_costs_at_most_2_percent_of_this_cpu(tmp_path):
    lines = _default_lines(tmp_path)
    assert lines[-1].startswith("schedule: ") and lines[-2].startswith("schedule on an H100-class GPU: ")
    suites = {m["name"]: m for m in map(SUITE.match, lines) if m}
    assert list(suites) == ["frequent", "power", "quick"]
    for match in suites.values():
        assert match["source"] == "estimated per case: no recorded runs"  # no history yet
    assert suites["frequent"]["rate"] == "4 runs an hour"
    assert suites["power"]["rate"] == "1/6 of a run an hour"
    assert suites["quick"]["rate"] == "1/24 of a run an hour"
    [frequent] = [line for line in lines if line.startswith("suite frequent costs")]
    assert "; confirmation runs: at most 4 an hour x " in frequent and frequent.endswith("not in the share")
    [quick] = [line for line in lines if line.startswith("suite quick costs")]
    assert quick.endswith("; also at once after a version or setting change, not in the share")
    total = _one(SCHEDULE, lines)
    hourly = sum(float(m["hourly"]) for m in suites.values())
    assert float(total["seconds"]) == pytest.approx(hourly, abs=1.0)  # the suites' lines add up (as rounded)
    assert float(total["share"]) == pytest.approx(100 * float(total["seconds"]) / 3600, abs=0.1)
    assert float(total["share"]) <= 2.0
    # the frequent tier's estimate is what the model gives for its five cases on the CPU
    planned = cost.planned_cases(load(None, env={}).suites[0], "cpu")
    assert len(planned) == 5
    run = cost.run_cost(planned, cost.CPU, power_counter=False)
    assert float(suites["frequent"]["seconds"]) == pytest.approx(run.seconds, abs=0.05)


def test_the_default_schedule_on_an_h100_is_estimated_and_said_to_be(tmp_path):
    lines = _default_lines(tmp_path)
    on_h100 = _one(ON_H100, lines)
    parts = dict(re.match(r"(\S+) ([\d.]+) s a run, ([\d.]+) s an hour", part).group(1, 3)
                 for part in on_h100["parts"].split("; "))
    assert list(parts) == ["frequent", "power", "quick"]
    assert float(on_h100["seconds"]) == pytest.approx(sum(map(float, parts.values())), abs=1.0)
    assert float(on_h100["share"]) == pytest.approx(100 * float(on_h100["seconds"]) / 3600, abs=0.1)


def test_the_default_schedule_costs_at_most_1_percent_of_an_h100(tmp_path):
    """Issue 41's goal, on the estimate for the code as it is now (cost.H100_NOW); the worker start-up the
    records measured in the first case is said beside it."""
    on_h100 = _one(ON_H100, _default_lines(tmp_path))
    assert float(on_h100["share"]) <= 1.0
    assert float(on_h100["start"]) == pytest.approx(cost.H100.first_case_seconds, abs=0.05)


def test_the_h100_estimate_for_todays_code_drops_only_the_terms_issue_41_moved():
    """What H100_NOW changes from the fitted H100: the first case's library start (now before it), and the
    per-element and per-byte host costs (now at the device's memory bandwidth); every fitted set-up stays."""
    now, fitted = cost.H100_NOW, cost.H100
    assert now.setup_seconds == fitted.setup_seconds and now.launch_seconds == fitted.launch_seconds
    assert now.power_extra_seconds == fitted.power_extra_seconds and now.first_case_seconds == 0.0
    assert 0 < now.operand_seconds_per_element < fitted.operand_seconds_per_element / 1000
    assert 0 < now.copy_seconds_per_byte < fitted.copy_seconds_per_byte / 1000
    assert cost.model_for("cuda") is now and cost.model_for("cpu") is cost.CPU


def _frequent_history(path: Path, spans: list[float], hostname: str = "node1") -> dict[cost.CaseKey, list[float]]:
    """A history with runs of the frequent suite's five CPU cases (real History writes), the i-th run of
    each case with a case_wall span of ``spans[i]`` x (1 + its position / 10); what each case's spans are."""
    planned = cost.planned_cases(load(None, env={}).suites[0], "cpu")
    history = History(path)
    written: dict[cost.CaseKey, list[float]] = {}
    try:
        for run, span in enumerate(spans):
            for position, (spec, case) in enumerate(planned):
                seconds = span * (1 + position / 10)
                start = 1000.0 + 100 * run + 10 * position
                record = replace(make_record(ended_at=start + 50), suite="frequent", workload=spec.name,
                                 precision=case.precision, shape=case.shape, mode=case.mode,
                                 kernel_pass=case.kernel_pass, hostname=hostname, device_type="cpu", device="cpu",
                                 gpu="", uuid="", model_name="cpu", details={"case_wall": [start, start + seconds]})
                history.add(record)
                written.setdefault(cost.case_key(spec, case), []).append(seconds)
    finally:
        history.close()
    return written


def test_a_suite_with_recorded_runs_is_costed_from_them(tmp_path):
    """The median of each case's last 5 recorded spans, on the device and for the suite they ran in; the
    suites without runs keep the estimate."""
    written = _frequent_history(tmp_path / "history.db", [9.0, 1.0, 2.0, 3.0, 4.0, 5.0])  # the 9 s run is too old
    lines = _default_lines(tmp_path)
    suites = {m["name"]: m for m in map(SUITE.match, lines) if m}
    assert suites["frequent"]["source"] == "recorded: the median of each case's last 5 runs"
    expected = sum(statistics.median(spans[-5:]) for spans in written.values())  # 3 s x (1 + 1.1 + ... + 1.4)
    assert expected == pytest.approx(3.0 * 6.0)
    assert float(suites["frequent"]["seconds"]) == pytest.approx(expected, abs=0.5)
    assert float(suites["frequent"]["hourly"]) == pytest.approx(4 * expected, abs=0.5)
    assert suites["power"]["source"] == suites["quick"]["source"] == "estimated per case: no recorded runs"
    # the quick suite shares four of the frequent tier's series on the CPU, but not its runs
    assert float(suites["quick"]["seconds"]) > 30


def test_runs_of_another_host_or_a_history_it_cannot_read_are_not_used(tmp_path):
    _frequent_history(tmp_path / "history.db", [3.0] * 5, hostname="elsewhere")
    suites = {m["name"]: m for m in map(SUITE.match, _default_lines(tmp_path)) if m}
    assert suites["frequent"]["source"] == "estimated per case: no recorded runs"
    (tmp_path / "history.db").unlink()
    (tmp_path / "history.db").write_text("not a database")
    suites = {m["name"]: m for m in map(SUITE.match, _default_lines(tmp_path)) if m}
    assert suites["frequent"]["source"].startswith("estimated per case: no recorded runs; the history was not read")


# ---------------------------------------------------------------------------- against a real run

@pytest.mark.slow
def test_a_frequent_run_on_this_cpu_takes_at_most_twice_its_estimate(tmp_path, cli_env):
    """``sixdim run --suite frequent`` on the CPU, its device time (the sum of its cases' spans) against
    the estimate ``--check-config`` printed for it: at most twice, in the better of two runs.

    Twice and not tighter: the CPU constants were fitted on this 2-core machine at a load average of
    0.5-1.6, and the tests run beside other jobs on the same two cores; a case's set-up (operands, the
    copy's 64 MiB, the check) and its warm-up stretch with the load (at a load average of 7, one run took
    12.2 s against 5.5 s estimated, 9 s of it one RNN case).  A second run is made only where the first
    went over, so that one burst of another job does not decide; the acceptance bound of issue 41 is this
    one."""
    lines = _default_lines(tmp_path)
    estimate = float(next(m for m in map(SUITE.match, lines) if m and m["name"] == "frequent")["seconds"])
    measured = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "sixdim", "run", "--suite", "frequent", "--device", "cpu",
                               "--json"], env=cli_env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        records = json.loads(done.stdout)
        assert [r["status"] for r in records] == ["ok"] * 5
        measured.append(sum(r["details"]["case_wall"][1] - r["details"]["case_wall"][0] for r in records))
        if measured[-1] <= 2 * estimate:
            break
    assert min(measured) <= 2 * estimate, (measured, estimate)
