"""Recurrent layers by DeepBench's rules: vanilla (ReLU), LSTM (no peepholes), GRU.

- The input projection W·x_t is computed for all steps before timing and is not
  in the timed region; the timed forward is the recurrence h_t = cell(Wx_t + U·h_{t-1}).
- The backward pass computes the gradient of the recurrent weights U only, not of
  the inputs (DeepBench: "all the recurrent work is done to calculate the weight updates").
- GRU as DeepBench specifies it: sigmoid reset and update gates, ReLU candidate.

FLOP count: the recurrent GEMMs, 2·B·H·(G·H) per step forward (G = 1, 4, 3 gates),
twice that backward (the gradients with respect to h and to U); the elementwise
gate arithmetic is not counted.

Imports torch: the worker process only.
"""

from __future__ import annotations

from typing import Any

import torch

from workloads.context import RunContext, Unsupported, WorkloadOutput
from workloads.correctness import check, corrupt_
from workloads.report import kernel_output, measure_latencies
from workloads.timing import time_rounds

GATES = {"vanilla": 1, "lstm": 4, "gru": 3}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def rnn_flop_count(cell: str, hidden: int, batch: int, steps: int, kernel_pass: str) -> int:
    forward = 2 * batch * hidden * GATES[cell] * hidden * steps
    return forward if kernel_pass == "forward" else 2 * forward


def recurrence(cell: str, xw: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """All hidden states (steps × batch × hidden) of the recurrence over precomputed inputs xw."""
    steps, batch, _ = xw.shape
    hidden = u.shape[1]
    h = xw.new_zeros(batch, hidden)
    c = xw.new_zeros(batch, hidden)
    states = []
    for t in range(steps):
        uh = h @ u.t()
        if cell == "vanilla":
            h = torch.relu(xw[t] + uh)
        elif cell == "lstm":
            i, f, g, o = (xw[t] + uh).chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        else:  # gru
            xr, xz, xn = xw[t].chunk(3, dim=1)
            ur, uz, un = uh.chunk(3, dim=1)
            r, z = torch.sigmoid(xr + ur), torch.sigmoid(xz + uz)
            n = torch.relu(xn + r * un)
            h = (1 - z) * n + z * h
        states.append(h)
    return torch.stack(states)


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    precision, kernel_pass, cell = params["dtype"], params["pass"], params["cell"]
    if device.type == "cuda":
        torch.cuda.set_device(device)
        if precision == "bf16" and torch.cuda.get_device_capability(device) < (8, 0):
            raise Unsupported("bf16 needs compute capability 8.0+")
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = DTYPES[precision]
    hidden, batch, steps = params["hidden"], params["batch"], params["steps"]
    gates = GATES[cell]
    generator = torch.Generator().manual_seed(0)
    # Contractive weights keep the state bounded over 1500 steps, in any precision.
    xw = (0.1 * torch.randn(steps, batch, gates * hidden, generator=generator)).to(device=device, dtype=dtype)
    u = (0.5 / hidden ** 0.5 * torch.randn(gates * hidden, hidden, generator=generator)).to(device=device, dtype=dtype)
    if kernel_pass == "forward":
        def kernel() -> torch.Tensor:  # the output is returned, never kept alive between timed calls
            with torch.no_grad():
                return recurrence(cell, xw, u)
    else:
        u.requires_grad_(True)
        grad_states = torch.randn(steps, batch, hidden, generator=generator).to(device=device, dtype=dtype)
        states = recurrence(cell, xw, u)  # the graph, built once outside the timed region

        def kernel() -> torch.Tensor:
            return torch.autograd.grad(states, u, grad_states, retain_graph=True)[0]

    timing = time_rounds(kernel, device, ctx, rounds=params["rounds"], min_round_seconds=params["min_round_seconds"],
                         warmup_seconds=params["warmup_seconds"])
    latencies = measure_latencies(kernel, device, params)
    produced, reference = _sample(cell, kernel_pass, kernel(), xw, u,
                                  grad_states if kernel_pass != "forward" else None)
    if params.get("corrupt"):
        produced = produced.clone()
        corrupt_(produced)
    return kernel_output(timing, check(produced, reference, precision),
                         flop_count=rnn_flop_count(cell, hidden, batch, steps, kernel_pass), latencies=latencies)


def _sample(cell: str, kernel_pass: str, out: torch.Tensor, xw: torch.Tensor, u: torch.Tensor,
            grad_states: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward: the first sequence's states (independent of the others), in float64.
    Backward: the whole weight gradient in float64, on the same device (data-centre GPUs do
    float64 quickly; it sums over the batch, so no smaller sample would check it)."""
    u64 = u.detach().double()
    if kernel_pass == "forward":
        with torch.no_grad():
            return out[:, :1], recurrence(cell, xw[:, :1].double(), u64)
    u64.requires_grad_(True)
    states = recurrence(cell, xw.double(), u64)
    return out, torch.autograd.grad(states, u64, grad_states.double())[0]
