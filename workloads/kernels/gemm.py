"""GEMM: D = A·B into a preallocated output, DeepBench's first kernel.

``torch.mm(a, b, out=d)`` is one cuBLAS call writing D directly (an ``addmm`` whose output is
not its C operand would first copy C into D, an extra M×N pass inside the timing).  FLOP count
2·M·N·K, as DeepBench and cuBLAS benchmarks count it.  Transposes follow DeepBench's ``op``:
``TN`` stores A as K×M and multiplies its transpose, ``NT`` does the same for B; the library
receives the transposed view, no copy.

Precisions: fp32 (TF32 off), tf32, fp16 and bf16 (fp32 accumulate, no half-precision split-K
reduction), int8 with int32 accumulate (``torch._int_mm``), and fp8 e4m3 (``torch._scaled_mm``,
bf16 output, compute capability 8.9+) in two forms: ``fp8`` with ``use_fast_accum=False`` (cuBLAS
promotes the tensor cores' partial sums into FP32 registers every so often, the accurate form) and
``fp8_fast`` with ``use_fast_accum=True`` (the partial sums stay in the tensor cores' own
accumulator: the rate NVIDIA's FP8 tensor-core peak describes); each fp8 case's details say which
(``fp8_fast_accum``).  int8 and fp8 run one layout, the one cuBLASLt accepts on every CUDA
version: A row-major, B column-major (``op`` NT); their dimensions are padded on CUDA to what the
kernels need (int8: M > 16 and multiples of 8; fp8: multiples of 16).

FLOP/s (and FLOP per joule, and so the fraction of peak) counts the work of the requested shape,
the one the case's ``shape`` label names: 2·M·N·K of the useful product, never the padding.  A
DeepBench inference shape with N = 1 to 4 runs as N = 8 (int8) or 16 (fp8), 2 to 16 times the
requested work; counting the padded work under the requested label would report a rate no user
of that shape gets, and a fraction of peak that grows with the padding.  A padded case keeps the
shape that ran and its rate in the details (``padded_shape``, ``padded_flop_count``,
``padded_flops``, beside ``requested_flop_count``).

Operands are drawn on the device by its own seeded generator (:mod:`sixdim.workloads.measure.operands`), in
the kernel's precision (bf16 first for fp8, which torch cannot draw): no host draw, no copy.

Correctness: a sample of rows × columns of D against a float64 product of the same rows of A
and columns of B, built on the host (never a float64 copy of a whole operand on the device):
16 rows × 64 columns, so for an 8192³ case the reference is a 16×8192 by 8192×64 product
(8 MFLOP) and the copies 2.6 MiB, a negligible part of the case.

Imports torch: the worker process only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from sixdim.workloads.context import RunContext, Unsupported, WorkloadOutput
from sixdim.workloads.measure import flags, operands
from sixdim.workloads.measure.correctness import Check, check, corrupt_
from sixdim.workloads.measure.operands import normal
from sixdim.workloads.measure.report import Measurement, kernel_output, measure_kernel

FLOAT_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
FP8_FAST_ACCUM = {"fp8": False, "fp8_fast": True}
"""The fp8 precisions and the ``use_fast_accum`` each passes to ``torch._scaled_mm``."""
SAMPLE_ROWS = 16
SAMPLE_COLS = 64


def gemm_flop_count(m: int, n: int, k: int) -> int:
    return 2 * m * n * k


def require(precision: str, device: torch.device) -> None:
    """Raise Unsupported where the device cannot run this precision."""
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if precision in ("tf32", "bf16") and capability < (8, 0):
            raise Unsupported(f"{precision} needs compute capability 8.0+, "
                              f"this GPU has {capability[0]}.{capability[1]}")
        if precision in FP8_FAST_ACCUM:
            if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
                raise Unsupported(f"{precision} needs torch with float8 and _scaled_mm; "
                                  f"torch {torch.__version__} lacks them")
            if capability < (8, 9):
                raise Unsupported(f"{precision} needs compute capability 8.9+, "
                                  f"this GPU has {capability[0]}.{capability[1]}")
    elif precision in ("tf32", *FP8_FAST_ACCUM):
        raise Unsupported(f"{precision} is a tensor-core precision of GPUs; the CPU has no {precision} GEMM")


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _operand(rows: int, cols: int, transposed: bool, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """A rows×cols operand; stored cols×rows and viewed transposed when ``transposed``."""
    return normal((cols, rows), generator, dtype).t() if transposed else normal((rows, cols), generator, dtype)


def _sample_index(size: int, count: int, generator: torch.Generator) -> list[int]:
    """Sorted sample of indices, always with 0 (where the corruption self-test writes)."""
    return sorted({0, *torch.randint(0, size, (count - 1,), generator=generator).tolist()})


def _host(t: torch.Tensor) -> torch.Tensor:
    """A small device tensor on the host in float64 (fp8 through its float32 value)."""
    t = t.cpu()
    return (t.float() if t.dtype not in (torch.float64, torch.int8, torch.int32, torch.int64) else t).double()


def padded_shape(precision: str, m: int, n: int, k: int, device: torch.device) -> tuple[int, int, int]:
    """The shape the kernel actually runs: int8 and fp8 kernels need aligned dimensions on CUDA."""
    if device.type != "cuda":
        return m, n, k
    if precision == "int8":
        return max(17, _round_up(m, 8)), _round_up(n, 8), _round_up(k, 8)
    if precision in FP8_FAST_ACCUM:
        return _round_up(m, 16), _round_up(n, 16), _round_up(k, 16)
    return m, n, k


def _setup(params: dict[str, Any], device: torch.device):
    """The kernel, a function giving (sampled output, float64 reference), the bytes the kernel
    touches (to choose its cache regime), and the shape actually run (padded for int8/fp8)."""
    m, n, k, op, precision = params["m"], params["n"], params["k"], params["op"], params["dtype"]
    indices = torch.Generator().manual_seed(0)
    rows, cols = _sample_index(m, SAMPLE_ROWS, indices), _sample_index(n, SAMPLE_COLS, indices)
    generator = operands.generator(device)
    pm, pn, pk = padded_shape(precision, m, n, k, device)

    if precision == "int8" or precision in FP8_FAST_ACCUM:
        # A row-major (pm×pk); B column-major: Bᵀ stored row-major (pn×pk) and viewed transposed;
        # the padding is zero.
        if precision == "int8":
            a = torch.zeros(pm, pk, device=device, dtype=torch.int8)
            bt = torch.zeros(pn, pk, device=device, dtype=torch.int8)
            a[:m, :k] = torch.randint(-8, 8, (m, k), generator=generator, device=device, dtype=torch.int8)
            bt[:n, :k] = torch.randint(-8, 8, (n, k), generator=generator, device=device, dtype=torch.int8)
            b = bt.t()

            def kernel() -> torch.Tensor:  # returned, never kept alive between timed calls
                return torch._int_mm(a, b)
            itemsize_out = 4
        else:
            a_full = torch.zeros(pm, pk, device=device, dtype=torch.bfloat16)
            bt_full = torch.zeros(pn, pk, device=device, dtype=torch.bfloat16)
            a_full[:m, :k] = normal((m, k), generator, torch.bfloat16)
            bt_full[:n, :k] = normal((n, k), generator, torch.bfloat16)
            a, bt = a_full.to(torch.float8_e4m3fn), bt_full.to(torch.float8_e4m3fn)
            del a_full, bt_full
            b = bt.t()
            one = torch.ones((), device=device)
            fast_accum = FP8_FAST_ACCUM[precision]

            def kernel() -> torch.Tensor:
                out = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                       use_fast_accum=fast_accum)
                return out[0] if isinstance(out, tuple) else out
            itemsize_out = 2

        def sample() -> tuple[torch.Tensor, torch.Tensor]:
            fp8 = precision in FP8_FAST_ACCUM
            a_rows = _host(a.view(torch.uint8)[rows].view(a.dtype)) if fp8 else _host(a[rows])
            b_cols = _host(bt.view(torch.uint8)[cols].view(bt.dtype)) if fp8 else _host(bt[cols])
            produced = kernel()[rows][:, cols]
            return produced, a_rows @ b_cols.t()

        return kernel, sample, pm * pk + pk * pn + itemsize_out * pm * pn, (pm, pn, pk)

    dtype = FLOAT_DTYPES[precision]
    a = _operand(m, k, op[0] == "T", generator, dtype)
    b = _operand(k, n, op[1] == "T", generator, dtype)
    d = torch.empty(m, n, device=device, dtype=dtype)

    def mm_kernel() -> None:
        torch.mm(a, b, out=d)

    def mm_sample() -> tuple[torch.Tensor, torch.Tensor]:
        return d[rows][:, cols], _host(a[rows]) @ _host(b[:, cols])

    return mm_kernel, mm_sample, dtype.itemsize * (m * k + k * n + m * n), (m, n, k)


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    precision = params["dtype"]
    require(precision, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    flags.apply(precision)
    kernel, sample, working_set, padded = _setup(params, device)
    if params.get("slowdown_seconds"):
        kernel = slowed(kernel, params["slowdown_seconds"])
    # the requested shape's work, padded or not: flop_per_joule counts what FLOP/s counts (see output)
    measured = measure_kernel(kernel, device, ctx, params, working_set_bytes=working_set,
                              flop_count=gemm_flop_count(params["m"], params["n"], params["k"]))
    return finish(params, kernel, sample, measured, padded)


def slowed(kernel: Callable[[], object], seconds: float) -> Callable[[], object]:
    """The self-test slowdown: the kernel, then a busy-wait until ``seconds`` have passed since it
    was called (a sleep would be as long as the OS pleases), so every timed call takes longer."""
    def call() -> object:
        until = time.perf_counter() + seconds
        out = kernel()
        while time.perf_counter() < until:
            pass
        return out
    return call


def finish(params: dict[str, Any], kernel: Callable[[], object], sample: Callable, measured: Measurement,
           padded: tuple[int, int, int]) -> WorkloadOutput:
    """The correctness check on a fresh call, then the figures (:func:`output`)."""
    kernel()
    produced, reference = sample()
    if params.get("corrupt"):
        produced = produced.clone()
        corrupt_(produced)
    return output(params, measured, check(produced, reference, params["dtype"]), padded)


def output(params: dict[str, Any], measured: Measurement, verdict: Check,
           padded: tuple[int, int, int]) -> WorkloadOutput:
    """The case's result from its measurement and check.

    ``flops`` (and ``flop_per_joule``, which the power phase computed from the same count) is the
    requested shape's 2·M·N·K over the seconds: the work the ``shape`` label names.  A padded
    int8/fp8 case ran more work than that; its shape, work and rate are details
    (``padded_shape``, ``padded_flop_count``, ``padded_flops``, and ``padded_flop_per_joule`` where
    power was measured), never the exported figure."""
    m, n, k = params["m"], params["n"], params["k"]
    requested = gemm_flop_count(m, n, k)
    details: dict[str, Any] = {}
    if params["dtype"] in FP8_FAST_ACCUM:
        details["fp8_fast_accum"] = FP8_FAST_ACCUM[params["dtype"]]
    result = kernel_output(measured, verdict, flop_count=requested, details=details)
    if padded != (m, n, k):
        padded_count = gemm_flop_count(*padded)
        result.details.update({
            "padded_shape": {"m": padded[0], "n": padded[1], "k": padded[2]},
            "requested_shape": {"m": m, "n": n, "k": k},
            "requested_flop_count": requested,
            "padded_flop_count": padded_count,
            "padded_flops": padded_count / result.figures["seconds"]})
        if "flop_per_joule" in result.figures:
            result.details["padded_flop_per_joule"] = result.figures["flop_per_joule"] * padded_count / requested
    return result
