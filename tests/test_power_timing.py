"""The timing harness's decisions that only a GPU used to show, here on fake clocks (issue 45, items 3, 6, 9, 10).

A fake clock drives everything: the kernel moves it by its length, an energy read by its cost, and a fake
NVML GPU (tests/fakenvml.py, read through the real :class:`NvmlEnergy`) keeps a total-energy counter that
steps every 100 ms, as NVML's does, and a utilization sample every sample period.  So what the power phase
decides depends on its rules alone, never on how busy this machine is, and each test takes well under a
second."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sixdim.workloads.context import RunContext
from sixdim.workloads.measure import energy, timing
from tests.fakenvml import FakeGpu, FakeNvml

CPU = torch.device("cpu")
COUNTER_STEP = 0.1
"""NVML's total energy moves about every 100 ms."""


class FakeGpuClock:
    """One fake clock for the harness (``perf_counter``, ``monotonic``, ``time``), a fake NVML GPU drawing
    ``watts`` whenever time passes, an energy read that costs ``read_seconds``, and a utilization sample of
    ``busy_percent`` every ``sample_period`` seconds."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, watts: float = 700.0, read_seconds: float = 0.0,
                 sample_period: float = 1 / 6, busy_percent: int = 100) -> None:
        self.now, self.watts, self.read_seconds = 1000.0, watts, read_seconds
        self.sample_period, self.busy_percent = sample_period, busy_percent
        self.next_sample = self.now
        fake_time = SimpleNamespace(perf_counter=lambda: self.now, monotonic=lambda: self.now,
                                    time=lambda: 1.8e9 + self.now)
        monkeypatch.setattr(timing, "time", fake_time)
        monkeypatch.setattr(energy, "time", fake_time)
        self.gpu = FakeGpu(utilization_samples=[])
        self.nvml = FakeNvml([self.gpu], on_call=self._nvml_called)
        self.advance(0.0)
        self.meter = energy.NvmlEnergy([self.gpu.uuid], module=self.nvml)
        assert self.meter.available, self.meter.reason

    def _nvml_called(self, name: str) -> None:
        if name == "nvmlDeviceGetTotalEnergyConsumption":
            self.advance(self.read_seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.gpu.energy_mj = round(self.watts * 1000 * COUNTER_STEP * int(self.now / COUNTER_STEP))
        while self.next_sample <= self.now:
            self.gpu.utilization_samples.append((round(self.next_sample * 1e6), self.busy_percent))
            self.next_sample += self.sample_period

    def kernel(self, seconds: float):
        return lambda: self.advance(seconds)

    def context(self) -> RunContext:
        return RunContext(device="cpu", energy=self.meter)


# ---------------------------------------------------------------------------- item 3: cold efficiency

def test_a_cold_cases_efficiency_is_the_power_phases_own_warm_rate_and_says_so(monkeypatch):
    """1760×128×1760 fp16 on an H200: 10.2 µs a call timed cold, 6.7 µs a call in the power phase (data in
    L2).  flop_per_joule must be the phase's own rate over its power, and the record must say the phase ran
    warm; the cold rate over the phase's power would be a third lower."""
    gpu = FakeGpuClock(monkeypatch)
    work = 2 * 1760 * 128 * 1760
    cold_seconds = 10.2e-6
    figures, details = timing.power_phase(gpu.kernel(6.7e-6), CPU, gpu.context(), seconds=1.0,
                                          seconds_per_unit=cold_seconds, work_per_call=work, timed_regime="cold")
    phase = details["power"]
    assert figures["power_watts"] == pytest.approx(700.0, rel=0.03)
    assert phase["cache_regime"] == "warm"
    assert phase["flop_per_second"] == pytest.approx(work / 6.7e-6, rel=1e-6)
    assert phase["flop_per_second"] == pytest.approx(work * phase["calls"] / phase["seconds"], rel=1e-9)
    assert figures["flop_per_joule"] == pytest.approx(phase["flop_per_second"] / figures["power_watts"], rel=1e-9)
    cold_efficiency = work / cold_seconds / figures["power_watts"]
    assert figures["flop_per_joule"] == pytest.approx(cold_efficiency * 10.2 / 6.7, rel=1e-3)
    assert "warm" in phase["efficiency_note"] and "cold" in phase["efficiency_note"]


def test_a_warm_case_needs_no_efficiency_note(monkeypatch):
    gpu = FakeGpuClock(monkeypatch)
    figures, details = timing.power_phase(gpu.kernel(1e-3), CPU, gpu.context(), seconds=1.0, seconds_per_unit=1e-3,
                                          work_per_call=1e9, timed_regime="warm")
    assert figures["flop_per_joule"] == pytest.approx(1e9 / 1e-3 / 700.0, rel=0.03)
    assert "efficiency_note" not in details["power"]


# ---------------------------------------------------------------------------- item 10: leftovers

def test_the_alignment_blocks_outlast_a_measured_energy_read(monkeypatch):
    """An H200's NVML energy read costs 5.8-6.8 ms: a 5 ms alignment block would run dry while the host reads.
    The phase measures the read and sizes its alignment blocks from it."""
    gpu = FakeGpuClock(monkeypatch, read_seconds=6.5e-3)
    figures, details = timing.power_phase(gpu.kernel(0.5e-3), CPU, gpu.context(), seconds=1.0,
                                          seconds_per_unit=0.5e-3)
    phase = details["power"]
    assert phase["read_seconds"] == pytest.approx(6.5e-3, rel=1e-6)
    assert phase["align_block_seconds"] >= timing.ALIGN_READ_MARGIN * phase["read_seconds"]
    assert phase["calls_per_alignment_read"] * 0.5e-3 == pytest.approx(phase["align_block_seconds"], rel=1e-9)
    assert figures["power_watts"] > 0


def test_a_cheap_read_keeps_the_short_alignment_blocks(monkeypatch):
    gpu = FakeGpuClock(monkeypatch, read_seconds=0.2e-3)
    _, details = timing.power_phase(gpu.kernel(0.5e-3), CPU, gpu.context(), seconds=1.0, seconds_per_unit=0.5e-3)
    assert details["power"]["align_block_seconds"] == pytest.approx(timing.ALIGN_READING_SECONDS, rel=1e-9)


def test_too_few_utilization_samples_refuse_the_power_and_say_why(monkeypatch):
    """NVML keeps a utilization sample every 1/6 s to 1 s by product: a 1 s phase may hold only 1 or 2.
    Unchecked for idle gaps, the power is not reported; the count is recorded."""
    gpu = FakeGpuClock(monkeypatch, sample_period=0.6)
    figures, details = timing.power_phase(gpu.kernel(1e-3), CPU, gpu.context(), seconds=1.0, seconds_per_unit=1e-3,
                                          work_per_call=1.0)
    assert figures == {}, figures
    assert "utilization sample(s)" in details["power_note"] and "at least 3" in details["power_note"]
    assert details["power"]["gpu_busy_samples"] < energy.MIN_BUSY_SAMPLES
    assert "gpu_busy_share" not in details["power"]
    assert details["power_refused"] is True  # the daemon's window must not fill it in (issue 45, item 1)


def test_a_busy_share_is_recorded_with_its_sample_count(monkeypatch):
    gpu = FakeGpuClock(monkeypatch, busy_percent=97)
    figures, details = timing.power_phase(gpu.kernel(1e-3), CPU, gpu.context(), seconds=1.0, seconds_per_unit=1e-3)
    phase = details["power"]
    assert phase["gpu_busy_share"] == pytest.approx(0.97)
    assert phase["gpu_busy_samples"] >= 6  # a sample every 1/6 s over a phase of just over 1 s
    assert figures["power_watts"] == pytest.approx(700.0, rel=0.03)


# ---------------------------------------------------------------------------- item 6: graph or loop

class FakeEvent:
    """A CUDA event on a fake device timeline: ``elapsed_time`` is what the device took between two records,
    in milliseconds, as torch's is; each record and wait is logged for the order of operations."""

    log: list[str] = []

    def __init__(self, device: FakeStream) -> None:
        self.device, self.at = device, 0.0

    def record(self) -> None:
        self.at = self.device.done_at()
        self.log.append("record")

    def synchronize(self) -> None:
        self.log.append("wait")

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1e3


class FakeStream:
    """A device queue on the fake clock: each kernel starts when both the host has launched it and the device
    has finished the one before, so a kernel whose host dispatch is longer than its device time leaves the
    device idle between calls, and events around a loop of them measure the host's pace."""

    def __init__(self, clock: FakeGpuClock, host_seconds: float, device_seconds: float) -> None:
        self.clock, self.host, self.device = clock, host_seconds, device_seconds
        self.free_at = clock.now

    def done_at(self) -> float:
        return max(self.free_at, self.clock.now)

    def kernel(self) -> None:
        FakeEvent.log.append("call")
        self.clock.advance(self.host)
        self.free_at = max(self.free_at, self.clock.now) + self.device

    def spin(self) -> None:
        FakeEvent.log.append("spin")
        self.free_at = max(self.free_at, self.clock.now) + 20e-6

    def event(self) -> FakeEvent:
        return FakeEvent(self)


@pytest.mark.parametrize("host_us, device_us, graph", [
    (60, 55, True),     # sparse GEMM or a convolution's backward: host dispatch above its GPU time
    (60, 100, True),    # the host takes more than half the device time: the queue runs dry on any hiccup
    (60, 1000, False),  # the device is far behind the host: a loop keeps it busy
    (5, 200, False),
])
def test_a_host_bound_kernel_is_captured_whatever_its_host_time(monkeypatch, host_us, device_us, graph):
    """The old rule captured a kernel only when its host-timed call was under 50 µs, so a 60 µs dispatch of a
    55 µs kernel was timed over a Python loop that kept the GPU waiting.  The rule now compares host dispatch
    with device time, both measured over the same calls."""
    clock = FakeGpuClock(monkeypatch)
    stream = FakeStream(clock, host_us * 1e-6, device_us * 1e-6)
    host, device = timing.launch_profile(stream.kernel, 20, event=stream.event, spin=stream.spin)
    assert host == pytest.approx(host_us * 1e-6)
    assert device == pytest.approx(max(host_us, device_us) * 1e-6, rel=0.05)
    assert timing.host_bound(host, device) is graph
    per_call = max(host_us, device_us) * 1e-6  # what calibration's synchronized blocks measure
    assert timing.wants_graph(False, per_call, lambda: (host, device)) is graph


def test_a_short_or_asked_for_kernel_is_captured_without_a_probe():
    def probe() -> tuple[float, float]:
        raise AssertionError("no launch profile needed")

    assert timing.wants_graph(False, 20e-6, probe) and timing.wants_graph(True, 1.0, probe)


# ---------------------------------------------------------------------------- item 9: warm-call latency

def test_the_start_event_is_recorded_behind_a_spin_on_the_stream(monkeypatch):
    """The start event of a warm call is taken when the stream is already busy (a short spin queued first), so
    the host's launch of the call happens while the device still spins and is not counted as latency."""
    clock = FakeGpuClock(monkeypatch)
    stream = FakeStream(clock, host_seconds=5e-6, device_seconds=30e-6)
    FakeEvent.log = []
    seconds = timing._events(stream.kernel, 1, event=stream.event, spin=stream.spin)
    assert FakeEvent.log == ["spin", "record", "call", "record", "wait"]
    assert seconds == pytest.approx(30e-6)  # without the spin: 35 µs, the launch counted


def test_the_spin_outlasts_an_event_record_and_a_launch_yet_stays_brief():
    """The spin's length in cycles: above the 10-20 µs the host takes to record the start event and launch
    a graph, even at a 2 GHz clock; at most 0.2 ms at 0.5 GHz (200 latency samples: 40 ms of spinning)."""
    assert timing.SPIN_CYCLES / 2e9 >= 25e-6 and timing.SPIN_CYCLES / 0.5e9 <= 200e-6
