"""What watching costs each device (issue 41, item 3): the device time and energy each suite's cases spent.

- The executor records, with each case, the device energy over the case's whole span (``case_wall``: set-up
  to check, the worker's start-up not included) from the energy counter the sampler read, or says why there
  is none (``case_energy_note``): a missing reading is never 0 J.
- The board adds each counted run's span and energy to its suite's, since the agent started, and the
  exporter shows them as ``sixdim_suite_device_seconds_total`` and ``sixdim_suite_energy_joules_total``
  (agent/core/catalog.py), which pass ``promtool check metrics``.

The dashboard panels that read them are checked in tests/test_dashboards_coverage.py (promtool on synthetic
series) and tests/test_dashboards_e2e.py (a real Prometheus scraping a real agent).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sixdim.collectors.host import RaplReader
from sixdim.collectors.nvml import NvmlCollector
from sixdim.core import catalog
from sixdim.core.results import RunRecord
from sixdim.http.board import Board, case_energy_joules, case_seconds, case_span_seconds
from sixdim.http.exporter import SixdimCollector, family_header
from sixdim.run.devices import Device
from sixdim.run.executor import CASE_SPAN, Executor, Sampled, case_energy
from sixdim.run.telemetry import TelemetrySample, counter_energy, summarize_window
from sixdim.store.history import History
from tests.conftest import promtool_check
from tests.guard_workloads import spec as sleeping_spec
from tests.helpers import make_record

CPU = Device("cpu", model_name="Test CPU")

OFFSET = 1.7e9
"""Unix time less monotonic time in the synthetic spans below (a case_wall is Unix time, samples monotonic)."""


def _counter(times: list[float], joules_at: float = 1000.0, watts: float = 250.0) -> list[TelemetrySample]:
    """Samples of a device whose energy counter reads ``joules_at`` at 0 s and grows at ``watts``."""
    return [TelemetrySample(t, energy_joules=joules_at + watts * t, power_watts=watts) for t in times]


TENTHS = [round(0.1 * i, 1) for i in range(21)]
"""A 10 Hz sampler's readings over 2 s."""


# ---------------------------------------------------------------------------- the energy over a case's span

def test_the_energy_of_a_span_is_the_counter_interpolated_at_its_ends():
    samples = _counter(TENTHS)
    wall = (OFFSET + 0.05, OFFSET + 1.23)  # between samples at both ends
    assert case_energy(Sampled(samples), wall, offset=OFFSET) == {"case_energy_joules": pytest.approx(250.0 * 1.18)}
    # a span shorter than the sample period, between two readings: interpolated too, never 0
    short = case_energy(Sampled(samples), (OFFSET + 0.42, OFFSET + 0.47), offset=OFFSET)
    assert short == {"case_energy_joules": pytest.approx(12.5)}
    # the same counter and the same rule as a measured window's energy
    assert counter_energy(samples, 0.05, 1.23)[0] == pytest.approx(
        summarize_window(samples, 0.05, 1.23)["energy_joules"])


def test_a_span_the_counter_does_not_bracket_has_a_note_and_no_joules():
    samples = _counter(TENTHS)
    cases = {
        "no samples": (Sampled([]), (OFFSET + 0.5, OFFSET + 1.0)),
        "after the last": (Sampled(samples), (OFFSET + 1.9, OFFSET + 2.4)),
        "before the first": (Sampled(samples), (OFFSET - 0.5, OFFSET + 0.05)),
        "no counter": (Sampled([TelemetrySample(t, power_watts=300.0) for t in TENTHS]), (OFFSET + 0.5, OFFSET + 1.0)),
        "stuck": (Sampled(_counter(TENTHS, watts=0.0)), (OFFSET + 0.5, OFFSET + 1.0)),
        "reset": (Sampled([TelemetrySample(0.0, energy_joules=5000.0), TelemetrySample(2.0, energy_joules=10.0)]),
                  (OFFSET + 0.5, OFFSET + 1.0)),
        "empty span": (Sampled(samples), (OFFSET + 1.0, OFFSET + 1.0)),
        "no span": (Sampled(samples), None),
    }
    notes = {}
    for name, (sampled, wall) in cases.items():
        found = case_energy(sampled, wall, offset=OFFSET)
        assert set(found) == {"case_energy_note"}, (name, found)  # absent, never 0 J
        notes[name] = found["case_energy_note"]
    assert notes["no samples"] == f"no telemetry sample was taken around the 0.5 s {CASE_SPAN}"
    assert notes["after the last"] == f"the energy counter was not read both before and after the {CASE_SPAN}"
    assert notes["before the first"] == f"the energy counter was not read both before and after the {CASE_SPAN}"
    assert notes["no counter"] == "none of the 21 telemetry samples had a energy counter reading"
    assert notes["stuck"] == f"the energy counter did not advance over the 0.5 s {CASE_SPAN}"
    assert notes["reset"] == f"the energy counter went back by 1.25e+03 J over the {CASE_SPAN} (reset?)"
    assert notes["empty span"] == "the case's span is empty: it did not run on the device"
    assert notes["no span"] == "the worker reported no span for the case"
    # a device whose readings cannot give it (a host-wide run's sum over its GPUs): said, whatever was sampled
    assert case_energy(Sampled(samples), (OFFSET + 0.5, OFFSET + 1.0), "summed over 8 GPUs", OFFSET) == {
        "case_energy_note": "summed over 8 GPUs"}


# ---------------------------------------------------------------------------- the board and the exporter

def _case(suite: str, status: str, wall: tuple[float, float] | None, joules: float | None = None, *,
          gpu: str = "0", reason: str = "") -> RunRecord:
    record = make_record(status, gpu=gpu, uuid=f"GPU-{gpu}")
    record.suite = suite
    if reason:
        record.reason = reason
    record.details = {**({"case_wall": list(wall)} if wall else {}),
                      **({"case_energy_joules": joules} if joules is not None else {"case_energy_note": "why"})}
    return record


def _scrape(board: Board) -> str:
    registry = CollectorRegistry()
    registry.register(SixdimCollector(board, [], "node1", part="results"))
    return generate_latest(registry).decode()


def _values(text: str, metric: catalog.MetricDef) -> dict[tuple[str, str], float]:
    """(gpu, suite) -> value of the metric's samples."""
    return {(s.labels[catalog.GPU], s.labels[catalog.SUITE]): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == metric.name}


def test_each_counted_run_adds_its_span_and_its_energy_where_read_to_its_suite():
    board = Board()
    board.add(_case("frequent", "ok", (100.0, 104.5), 2250.0))
    board.add(_case("frequent", "failed", (104.5, 105.0), 200.0))  # a failure ran on the device: it counts
    board.add(_case("frequent", "timeout", (105.0, 115.0)))  # no energy read: its time counts, no joules
    board.add(_case("frequent", "skipped", (115.0, 115.0)))  # skipped before it started: 0 s
    board.add(_case("frequent", "skipped", None, reason="busy: pid 7"))  # no span at all: nothing
    board.add(_case("frequent", "skipped", (115.0, 130.0), 99.0, reason="interrupted: the agent stopped"))  # not a run
    board.add(_case("power", "ok", (200.0, 203.0)))  # a suite with no energy reading yet: no energy series
    board.add(_case("frequent", "ok", (300.0, 301.0), 500.0, gpu="1"))
    text = _scrape(board)
    assert _values(text, catalog.SUITE_DEVICE_SECONDS) == {("0", "frequent"): 15.0, ("0", "power"): 3.0,
                                                           ("1", "frequent"): 1.0}
    assert _values(text, catalog.SUITE_ENERGY) == {("0", "frequent"): 2450.0, ("1", "frequent"): 500.0}
    labels = next(s.labels for family in text_string_to_metric_families(text) for s in family.samples
                  if s.name == catalog.SUITE_DEVICE_SECONDS.name)
    assert set(labels) == {*catalog.SUITE_LABELS}, labels
    # the one definition of a case's device time, and its energy read back
    record = _case("frequent", "ok", (100.0, 104.5), 2250.0)
    assert case_span_seconds(record) == case_seconds(record) == 4.5 and case_energy_joules(record) == 2250.0
    bare = _case("frequent", "ok", None)
    assert case_span_seconds(bare) is None and case_energy_joules(bare) is None


def test_the_counters_count_since_the_agent_started_not_what_the_history_held(tmp_path):
    history = History(tmp_path / "h.db")
    history.add(_case("frequent", "ok", (100.0, 110.0), 1000.0))
    board = Board.from_history(history)
    assert board.suite_costs() == []  # loaded, not counted: a counter since the agent started
    history.add(_case("frequent", "ok", (200.0, 202.5), 300.0))
    board.catch_up(history)
    [(labels, seconds, joules)] = board.suite_costs()
    assert (labels[catalog.SUITE], seconds, joules) == ("frequent", 2.5, 300.0)


def test_the_counters_pass_promtool_and_render_as_the_exposition_does(promtool):
    board = Board()
    board.add(_case("frequent", "ok", (100.0, 104.5), 2250.0))
    board.add(_case("quick", "ok", (200.0, 260.0)))  # a device without an energy reading: seconds only
    text = _scrape(board)
    for metric in catalog.SUITE_COST_METRICS:
        assert family_header(metric) in text, metric.name
    result = promtool_check(promtool, text)
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr
    # the exposition's path (render_lines, lines grouped per family) gives the same samples, each family whole
    collector = SixdimCollector(board, [], "node1", part="results")
    lines: dict[str, list[str]] = {}
    for metric, line in collector.render_lines():
        lines.setdefault(metric.name, []).append(line)
    for metric in catalog.SUITE_COST_METRICS:
        assert all(line in text for line in lines[metric.name]), metric.name
    assert len(lines[catalog.SUITE_DEVICE_SECONDS.name]) == 2 and len(lines[catalog.SUITE_ENERGY.name]) == 1


# ---------------------------------------------------------------------------- a real run

class FakePowercap:
    """A RAPL package zone in a folder, its ``energy_uj`` advanced by a thread at ``watts`` (every 2 ms), read
    by the agent's real RaplReader: the CPU's energy counter of a host without a readable one."""

    def __init__(self, root: Path, watts: float) -> None:
        self.zone = root / "intel-rapl:0"
        self.zone.mkdir(parents=True)
        (self.zone / "name").write_text("package-0\n")
        (self.zone / "max_energy_range_uj").write_text("262143328850\n")
        self.watts = watts
        self._started = time.monotonic()
        self._write()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _write(self) -> None:
        microjoules = round(self.watts * 1e6 * (time.monotonic() - self._started))
        target = self.zone / "energy_uj.tmp"
        target.write_text(f"{microjoules}\n")
        target.replace(self.zone / "energy_uj")  # a reader never sees a half-written number

    def _loop(self) -> None:
        while not self._stop.wait(0.002):
            self._write()

    def __enter__(self) -> FakePowercap:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.slow
def test_a_real_run_adds_its_case_spans_and_their_energy_to_its_suite(tmp_path):
    """A real worker on the CPU runs two suites of short cases (one of which times out); the counters hold the
    sum of the recorded cases' spans per suite, and the energy the real RAPL reader saw over them: the fake
    package's power times the span."""
    watts = 40.0
    with FakePowercap(tmp_path / "powercap", watts):
        rapl = RaplReader(tmp_path / "powercap")
        assert rapl.available
        history = History(tmp_path / "h.db")
        board = Board.from_history(history)
        executor = Executor(hostname="node1", history=history, nvml=NvmlCollector("node1"), rapl=rapl,
                            on_recorded=board.catch_up)
        naps = sleeping_spec("naps", [{"seconds": 0.3}, {"seconds": 0.6}])
        records = executor.execute(naps, {}, CPU, suite="frequent")
        records += executor.execute(sleeping_spec("nap", [{"seconds": 0.4}]), {}, CPU, suite="power")
        records += executor.execute(sleeping_spec("hang", [{"seconds": 30.0}]), {}, CPU, suite="power",
                                    timeout=1.0)
    board.catch_up(history)
    assert [r.status for r in records] == ["ok", "ok", "ok", "timeout"]
    spans: dict[str, float] = {}
    energy: dict[str, float] = {}
    for record in records:
        wall = record.details["case_wall"]
        spans[record.suite] = spans.get(record.suite, 0.0) + wall[1] - wall[0]
        joules = record.details["case_energy_joules"]
        # within what the writer thread's lag (milliseconds on a loaded machine) moves the counter's two ends by
        assert joules == pytest.approx(watts * (wall[1] - wall[0]), rel=0.05, abs=0.4), record.details
        energy[record.suite] = energy.get(record.suite, 0.0) + joules
    assert spans["frequent"] > 0.9 and spans["power"] > 1.4  # the cases' own sleeps, and the hung one's second
    text = _scrape(board)
    assert _values(text, catalog.SUITE_DEVICE_SECONDS) == {("", suite): pytest.approx(s, rel=1e-12)
                                                           for suite, s in spans.items()}
    assert _values(text, catalog.SUITE_ENERGY) == {("", suite): pytest.approx(j, rel=1e-12)
                                                   for suite, j in energy.items()}


@pytest.mark.slow
def test_a_cpu_without_rapl_records_why_its_cases_have_no_energy(tmp_path):
    history = History(tmp_path / "h.db")
    board = Board.from_history(history)
    rapl = RaplReader(tmp_path / "no-powercap")
    executor = Executor(hostname="node1", history=history, nvml=NvmlCollector("node1"), rapl=rapl,
                        on_recorded=board.catch_up)
    [record] = executor.execute(sleeping_spec("nap", [{"seconds": 0.2}]), {}, CPU, suite="frequent")
    assert "case_energy_joules" not in record.details
    assert record.details["case_energy_note"] == (
        f"the CPU has no energy counter the agent can read (RAPL: {tmp_path / 'no-powercap'} does not exist (no "
        f"RAPL powercap driver))")
    board.catch_up(history)
    text = _scrape(board)
    wall = record.details["case_wall"]
    assert _values(text, catalog.SUITE_DEVICE_SECONDS) == {("", "frequent"): pytest.approx(wall[1] - wall[0])}
    assert _values(text, catalog.SUITE_ENERGY) == {}  # absent, never 0 J
