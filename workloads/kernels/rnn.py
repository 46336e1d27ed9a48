"""Recurrent layers by DeepBench's rules: vanilla (ReLU), LSTM (no peepholes), GRU.

- The input projection W·x_t is computed for all steps before timing and is not
  in the timed region; the timed forward is the recurrence h_t = cell(Wx_t + U·h_{t-1}).
- The backward pass computes the gradient of the recurrent weights U only, not of
  the inputs (DeepBench: "all the recurrent work is done to calculate the weight updates").
  The forward it differentiates runs once, outside the timed region, and saves what the
  backward needs (as cuDNN's reserve space does).
- GRU as DeepBench specifies it: sigmoid reset and update gates, ReLU candidate.

FLOP count: the recurrent GEMMs, 2·B·H·(G·H) per step forward (G = 1, 4, 3 gates),
twice that backward (the gradients with respect to h and to U); the elementwise
gate arithmetic is not counted.

**Static kernels, CUDA graphs.**  A recurrence is a chain of T small GEMMs and elementwise
kernels; timed from Python on an H100 it measures the launch rate, not the GPU.  So both
timed calls (:meth:`Recurrence.forward`, :meth:`Recurrence.backward`) write only into
buffers allocated once, read nothing back to the host, build no autograd graph, and have
a fixed sequence of kernels: on CUDA the whole call is captured in a CUDA graph and
replayed (``time_rounds(graph=True)``; the result's ``timing_method`` says
``cuda_graph_events``, or ``cuda_events`` if capture failed).  The backward is a manual BPTT:
per step (from the last) dh_t = ∂L/∂h_t + dh carried from step t+1, the gates' gradient da_t
from the saved activations, the carry da_t·U (plus the cell's direct path: the LSTM's cell
state, the GRU's z·h); after the loop dU = Σ_t da_tᵀ·h_{t-1} as one GEMM over all T·B rows,
as cuDNN's weight-gradient pass does.  The last carry is dh_0, cuDNN's ``dhx``, so the
backward does exactly the 2× forward GEMM work that :func:`rnn_flop_count` counts.

**Correctness.**  Forward: the first sequence's states; backward: all of dU; each against a
float64 autograd of :func:`recurrence` from the same rounded inputs, with the fixed
per-precision tolerance of :data:`sixdim.workloads.measure.correctness.TOLERANCES` at every step count.  Two
things used to make a correct half-precision backward fail at DeepBench's step counts (bf16:
GRU 187 steps 0.06–0.08, vanilla 50 steps hidden 1024 0.09–0.18, against 0.02), and neither is
fixed by loosening the tolerance with the step count:

- *dU accumulated in half precision.*  Autograd added T per-step contributions to dU, each
  rounded to bf16, so the error grew with T.  Here dU is one GEMM over all T·B rows, accumulated
  in fp32 and rounded once, as cuDNN's weight-gradient pass and training under autocast (fp32
  weight gradients) accumulate it.
- *ReLU's kink.*  The vanilla state and the GRU candidate are ReLUs, whose derivative jumps
  from 0 to 1 at zero: a pre-activation within rounding of zero can take the other branch in
  the kernel than in float64, and each such flip moves a whole term of dU (this dominated, and
  it hit fp16 too: 0.1 against 0.005).  A gradient check is not made at a kink, so the backward's
  reference follows the branch the kernel took wherever its own pre-activation lies within the
  precision's tolerance × the step's largest |pre-activation| of zero, and its own sign
  everywhere else (so a corrupted state is still its own, and still caught).

Measured with both in place, every cell, flat in the step count: on CPU up to 1500 steps, and on
an H100 at DeepBench's full shapes (the quick set, vanilla 2560×128×50, LSTM 4096×128×25, GRU
2560×32×1500 and 1024×64×1500): bf16 at most 0.011 against 0.02, fp16 at most 0.0015 against
0.005, fp32 at most 3e-6 against 1e-4.  A corrupted element (the ``corrupt`` self-test) gives an
error of order 1 or more, far above any tolerance.  On that H100 the CUDA graph made the timed
call 4–7× faster than the same kernels launched from Python (bf16 GRU 1536×32×187 forward
31.1 → 5.2 ms, LSTM 1024×64×25 forward 2.9 → 0.58 ms).

Imports torch: the worker process only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

import torch

from sixdim.workloads.context import RunContext, Unsupported, WorkloadOutput
from sixdim.workloads.measure import flags, operands
from sixdim.workloads.measure.correctness import TOLERANCES, check, corrupt_
from sixdim.workloads.measure.operands import normal
from sixdim.workloads.measure.report import kernel_output, measure_kernel
from sixdim.workloads.measure.timing import latency_percentiles

GATES = {"vanilla": 1, "lstm": 4, "gru": 3}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

_sigmoid_backward = torch.ops.aten.sigmoid_backward.grad_input
_tanh_backward = torch.ops.aten.tanh_backward.grad_input
_threshold_backward = torch.ops.aten.threshold_backward.grad_input
"""autograd's own fused backward kernels of sigmoid, tanh and ReLU, with an output argument."""


def rnn_flop_count(cell: str, hidden: int, batch: int, steps: int, kernel_pass: str) -> int:
    forward = 2 * batch * hidden * GATES[cell] * hidden * steps
    return forward if kernel_pass == "forward" else 2 * forward


def recurrence(cell: str, xw: torch.Tensor, u: torch.Tensor, branches: torch.Tensor | None = None,
               band: float = 0.0) -> torch.Tensor:
    """All hidden states (steps × batch × hidden) of the recurrence over precomputed inputs xw.

    The plain definition, differentiable by autograd: the float64 reference that the static
    :class:`Recurrence` (what is timed) is checked against.

    ``branches`` (steps × batch × hidden, bool) are the ReLU branches another computation took
    (its pre-activation > 0: the vanilla state, the GRU candidate).  Where this computation's
    pre-activation lies within ``band`` × that step's largest |pre-activation| of zero, it takes
    that branch rather than its own sign.  ReLU's derivative jumps from 0 to 1 there, so a
    rounding-sized difference in the state flips a whole term of the gradient; a reference for a
    half-precision backward must differentiate the branch the kernel took (a gradient check
    does not test at a kink), while anything outside the band is still its own.
    """
    steps, batch, _ = xw.shape
    hidden = u.shape[1]
    h = xw.new_zeros(batch, hidden)
    c = xw.new_zeros(batch, hidden)

    def relu(pre: torch.Tensor, t: int) -> torch.Tensor:
        if branches is None:
            return torch.relu(pre)
        near = pre.detach().abs() <= band * pre.detach().abs().max()
        return pre * torch.where(near, branches[t], pre.detach() > 0).to(pre.dtype)

    states = []
    for t in range(steps):
        uh = h @ u.t()
        if cell == "vanilla":
            h = relu(xw[t] + uh, t)
        elif cell == "lstm":
            i, f, g, o = (xw[t] + uh).chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        else:  # gru
            xr, xz, xn = xw[t].chunk(3, dim=1)
            ur, uz, un = uh.chunk(3, dim=1)
            r, z = torch.sigmoid(xr + ur), torch.sigmoid(xz + uz)
            n = relu(xn + r * un, t)
            h = (1 - z) * n + z * h
        states.append(h)
    return torch.stack(states)


class _Placement(TypedDict):
    """Where and in what type every buffer of a run lives: the input's, passed to each allocation."""

    device: torch.device
    dtype: torch.dtype


class Recurrence:
    """One layer's recurrence over fixed inputs, with every buffer allocated up front.

    :meth:`forward` and :meth:`backward` only write into these buffers (their temporaries have
    fixed shapes), so a CUDA graph can capture either whole call.  ``training`` keeps each step's
    activations for the backward; without it they share one step's buffer (inference needs only
    the states).
    """

    def __init__(self, cell: str, xw: torch.Tensor, u: torch.Tensor, *, training: bool) -> None:
        steps, batch, width = xw.shape
        hidden = u.shape[1]
        if cell not in GATES or width != GATES[cell] * hidden or u.shape[0] != width:
            raise ValueError(f"{cell}: xw {tuple(xw.shape)} and U {tuple(u.shape)} do not match")
        # Detached: the timed calls record nothing for autograd (their out= ops refuse to anyway).
        self.cell, self.xw, self.u, self.training = cell, xw.detach(), u.detach(), training
        self.steps, self.batch, self.hidden = steps, batch, hidden
        saved = steps if training else 1
        new: _Placement = {"device": xw.device, "dtype": xw.dtype}
        self.h = torch.zeros(steps + 1, batch, hidden, **new)
        """h[0] is the initial state (zero, never written); h[t + 1] the state after step t."""
        self.c = torch.zeros(steps + 1, batch, hidden, **new) if cell == "lstm" else None
        self.gates = torch.empty(saved, batch, width, **new) if cell != "vanilla" else None
        """Activated gates: LSTM i, f, g, o; GRU r, z and the candidate n."""
        self.tanh_c = torch.empty(saved, batch, hidden, **new) if cell == "lstm" else None
        self.uh = torch.empty(saved, batch, width, **new) if cell == "gru" else None
        """GRU: U·h_{t-1}, whose candidate part r multiplies."""
        if training:
            self.da = torch.empty(steps, batch, width, **new)
            """∂L/∂(U·h_{t-1}) for every step: the left operand of dU's one GEMM."""
            self.dh = torch.empty(batch, hidden, **new)
            self.carry = torch.empty(batch, hidden, **new)
            """dh passed back to the previous step; after the backward, dh_0 (cuDNN's dhx)."""
            self.dh_z = torch.empty(batch, hidden, **new) if cell == "gru" else None
            self.dc = torch.empty(batch, hidden, **new) if cell == "lstm" else None
            self.scratch = torch.empty(batch, hidden, **new) if cell == "lstm" else None
            self.du = torch.empty_like(u)

    # ------------------------------------------------------------------ forward

    def forward(self) -> torch.Tensor:
        """Run the recurrence; returns the states (steps × batch × hidden), a view of ``h``."""
        step = {"vanilla": self._vanilla, "lstm": self._lstm, "gru": self._gru}[self.cell]
        for t in range(self.steps):
            step(t, t if self.training else 0)
        return self.h[1:]

    def _vanilla(self, t: int, k: int) -> None:
        h = self.h[t + 1]
        torch.addmm(self.xw[t], self.h[t], self.u.t(), out=h)
        h.relu_()

    def _lstm(self, t: int, k: int) -> None:
        assert self.gates is not None and self.c is not None and self.tanh_c is not None
        n = self.hidden
        g = self.gates[k]
        torch.addmm(self.xw[t], self.h[t], self.u.t(), out=g)
        g[:, :2 * n].sigmoid_()
        g[:, 2 * n:3 * n].tanh_()
        g[:, 3 * n:].sigmoid_()
        i, f, cand, o = g.chunk(4, dim=1)
        c = self.c[t + 1]
        torch.mul(f, self.c[t], out=c)
        c.addcmul_(i, cand)
        torch.tanh(c, out=self.tanh_c[k])
        torch.mul(o, self.tanh_c[k], out=self.h[t + 1])

    def _gru(self, t: int, k: int) -> None:
        assert self.gates is not None and self.uh is not None
        n_ = self.hidden
        uh, g, xw = self.uh[k], self.gates[k], self.xw[t]
        torch.mm(self.h[t], self.u.t(), out=uh)
        rz = g[:, :2 * n_]
        torch.add(xw[:, :2 * n_], uh[:, :2 * n_], out=rz)
        rz.sigmoid_()
        r, z, n = g[:, :n_], g[:, n_:2 * n_], g[:, 2 * n_:]
        torch.mul(r, uh[:, 2 * n_:], out=n)
        n.add_(xw[:, 2 * n_:]).relu_()
        h = self.h[t + 1]  # (1 - z)·n + z·h = n + z·(h - n)
        torch.sub(self.h[t], n, out=h)
        h.mul_(z).add_(n)

    def relu_branches(self) -> torch.Tensor | None:
        """The ReLU branch (pre-activation > 0) each step took: the vanilla state, the GRU
        candidate; None for the LSTM, which has no ReLU."""
        if self.cell == "vanilla":
            return self.h[1:] > 0
        if self.cell == "gru" and self.training:
            assert self.gates is not None
            return self.gates[:, :, 2 * self.hidden:] > 0
        return None

    # ------------------------------------------------------------------ backward

    def backward(self, grad_states: torch.Tensor) -> torch.Tensor:
        """dU for the loss whose gradient with respect to the states is ``grad_states``.

        Uses the activations saved by the last :meth:`forward` (which it does not rerun).
        Returns ``du``, overwritten by each call.
        """
        if not self.training:
            raise RuntimeError("a Recurrence built with training=False keeps no activations to differentiate")
        self.carry.zero_()
        if self.dc is not None:
            self.dc.zero_()
        step = {"vanilla": self._vanilla_back, "lstm": self._lstm_back, "gru": self._gru_back}[self.cell]
        for t in reversed(range(self.steps)):
            torch.add(grad_states[t], self.carry, out=self.dh)
            step(t)
        rows = self.steps * self.batch
        torch.mm(self.da.view(rows, -1).t(), self.h[:self.steps].reshape(rows, self.hidden), out=self.du)
        return self.du

    def _vanilla_back(self, t: int) -> None:
        da = self.da[t]
        _threshold_backward(self.dh, self.h[t + 1], 0, grad_input=da)
        torch.mm(da, self.u, out=self.carry)

    def _lstm_back(self, t: int) -> None:
        assert self.gates is not None and self.c is not None and self.tanh_c is not None
        assert self.dc is not None and self.scratch is not None
        i, f, cand, o = self.gates[t].chunk(4, dim=1)
        da_i, da_f, da_g, da_o = self.da[t].chunk(4, dim=1)
        tanh_c, dh, dc, tmp = self.tanh_c[t], self.dh, self.dc, self.scratch
        # dc_t = dc carried from t+1 (already f_{t+1}·dc_{t+1}) + dh·o·(1 - tanh²c)
        torch.mul(dh, o, out=tmp)
        _tanh_backward(tmp, tanh_c, grad_input=tmp)
        dc.add_(tmp)
        torch.mul(dh, tanh_c, out=da_o)
        _sigmoid_backward(da_o, o, grad_input=da_o)
        torch.mul(dc, cand, out=da_i)
        _sigmoid_backward(da_i, i, grad_input=da_i)
        torch.mul(dc, self.c[t], out=da_f)
        _sigmoid_backward(da_f, f, grad_input=da_f)
        torch.mul(dc, i, out=da_g)
        _tanh_backward(da_g, cand, grad_input=da_g)
        dc.mul_(f)
        torch.mm(self.da[t], self.u, out=self.carry)

    def _gru_back(self, t: int) -> None:
        assert self.gates is not None and self.uh is not None and self.dh_z is not None
        n_ = self.hidden
        g, da = self.gates[t], self.da[t]
        r, z, n = g[:, :n_], g[:, n_:2 * n_], g[:, 2 * n_:]
        da_r, da_z, da_n = da[:, :n_], da[:, n_:2 * n_], da[:, 2 * n_:]
        un = self.uh[t][:, 2 * n_:]
        dh, dh_z = self.dh, self.dh_z
        torch.mul(dh, z, out=dh_z)  # the direct path to h_{t-1}
        torch.sub(dh, dh_z, out=da_n)  # dn = dh·(1 - z)
        _threshold_backward(da_n, n, 0, grad_input=da_n)  # through the ReLU candidate
        torch.mul(da_n, un, out=da_r)
        _sigmoid_backward(da_r, r, grad_input=da_r)
        da_n.mul_(r)  # ∂L/∂(U_n·h): the candidate sees r·(U_n·h)
        torch.sub(self.h[t], n, out=da_z)  # dz = dh·(h_{t-1} - n)
        da_z.mul_(dh)
        _sigmoid_backward(da_z, z, grad_input=da_z)
        torch.addmm(dh_z, da, self.u, out=self.carry)


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    precision, kernel_pass, cell = params["dtype"], params["pass"], params["cell"]
    if device.type == "cuda":
        torch.cuda.set_device(device)
        if precision == "bf16" and torch.cuda.get_device_capability(device) < (8, 0):
            raise Unsupported("bf16 needs compute capability 8.0+")
    flags.apply(precision)
    dtype = DTYPES[precision]
    hidden, batch, steps = params["hidden"], params["batch"], params["steps"]
    gates = GATES[cell]
    generator = operands.generator(device)  # drawn on the device, in the case's precision: no host draw, no copy
    # Contractive weights keep the state bounded over 1500 steps, in any precision.
    xw = normal((steps, batch, gates * hidden), generator, dtype).mul_(0.1)
    u = normal((gates * hidden, hidden), generator, dtype).mul_(0.5 / hidden ** 0.5)
    layer = Recurrence(cell, xw, u, training=kernel_pass != "forward")
    grad_states = None
    kernel: Callable[[], torch.Tensor]
    if kernel_pass == "forward":
        kernel = layer.forward
    else:
        grad_states = normal((steps, batch, hidden), generator, dtype)
        layer.forward()  # the activations the backward reads, saved once outside the timed region

        def kernel() -> torch.Tensor:
            return layer.backward(grad_states)

    graph = device.type == "cuda"  # the whole recurrence replayed as one CUDA graph: no launch overhead
    flop_count = rnn_flop_count(cell, hidden, batch, steps, kernel_pass)
    measured = measure_kernel(kernel, device, ctx, {**params, "latency_samples": 0}, graph=graph,
                              flop_count=flop_count)
    if params.get("latency_samples"):
        # On CUDA, single warm calls are replayed from a graph of one call (latency_percentiles).
        measured.latencies = latency_percentiles(kernel, device, ctx, samples=params["latency_samples"],
                                                 warmup_seconds=0.0, regime=measured.timing.regime)
    produced, reference = _sample(layer, kernel_pass, kernel(), grad_states, band=TOLERANCES[precision])
    if params.get("corrupt"):
        produced = produced.clone()
        corrupt_(produced)
    return kernel_output(measured, check(produced, reference, precision), flop_count=flop_count)


def _sample(layer: Recurrence, kernel_pass: str, out: torch.Tensor, grad_states: torch.Tensor | None, *,
            band: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward: the first sequence's states (independent of the others), in float64.
    Backward: the whole weight gradient in float64, on the same device (data-centre GPUs do
    float64 quickly; it sums over the batch, so no smaller sample would check it), following
    the kernel's ReLU branches within ``band`` of the kink (see the module docstring)."""
    cell, xw, u64 = layer.cell, layer.xw, layer.u.detach().double()
    if kernel_pass == "forward":
        with torch.no_grad():
            return out[:, :1], recurrence(cell, xw[:, :1].double(), u64)
    assert grad_states is not None
    u64.requires_grad_(True)
    states = recurrence(cell, xw.double(), u64, layer.relu_branches(), band)
    return out, torch.autograd.grad(states, u64, grad_states.double())[0]
