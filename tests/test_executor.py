"""One worker, many cases: each case is its own record, whatever happens to the others; and a
figure nobody measured is absent from it, with the reason in its details, never 0."""

import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sixdim.collectors.host import RaplReader
from sixdim.collectors.nvml import NvmlCollector
from sixdim.core.results import POWER_REFUSED
from sixdim.http.board import Board
from sixdim.http.exporter import SixdimCollector
from sixdim.run.devices import cpu_device, resolve
from sixdim.run.executor import Executor, GuardSettings
from sixdim.store.history import History
from sixdim.workloads.context import RunContext, WorkloadOutput
from sixdim.workloads.spec import Case, Param, WorkloadSpec
from tests.fakenvml import FakeGpu, FakeNvml
from tests.guard_workloads import spec as sleeping_spec


def by_kind_cases(spec, params, device_type):
    return [Case({"kind": kind}, precision="fp32", shape=f"case={i}") for i, kind in enumerate(params["kinds"])]


SPEC = WorkloadSpec(name="faults", description="test", entry="tests.fault_workloads:by_kind", expander=by_kind_cases,
                    params=(Param("kinds", str, "what each case does", ["ok"], ["ok"], many=True),))


@pytest.mark.slow
def test_each_case_is_recorded_and_a_crash_costs_only_its_case(tmp_path):
    history = History(tmp_path / "h.db")
    board = Board()
    executor = Executor(hostname="h", history=history, on_recorded=board.catch_up, nvml=NvmlCollector("h"), rapl=None)
    records = executor.execute(SPEC, {"kinds": ["ok", "unsupported", "raise", "ok", "crash", "ok"]}, cpu_device())
    assert [r.status for r in records] == ["ok", "unsupported", "failed", "ok", "failed", "ok"]
    assert records[1].reason == "no fp8 on this device (simulated)"
    assert records[2].reason == "ValueError: bad case"
    assert "SIGSEGV" in records[4].reason
    assert records[5].started_at > records[4].started_at  # the case after the crash ran in a fresh worker
    assert [r.shape for r in history] == [f"case={i}" for i in range(6)]
    assert {r.shape for r in board.latest()} == {"case=0", "case=3", "case=5"}  # only good results export


@pytest.mark.slow
def test_a_suite_shares_one_worker(tmp_path):
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=NvmlCollector("h"),
                        rapl=None)
    records = executor.execute_many([(SPEC, {"kinds": ["ok"]}), (SPEC, {"kinds": ["ok", "ok"]})], cpu_device())
    assert [r.status for r in records] == ["ok", "ok", "ok"]
    assert len({r.started_at for r in records}) == 1  # one worker ran all three cases
    ok = records[0]
    assert ok.figures["seconds"] == 0.25 and ok.details["telemetry"]["window_seconds"] > 0.04


@pytest.mark.slow
def test_each_case_has_its_own_wall_time_and_the_mean_case_duration_uses_it(tmp_path):
    """Cases sharing a worker share its started_at/ended_at; the span each case itself took is in
    details.case_wall (the worker's clock around the case), and sixdim_workload_case_mean_seconds is
    the mean of those spans, not of the worker's (which would count every case at the whole run)."""
    board = Board()
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), on_recorded=board.catch_up,
                        nvml=NvmlCollector("h"), rapl=None)
    records = executor.execute(sleeping_spec("naps", [{"seconds": 0.2}, {"seconds": 1.2}]), {}, cpu_device())
    assert [r.status for r in records] == ["ok", "ok"]
    assert len({r.started_at for r in records}) == 1  # one worker
    spans = [r.details["case_wall"][1] - r.details["case_wall"][0] for r in records]
    for r, span, nap in zip(records, spans, (0.2, 1.2)):
        assert r.started_at <= r.details["case_wall"][0] <= r.details["case_wall"][1] <= r.ended_at
        assert nap <= span < r.ended_at - r.started_at  # at least its own sleep, less than the worker's whole run
        assert (r.details["case_wall"][0] <= r.figures["begin_unix"]
                and r.figures["end_unix"] <= r.details["case_wall"][1])
    assert records[0].details["case_wall"][1] <= records[1].details["case_wall"][0]  # one after the other
    registry = CollectorRegistry()
    registry.register(SixdimCollector(board, [], "h"))
    [mean] = [line for line in generate_latest(registry).decode().splitlines()
              if line.startswith("sixdim_workload_case_mean_seconds{") and 'status="ok"' in line]
    assert float(mean.rsplit(" ", 1)[1]) == pytest.approx(sum(spans) / 2)


@pytest.mark.slow
def test_a_case_the_worker_died_in_ran_from_the_last_result_and_the_skipped_rest_never_ran(tmp_path):
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=NvmlCollector("h"),
                        rapl=None)
    records = executor.execute(SPEC, {"kinds": ["ok", "crash", "ok"]}, cpu_device())
    assert [r.status for r in records] == ["ok", "failed", "ok"]
    ok, crashed = records[0], records[1]
    assert crashed.details["case_wall"][0] == ok.details["case_wall"][1]  # from the last result on
    assert crashed.details["case_wall"][1] == crashed.ended_at  # to the worker's end


# ---------------------------------------------------------------------------- no reading is never 0
# Workloads run by the real worker in a real child process (it imports them from here).

def gives_up_with_figures(params: dict, ctx: RunContext) -> WorkloadOutput:
    """A run that measured something and then failed (a training that missed its target)."""
    ctx.mark_window_start()
    time.sleep(0.05)
    ctx.mark_window_end()
    return WorkloadOutput({"seconds": 0.05, "samples_per_second": 120.0, "accuracy": 0.42}, {"epochs": 3},
                          status="failed", reason="did not reach the target accuracy 0.9")


def marks_no_window(params: dict, ctx: RunContext) -> WorkloadOutput:
    return WorkloadOutput({"seconds": 0.01})


def refuses_its_power(params: dict, ctx: RunContext) -> WorkloadOutput:
    """A case whose power phase ran and withheld its figure (as workloads/measure/timing.py's power_phase does when the
    GPU was busy for only 88% of it), over a measured window of 1.3 s."""
    ctx.mark_window_start()
    time.sleep(1.3)
    ctx.mark_window_end()
    return WorkloadOutput({"seconds": 1.3}, {POWER_REFUSED: True, "power_note": "the GPU was busy for only 88%"})


def one_case_spec(name: str, entry: str) -> WorkloadSpec:
    return WorkloadSpec(name=name, description="test", entry=f"tests.test_executor:{entry}", uses_torch=False,
                        expander=lambda spec, params, device_type: [Case({}, precision="fp32", shape="case=0")])


def cpu_executor(tmp_path: Path, **options) -> Executor:
    """An executor whose board catches up as the daemon's does (its ``on_recorded`` is the board's)."""
    return Executor(hostname="h", history=History(tmp_path / "h.db"),
                    **{"nvml": NvmlCollector("h"), "rapl": None, "on_recorded": Board().catch_up, **options})


def scrape(executor: Executor) -> str:
    registry = CollectorRegistry()
    registry.register(SixdimCollector(executor.on_recorded.__self__, [], "h"))  # the board it feeds
    return generate_latest(registry).decode()


def test_a_failed_run_has_no_figures_and_keeps_what_it_reported_in_details(tmp_path):
    executor = cpu_executor(tmp_path)
    [record] = executor.execute(one_case_spec("gives_up", "gives_up_with_figures"), {}, cpu_device())
    assert record.status == "failed" and record.reason == "did not reach the target accuracy 0.9"
    assert record.figures == {}
    assert record.details["unreported_figures"] == {"seconds": 0.05, "samples_per_second": 120.0, "accuracy": 0.42}
    assert record.details["figures_note"] == "not reported: the run is 'failed' (see its reason)"
    assert record.details["epochs"] == 3 and record.details["telemetry"]["window_seconds"] > 0.04
    [stored] = list(executor.history)
    assert stored.figures == {}
    assert "sixdim_workload_seconds" not in scrape(executor)


def test_a_case_without_a_measured_window_says_why_it_has_no_telemetry_figures(tmp_path):
    [record] = cpu_executor(tmp_path).execute(one_case_spec("no_window", "marks_no_window"), {}, cpu_device())
    assert record.status == "ok" and record.figures == {"seconds": 0.01}
    assert record.details["telemetry"] == {"window_note": "the case marked no measured window, so no telemetry "
                                                          "figure was taken from it"}
    assert record.details["power_note"] == record.details["telemetry"]["window_note"]


def test_a_worker_that_ends_before_the_first_sample_has_no_memory_figure(tmp_path):
    """A sample every 100 s: the sampler reads once before the worker starts and once after it
    ended, never while it ran.  The CPU run's resident memory is absent, not 0, and says why."""
    executor = cpu_executor(tmp_path, sample_hz=0.01)
    [record] = executor.execute(sleeping_spec("quick", [{"seconds": 0.02}]), {}, cpu_device())
    assert record.status == "ok", record.reason
    assert "memory_bytes" not in record.figures
    telemetry = record.details["telemetry"]
    assert telemetry["telemetry_samples"] == 0
    assert telemetry["memory_note"] == "none of the 2 telemetry samples had a memory reading"
    assert "no telemetry sample was taken during the" in telemetry["window_note"]
    assert "sixdim_workload_memory_bytes" not in scrape(executor)


@pytest.mark.slow
def test_a_stuck_rapl_counter_is_no_power_reading_not_0_watts(tmp_path):
    """A CPU run of 1.2 s with a RAPL package whose counter never moves: there is no power figure
    (it was exported as 0 W), and the note says the counter did not advance."""
    zone = tmp_path / "powercap" / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    (zone / "energy_uj").write_text("1000000\n")
    executor = cpu_executor(tmp_path, rapl=RaplReader(tmp_path / "powercap"))
    [record] = executor.execute(sleeping_spec("steady", [{"seconds": 1.2}]), {}, cpu_device())
    assert record.status == "ok", record.reason
    assert "power_watts" not in record.figures and "energy_joules" not in record.figures
    assert record.details["telemetry"]["energy_note"].startswith("the energy counter did not advance over")
    assert record.details["power_note"].startswith("the energy counter did not advance over")
    assert "sixdim_workload_power_watts" not in scrape(executor)


@pytest.mark.slow
def test_a_gpu_without_readings_gives_no_figures_but_the_reasons(tmp_path):
    """A GPU (the fake NVML) whose energy counter stands still and which answers
    NVML_ERROR_NOT_SUPPORTED for memory and clock events: power, device memory and the clock
    groups are absent with their reasons; the SM clock, which it reports, is kept."""
    gpu = FakeGpu(unsupported={"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetCurrentClocksEventReasons"})
    nvml = NvmlCollector("h", module=FakeNvml([gpu]))
    executor = cpu_executor(tmp_path, nvml=nvml, guard=GuardSettings(enabled=False))
    [device] = resolve(["cuda:0"], nvml)
    [record] = executor.execute(sleeping_spec("steady", [{"seconds": 1.2}]), {}, device)
    assert record.status == "ok", record.reason
    for figure in ("power_watts", "energy_joules", "device_memory_bytes", "power_capped", "thermal_slowdown",
                   "hardware_slowdown"):
        assert figure not in record.figures, figure
    assert record.figures["sm_clock_hertz"] == pytest.approx(1980e6)
    telemetry = record.details["telemetry"]
    samples = telemetry["telemetry_samples"]
    assert samples >= 5
    assert telemetry["energy_note"].startswith("the energy counter did not advance over")
    assert record.details["power_note"].startswith("the energy counter did not advance over")
    assert telemetry["memory_note"].startswith("none of the ") and telemetry["memory_note"].endswith(
        " telemetry samples had a memory reading")
    assert telemetry["clock_event_note"].endswith("telemetry samples had a clock-event reading")
    text = scrape(executor)
    assert "sixdim_workload_sm_clock_hertz" in text
    for metric in ("sixdim_workload_power_watts", "sixdim_workload_device_memory_bytes",
                   "sixdim_workload_power_capped"):
        assert metric not in text, metric


# ---------------------------------------------------------------------------- fraction of peak, wired

def fixed_copy(params: dict, ctx: RunContext) -> WorkloadOutput:
    """A copy's figures as a GPU would give them, without a GPU: 1.675e12 bytes/s."""
    ctx.mark_window_start()
    ctx.mark_window_end()
    return WorkloadOutput({"seconds": 1e-3, "bytes_per_second": 1.675e12})


@pytest.mark.slow
def test_the_fraction_of_peak_is_the_gpus_published_bandwidth_for_device_copies_only(tmp_path):
    """On a GPU the peak table knows (NVML's name, faked: an H100 SXM, 3.35 TB/s), a device-to-device
    copy gets achieved / peak; a host-to-device one, limited by PCIe and not by the GPU's memory, none."""
    from sixdim.run.devices import resolve as resolve_devices

    def copies(spec, params, device_type):
        return [Case({}, precision="", shape=f"size={2**20}", kernel_pass=direction) for direction in ("d2d", "h2d")]

    spec = WorkloadSpec(name="memory_bandwidth", description="test", entry="tests.test_executor:fixed_copy",
                        uses_torch=False, peak_kind="bandwidth", expander=copies)
    fake = FakeNvml([FakeGpu(name="NVIDIA H100 80GB HBM3")])
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=NvmlCollector("h", module=fake),
                        rapl=None, guard=GuardSettings(enabled=False))
    d2d, h2d = executor.execute(spec, {}, resolve_devices(["cuda:0"], executor.nvml)[0])
    assert (d2d.kernel_pass, h2d.kernel_pass) == ("d2d", "h2d") and d2d.status == h2d.status == "ok"
    assert d2d.figures["peak_ratio"] == pytest.approx(1.675e12 / 3.35e12)
    assert "peak_ratio" not in h2d.figures
    # and no peak for a GPU the table does not have: absent, never guessed
    fake.gpus[0].name = "NVIDIA Made-Up 9000"
    executor.nvml = NvmlCollector("h", module=fake)
    [unknown, _] = executor.execute(spec, {}, resolve_devices(["cuda:0"], executor.nvml)[0])
    assert unknown.status == "ok" and "peak_ratio" not in unknown.figures


@pytest.mark.slow
def test_power_the_worker_refused_is_not_filled_in_from_the_daemons_window(tmp_path):
    """Issue 45, item 1: where the worker's power phase withheld its figure (a GPU busy under 90%, too few counter
    updates), the daemon filled power and energy from its own 10 Hz window telemetry: a stepped counter read
    unaligned over about a second, ±6.5% at the 5th/95th percentile.  A figure the method refused stays absent,
    with the worker's reason.  Here RAPL's counter moves steadily (60 W) through a 1.3 s window."""
    zone = tmp_path / "powercap" / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    counter = zone / "energy_uj"
    counter.write_text("1000000\n")
    stop = threading.Event()

    def tick() -> None:
        started = time.monotonic()
        while not stop.wait(0.01):
            counter.write_text(f"{1000000 + int((time.monotonic() - started) * 60e6)}\n")

    ticking = threading.Thread(target=tick, daemon=True)
    ticking.start()
    try:
        executor = cpu_executor(tmp_path, rapl=RaplReader(tmp_path / "powercap"))
        [record] = executor.execute(one_case_spec("refusing", "refuses_its_power"), {}, cpu_device())
    finally:
        stop.set()
        ticking.join()
    assert record.status == "ok", record.reason
    assert record.details["telemetry"].get("power_source") == "energy_counter"  # the window could have given one
    assert "power_watts" not in record.figures and "energy_joules" not in record.figures
    assert record.details["power_note"] == "the GPU was busy for only 88%"
