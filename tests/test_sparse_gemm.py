"""Sparse GEMM's memory is the sparse kernel's own: the dense comparison's operands are gone before it is measured.

On a GPU the case's ``memory_bytes`` is the allocator's peak over the sparse measurement; whatever is still
referenced then (the dense weight, the int64 CSR copy) counts in it.  On the CPU the allocator keeps no
peak, but what is alive when the sparse measurement begins is observable: the tensors themselves."""

from __future__ import annotations

import gc
import warnings

import torch

from sixdim.workloads import registry
from sixdim.workloads.context import RunContext
from sixdim.workloads.kernels import sparse_gemm

M, N, K = 96, 8, 64


def _live_tensors() -> list[torch.Tensor]:
    gc.collect()
    with warnings.catch_warnings():  # isinstance on every object touches deprecated module attributes
        warnings.simplefilter("ignore")
        return [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]


def test_the_dense_weight_and_int64_indices_are_freed_before_the_sparse_measurement(monkeypatch):
    alive_then: list[torch.Tensor] = []
    measure = sparse_gemm.measure_kernel

    def spying(*args, **kwargs):  # the real measurement, after a look at what is alive as it begins
        alive_then.extend(_live_tensors())
        return measure(*args, **kwargs)

    monkeypatch.setattr(sparse_gemm, "measure_kernel", spying)
    earlier = _live_tensors()  # held, so their ids stay theirs: what other tests of this process left alive
    known = {id(t) for t in earlier}
    [case] = [c for c in registry.get("sparse_gemm").cases({"set": "quick"}, "cpu")][:1]
    params = {**case.params, "m": M, "n": N, "k": K, "rounds": 3, "min_round_seconds": 0.001,
              "warmup_seconds": 0.0, "power_seconds": 0.0, "latency_samples": 0}
    output = sparse_gemm.run(params, RunContext(device="cpu"))
    assert output.status == "ok", output.reason
    assert alive_then, "the sparse measurement never began"
    alive_then = [t for t in alive_then if id(t) not in known]
    dense_weights = [t for t in alive_then if t.layout == torch.strided and tuple(t.shape) == (M, K)]
    int64_indices = [t for t in alive_then if t.dtype == torch.int64 and t.layout == torch.strided and t.numel() > 1]
    csr_int64 = [t for t in alive_then if t.layout == torch.sparse_csr and t.crow_indices().dtype == torch.int64]
    assert not dense_weights, f"{len(dense_weights)} dense {M}x{K} weight(s) alive through the sparse measurement"
    assert not csr_int64 and not int64_indices, "the int64 CSR copy is alive through the sparse measurement"
    assert output.details["index_dtype"] == "int32"
