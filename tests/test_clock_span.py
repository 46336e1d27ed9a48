"""Clock and clock-event figures come from a span that holds enough samples (issue 27): the timed
window where it holds MIN_CLOCK_SAMPLES, else the power phase, else the timed window interpolated,
with a note; the record's details say which span and keep both spans' summaries."""

import pytest

from sixdim.collectors.nvml import NvmlCollector
from sixdim.run.devices import resolve
from sixdim.run.executor import Executor, GuardSettings, Sampled, telemetry_figures, window_telemetry
from sixdim.run.telemetry import MIN_CLOCK_SAMPLES, TelemetrySample, summarize_window
from sixdim.store.history import History
from tests.fakenvml import FakeGpu, FakeNvml

FULL, CAPPED = 1.98e9, 1.5e9
SW_POWER_CAP, IDLE = 0x4, 0x0


def series(fn, start=0.0, stop=10.0, step=0.1, **extra):
    samples, t = [], start
    while t <= stop + 1e-9:
        samples.append(TelemetrySample(time=t, **fn(t), **extra))
        t += step
    return samples


def cold_then_capped(t):
    """Full clocks and no event until 1 s, then the power phase's lower, capped clock from 1.5 s on."""
    capped = t >= 1.45
    return {"sm_clock_hertz": CAPPED if capped else FULL, "memory_clock_hertz": 2.619e9,
            "clock_event_mask": SW_POWER_CAP if capped else IDLE, "energy_joules": 1000.0 + 300.0 * t,
            "memory_bytes": 1e9}


def test_a_window_shorter_than_the_sample_period_takes_the_power_phase_clocks():
    """A 30 ms timed window between the samples at 0.5 and 0.6 s, and a 3 s power phase at a capped,
    lower clock: the clock figures are the power phase's, from its 31 samples; the window's own
    (interpolated) summary is kept beside it; power and memory stay the window's."""
    samples = series(cold_then_capped, step=0.1)
    figures = summarize_window(samples, 0.53, 0.56, power_phase=(1.5, 4.5))
    assert figures["telemetry_samples"] == 0
    assert figures["clock_span"] == "power_phase"
    assert figures["clock_span_samples"] == 31  # 1.5, 1.6, ..., 4.5
    assert figures["sm_clock_hertz"] == pytest.approx(CAPPED)
    assert figures["sm_clock_min_hertz"] == pytest.approx(CAPPED)
    assert figures["power_capped"] == 1.0 and figures["clock_event_reasons"] == ["sw_power_cap"]
    assert (figures["thermal_slowdown"], figures["hardware_slowdown"]) == (0.0, 0.0)
    assert "fewer than 3" in figures["clock_span_note"] and "power phase's" in figures["clock_span_note"]
    # the other span, summarised too: the timed window's interpolated full clock, not capped
    timed = figures["timed"]
    assert timed["samples"] == 0 and timed["seconds"] == pytest.approx(0.03)
    assert timed["sm_clock_hertz"] == pytest.approx(FULL) and timed["power_capped"] == 0.0
    phase = figures["power_phase"]
    assert phase["samples"] == 31 and phase["seconds"] == pytest.approx(3.0)
    assert phase["sm_clock_hertz"] == pytest.approx(CAPPED) and phase["power_capped"] == 1.0
    # power and memory are still the window's: 300 W from the counter over the 30 ms
    assert figures["power_watts"] == pytest.approx(300.0) and figures["window_seconds"] == pytest.approx(0.03)
    assert figures["memory_peak_bytes"] == 1e9


def test_a_window_with_enough_samples_keeps_its_own_clocks():
    """A 2 s timed window holding 20 samples: its clocks, even with a capped power phase after it."""
    samples = series(cold_then_capped, start=-1.0, step=0.1)
    figures = summarize_window(samples, -0.95, 1.05, power_phase=(1.5, 4.5))
    assert figures["telemetry_samples"] == 20
    assert figures["clock_span"] == "timed" and figures["clock_span_samples"] == 20
    assert figures["sm_clock_hertz"] == pytest.approx(FULL) and figures["power_capped"] == 0.0
    assert "clock_span_note" not in figures
    assert figures["power_phase"]["power_capped"] == 1.0  # still summarised, not exported
    assert figures["power_phase"]["sm_clock_hertz"] == pytest.approx(CAPPED)


def test_a_short_window_without_a_power_phase_is_interpolated_and_says_so():
    samples = [TelemetrySample(time=0.0, sm_clock_hertz=1.9e9, clock_event_mask=SW_POWER_CAP),
               TelemetrySample(time=0.1, sm_clock_hertz=1.7e9, clock_event_mask=IDLE)]
    figures = summarize_window(samples, 0.04, 0.07)
    assert figures["clock_span"] == "timed" and figures["clock_span_samples"] == 0
    assert figures["sm_clock_hertz"] == pytest.approx(1.9e9 - 0.2e9 * 0.55)  # the mean of 1.82 and 1.76 GHz
    assert figures["power_capped"] == 1.0  # the events of the sample just before the window
    assert figures["clock_span_note"] == (
        "the 0.03 s measured window holds 0 sample(s) with a clock reading, fewer than 3 and the case ran no "
        "power phase: the clock and clock-event figures are interpolated from fewer samples")
    assert "power_phase" not in figures


def test_a_power_phase_with_too_few_samples_is_not_taken_either():
    samples = series(cold_then_capped, step=0.1)
    figures = summarize_window(samples, 0.53, 0.56, power_phase=(1.55, 1.75))  # holds 1.6 and 1.7 only
    assert figures["clock_span"] == "timed" and figures["sm_clock_hertz"] == pytest.approx(FULL)
    assert figures["power_phase"]["samples"] == 2 < MIN_CLOCK_SAMPLES
    assert "the 0.2 s power phase holds only 2" in figures["clock_span_note"]
    assert "interpolated from fewer samples" in figures["clock_span_note"]


def test_a_device_without_clock_readings_gets_no_interpolation_note():
    figures = summarize_window([TelemetrySample(time=0.0, memory_bytes=1e9), TelemetrySample(time=0.1)], 0.04, 0.07)
    assert figures["clock_span"] == "timed" and figures["clock_span_samples"] == 0
    assert "sm_clock_hertz" not in figures and "power_capped" not in figures and "clock_span_note" not in figures
    assert figures["sm_clock_note"] == "none of the 2 telemetry samples had a SM clock reading"


def test_the_exported_figures_are_the_chosen_spans():
    """Through the executor's functions: the record's figures take the power phase's clocks, and the
    worker's own power figure is left as it is."""
    sampled = Sampled(series(cold_then_capped, step=0.1))
    telemetry = window_telemetry(sampled, (0.53, 0.56), (1.5, 4.5))
    figures = {"seconds": 0.03, "power_watts": 280.0}
    telemetry_figures(figures, telemetry, "cuda")
    assert figures["sm_clock_hertz"] == pytest.approx(CAPPED) and figures["power_capped"] == 1.0
    assert figures["power_watts"] == 280.0
    assert telemetry["clock_span"] == "power_phase" and telemetry["clock_span_samples"] == 31


PHASED = {"window": 0.03, "settle": 0.5, "phase": 1.0}
"""tests.fault_workloads.phased's timings here (seconds)."""


@pytest.mark.slow
def test_a_cold_case_exports_its_power_phase_clocks(tmp_path):
    """A real worker on a (fake) H100: its 30 ms timed window holds fewer than 3 samples at 10 Hz, so
    the exported SM clock and power cap are the power phase's, where the cap engaged."""
    from sixdim.workloads.spec import Case, WorkloadSpec

    gpu = FakeGpu(clock_event_mask=IDLE)
    nvml = NvmlCollector("h", module=FakeNvml([gpu]))
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=nvml, rapl=None,
                        guard=GuardSettings(enabled=False))
    spec = WorkloadSpec(name="phased", description="test", entry="tests.fault_workloads:phased",
                        uses_torch=False, expander=lambda s, p, d: [Case(PHASED, precision="fp32", shape="case=0")])

    def progress(line: str) -> None:
        if "power phase" in line:
            gpu.clock_event_mask, gpu.sm_mhz = SW_POWER_CAP, 1500

    [device] = resolve(["cuda:0"], nvml)
    [record] = executor.execute(spec, {}, device, on_progress=progress)
    assert record.status == "ok", record.reason
    telemetry = record.details["telemetry"]
    assert telemetry["clock_span"] == "power_phase"
    assert telemetry["clock_span_samples"] >= MIN_CLOCK_SAMPLES
    assert telemetry["timed"]["samples"] < MIN_CLOCK_SAMPLES
    assert record.figures["sm_clock_hertz"] == pytest.approx(1500e6)
    assert record.figures["power_capped"] == 1.0
    # the window's own summary: interpolated toward the sample after it, which may already be capped
    assert 1500e6 <= telemetry["timed"]["sm_clock_hertz"] <= 1980e6
    assert telemetry["timed"]["power_capped"] == 0.0  # the events of the sample before it, uncapped
    assert record.conditions["power_phase_sw_power_cap_ratio"] == 1.0  # the conditions agree
