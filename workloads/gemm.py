"""GEMM: D = A·B + C with alpha = beta = 1 (no work elided), DeepBench's first kernel.

FLOP count 2·M·N·K, as DeepBench and cuBLAS benchmarks count it.  Transposes
follow DeepBench's ``op``: ``TN`` stores A as K×M and multiplies its transpose,
``NT`` does the same for B; the library receives the transposed view, no copy.

Precisions: fp32 (TF32 off), tf32, fp16 and bf16 (fp32 accumulate), int8 with
int32 accumulate (``torch._int_mm``: D = A·B, there is no C term; dimensions
padded on CUDA to what the kernel needs, FLOP/s counted on the requested shape),
and fp8 e4m3 (``torch._scaled_mm``, bf16 output, compute capability 8.9+).

Imports torch: the worker process only.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from workloads.context import RunContext, Unsupported, WorkloadOutput
from workloads.correctness import check, corrupt_
from workloads.report import kernel_output, measure_latencies
from workloads.timing import Timing, time_rounds

FLOAT_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
SAMPLE_ROWS = 16


def gemm_flop_count(m: int, n: int, k: int) -> int:
    return 2 * m * n * k


def require(precision: str, device: torch.device) -> None:
    """Raise Unsupported where the device cannot run this precision."""
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if precision in ("tf32", "bf16") and capability < (8, 0):
            raise Unsupported(f"{precision} needs compute capability 8.0+, this GPU has {capability[0]}.{capability[1]}")
        if precision == "fp8":
            if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
                raise Unsupported(f"fp8 needs torch with float8 and _scaled_mm; torch {torch.__version__} lacks them")
            if capability < (8, 9):
                raise Unsupported(f"fp8 needs compute capability 8.9+, this GPU has {capability[0]}.{capability[1]}")
    elif precision in ("tf32", "fp8"):
        raise Unsupported(f"{precision} is a tensor-core precision of GPUs; the CPU has no {precision} GEMM")


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _random(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=torch.float32)


def _operand(rows: int, cols: int, transposed: bool, generator: torch.Generator) -> torch.Tensor:
    """A rows×cols operand; stored cols×rows and viewed transposed when ``transposed``."""
    return _random((cols, rows), generator).t() if transposed else _random((rows, cols), generator)


def _setup(params: dict[str, Any], device: torch.device):
    """The kernel, a function giving (output, float64 reference) for sampled rows, the bytes the
    kernel touches (to decide on an L2 flush), and the shape actually run (padded for int8/fp8)."""
    m, n, k, op, precision = params["m"], params["n"], params["k"], params["op"], params["dtype"]
    generator = torch.Generator().manual_seed(0)
    rows = sorted({0, *torch.randint(0, m, (SAMPLE_ROWS - 1,), generator=generator).tolist()})

    if precision == "int8":
        pm, pn, pk = (max(17, _round_up(m, 8)), _round_up(n, 8), _round_up(k, 8)) if device.type == "cuda" \
            else (m, n, k)
        a = torch.zeros(pm, pk, dtype=torch.int8)
        b = torch.zeros(pk, pn, dtype=torch.int8)
        a[:m, :k] = torch.randint(-8, 8, (m, k), generator=generator, dtype=torch.int8)
        b[:k, :n] = torch.randint(-8, 8, (k, n), generator=generator, dtype=torch.int8)
        a, b = a.to(device), b.to(device)
        d = torch.empty(pm, pn, dtype=torch.int32, device=device)

        def kernel() -> None:
            torch._int_mm(a, b, out=d)

        def sample() -> tuple[torch.Tensor, torch.Tensor]:
            a64, b64 = a[:m, :k].double().cpu(), b[:k, :n].double().cpu()
            return d[rows, :n], a64[rows] @ b64

        return kernel, sample, (pm * pk + pk * pn) + 4 * pm * pn, (pm, pn, pk)

    if precision == "fp8":
        pm, pn, pk = _round_up(m, 16), _round_up(n, 16), _round_up(k, 16)
        a = torch.zeros(pm, pk)
        a[:m, :k] = _random((m, k), generator)
        b_rows = torch.zeros(pn, pk)  # B is column-major for _scaled_mm: store Bᵀ row-major
        b_rows[:n, :k] = _random((n, k), generator)
        a = a.to(device=device, dtype=torch.float8_e4m3fn)
        b = b_rows.to(device=device, dtype=torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)

        def kernel() -> torch.Tensor:  # returned, never kept alive between timed calls
            out = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            return out[0] if isinstance(out, tuple) else out

        def sample() -> tuple[torch.Tensor, torch.Tensor]:
            a64, b64 = a[:m, :k].double().cpu(), b[:k, :n].double().cpu()
            return kernel()[rows, :n], a64[rows] @ b64

        return kernel, sample, pm * pk + pk * pn + 2 * pm * pn, (pm, pn, pk)

    dtype = FLOAT_DTYPES[precision]
    a = _operand(m, k, op[0] == "T", generator).to(device=device, dtype=dtype)
    b = _operand(k, n, op[1] == "T", generator).to(device=device, dtype=dtype)
    c = _random((m, n), generator).to(device=device, dtype=dtype)
    d = torch.empty(m, n, device=device, dtype=dtype)

    def kernel() -> None:
        torch.addmm(c, a, b, beta=1, alpha=1, out=d)

    def sample() -> tuple[torch.Tensor, torch.Tensor]:
        a64, b64, c64 = a.double().cpu(), b.double().cpu(), c.double().cpu()
        return d[rows], a64[rows] @ b64 + c64[rows]

    return kernel, sample, dtype.itemsize * (m * k + k * n + 2 * m * n), (m, n, k)


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    precision = params["dtype"]
    require(precision, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    kernel, sample, working_set, padded = _setup(params, device)
    timing = time_rounds(kernel, device, ctx, rounds=params["rounds"], min_round_seconds=params["min_round_seconds"],
                         warmup_seconds=params["warmup_seconds"], working_set_bytes=working_set)
    return finish(params, kernel, sample, timing, padded, device)


def finish(params: dict[str, Any], kernel: Callable[[], None], sample: Callable, timing: Timing,
           padded: tuple[int, int, int], device: torch.device) -> WorkloadOutput:
    """Figures from the timing, latencies if asked, then the correctness check on a fresh call."""
    m, n, k = params["m"], params["n"], params["k"]
    latencies = measure_latencies(kernel, device, params)
    kernel()
    produced, reference = sample()
    if params.get("corrupt"):
        produced = produced.clone()
        corrupt_(produced)
    details = {"padded_shape": {"m": padded[0], "n": padded[1], "k": padded[2]}} if padded != (m, n, k) else {}
    return kernel_output(timing, check(produced, reference, params["dtype"]), flop_count=gemm_flop_count(m, n, k),
                         details=details, latencies=latencies)
