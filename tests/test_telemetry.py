"""Window maths on known series: energy counter deltas, trapezoids, peaks, clock events; and a
missing reading (no sample, an ended process, a stuck or unreadable counter) is absent with a
reason, never 0."""

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sixdim.collectors import host
from sixdim.collectors.host import HostCollector, RaplReader
from sixdim.run.telemetry import CpuProbe, Sampler, TelemetrySample, integral, summarize_window, time_average, value_at


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


@pytest.mark.slow
def test_sampler_reads_at_its_rate():
    """20 reads a second on a fixed schedule, plus the last one at stop, counted against the time
    the reads actually spanned rather than a sleep that a busy machine stretches.  Read i comes
    no earlier than its slot (start + i/20), so never more reads than slots: true under any
    load.  A late read is followed by quick catch-up reads, so fewer than half the slots would
    take the sampler thread kept off the CPU for half the run."""
    class CountingProbe:
        def read(self):
            return TelemetrySample(time=time.monotonic(), power_watts=1.0)

    sampler = Sampler(CountingProbe(), hz=20).start()
    time.sleep(2.0)
    samples = sampler.stop()
    scheduled = samples[:-1]  # the last one is stop()'s
    ran = scheduled[-1].time - scheduled[0].time
    slots = ran * 20 + 1
    assert slots / 2 <= len(scheduled) <= slots + 0.5
    assert ran >= 0.5  # it did read for a good part of the two seconds it was given


def test_a_sampler_slower_than_the_wait_does_not_make_its_caller_wait():
    """A sample every 100 s and a caller that would wait 2 s for one after its window: no read can come
    before its deadline, so it gets the samples so far at once instead of sleeping the 2 s in vain (the
    executor's REPORTED_WAIT_SECONDS wait, which a slow test sampler used to spend on every case)."""
    class CountingProbe:
        def read(self):
            return TelemetrySample(time=time.monotonic(), power_watts=1.0)

    sampler = Sampler(CountingProbe(), hz=0.01).start()
    try:
        asked = time.monotonic()
        samples = sampler.samples_after(asked, most=2.0)
        waited = time.monotonic() - asked
    finally:
        sampler.stop()
    assert len(samples) == 1 and samples[0].time < asked  # start()'s read only: nothing after the moment
    assert waited < 2.0 / 4  # a quarter of the wait it would have slept through, whatever the load


# ---------------------------------------------------------------------------- a missing reading is never 0

def exited_child() -> subprocess.Popen:
    """A real child that exits at once, left unreaped (a zombie) as a worker is between its exit
    and the runner's wait."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    return child


def test_an_ended_process_has_no_resident_memory_not_zero():
    child = exited_child()
    try:
        probe = CpuProbe(rapl=None)
        probe.attach(child.pid)
        assert psutil.Process(child.pid).memory_info().rss == 0  # what the kernel answers for a zombie
        assert probe.read().memory_bytes is None  # ... is no reading of the worker
    finally:
        child.wait()
    assert probe.read().memory_bytes is None  # reaped: gone


def test_a_worker_that_ended_before_the_first_sample_has_no_memory_figure():
    """The real sampler over the real probe, attached to a process that ended before the sampler's
    first read: the window has no memory figure (it read 0 before) and says why."""
    probe = CpuProbe(rapl=None)
    started = time.monotonic()
    child = exited_child()
    ended = time.monotonic()
    probe.attach(child.pid)
    sampler = Sampler(probe, hz=20).start()
    time.sleep(0.3)
    samples = sampler.stop()
    child.wait()
    assert samples  # at least the first and the last read
    figures = summarize_window(samples, started, ended)
    assert "memory_peak_bytes" not in figures and "memory_average_bytes" not in figures
    assert figures["memory_note"] == f"none of the {len(samples)} telemetry samples had a memory reading"
    assert figures["telemetry_samples"] == 0 and "no telemetry sample was taken during" in figures["window_note"]


def test_a_live_process_and_its_children_are_read():
    code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
            "'print(1, flush=True); import time; time.sleep(30)'], stdout=subprocess.PIPE); "
            "c.stdout.readline(); print('ready', flush=True); time.sleep(30)")
    worker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline() == "ready\n"  # both interpreters are up
        probe = CpuProbe(rapl=None)
        probe.attach(worker.pid)
        [child] = psutil.Process(worker.pid).children()
        own = psutil.Process(worker.pid).memory_info().rss
        assert probe.read().memory_bytes >= own + 0.5 * child.memory_info().rss
    finally:
        for process in psutil.Process(worker.pid).children() + [psutil.Process(worker.pid)]:
            process.kill()
        worker.wait()


def test_readings_on_one_side_of_the_window_are_not_held_over_it():
    # memory read until 1.0 s (the process then ended), a window at [2, 3]: nothing was read in it
    samples = [TelemetrySample(time=t / 10, memory_bytes=5e8 if t <= 10 else None, sm_clock_hertz=1.5e9)
               for t in range(0, 41)]
    figures = summarize_window(samples, 2.0, 3.0)
    assert "memory_peak_bytes" not in figures
    assert figures["memory_note"].startswith("no memory reading during or after the 1 s measured window")
    assert figures["sm_clock_hertz"] == pytest.approx(1.5e9)  # read throughout: kept
    # readings only after the window: a sampler that started late
    late = summarize_window([TelemetrySample(time=5.0, memory_bytes=1e9, clock_event_mask=0x4)], 1.0, 2.0)
    assert "memory_peak_bytes" not in late and "power_capped" not in late
    assert late["memory_note"].startswith("no memory reading before the 1 s measured window ended")
    assert late["clock_event_note"].startswith("no clock-event reading before")


def test_a_window_between_two_samples_is_interpolated_and_says_so():
    samples = [TelemetrySample(time=0.0, memory_bytes=1e9, clock_event_mask=0x4),
               TelemetrySample(time=0.1, memory_bytes=2e9, clock_event_mask=0x1)]
    figures = summarize_window(samples, 0.04, 0.06)
    assert figures["telemetry_samples"] == 0 and "interpolated" in figures["window_note"]
    assert figures["memory_average_bytes"] == pytest.approx(1.5e9)
    assert figures["power_capped"] == 1.0  # the events of the sample just before the window


def test_a_window_with_no_sample_at_all():
    figures = summarize_window([], 1.0, 1.02)
    for key in ("power_watts", "energy_joules", "memory_peak_bytes", "sm_clock_hertz", "power_capped"):
        assert key not in figures
    for note in ("memory_note", "energy_note", "power_note", "sm_clock_note", "clock_event_note"):
        assert figures[note] == "no telemetry sample was taken around the 0.02 s measured window"


def test_a_counter_that_does_not_advance_is_no_power_reading():
    stuck = series(lambda t: {"energy_joules": 1000.0})
    figures = summarize_window(stuck, 2.0, 6.0)
    assert "power_watts" not in figures and "energy_joules" not in figures
    assert figures["energy_note"] == "the energy counter did not advance over the 4 s measured window"
    reset = summarize_window(series(lambda t: {"energy_joules": 1000.0 if t < 4 else 5.0}), 2.0, 6.0)
    assert "power_watts" not in reset and "went back" in reset["energy_note"]
    # with power samples beside a stuck counter, those are used (and say the counter was stuck)
    sampled = summarize_window(series(lambda t: {"energy_joules": 1000.0, "power_watts": 250.0}), 2.0, 6.0)
    assert sampled["power_source"] == "power_samples" and sampled["power_watts"] == pytest.approx(250.0)
    assert "did not advance" in sampled["energy_note"]
    zero = summarize_window(series(lambda t: {"power_watts": 0.0}), 2.0, 6.0)
    assert "power_watts" not in zero and zero["power_note"] == "every power reading around the measured window was 0 W"


def test_a_failing_probe_is_counted_not_zero():
    class Broken:
        def read(self):
            raise OSError("device gone")

    sampler = Sampler(Broken(), hz=50).start()
    time.sleep(0.5)
    assert sampler.stop() == []
    assert sampler.failed_reads >= 2 and sampler.last_error == "OSError: device gone"


def rapl_zone(root: Path, index: int, energy_uj: int, name: str | None = None) -> Path:
    zone = root / f"intel-rapl:{index}"
    zone.mkdir(parents=True)
    (zone / "name").write_text(f"{name or f'package-{index}'}\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    return zone


def test_the_platform_zone_is_not_summed_with_the_packages_it_includes(tmp_path):
    """A laptop or workstation kernel lists ``psys`` (the whole platform) beside ``package-0``:
    the CPU's energy is the package's alone."""
    package, platform = rapl_zone(tmp_path, 0, 1_000_000), rapl_zone(tmp_path, 1, 5_000_000, name="psys")
    rapl = RaplReader(tmp_path)
    (package / "energy_uj").write_text("3000000\n")  # +2 J
    (platform / "energy_uj").write_text("9000000\n")  # +4 J, the package's 2 J among them
    assert rapl.read() == {"package-0": pytest.approx(2.0)}
    assert rapl.total_joules() == pytest.approx(2.0)



def test_packages_of_several_dies_are_read_each(tmp_path):
    """The kernel names a die's zone package-N-die-M where a package has several dies."""
    zones = [rapl_zone(tmp_path, i, 1_000_000, name=f"package-{i // 2}-die-{i % 2}") for i in range(4)]
    rapl = RaplReader(tmp_path)
    for zone in zones:
        (zone / "energy_uj").write_text("2000000\n")  # +1 J each
    assert rapl.read() == {f"package-{i // 2}-die-{i % 2}": pytest.approx(1.0) for i in range(4)}
    assert rapl.total_joules() == pytest.approx(4.0)


def test_an_unreadable_rapl_package_is_absent_not_a_stale_total(tmp_path):
    zone0, zone1 = rapl_zone(tmp_path, 0, 1_000_000), rapl_zone(tmp_path, 1, 2_000_000)
    rapl = RaplReader(tmp_path)
    (zone0 / "energy_uj").write_text("3000000\n")
    (zone1 / "energy_uj").write_text("2500000\n")
    assert rapl.read() == {"package-0": 2.0, "package-1": 0.5}
    (zone1 / "energy_uj").unlink()  # the file cannot be read now
    (zone0 / "energy_uj").write_text("4000000\n")
    assert rapl.read() == {"package-0": 3.0}  # package-1 is not "still 0.5 J": it is unread
    assert rapl.total_joules() is None  # a sum over some packages is not the CPU's energy
    (zone1 / "energy_uj").write_text("2700000\n")
    assert rapl.total_joules() == pytest.approx(3.0 + 0.7)  # read again: nothing it spent meanwhile is lost


def test_a_package_unreadable_from_the_start_gives_no_total(tmp_path, caplog):
    rapl_zone(tmp_path, 0, 1_000_000)
    (rapl_zone(tmp_path, 1, 1_000_000) / "energy_uj").unlink()
    rapl = RaplReader(tmp_path)
    assert rapl.available and rapl.total_joules() is None
    assert "intel-rapl:1/energy_uj is not readable" in rapl.reason
    caplog.set_level("WARNING", logger=host.log.name)
    collector = HostCollector("node1", rapl=rapl)
    assert [s.labels["domain"] for s in collector.collect() if "domain" in s.labels] == ["package-0"]
    assert "CPU runs report no power" in caplog.text


def test_host_gauges_are_psutils_readings_in_base_units(tmp_path):
    """The real psutil: memory as psutil reads it (bytes), CPU utilization a ratio (a busy half
    second in between makes it well above 0 and never above 1), the load averages as the kernel's."""
    import os

    import psutil

    collector = HostCollector("node1", rapl=RaplReader(tmp_path / "no-powercap"))
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:  # load for the utilization to show
        pass
    samples = {(s.metric.name, s.labels.get("period", "")): s.value for s in collector.collect()}
    memory = psutil.virtual_memory()
    assert samples[("sixdim_host_memory_total_bytes", "")] == memory.total
    used = samples[("sixdim_host_memory_used_bytes", "")]
    assert abs(used - (memory.total - memory.available)) < 0.05 * memory.total and used < memory.total
    assert 0.2 <= samples[("sixdim_host_cpu_utilization_ratio", "")] <= 1.0
    load = dict(zip(("1m", "5m", "15m"), os.getloadavg()))
    for period in ("1m", "5m", "15m"):
        assert samples[("sixdim_host_load_average", period)] == pytest.approx(load[period], abs=0.5)
    assert not any(name == "sixdim_host_rapl_energy_joules_total" for name, _ in samples)  # none readable here


def test_an_average_never_leaves_the_range_of_what_was_read():
    """CI saw a run whose memory stayed at 263,720,960 bytes report an average of 263,720,960.00000003, above
    its own peak: the trapezoids' rounding.  Over 2,000 random sample times of a constant series, 30% of the
    averages came out a last digit above it.  The average of readings lies within them, whatever the sum's
    rounding; and the window summary's average memory is never above its peak."""
    import random

    rng = random.Random(1)
    constant = 263_720_960.0
    for _ in range(2000):
        times = sorted(rng.uniform(1000, 1010) for _ in range(rng.randint(3, 30)))
        start = times[0] + rng.random() * (times[1] - times[0])
        end = times[-1] - rng.random() * (times[-1] - times[-2])
        assert time_average([(t, constant) for t in times], start, end) == constant
        varying = [(t, constant + rng.choice((0.0, 4096.0))) for t in times]
        assert constant <= time_average(varying, start, end) <= constant + 4096
        samples = [TelemetrySample(t, memory_bytes=value) for t, value in varying]
        figures = summarize_window(samples, start, end)
        assert figures["memory_average_bytes"] <= figures["memory_peak_bytes"], figures
