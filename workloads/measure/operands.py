"""Operands made where they are used: on the case's device, by its own seeded generator.

A kernel case used to draw its inputs on the host and copy them over: for an 8192³ GEMM two host
draws of 64 Mi values and a copy of each before anything was timed, part of the 2.9 s each such case
cost on an H100 beyond its timed work (docs/BENCHMARKS.md, "The quick suite with default timing").
Drawn by the device's generator, the same seed gives the same operands on every run of a device
(another kind of device draws others: a series is per device).

Imports torch: the worker process only.
"""

from __future__ import annotations

import torch

SEED = 0


def generator(device: torch.device | str, seed: int = SEED) -> torch.Generator:
    """The seeded generator of ``device``: what every operand of a case is drawn from, in order."""
    return torch.Generator(device=device).manual_seed(seed)


def normal(shape: tuple[int, ...], source: torch.Generator, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal values in ``dtype``, made on ``source``'s device (half precisions drawn directly:
    no float32 copy of the operand)."""
    return torch.randn(*shape, generator=source, device=source.device, dtype=dtype)


def random_bytes(size: int, device: torch.device | str, *, pin_memory: bool = False, seed: int = SEED) -> torch.Tensor:
    """A buffer of ``size`` uniformly random bytes, made on ``device`` (pinned host memory with ``pin_memory``).

    Drawn as 64-bit integers over their whole range and viewed as bytes: every byte is uniform, with
    one draw per 8 bytes rather than per byte (about a fifth of the time on a 2-vCPU host: docs/BENCHMARKS.md,
    "The cost of watching")."""
    words = torch.empty(-(-size // 8), dtype=torch.int64, device=device, pin_memory=pin_memory)
    words.random_(-2**63, None, generator=generator(device, seed))
    return words.view(torch.uint8)[:size]
