"""Telemetry of a host-wide run: every GPU it uses, read together as one device.

A host-wide workload (all-reduce, card linearity) loads all the host's GPUs at once, so its
window figures must cover all of them, not the first GPU only: energy and power are the sums
over the GPUs (what the host spent on the run), memory is the sum of device memory in use.
"""

from __future__ import annotations

from collections.abc import Sequence

from sixdim.collectors.nvml import NvmlCollector
from sixdim.run.telemetry import TelemetrySample


def _total(values: Sequence[float | None]) -> float | None:
    """The sum, or None if any GPU lacks the reading: a partial sum would pass for the whole."""
    if not values or any(v is None for v in values):
        return None
    return float(sum(v for v in values if v is not None))


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


class MultiGpuProbe:
    """Several GPUs through NVML, as one :class:`TelemetrySample` per read.

    - ``energy_joules``, ``power_watts``, ``memory_bytes``: sums over the GPUs (absent if any GPU
      lacks the field);
    - ``sm_clock_hertz``, ``memory_clock_hertz``: the mean over the GPUs that report them (a clock
      has no meaningful sum);
    - ``clock_event_mask``: the union (OR) of the GPUs' masks, so a slowdown on any GPU shows;
    - ``temperature_celsius``: the hottest GPU's;
    - ``time``: the first GPU's reading time, which is taken before any query is made.
    """

    def __init__(self, nvml: NvmlCollector, indices: Sequence[int]):
        if not indices:
            raise ValueError("MultiGpuProbe needs at least one GPU")
        self._nvml, self._indices = nvml, list(indices)

    def read(self) -> TelemetrySample:
        samples = [self._nvml.sample(index) for index in self._indices]
        masks = [s.clock_event_mask for s in samples if s.clock_event_mask is not None]
        mask: int | None = None
        for value in masks:
            mask = value if mask is None else mask | value
        return TelemetrySample(
            time=samples[0].time,
            energy_joules=_total([s.energy_joules for s in samples]),
            power_watts=_total([s.power_watts for s in samples]),
            memory_bytes=_total([s.memory_used_bytes for s in samples]),
            sm_clock_hertz=_mean([s.sm_clock_hertz for s in samples]),
            memory_clock_hertz=_mean([s.memory_clock_hertz for s in samples]),
            clock_event_mask=mask,
            temperature_celsius=max((s.temperature_celsius for s in samples if s.temperature_celsius is not None),
                                    default=None),
        )
