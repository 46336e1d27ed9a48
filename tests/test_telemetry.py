"""Window maths on known series: energy counter deltas, trapezoids, peaks, clock events."""

import time

import pytest

from agent.telemetry import Sampler, TelemetrySample, integral, summarize_window, value_at


def series(fn, start=0.0, stop=10.0, step=0.1, **extra):
    samples, t = [], start
    while t <= stop + 1e-9:
        samples.append(TelemetrySample(time=t, **fn(t), **extra))
        t += step
    return samples


def test_power_from_energy_counter_is_exact_average():
    # 300 W constant: the counter grows 300 J/s; the window [2.05, 7.05] should give exactly 300 W, 1500 J.
    samples = series(lambda t: {"energy_joules": 1000.0 + 300.0 * t, "power_watts": 999.0})
    figures = summarize_window(samples, 2.05, 7.05)
    assert figures["power_source"] == "energy_counter"
    assert figures["energy_joules"] == pytest.approx(1500.0)
    assert figures["power_watts"] == pytest.approx(300.0)  # the (wrong) sampled 999 W is not used


def test_power_from_samples_when_there_is_no_counter():
    # Power ramps 100 -> 200 W over 0..10 s; its average over [0, 10] is 150 W.
    samples = series(lambda t: {"power_watts": 100.0 + 10.0 * t})
    figures = summarize_window(samples, 0.0, 10.0)
    assert figures["power_source"] == "power_samples"
    assert figures["power_watts"] == pytest.approx(150.0)
    assert figures["energy_joules"] == pytest.approx(1500.0)


def test_memory_average_and_peak_only_inside_window():
    # 1 GiB, with a 3 GiB spike at t=5, and a 9 GiB spike at t=9 outside the window [1, 8].
    def memory(t):
        if abs(t - 5.0) < 1e-6:
            return {"memory_bytes": 3 * 2**30}
        if abs(t - 9.0) < 1e-6:
            return {"memory_bytes": 9 * 2**30}
        return {"memory_bytes": 2**30}
    samples = series(memory, step=0.5)
    figures = summarize_window(samples, 1.0, 8.0)
    assert figures["memory_peak_bytes"] == 3 * 2**30
    # the spike is a triangle 1 s wide and 2 GiB high over a 7 s window
    assert figures["memory_average_bytes"] == pytest.approx(2**30 + (2 * 2**30 * 0.5) / 7.0)


def test_clock_events_seen_in_window_are_named_and_flag_throttling():
    def events(t):
        return {"clock_event_mask": 0x4 if 3.0 <= t <= 4.0 else 0x0, "sm_clock_hertz": 1.98e9}
    figures = summarize_window(series(events), 2.0, 6.0)
    assert figures["clock_event_reasons"] == ["sw_power_cap"]
    assert (figures["power_capped"], figures["thermal_slowdown"], figures["hardware_slowdown"]) == (1.0, 0.0, 0.0)
    assert figures["sm_clock_hertz"] == pytest.approx(1.98e9)
    idle_only = summarize_window(series(lambda t: {"clock_event_mask": 0x1}), 2.0, 6.0)
    assert idle_only["power_capped"] == 0.0 and idle_only["clock_event_reasons"] == ["gpu_idle"]
    # a thermal and a power-brake event in one window: each in its own group, the cap not claimed
    hot = summarize_window(series(lambda t: {"clock_event_mask": 0x20 | 0x80}), 2.0, 6.0)
    assert (hot["power_capped"], hot["thermal_slowdown"], hot["hardware_slowdown"]) == (0.0, 1.0, 1.0)


def test_absent_readings_stay_absent():
    figures = summarize_window(series(lambda t: {}), 1.0, 2.0)
    for key in ("power_watts", "energy_joules", "memory_peak_bytes", "power_capped", "hardware_slowdown"):
        assert key not in figures


def test_empty_window_is_refused():
    with pytest.raises(ValueError):
        summarize_window(series(lambda t: {"power_watts": 1.0}), 5.0, 5.0)


def test_interpolation_and_integral():
    points = [(0.0, 0.0), (2.0, 4.0)]
    assert value_at(points, 1.0) == 2.0
    assert integral(points, 0.0, 2.0) == pytest.approx(4.0)


def test_sampler_reads_at_its_rate():
    class CountingProbe:
        def read(self):
            return TelemetrySample(time=time.monotonic(), power_watts=1.0)

    sampler = Sampler(CountingProbe(), hz=20).start()
    time.sleep(1.0)
    samples = sampler.stop()
    assert 15 <= len(samples) <= 25
    gaps = [b.time - a.time for a, b in zip(samples, samples[1:-1])]
    assert max(gaps) < 0.2
