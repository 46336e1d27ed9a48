"""Workloads that touch torch's global state on purpose, run by the real worker in real child processes."""

from __future__ import annotations

import os

import torch

from sixdim.workloads.context import RunContext, WorkloadOutput


def sets_every_flag(params: dict, ctx: RunContext) -> WorkloadOutput:
    """What a careless workload might leave behind: every global flag away from its default."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return WorkloadOutput({"seconds": 1.0})


def reports_environment(params: dict, ctx: RunContext) -> WorkloadOutput:
    """The worker's environment and flags as a case sees them when it starts."""
    return WorkloadOutput({"seconds": 1.0}, {
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "deterministic_at_start": torch.are_deterministic_algorithms_enabled(),
        "matmul_tf32_at_start": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_tf32_at_start": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark_at_start": torch.backends.cudnn.benchmark,
    })
