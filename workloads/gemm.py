"""GEMM: C = A·B, timed; the first of DeepBench's kernels.

FLOP count 2·M·N·K (a multiply and an add per inner-product term), as DeepBench
and cuBLAS benchmarks count it.  Imports torch: the worker process only.
"""

from __future__ import annotations

from typing import Any

import torch

from workloads.context import RunContext, WorkloadOutput
from workloads.stats import deepspark_mean, summarize
from workloads.timing import time_rounds

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def gemm_flop_count(m: int, n: int, k: int) -> int:
    return 2 * m * n * k


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    dtype = DTYPES[params["dtype"]]
    m, n, k = params["m"], params["n"], params["k"]
    if device.type == "cuda":
        torch.cuda.set_device(device)
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(m, k, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)
    b = torch.randn(k, n, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)
    c = torch.empty(m, n, device=device, dtype=dtype)

    def kernel() -> None:
        torch.matmul(a, b, out=c)

    rounds, iterations = time_rounds(
        kernel, device, ctx, rounds=params["rounds"], min_round_seconds=params["min_round_seconds"],
        warmup_seconds=params["warmup_seconds"])
    seconds = deepspark_mean(rounds)
    distribution = summarize(rounds)
    return WorkloadOutput(
        figures={
            "seconds": seconds,
            "flops": gemm_flop_count(m, n, k) / seconds,
            "seconds_iqr_ratio": distribution["iqr_ratio"],
        },
        details={"round_seconds": rounds, "iterations_per_round": iterations, "distribution": distribution,
                 "flop_count": gemm_flop_count(m, n, k)},
    )
