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
  ``power_capped``, ``thermal_slowdown`` and ``hardware_slowdown`` (0 or 1 each).  These come
  from the window where it holds :data:`MIN_CLOCK_SAMPLES` samples; a shorter one (a cold case's
  timed rounds, tens of milliseconds) would only interpolate the samples around it, so they come
  from the case's power phase where it ran one that holds enough, and else from the window with a
  ``clock_span_note``.  ``clock_span`` (``timed`` or ``power_phase``) and ``clock_span_samples``
  say which span they are, and both spans' summaries are kept (``timed``, ``power_phase``).

A missing reading is never 0.  A figure needs a reading of its kind inside the window, or one on
each side of it to interpolate between (a window shorter than the sample period); readings on one
side only are not stretched over the window.  Otherwise the figure is absent and a note
(``power_note``, ``energy_note``, ``memory_note``, ``sm_clock_note``, ``memory_clock_note``,
``clock_event_note``) says why: no sample was taken, the device gives no such reading, or the
process had ended before the window could be read.  An energy counter that did not advance is
not 0 W, and a process that has exited is not a process with 0 bytes resident.

Which of these become a result's figures is the executor's choice (:mod:`sixdim.run.executor`).  The energy
over another span, a case's whole span from set-up to check (what the suites cost each device), comes from
the same counter by the same rule (:func:`counter_energy`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import psutil

from sixdim.collectors.host import STALL_CONDITIONS, RaplReader, StallMeter
from sixdim.collectors.nvml import CLOCK_EVENT_GROUPS, NvmlCollector, reason_names


@dataclass(frozen=True)
class TelemetrySample:
    time: float
    energy_joules: float | None = None
    power_watts: float | None = None
    memory_bytes: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    clock_event_mask: int | None = None
    temperature_celsius: float | None = None
    host_busy_seconds: float | None = None
    """CPU seconds the whole host has spent busy (all CPUs, from /proc/stat), cumulative."""
    own_cpu_seconds: float | None = None
    """CPU seconds the run's worker has used (its threads and its reaped children), cumulative."""
    stall_seconds: Mapping[str, float] | None = None
    """Seconds some task stalled on each resource, cumulative, by ``*_pressure_ratio`` condition name: the
    kernel's pressure stall counters, host-wide and of the worker's cgroup (:class:`StallMeter`)."""
    stall_cgroup: str | None = None
    """The worker's cgroup (as /proc names it) its ``cgroup_*`` counters were read in."""
    stall_unavailable: Mapping[str, str] | None = None
    """Why each pressure counter not in ``stall_seconds`` could not be read (one dict shared by the samples)."""


class Probe(Protocol):
    def read(self) -> TelemetrySample: ...


class GpuProbe:
    """One GPU through NVML: energy counter, power, device memory used, clocks, clock events."""

    def __init__(self, nvml: NvmlCollector, index: int):
        self._nvml, self._index = nvml, index

    def read(self) -> TelemetrySample:
        s = self._nvml.sample(self._index)
        return TelemetrySample(s.time, s.energy_joules, s.power_watts, s.memory_used_bytes,
                               s.sm_clock_hertz, s.memory_clock_hertz, s.clock_event_mask, s.temperature_celsius)


class CpuProbe:
    """A CPU run: RAPL package energy where readable, the worker's resident memory, the core clock."""

    def __init__(self, rapl: RaplReader | None):
        self._rapl = rapl if rapl is not None and rapl.available else None
        self._process: psutil.Process | None = None

    def attach(self, pid: int) -> None:
        self._process = _process(pid)

    def _resident_bytes(self) -> float | None:
        """The worker's resident memory with its live children's, or None once it has ended.

        An exited process that is not reaped yet (a zombie) still answers ``memory_info``, with
        an RSS of 0 (Linux's ``statm`` of a zombie is all zeros): that 0 is no reading, so an
        ended worker gives None and an ended child adds nothing.  Each RSS is read before the
        process is checked: one found alive after its read was alive during it."""
        if self._process is None:
            return None
        try:
            total = self._process.memory_info().rss
            if not _alive(self._process):
                return None
            for child in self._process.children(recursive=True):
                try:
                    rss = child.memory_info().rss
                    if _alive(child):
                        total += rss
                except psutil.Error:
                    pass
            return float(total)
        except psutil.Error:
            return None

    def read(self) -> TelemetrySample:
        frequency = psutil.cpu_freq()
        return TelemetrySample(
            time=time.monotonic(),
            energy_joules=self._rapl.total_joules() if self._rapl else None,
            memory_bytes=self._resident_bytes(),
            sm_clock_hertz=frequency.current * 1e6 if frequency and frequency.current else None,
        )


def _process(pid: int) -> psutil.Process | None:
    """The worker's process, or None where it is already gone."""
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _alive(process: psutil.Process) -> bool:
    """Running and not a zombie (``is_running`` also rules out a reused PID)."""
    return process.is_running() and process.status() != psutil.STATUS_ZOMBIE


class CpuMeter:
    """The host's busy CPU seconds and the run's own, read with every sample: their difference over
    a case's span is the CPU that other processes took (the ``other_cpu_ratio`` condition).

    Both are cumulative counters (``/proc/stat`` and the worker's ``/proc/PID/stat``), so two reads
    bracketing a span measure it exactly, and each read costs one small file.  The worker's children
    count once reaped; rank processes that are still running (all-reduce's) count as "other" in every
    run alike, so a comparison between runs of one series is not misled by them."""

    def __init__(self, stalls: StallMeter | None = None) -> None:
        self._process: psutil.Process | None = None
        self.stalls = stalls if stalls is not None else StallMeter()
        """The kernel's pressure stall counters, read with the CPU times (the ``*_pressure_ratio`` conditions)."""

    def attach(self, pid: int) -> None:
        self._process = _process(pid)
        self.stalls.attach(pid)

    def read(self) -> tuple[float | None, float | None]:
        try:
            times = psutil.cpu_times()
            # guest time is already in user and nice on Linux; idle and iowait are not busy
            busy: float | None = sum(times) - times.idle - sum(getattr(times, name, 0.0) for name in (
                "iowait", "guest", "guest_nice"))
        except (OSError, psutil.Error):
            busy = None
        own = None
        if self._process is not None:
            try:
                t = self._process.cpu_times()
                own = t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                own = None
        return busy, own


class Sampler:
    """Reads a probe at a fixed rate in a background thread, from start() to stop()."""

    def __init__(self, probe: Probe, hz: float, cpu: CpuMeter | None = None):
        self._probe = probe
        self._cpu = cpu
        self._period = 1.0 / hz
        self._next_time = float("inf")
        """When the thread takes its next read (monotonic): no sample can come before it."""
        self._samples: list[TelemetrySample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="telemetry-sampler")
        self.failed_reads = 0
        """Reads that raised: each is a missing sample, counted so a record can say why it has none."""
        self.last_error = ""

    def _take(self) -> None:
        try:
            sample = self._probe.read()
            if self._cpu is not None:
                busy, own = self._cpu.read()
                stalls, cgroup, why = self._cpu.stalls.read()
                sample = replace(sample, host_busy_seconds=busy, own_cpu_seconds=own, stall_seconds=stalls,
                                 stall_cgroup=cgroup, stall_unavailable=why)
            self._samples.append(sample)
        except Exception as exc:  # a failed read is a missing sample, never a dead agent
            self.failed_reads += 1
            self.last_error = f"{type(exc).__name__}: {exc}"

    def _loop(self) -> None:
        while not self._stop.wait(max(0.0, self._next_time - time.monotonic())):
            self._take()
            self._next_time += self._period

    def start(self) -> Sampler:
        """Take the first read now, before the caller goes on, then one every period on a thread: whatever the
        caller starts next (a worker, its first case) begins after a reading, so the counter brackets it."""
        self._take()
        self._next_time = time.monotonic() + self._period
        self._thread.start()
        return self

    def samples_after(self, moment: float, most: float | None = None) -> list[TelemetrySample]:
        """The samples so far, once one was taken after ``moment`` (monotonic) so that a window ending then is
        bracketed, as :meth:`stop`'s last sample brackets the last one; waits at most two sample periods, and
        at most ``most`` seconds where given, and not at all where the next read is due after that (a sampler
        slower than the wait: sleeping would only delay the caller)."""
        wait = 2 * self._period + 0.05
        deadline = time.monotonic() + (wait if most is None else min(wait, most))
        if self._next_time > deadline and not (self._samples and self._samples[-1].time > moment):
            return list(self._samples)
        while not (self._samples and self._samples[-1].time > moment) and time.monotonic() < deadline \
                and self._thread.is_alive():
            time.sleep(min(0.01, self._period))
        return list(self._samples)

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
    """The series' time-weighted mean over [start, end], held within the lowest and highest value over the span:
    the trapezoids' sum rounds, and a constant series came out a last digit above itself (its own peak)."""
    values = [v for _, v in _clip(points, start, end)]
    return min(max(integral(points, start, end) / (end - start), min(values)), max(values))


def _missing_reason(points: Points, taken: int, start: float, end: float, what: str,
                    span: str = "measured window") -> str | None:
    """Why ``points`` cannot give the ``span`` [start, end] its ``what`` figure; None where they can.

    They can with a reading inside the span, or one on each side of it (a span between two
    samples).  Readings on one side only would be held across the span: a value nobody read
    there, and a zero where the held value is one."""
    duration = end - start
    if not points:
        if not taken:
            return f"no telemetry sample was taken around the {duration:.3g} s {span}"
        return f"none of the {taken} telemetry samples had a {what} reading"
    if any(start <= t <= end for t, _ in points) or (points[0][0] <= start and points[-1][0] >= end):
        return None
    if points[-1][0] < start:
        return (f"no {what} reading during or after the {duration:.3g} s {span}: the last was taken "
                f"{start - points[-1][0]:.3g} s before it began (the process had ended, or the device "
                f"stopped answering)")
    return (f"no {what} reading before the {duration:.3g} s {span} ended: the first was taken "
            f"{points[0][0] - end:.3g} s after it (the process had not started yet, or the {span} ended "
            f"before the first sample)")


def counter_energy(samples: list[TelemetrySample], start: float, end: float,
                   span: str = "measured window") -> tuple[float | None, str | None]:
    """The device's energy over [start, end] (monotonic) from its energy counter (NVML's total energy on a
    GPU, RAPL's packages on a CPU), interpolated between the readings either side of each end: (joules,
    None), or (None, why not).

    The counter must be read at or before the start and at or after the end: a span the samples do not
    bracket would be extrapolated, a figure nobody read.  A counter that did not advance (or went back: a
    driver reload, a reset) is no reading of 0 J.  One definition for a run's measured window and for the
    whole span of a case (the device energy the suite's cases spent, :mod:`sixdim.run.executor`)."""
    duration = end - start
    energy = _series(samples, "energy_joules")
    note = _missing_reason(energy, len(samples), start, end, "energy counter", span)
    if note is None and not (energy[0][0] <= start and energy[-1][0] >= end):
        note = f"the energy counter was not read both before and after the {span}"
    if note is not None:
        return None, note
    joules = value_at(energy, end) - value_at(energy, start)
    if joules > 0:
        return joules, None
    return None, (f"the energy counter did not advance over the {duration:.3g} s {span}" if joules == 0
                  else f"the energy counter went back by {-joules:.3g} J over the {span} (reset?)")


def _power(samples: list[TelemetrySample], start: float, end: float) -> dict[str, Any]:
    """Energy and power from the counter, else from power samples; notes where either is missing.

    A counter that did not advance (or went backwards: a driver reload) is no reading of 0 J."""
    duration = end - start
    joules, energy_note = counter_energy(samples, start, end)
    if joules is not None:
        return {"energy_joules": joules, "power_watts": joules / duration, "power_source": "energy_counter"}
    power = _series(samples, "power_watts")
    power_note = _missing_reason(power, len(samples), start, end, "power")
    if power_note is None:
        watts = time_average(power, start, end)
        if watts > 0:
            return {"energy_joules": watts * duration, "power_watts": watts, "power_source": "power_samples",
                    "energy_note": energy_note}
        power_note = "every power reading around the measured window was 0 W"
    return {"energy_note": energy_note, "power_note": power_note}


def _memory(samples: list[TelemetrySample], start: float, end: float) -> dict[str, Any]:
    """Time-weighted average and peak memory, or a note saying why there are none."""
    memory = _series(samples, "memory_bytes")
    note = _missing_reason(memory, len(samples), start, end, "memory")
    if note is not None:
        return {"memory_note": note}
    # whole bytes: the window's edges are interpolated between two readings, a peak is a count of bytes (and the
    # average no more than that peak, which rounding to whole bytes may have taken below an interpolated edge)
    peak = float(round(max(v for _, v in _clip(memory, start, end))))
    return {"memory_average_bytes": min(time_average(memory, start, end), peak), "memory_peak_bytes": peak}


def _clocks(samples: list[TelemetrySample], start: float, end: float, span: str) -> dict[str, Any]:
    """Average and lowest SM and memory clocks, each with a note where it is missing."""
    figures: dict[str, Any] = {}
    for attribute, what in (("sm_clock_hertz", "SM clock"), ("memory_clock_hertz", "memory clock")):
        series = _series(samples, attribute)
        note = _missing_reason(series, len(samples), start, end, what, span)
        if note is not None:
            figures[attribute.replace("_hertz", "_note")] = note
            continue
        figures[attribute] = time_average(series, start, end)
        figures[attribute.replace("_hertz", "_min_hertz")] = min(v for _, v in _clip(series, start, end))
    return figures


def _clock_events(samples: list[TelemetrySample], start: float, end: float, span: str) -> dict[str, Any]:
    """Every clock event seen in the span, and its 0/1 groups; a note where there was no reading.

    A span between two samples takes the events of the sample just before it (what the device
    was doing as the span began)."""
    masks = [(s.time, s.clock_event_mask) for s in samples if s.clock_event_mask is not None]
    note = _missing_reason([(t, float(m)) for t, m in masks], len(samples), start, end, "clock-event", span)
    if note is not None:
        return {"clock_event_note": note}
    in_window = [m for t, m in masks if start <= t <= end]
    if not in_window:  # a window shorter than the sample period, between two samples
        in_window = [[m for t, m in masks if t <= start][-1]]
    combined = 0
    for mask in in_window:
        combined |= mask
    reasons = reason_names(combined)
    figures: dict[str, Any] = {"clock_event_reasons": reasons}
    for group, members in CLOCK_EVENT_GROUPS.items():
        figures[group] = 1.0 if members.intersection(reasons) else 0.0
    return figures


CONDITION_EVENTS: tuple[str, ...] = ("sw_power_cap", "hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown",
                                     "hw_power_brake_slowdown", "sync_boost", "applications_clocks_setting")
"""The clock events whose share of a span is a condition (``<event>_ratio``, sixdim.core.conditions)."""


def _span(samples: list[TelemetrySample], attribute: str, start: float, end: float) -> list[TelemetrySample]:
    """The samples with ``attribute`` inside [start, end]; for a span shorter than the sample period,
    the last one before it (what the device was doing as it began)."""
    having = [s for s in samples if getattr(s, attribute) is not None]
    inside = [s for s in having if start <= s.time <= end]
    if inside:
        return inside
    before = [s for s in having if s.time <= start]
    return before[-1:]


def window_conditions(samples: list[TelemetrySample], start: float, end: float) -> dict[str, Any]:
    """The ``window`` conditions of a case's span (sixdim.core.conditions): the share of samples with
    each clock event, the mean SM clock and temperature, the share of the host's CPU other processes
    took, and the share of the span some task stalled on CPU, memory and IO (host-wide and in the worker's
    cgroup); each one that cannot be had is listed under ``unavailable`` with the reason."""
    out: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    masked = _span(samples, "clock_event_mask", start, end)
    if masked:
        for event in CONDITION_EVENTS:
            out[f"{event}_ratio"] = sum(1 for s in masked if event in reason_names(s.clock_event_mask or 0)) / len(
                masked)
    else:
        for event in CONDITION_EVENTS:
            unavailable[f"{event}_ratio"] = "no clock-event reading around the span"
    for attribute in ("sm_clock_hertz", "temperature_celsius"):
        points = _series(samples, attribute)
        note = _missing_reason(points, len(samples), start, end, attribute.rsplit("_", 1)[0].replace("_", " "))
        if note is None:
            out[attribute] = time_average(points, start, end)
        else:
            unavailable[attribute] = note
    # the two readings that bracket the span most closely (a span shorter than the sample period is
    # measured over the period around it): the last at or before its start, the first at or after its end
    cpu = [s for s in samples if s.host_busy_seconds is not None and s.own_cpu_seconds is not None]
    a = ([s for s in cpu if s.time <= start] or cpu[:1])[-1] if cpu else None
    later = [s for s in cpu if a is not None and s.time > a.time]
    b = ([s for s in later if s.time >= end] or later[-1:])[0] if later else None
    if a is not None and b is not None:
        capacity = (b.time - a.time) * (psutil.cpu_count() or 1)
        other = ((b.host_busy_seconds or 0.0) - (a.host_busy_seconds or 0.0)
                 - ((b.own_cpu_seconds or 0.0) - (a.own_cpu_seconds or 0.0)))
        out["other_cpu_ratio"] = min(1.0, max(0.0, other / capacity))
    else:
        unavailable["other_cpu_ratio"] = "the host's and the run's CPU times were not read on both sides of the span"
    for name, (where, _) in STALL_CONDITIONS.items():
        share, why = _stall_share(samples, name, start, end, where == "cgroup")
        if share is None:
            unavailable[name] = why
        else:
            out[name] = share
    if unavailable:
        out["unavailable"] = unavailable
    return out


def _stall_share(samples: list[TelemetrySample], name: str, start: float, end: float,
                 cgroup: bool) -> tuple[float | None, str]:
    """The share of the span [start, end] some task stalled on a resource (the ``name`` pressure condition),
    from the stall counter read at the samples that bracket it most closely, as ``other_cpu_ratio`` is: the
    last at or before its start, the first at or after its end (a span shorter than the sample period is
    measured over the period around it).  A cgroup's counter counts only when both were read in the same
    cgroup.  (None, why) where it cannot be had."""
    read = [s for s in samples if s.stall_seconds is not None and name in s.stall_seconds]
    if not read:
        why = next((s.stall_unavailable[name] for s in reversed(samples)
                    if s.stall_unavailable is not None and name in s.stall_unavailable), "")
        return None, why or "no pressure stall reading around the span"
    a = ([s for s in read if s.time <= start] or read[:1])[-1]
    later = [s for s in read if s.time > a.time]
    b = ([s for s in later if s.time >= end] or later[-1:])[0] if later else None
    if b is None or a.stall_seconds is None or b.stall_seconds is None:
        return None, "the pressure stall counter was not read on both sides of the span"
    if cgroup and a.stall_cgroup != b.stall_cgroup:
        return None, f"the worker moved from cgroup {a.stall_cgroup} to {b.stall_cgroup} during the span"
    stalled = b.stall_seconds[name] - a.stall_seconds[name]
    return min(1.0, max(0.0, stalled / (b.time - a.time))), ""


MIN_CLOCK_SAMPLES = 3
"""The fewest samples with a clock reading a span must hold for its clock and clock-event figures to be
read from it rather than interpolated between the samples around it (a cold case's timed rounds last
tens of milliseconds, shorter than the 100 ms sample period)."""

CLOCK_READINGS: tuple[str, ...] = ("sm_clock_hertz", "memory_clock_hertz", "clock_event_mask")
"""The readings the clock and clock-event figures come from."""

TIMED, POWER_PHASE = "timed", "power_phase"
"""The spans a run's clock figures can come from: its timed rounds (the measured window) and its
power phase (the back-to-back calls its power figure comes from, where the power cap engages)."""

_SPAN_WORDS = {TIMED: "measured window", POWER_PHASE: "power phase"}


def clock_samples(samples: list[TelemetrySample], start: float, end: float) -> int:
    """How many samples inside [start, end] hold a clock reading: the fewest over the readings the
    device gives (those any sample has), so that every clock figure of the span has that many."""
    given = [a for a in CLOCK_READINGS if any(getattr(s, a) is not None for s in samples)]
    if not given:
        return 0
    return min(sum(1 for s in samples if start <= s.time <= end and getattr(s, a) is not None) for a in given)


def summarize_clocks(samples: list[TelemetrySample], start: float, end: float, span: str = TIMED) -> dict[str, Any]:
    """The clock and clock-event figures of one span (``timed`` or ``power_phase``), with its length and
    how many samples with a clock reading it holds (``seconds``, ``samples``)."""
    figures: dict[str, Any] = {"seconds": end - start, "samples": clock_samples(samples, start, end)}
    figures.update(_clocks(samples, start, end, _SPAN_WORDS[span]))
    figures.update(_clock_events(samples, start, end, _SPAN_WORDS[span]))
    return figures


def _clock_span(samples: list[TelemetrySample], start: float, end: float,
                power_phase: tuple[float, float] | None) -> dict[str, Any]:
    """The clock and clock-event figures from the span that holds enough samples, and which span that is.

    The timed window where it holds :data:`MIN_CLOCK_SAMPLES` samples with a clock reading; else the
    power phase where the case ran one that does; else the timed window still, interpolated from the
    samples around it, with a ``clock_span_note`` saying so.  Both spans' summaries are kept
    (``timed``, ``power_phase``); ``clock_span`` and ``clock_span_samples`` say which one the
    figures are and from how many samples."""
    spans = {TIMED: summarize_clocks(samples, start, end, TIMED)}
    if power_phase is not None and power_phase[1] > power_phase[0]:
        spans[POWER_PHASE] = summarize_clocks(samples, *power_phase, POWER_PHASE)
    timed = spans[TIMED]
    phase = spans.get(POWER_PHASE)
    note = None
    if timed["samples"] >= MIN_CLOCK_SAMPLES:
        chosen = TIMED
    else:
        few = (f"the {timed['seconds']:.3g} s measured window holds {timed['samples']} sample(s) with a clock "
               f"reading, fewer than {MIN_CLOCK_SAMPLES}")
        if phase is not None and phase["samples"] >= MIN_CLOCK_SAMPLES:
            chosen = POWER_PHASE
            note = f"{few}: the clock and clock-event figures are the {phase['seconds']:.3g} s power phase's"
        else:
            chosen = TIMED
            why = ("the case ran no power phase" if phase is None else
                   f"the {phase['seconds']:.3g} s power phase holds only {phase['samples']}")
            note = f"{few} and {why}: the clock and clock-event figures are interpolated from fewer samples"
    figures = {k: v for k, v in spans[chosen].items() if k not in ("seconds", "samples")}
    figures.update(clock_span=chosen, clock_span_samples=spans[chosen]["samples"], **spans)
    if note is not None and any(k in figures for k in ("sm_clock_hertz", "memory_clock_hertz", "clock_event_reasons")):
        figures["clock_span_note"] = note  # with no clock figure at all, their own notes say why
    return figures


def summarize_window(samples: list[TelemetrySample], start: float, end: float,
                     power_phase: tuple[float, float] | None = None) -> dict[str, Any]:
    """Figures (base units) for the measured window [start, end]; absent, with a note, where
    nothing was measured (see the module's docstring).

    Power, energy and memory are the window's.  The clock and clock-event figures are the window's
    where it holds :data:`MIN_CLOCK_SAMPLES` samples, else the ``power_phase``'s (monotonic start
    and end) where it does: ``clock_span`` says which, and both spans' summaries are kept."""
    if end <= start:
        raise ValueError(f"empty measured window: start {start} >= end {end}")
    duration = end - start
    inside = sum(1 for s in samples if start <= s.time <= end)
    figures: dict[str, Any] = {"window_seconds": duration, "telemetry_samples": inside}
    if not inside:
        figures["window_note"] = (f"no telemetry sample was taken during the {duration:.3g} s measured window: "
                                  f"figures read just before and just after it are interpolated, the others "
                                  f"are absent")
    for part in (_power, _memory):
        figures.update(part(samples, start, end))
    figures.update(_clock_span(samples, start, end, power_phase))
    return figures


def probe_for(device_type: str, nvml: NvmlCollector, gpu_index: int | None,
              rapl: RaplReader | None) -> tuple[Probe, Callable[[int], None]]:
    """The probe for a device, and the hook that tells it the worker's PID."""
    if device_type == "cuda" and gpu_index is not None:
        return GpuProbe(nvml, gpu_index), lambda pid: None
    probe = CpuProbe(rapl)
    return probe, probe.attach
