"""Memory bandwidth: device-to-device copy, host-to-device and device-to-host, in bytes per second.

Bytes moved: a device-to-device copy reads and writes every byte, so it moves
2 × size (as CUDA's bandwidthTest counts it); a host-to-device or device-to-host
copy moves the size once, from or to pinned host memory.  On the CPU the
"device" is host memory: ``d2d`` is a host memory copy (2 × size), and there is
no separate device to copy to or from (``h2d``, ``d2h`` are unsupported).

Imports torch: the worker process only.
"""

from __future__ import annotations

from typing import Any

import torch

from sixdim.workloads.context import RunContext, Unsupported, WorkloadOutput
from sixdim.workloads.measure.operands import random_bytes
from sixdim.workloads.measure.stats import deepspark_mean, summarize
from sixdim.workloads.measure.timing import time_rounds


def bytes_moved(direction: str, size: int) -> int:
    return 2 * size if direction == "d2d" else size


CHECK_CHUNK = 64 * 2**20


def _compare(source: torch.Tensor, target: torch.Tensor) -> tuple[int, float]:
    """Bytes that differ, and the largest difference of a byte's value relative to the largest value
    of the source (the catalog's max relative error, as for the kernels).

    Where both are on one device, a whole comparison there (``torch.equal``) settles the usual case,
    an exact copy, without moving anything: on a GPU a device-to-device copy used to be read back to
    the host whole, twice its size over PCIe, and on the CPU counting mismatches byte by byte took
    about twelve times as long as the comparison (docs/BENCHMARKS.md, "The cost of watching").
    Otherwise, or where they differ, the counts are made 64 MiB at a time on the host, so a 1 GiB
    copy never needs 3 GiB of host memory."""
    if source.device == target.device and torch.equal(source, target):
        return 0, 0.0
    mismatched, largest_error = 0, 0
    for i in range(0, source.numel(), CHECK_CHUNK):
        want = source[i:i + CHECK_CHUNK].cpu()
        got = target[i:i + CHECK_CHUNK].cpu()
        if torch.equal(got, want):
            continue
        want, got = want.to(torch.int16), got.to(torch.int16)
        mismatched += int((got != want).sum())
        largest_error = max(largest_error, int((got - want).abs().max()))
    if not largest_error:
        return mismatched, 0.0
    largest_value = int(source.max())
    return mismatched, (largest_error / largest_value if largest_value else float(largest_error))


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    direction, size = params["direction"], params["size_bytes"]
    if device.type == "cpu" and direction != "d2d":
        raise Unsupported(f"{direction}: the CPU has no separate device memory to copy to or from")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    pinned = device.type == "cuda"
    source_device = "cpu" if direction == "h2d" else device
    target_device = "cpu" if direction == "d2h" else device
    # the source's bytes drawn where it lives (a GPU's on the GPU: no host draw of up to 1 GiB, no copy)
    source = random_bytes(size, source_device, pin_memory=pinned and source_device == "cpu")
    target = torch.empty(size, dtype=torch.uint8, device=target_device, pin_memory=pinned and target_device == "cpu")

    def kernel() -> None:
        target.copy_(source, non_blocking=True)

    timing = time_rounds(kernel, device, ctx, rounds=params["rounds"], min_round_seconds=params["min_round_seconds"],
                         warmup_seconds=params["warmup_seconds"])
    kernel()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if params.get("corrupt"):
        target[0] = target[0] ^ 0xFF
    mismatched, error = _compare(source, target)
    seconds = deepspark_mean(timing.round_seconds)
    distribution = summarize(timing.round_seconds)
    moved = bytes_moved(direction, size)
    figures = {"seconds": seconds, "bytes_per_second": moved / seconds,
               "seconds_iqr_ratio": distribution["iqr_ratio"], "max_relative_error": error}
    details = {"round_seconds": timing.round_seconds, "bytes_moved": moved, "mismatched_bytes": mismatched,
               "calls_per_round": timing.calls_per_round, "timing_method": timing.method,
               "distribution": distribution}
    if mismatched:
        return WorkloadOutput(figures, details, status="incorrect",
                              reason=f"incorrect copy: {mismatched} of {size} bytes differ from the source")
    return WorkloadOutput(figures, details)
