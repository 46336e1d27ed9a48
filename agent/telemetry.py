"""Telemetry over a run's measured window: power, energy, memory, clocks, throttling.

While a worker runs, a :class:`Sampler` thread in the daemon reads the device
at ``sample_hz`` (10 Hz by default).  When the worker reports the start and end
of its measured window (``time.monotonic`` marks), :func:`summarize_window`
computes over exactly that window:

- energy and average power from the device's energy counter (NVML's total
  energy, or RAPL on a CPU) interpolated at the window's edges: the exact
  average, as NVML's own docs recommend over averaging power readings;
  without a counter, the trapezoid integral of the power samples;
- time-weighted average and peak memory (``memory_average_bytes``, ``memory_peak_bytes``): the
  device-wide memory in use on a GPU (CUDA context and other processes included), the worker's
  resident memory on a CPU;
- time-weighted average SM and memory clocks, and every clock event seen, grouped into
  ``power_capped``, ``thermal_slowdown`` and ``hardware_slowdown`` (0 or 1 each).

Which of these become a result's figures is the executor's choice (:mod:`agent.executor`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import psutil

from collectors.host import RaplReader
from collectors.nvml import CLOCK_EVENT_GROUPS, NvmlCollector, reason_names


@dataclass(frozen=True)
class TelemetrySample:
    time: float
    energy_joules: float | None = None
    power_watts: float | None = None
    memory_bytes: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    clock_event_mask: int | None = None


class Probe(Protocol):
    def read(self) -> TelemetrySample: ...


class GpuProbe:
    """One GPU through NVML: energy counter, power, device memory used, clocks, clock events."""

    def __init__(self, nvml: NvmlCollector, index: int):
        self._nvml, self._index = nvml, index

    def read(self) -> TelemetrySample:
        s = self._nvml.sample(self._index)
        return TelemetrySample(s.time, s.energy_joules, s.power_watts, s.memory_used_bytes,
                               s.sm_clock_hertz, s.memory_clock_hertz, s.clock_event_mask)


class CpuProbe:
    """A CPU run: RAPL package energy where readable, the worker's resident memory, the core clock."""

    def __init__(self, rapl: RaplReader | None):
        self._rapl = rapl if rapl is not None and rapl.available else None
        self._process: psutil.Process | None = None

    def attach(self, pid: int) -> None:
        try:
            self._process = psutil.Process(pid)
        except psutil.NoSuchProcess:
            self._process = None

    def _resident_bytes(self) -> float | None:
        if self._process is None:
            return None
        try:
            total = self._process.memory_info().rss
            for child in self._process.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.NoSuchProcess:
                    pass
            return float(total)
        except psutil.NoSuchProcess:
            return None

    def read(self) -> TelemetrySample:
        frequency = psutil.cpu_freq()
        return TelemetrySample(
            time=time.monotonic(),
            energy_joules=self._rapl.total_joules() if self._rapl else None,
            memory_bytes=self._resident_bytes(),
            sm_clock_hertz=frequency.current * 1e6 if frequency and frequency.current else None,
        )


class Sampler:
    """Reads a probe at a fixed rate in a background thread, from start() to stop()."""

    def __init__(self, probe: Probe, hz: float):
        self._probe = probe
        self._period = 1.0 / hz
        self._samples: list[TelemetrySample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="telemetry-sampler")

    def _take(self) -> None:
        try:
            self._samples.append(self._probe.read())
        except Exception:  # a failed read is a missing sample, never a dead agent
            pass

    def _loop(self) -> None:
        next_time = time.monotonic()
        while not self._stop.is_set():
            self._take()
            next_time += self._period
            self._stop.wait(max(0.0, next_time - time.monotonic()))

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> list[TelemetrySample]:
        self._stop.set()
        self._thread.join()
        self._take()  # a last sample after the worker ended brackets its window
        return list(self._samples)


# ---------------------------------------------------------------------------- window maths

Points = list[tuple[float, float]]


def _series(samples: list[TelemetrySample], attribute: str) -> Points:
    return [(s.time, float(getattr(s, attribute))) for s in samples if getattr(s, attribute) is not None]


def value_at(points: Points, t: float) -> float:
    """Linear interpolation of a time series at t (clamped to its ends)."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def _clip(points: Points, start: float, end: float) -> Points:
    """The series on [start, end], with interpolated values at both edges."""
    inside = [(t, v) for t, v in points if start < t < end]
    return [(start, value_at(points, start))] + inside + [(end, value_at(points, end))]


def integral(points: Points, start: float, end: float) -> float:
    """Trapezoid integral of the series over [start, end]."""
    clipped = _clip(points, start, end)
    return sum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in zip(clipped, clipped[1:]))


def time_average(points: Points, start: float, end: float) -> float:
    return integral(points, start, end) / (end - start)


def summarize_window(samples: list[TelemetrySample], start: float, end: float) -> dict[str, Any]:
    """Figures (base units) for the measured window [start, end]; absent where nothing was measured."""
    if end <= start:
        raise ValueError(f"empty measured window: start {start} >= end {end}")
    duration = end - start
    figures: dict[str, Any] = {"window_seconds": duration, "telemetry_samples": sum(
        1 for s in samples if start <= s.time <= end)}

    energy = _series(samples, "energy_joules")
    power = _series(samples, "power_watts")
    if len(energy) >= 2 and energy[0][0] <= start and energy[-1][0] >= end:
        joules = value_at(energy, end) - value_at(energy, start)
        figures.update(energy_joules=joules, power_watts=joules / duration, power_source="energy_counter")
    elif power:
        watts = time_average(power, start, end)
        figures.update(energy_joules=watts * duration, power_watts=watts, power_source="power_samples")

    memory = _series(samples, "memory_bytes")
    if memory:
        figures["memory_average_bytes"] = time_average(memory, start, end)
        figures["memory_peak_bytes"] = max(v for _, v in _clip(memory, start, end))
    for attribute in ("sm_clock_hertz", "memory_clock_hertz"):
        series = _series(samples, attribute)
        if series:
            figures[attribute] = time_average(series, start, end)
            figures[attribute.replace("_hertz", "_min_hertz")] = min(v for _, v in _clip(series, start, end))

    masks = [s for s in samples if s.clock_event_mask is not None]
    if masks:
        in_window = [s.clock_event_mask for s in masks if start <= s.time <= end]
        if not in_window:  # a window shorter than the sample period: the sample just before it
            in_window = [max((s for s in masks if s.time <= start), key=lambda s: s.time,
                             default=masks[0]).clock_event_mask]
        combined = 0
        for mask in in_window:
            combined |= mask
        reasons = reason_names(combined)
        figures["clock_event_reasons"] = reasons
        for group, members in CLOCK_EVENT_GROUPS.items():
            figures[group] = 1.0 if members.intersection(reasons) else 0.0
    return figures


def probe_for(device_type: str, nvml: NvmlCollector, gpu_index: int | None,
              rapl: RaplReader | None) -> tuple[Probe, Callable[[int], None]]:
    """The probe for a device, and the hook that tells it the worker's PID."""
    if device_type == "cuda" and gpu_index is not None:
        return GpuProbe(nvml, gpu_index), lambda pid: None
    probe = CpuProbe(rapl)
    return probe, probe.attach
