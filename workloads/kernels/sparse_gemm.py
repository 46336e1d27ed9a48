"""Sparse GEMM: DeepBench's sparse inference kernels, Y = W·X with W at 90% or 95% sparsity.

W (M×K) is stored in CSR; X (K×N) is dense.  The same product with W dense is
timed too, so the speedup over dense (dense time / sparse time) stands beside
the sparse time.  FLOP/s counts the arithmetic the sparse kernel must do,
2·nnz(W)·N; the dense-equivalent rate is in the details.  fp32, as DeepBench
runs sparse kernels, with int32 CSR indices as DeepBench uses.

Both kernels are timed in the same cache regime: if either one's data would stay in L2
between calls (and so be flushed before each call), both are flushed; a speedup that
compares a sparse operand living in L2 with a dense one streaming from memory would be
the cache's, not the sparse kernel's.

Imports torch: the worker process only.
"""

from __future__ import annotations

from typing import Any

import torch

from sixdim.workloads.context import RunContext, Unsupported, WorkloadOutput
from sixdim.workloads.measure import flags, operands
from sixdim.workloads.measure.correctness import check, corrupt_
from sixdim.workloads.measure.operands import normal
from sixdim.workloads.measure.report import kernel_output, measure_kernel
from sixdim.workloads.measure.stats import deepspark_mean
from sixdim.workloads.measure.timing import Timing, cache_regime, note_memory, time_rounds

SAMPLE_ROWS = 16


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    if params["dtype"] != "fp32":
        raise Unsupported("sparse GEMM runs in fp32 only, as DeepBench specifies")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    flags.apply("fp32")
    m, n, k, sparsity = params["m"], params["n"], params["k"], params["sparsity"]
    generator = operands.generator(device)  # drawn on the device: no host draw, no copy
    dense_w = normal((m, k), generator)
    dense_w[torch.rand(m, k, generator=generator, device=device) < sparsity] = 0.0
    x = normal((k, n), generator)
    csr = dense_w.to_sparse_csr()
    sparse_w = torch.sparse_csr_tensor(csr.crow_indices().to(torch.int32), csr.col_indices().to(torch.int32),
                                       csr.values().clone(), size=(m, k), check_invariants=False)
    # (values cloned: a view of csr's would keep the whole int64 CSR tensor alive as its base)
    nnz = int(sparse_w.values().numel())
    dense_bytes = 4 * (m * k + k * n + m * n)
    sparse_bytes = 8 * nnz + 4 * (m + 1) + 4 * (k * n + m * n)
    regime = cache_regime(device, min(dense_bytes, sparse_bytes))

    def sparse_kernel() -> torch.Tensor:  # returned, never kept alive between timed calls
        return torch.sparse.mm(sparse_w, x) if device.type == "cpu" else sparse_w @ x

    dense = _time_dense(dense_w, x, device, ctx, params, regime)
    indices = torch.Generator().manual_seed(0)
    rows = sorted({0, *torch.randint(0, m, (SAMPLE_ROWS - 1,), generator=indices).tolist()})
    sampled_w = dense_w[rows].clone()  # all the check needs of the dense weight: a few rows
    del dense_w, csr  # the sparse case's memory is its own: no dense weight, no int64 CSR copy
    _release_freed(device)
    measured = measure_kernel(sparse_kernel, device, ctx, params, regime=regime, flop_count=2 * nnz * n)
    note_memory(ctx)  # now, before the check's float64 copies (the power phase notes it too, when there is one)
    sparse = measured.timing
    y = sparse_kernel()
    y = y.to_dense() if y.layout != torch.strided else y
    produced = y[rows].clone()
    # in float64 on the device: the sampled rows need all of X, which is not copied to the host for it
    reference = sampled_w.double() @ x.double()
    if params.get("corrupt"):
        corrupt_(produced)
    sparse_seconds, dense_seconds = deepspark_mean(sparse.round_seconds), deepspark_mean(dense.round_seconds)
    return kernel_output(
        measured, check(produced, reference, "fp32"), flop_count=2 * nnz * n,
        figures={"speedup": dense_seconds / sparse_seconds},
        details={"dense_round_seconds": dense.round_seconds, "dense_seconds": dense_seconds,
                 "dense_timing_method": dense.method, "dense_cache_regime": dense.regime, "nnz": nnz,
                 "index_dtype": str(sparse_w.col_indices().dtype).removeprefix("torch."),
                 "density": nnz / (m * k), "dense_equivalent_flops": 2 * m * n * k / sparse_seconds})


def _time_dense(dense_w: torch.Tensor, x: torch.Tensor, device: torch.device, ctx: RunContext,
                params: dict[str, Any], regime: str) -> Timing:
    """The same product with W dense, timed in the sparse kernel's cache regime, on a context of its own (its
    memory is not the case's).  The timing keeps no reference to the dense weight (its ``call``, the kernel
    or its CUDA graph, is dropped), so freeing the weight frees it."""
    dense = time_rounds(lambda: torch.mm(dense_w, x), device, RunContext(device=ctx.device), rounds=params["rounds"],
                        min_round_seconds=params["min_round_seconds"], warmup_seconds=params["warmup_seconds"],
                        regime=regime)
    dense.call = None
    return dense


def _release_freed(device: torch.device) -> None:
    """Return the dense comparison's freed blocks to the device and start the peak afresh, so the sparse
    measurement's memory holds only its own operands (the caching allocator would otherwise keep the dense
    weight's blocks reserved, and its peak would remember them: memory 2x at n = 1500, 10-20x for n = 1)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
