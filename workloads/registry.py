"""The registry of named workloads, in the shape every workload follows.

Adding a workload is adding a spec here and a ``run(params, context)`` function
in its own module; nothing else in the agent changes.
"""

from __future__ import annotations

from workloads.spec import Param, ParamError, WorkloadSpec

PRECISIONS = ("fp32", "fp16", "bf16")

_TIMING_PARAMS = (
    Param("rounds", int, "timed rounds; the speed figure is their DeepSpark mean", 5, 5, minimum=3),
    Param("min_round_seconds", float, "each round repeats the kernel until it lasts at least this long",
          0.2, 1.0, minimum=0.0),
    Param("warmup_seconds", float, "warm-up before timing, seconds (at least 3 calls)", 0.5, 2.0, minimum=0.0),
)

GEMM = WorkloadSpec(
    name="gemm",
    description="Dense matrix multiply C = A·B (M×K by K×N); seconds per GEMM and FLOP/s = 2·M·N·K / t.",
    entry="workloads.gemm:run",
    params=(
        Param("m", int, "rows of A and C", 1024, 8192, minimum=1),
        Param("n", int, "columns of B and C", 1024, 8192, minimum=1),
        Param("k", int, "columns of A, rows of B", 1024, 8192, minimum=1),
        Param("dtype", str, "element type of A, B and C", "fp32", "bf16", choices=PRECISIONS),
    ) + _TIMING_PARAMS,
    precision_param="dtype",
    label_params=("m", "n", "k"),
)

WORKLOADS: dict[str, WorkloadSpec] = {spec.name: spec for spec in (GEMM,)}


class UnknownWorkloadError(ParamError):
    """No workload has that name."""


def get(name: str) -> WorkloadSpec:
    """The spec of a workload by name; the error names the known ones."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkloadError(f"unknown workload {name!r} (known: {', '.join(sorted(WORKLOADS))})") from None
