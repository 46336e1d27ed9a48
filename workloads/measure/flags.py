"""torch's global numeric flags: set per case from what its precision means, restored between cases.

Several of torch's switches are process-wide and silently change what a measurement means:
TF32 for matmuls and for cuDNN convolutions (cuDNN's defaults to on, so an "fp32" ResNet-50
would run TF32 convolutions), cuDNN's autotuner, deterministic mode, and reduced-precision
reductions inside fp16/bf16 GEMMs.  One worker runs many cases, so a flag one case sets
would otherwise leak into the next.  Every workload calls :func:`apply` with its precision;
the worker calls :func:`restore` after each case and records :func:`current` in the result.

What each precision means here:

- ``fp32``: IEEE float32 arithmetic everywhere, TF32 off for matmuls and convolutions;
- ``tf32``: float32 storage, TF32 tensor-core arithmetic for matmuls and convolutions;
- ``fp16`` / ``bf16``: half-precision inputs with float32 accumulation (DeepBench's
  training precision), so split-K reductions in half precision are turned off;
- ``amp`` (models): autocast picks half precision per op; the float32 ops it keeps stay
  IEEE float32 (TF32 off), so ``amp`` differs from ``fp32`` only by autocast;
- ``int8`` / ``fp8`` / ``fp8_fast``: integer or fp8 kernels whose accumulation is fixed by the kernel
  call, not by a global flag (``fp8`` and ``fp8_fast`` differ only in the ``use_fast_accum`` argument
  gemm.py passes to ``torch._scaled_mm``); they get what every precision but tf32, fp16 and bf16
  gets: TF32 off, and the fp16/bf16 reduced-precision-reduction flags at torch's default (on), which
  their kernels do not read.

Imports torch: the worker process only.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

CUBLAS_WORKSPACE_CONFIG = ":4096:8"
"""What cuBLAS needs for deterministic GEMMs (torch raises without it once deterministic mode is on)."""


def current() -> dict[str, Any]:
    """The flags as they are now: recorded in each result's details."""
    matmul = torch.backends.cuda.matmul
    return {
        "matmul_allow_tf32": bool(matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "fp16_reduced_precision_reduction": bool(matmul.allow_fp16_reduced_precision_reduction),
        "bf16_reduced_precision_reduction": bool(matmul.allow_bf16_reduced_precision_reduction),
    }


_DEFAULTS: dict[str, Any] | None = None


def remember_defaults() -> None:
    """Note torch's flags at worker start (before any case), so :func:`restore` returns to them."""
    global _DEFAULTS
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE_CONFIG)
    _DEFAULTS = current()


def _set_deterministic(mode: bool) -> None:
    """Deterministic mode on or off, touching torch only where it is not already so.

    ``torch.use_deterministic_algorithms`` imports ``torch._inductor`` (to set its config's flag too):
    about 1 s of the first case of every worker on a 2-vCPU host, and afterwards each of the worker's
    per-case ``gc.collect`` calls took about twice as long (the import's objects; docs/BENCHMARKS.md,
    "The cost of watching"), while no built-in workload but convergence's deterministic option ever
    turns the mode on.  So it is called
    only when the mode (torch's, and inductor's config where that is already loaded) differs."""
    inductor = sys.modules.get("torch._inductor.config")
    if (torch.are_deterministic_algorithms_enabled() == mode
            and (inductor is None or getattr(inductor, "deterministic", mode) == mode)):
        return
    torch.use_deterministic_algorithms(mode)


def _set(flags: dict[str, Any]) -> None:
    matmul = torch.backends.cuda.matmul
    if "matmul_allow_tf32" in flags:
        matmul.allow_tf32 = flags["matmul_allow_tf32"]
    if "cudnn_allow_tf32" in flags:
        torch.backends.cudnn.allow_tf32 = flags["cudnn_allow_tf32"]
    if "cudnn_benchmark" in flags:
        torch.backends.cudnn.benchmark = flags["cudnn_benchmark"]
    if "deterministic" in flags:
        _set_deterministic(flags["deterministic"])
    if "fp16_reduced_precision_reduction" in flags:
        matmul.allow_fp16_reduced_precision_reduction = flags["fp16_reduced_precision_reduction"]
    if "bf16_reduced_precision_reduction" in flags:
        matmul.allow_bf16_reduced_precision_reduction = flags["bf16_reduced_precision_reduction"]


def for_precision(precision: str, *, cudnn_benchmark: bool = False, deterministic: bool = False) -> dict[str, Any]:
    """The full set of flags a case of this precision runs under."""
    tf32 = precision == "tf32"
    half_accumulate_in_fp32 = precision in ("fp16", "bf16")
    return {
        "matmul_allow_tf32": tf32,
        "cudnn_allow_tf32": tf32,
        "cudnn_benchmark": cudnn_benchmark and not deterministic,
        "deterministic": deterministic,
        "fp16_reduced_precision_reduction": not half_accumulate_in_fp32,
        "bf16_reduced_precision_reduction": not half_accumulate_in_fp32,
    }


def apply(precision: str, *, cudnn_benchmark: bool = False, deterministic: bool = False) -> dict[str, Any]:
    """Set every flag for a case of ``precision``; returns what was set."""
    flags = for_precision(precision, cudnn_benchmark=cudnn_benchmark, deterministic=deterministic)
    _set(flags)
    return flags


def restore() -> None:
    """Back to the flags noted at worker start (torch's defaults), whatever the last case set."""
    if _DEFAULTS is None:
        remember_defaults()
    assert _DEFAULTS is not None
    _set(_DEFAULTS)
