"""Silent data corruption catches no one by surprise: every kernel checks a sample of its output.

The reference is computed in float64 from the very inputs the kernel used (after
they were cast to the kernel's precision), so the difference measures only the
kernel's arithmetic.  The error is normalised by the reference's largest
magnitude, so an entry that happens to be near zero does not inflate it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

TOLERANCES = {
    "fp64": 1e-10,
    "fp32": 1e-4,
    "tf32": 5e-3,   # 10-bit mantissa inputs
    "fp16": 5e-3,   # fp32 accumulation, fp16 output rounding (2^-11)
    "bf16": 2e-2,   # 8-bit mantissa output rounding (2^-8)
    "int8": 0.0,    # int32 accumulation is exact
    "fp8": 2e-2,    # bf16 output of fp8 inputs
    # fp8 with fast accumulation: partial sums stay in the tensor cores' own accumulator, narrower
    # than FP32, instead of being promoted to FP32 now and then.  Its error grows with K, but the
    # inputs and the bf16 output are fp8's, and the same bound holds: on an H200, fp8 / fp8_fast
    # gave 0.0022 / 0.0036 at 4096³, 0.0022 / 0.0074 at 8192³ and 0.0032 / 0.012 at 1024×4×500000
    # (DeepBench's largest K).  One tolerance for both: one meaning of "correct" for fp8 inputs.
    "fp8_fast": 2e-2,
}
"""Largest acceptable max-relative-error per precision."""


@dataclass(frozen=True)
class Check:
    max_relative_error: float
    tolerance: float

    @property
    def correct(self) -> bool:
        return self.max_relative_error <= self.tolerance

    def figures(self) -> dict[str, float]:
        return {"max_relative_error": self.max_relative_error}

    def reason(self, what: str = "output") -> str:
        return (f"incorrect {what}: max relative error {self.max_relative_error:.3g} exceeds the "
                f"tolerance {self.tolerance:.3g}")


def max_relative_error(output: torch.Tensor, reference: torch.Tensor) -> float:
    """max |output - reference| / max |reference| (inf for a non-finite output)."""
    out = output.detach().to("cpu", torch.float64)
    ref = reference.detach().to("cpu", torch.float64)
    if not torch.isfinite(out).all():
        return float("inf")
    scale = ref.abs().max().item()
    error = (out - ref).abs().max().item()
    return error / scale if scale > 0 else error


def check(output: torch.Tensor, reference: torch.Tensor, precision: str) -> Check:
    return Check(max_relative_error(output, reference), TOLERANCES[precision])


def corrupt_(tensor: torch.Tensor) -> None:
    """Self-test: make one element of an output plainly wrong, in place (the first element)."""
    flat = tensor.view(-1)
    flat[0] = flat[0] + (1000 if tensor.dtype.is_floating_point else 100) + flat.abs().max()
