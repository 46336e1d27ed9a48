"""Sparse GEMM: DeepBench's sparse inference kernels, Y = W·X with W at 90% or 95% sparsity.

W (M×K) is stored in CSR; X (K×N) is dense.  The same product with W dense is
timed too, so the speedup over dense (dense time / sparse time) stands beside
the sparse time.  FLOP/s counts the arithmetic the sparse kernel must do,
2·nnz(W)·N; the dense-equivalent rate is in the details.  fp32, as DeepBench
runs sparse kernels.

Imports torch: the worker process only.
"""

from __future__ import annotations

from typing import Any

import torch

from workloads.context import RunContext, Unsupported, WorkloadOutput
from workloads.correctness import check, corrupt_
from workloads.report import kernel_output, measure_latencies
from workloads.stats import deepspark_mean
from workloads.timing import time_rounds

SAMPLE_ROWS = 16


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    if params["dtype"] != "fp32":
        raise Unsupported("sparse GEMM runs in fp32 only, as DeepBench specifies")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    m, n, k, sparsity = params["m"], params["n"], params["k"], params["sparsity"]
    generator = torch.Generator().manual_seed(0)
    dense_w = torch.randn(m, k, generator=generator)
    dense_w[torch.rand(m, k, generator=generator) < sparsity] = 0.0
    x = torch.randn(k, n, generator=generator).to(device)
    dense_w = dense_w.to(device)
    sparse_w = dense_w.to_sparse_csr()
    nnz = int(sparse_w.values().numel())

    def dense_kernel() -> torch.Tensor:
        return torch.mm(dense_w, x)

    def sparse_kernel() -> torch.Tensor:  # returned, never kept alive between timed calls
        return torch.sparse.mm(sparse_w, x) if device.type == "cpu" else sparse_w @ x

    timing_args = dict(rounds=params["rounds"], min_round_seconds=params["min_round_seconds"],
                       warmup_seconds=params["warmup_seconds"])
    dense = time_rounds(dense_kernel, device, RunContext(device=ctx.device), **timing_args)
    sparse = time_rounds(sparse_kernel, device, ctx, **timing_args)
    latencies = measure_latencies(sparse_kernel, device, params)
    y = sparse_kernel()
    y = y.to_dense() if y.layout != torch.strided else y
    rows = sorted({0, *torch.randint(0, m, (SAMPLE_ROWS - 1,), generator=generator).tolist()})
    produced = y[rows].clone()
    reference = dense_w[rows].double().cpu() @ x.double().cpu()
    if params.get("corrupt"):
        corrupt_(produced)
    sparse_seconds, dense_seconds = deepspark_mean(sparse.round_seconds), deepspark_mean(dense.round_seconds)
    return kernel_output(
        sparse, check(produced, reference, "fp32"), flop_count=2 * nnz * n, latencies=latencies,
        figures={"speedup": dense_seconds / sparse_seconds},
        details={"dense_round_seconds": dense.round_seconds, "dense_seconds": dense_seconds, "nnz": nnz,
                 "density": nnz / (m * k), "dense_equivalent_flops": 2 * m * n * k / sparse_seconds})
