"""The idle guard: never benchmark a GPU that someone else is using.

Operators run production jobs on these GPUs.  Before each GPU run the guard asks
NVML for the processes on the GPU and its utilization; any other process, or
utilization above the threshold, skips the run with the reason recorded.
"""

from __future__ import annotations

from collectors.nvml import NvmlCollector


def busy_reason(nvml: NvmlCollector, gpu_index: int, max_utilization: float) -> str | None:
    """Why the GPU is busy, or None if it is idle enough to benchmark."""
    pids = nvml.process_ids(gpu_index)
    if pids:
        shown = ", ".join(str(p) for p in pids[:5]) + (" ..." if len(pids) > 5 else "")
        return f"busy: {len(pids)} other process(es) on GPU {gpu_index} (pid {shown})"
    utilization = nvml.sample(gpu_index).utilization_ratio
    if utilization is not None and utilization > max_utilization:
        return (f"busy: GPU {gpu_index} utilization {utilization:.0%} is above the guard's "
                f"{max_utilization:.0%}")
    return None
