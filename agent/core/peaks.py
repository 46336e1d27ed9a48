"""Fraction of peak: achieved throughput over the GPU's published dense peak.

The figures live in ``peaks.toml`` beside this module, each GPU with its source.
The table is converted to base units here (FLOP/s, bytes/s) and is the only
place a peak comes from: a GPU that no entry matches gets no ratio, never a guess.
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


@lru_cache(maxsize=1)
def table() -> tuple[Peak, ...]:
    data = tomllib.loads(resources.files("sixdim.core").joinpath("peaks.toml").read_text())
    return tuple(Peak(name=entry["name"], pattern=re.compile(entry["match"]), source=entry["source"],
                      flops={p: float(v) * 1e12 for p, v in entry["tflops"].items()},
                      memory_bytes_per_second=float(entry["memory_gbps"]) * 1e9)
                 for entry in data["gpu"])


def find(device_name: str) -> Peak | None:
    """The table entry whose pattern matches the whole device name, if any."""
    for peak in table():
        if peak.pattern.fullmatch(device_name):
            return peak
    return None


def peak_ratio(device_name: str, workload_kind: str | None, precision: str, figures: dict[str, float]) -> float | None:
    """achieved / peak for a ``flops`` or ``bandwidth`` workload on a known GPU; None otherwise."""
    peak = find(device_name)
    if peak is None or workload_kind is None:
        return None
    if workload_kind == "flops" and "flops" in figures and precision in peak.flops:
        return figures["flops"] / peak.flops[precision]
    if workload_kind == "bandwidth" and "bytes_per_second" in figures:
        return figures["bytes_per_second"] / peak.memory_bytes_per_second
    return None
