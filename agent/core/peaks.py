"""Fraction of peak: achieved throughput over the GPU's published dense peak.

The figures live in ``peaks.toml`` beside this module, each GPU with its source.
The table is converted to base units here (FLOP/s, bytes/s) and is the only
place a peak comes from: a GPU that no entry matches gets no ratio, never a guess.

A ratio divides the case's ``flops`` figure, which counts the work of the shape its label names
(for a padded int8/fp8 GEMM, the requested shape's 2·M·N·K, not the padded shape's), so padding
never raises it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Peak:
    name: str
    pattern: re.Pattern[str]
    source: str
    flops: dict[str, float]  # precision -> FLOP/s (operations/s for int8)
    memory_bytes_per_second: float


SAME_PEAK = {"fp8_fast": "fp8"}
"""Precisions judged against another's published peak.  ``fp8_fast`` (e4m3 ``_scaled_mm`` with
``use_fast_accum=True``) is measured against the dense FP8 tensor-core figure, the same one as
``fp8``: that headline number is the tensor cores' own rate with their own accumulator, which is
what fast accumulation runs.  NVIDIA's Hopper FP8 tensor-core peak does not include the periodic
promotion of partial sums into FP32 (CUDA-core FMAs between tensor-core instructions) that cuBLAS
performs without fast accumulation, so plain ``fp8`` is expected to fall further short of it."""


def _flops(tflops: dict[str, float]) -> dict[str, float]:
    flops = {p: float(v) * 1e12 for p, v in tflops.items()}
    flops.update({alias: flops[source] for alias, source in SAME_PEAK.items() if source in flops})
    return flops


@lru_cache(maxsize=1)
def table() -> tuple[Peak, ...]:
    data = tomllib.loads(resources.files("sixdim.core").joinpath("peaks.toml").read_text())
    return tuple(Peak(name=entry["name"], pattern=re.compile(entry["match"]), source=entry["source"],
                      flops=_flops(entry["tflops"]), memory_bytes_per_second=float(entry["memory_gbps"]) * 1e9)
                 for entry in data["gpu"])


def find(device_name: str) -> Peak | None:
    """The table entry whose pattern matches the whole device name, if any."""
    for peak in table():
        if peak.pattern.fullmatch(device_name):
            return peak
    return None


def peak_ratio(device_name: str, workload_kind: str | None, precision: str, figures: dict[str, float]) -> float | None:
    """achieved / peak for a ``flops`` or ``bandwidth`` workload on a known GPU; None otherwise.

    ``figures["flops"]`` is the workload's exported rate: for a GEMM, the useful work of the
    requested shape (padding excluded), so the ratio never credits padding."""
    peak = find(device_name)
    if peak is None or workload_kind is None:
        return None
    if workload_kind == "flops" and "flops" in figures and precision in peak.flops:
        return figures["flops"] / peak.flops[precision]
    if workload_kind == "bandwidth" and "bytes_per_second" in figures:
        return figures["bytes_per_second"] / peak.memory_bytes_per_second
    return None
