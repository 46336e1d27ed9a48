"""Convolution: DeepBench's NCHW shapes, forward, backward-data and backward-weight timed apart.

FLOP count of each pass: 2·N·K·P·Q·C·R·S (P×Q the output size), the multiply-adds
of the direct algorithm, whatever algorithm the library picks (as DeepBench and
cuDNN benchmarks count it).  The backward passes call ``aten.convolution_backward``
with one output each, so each pass is its own kernel and its own measurement.
``layout`` ``channels_last`` runs the same convolution on NHWC memory.

Imports torch: the worker process only.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from sixdim.workloads.context import RunContext, Unsupported, WorkloadOutput
from sixdim.workloads.measure import flags, operands
from sixdim.workloads.measure.correctness import check, corrupt_
from sixdim.workloads.measure.operands import normal
from sixdim.workloads.measure.report import kernel_output, measure_kernel

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
SAMPLE_FILTERS = 4


def conv_flop_count(n: int, k: int, p: int, q: int, c: int, r: int, s: int) -> int:
    return 2 * n * k * p * q * c * r * s


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    precision, kernel_pass = params["dtype"], params["pass"]
    if device.type == "cuda":
        torch.cuda.set_device(device)
        if precision == "bf16" and torch.cuda.get_device_capability(device) < (8, 0):
            raise Unsupported("bf16 convolution needs compute capability 8.0+")
    flags.apply(precision, cudnn_benchmark=True)  # cuDNN picks its fastest algorithm, as a framework would
    dtype = DTYPES[precision]
    n, c, h, w, k, r, s = (params[x] for x in ("n", "c", "h", "w", "k", "r", "s"))
    stride, padding = (params["stride_h"], params["stride_w"]), (params["pad_h"], params["pad_w"])
    memory_format = torch.channels_last if params["layout"] == "channels_last" else torch.contiguous_format

    # Drawn on the device by its own seeded generator, in the case's precision: no host draw, no copy.
    generator = operands.generator(device)
    x = normal((n, c, h, w), generator, dtype).contiguous(memory_format=memory_format)
    weight = normal((k, c, r, s), generator, dtype).div_((c * r * s) ** 0.5).contiguous(memory_format=memory_format)
    p, q = output_size(h, w, r, s, stride, padding)
    # Only what the pass reads stays allocated: a case's memory is what its kernel needs.  (Keeping a
    # forward output for its shape and the output gradient for every pass made the forward case hold two
    # output-sized tensors it never used: 2 x 26.3 MiB over the hand-measured 29.8 MiB on an H200.)
    grad_y = None
    if kernel_pass != "forward":
        grad_y = normal((n, k, p, q), generator, dtype).contiguous(memory_format=memory_format)
    mask = {"forward": None, "backward_data": [True, False, False],
            "backward_weight": [False, True, False]}[kernel_pass]

    def kernel() -> torch.Tensor:
        # Returned, not kept: holding the last output alive while timing defeats the allocator's
        # reuse and was measured to double a CPU convolution's time.
        if mask is None:
            return F.conv2d(x, weight, stride=stride, padding=padding)
        grads = torch.ops.aten.convolution_backward(grad_y, x, weight, None, list(stride), list(padding),
                                                    [1, 1], False, [0, 0], 1, mask)
        return grads[0] if kernel_pass == "backward_data" else grads[1]

    itemsize = dtype.itemsize
    working_set = itemsize * (x.numel() + weight.numel() + n * k * p * q)
    flop_count = conv_flop_count(n, k, p, q, c, r, s)
    measured = measure_kernel(kernel, device, ctx, params, working_set_bytes=working_set, flop_count=flop_count)
    produced, reference = _sample(kernel_pass, kernel(), x, weight, grad_y, stride, padding)
    if params.get("corrupt"):
        produced = produced.clone()
        corrupt_(produced)
    return kernel_output(measured, check(produced, reference, precision), flop_count=flop_count,
                         details={"output_size": [p, q]})


def output_size(h: int, w: int, r: int, s: int, stride: tuple[int, int], padding: tuple[int, int]) -> tuple[int, int]:
    """The output's height and width (P, Q) of a convolution without dilation, as cuDNN computes them."""
    return (h + 2 * padding[0] - r) // stride[0] + 1, (w + 2 * padding[1] - s) // stride[1] + 1


def _sample(kernel_pass: str, out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, grad_y: torch.Tensor | None,
            stride: tuple[int, int], padding: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The produced values for a sample and their float64 reference from the same inputs.

    Forward: the first image, a few filters.  Backward-data: the first image's input
    gradient (it depends on that image alone).  Backward-weight: a few filters' gradient
    (each sums over the whole batch).
    """
    filters = list(range(min(SAMPLE_FILTERS, weight.shape[0])))
    w64 = weight.cpu().double()
    if kernel_pass == "forward":
        x64 = x[:1].cpu().double()
        reference = F.conv2d(x64, w64[filters], stride=stride, padding=padding)
        return out[:1, filters], reference
    assert grad_y is not None  # a backward pass
    if kernel_pass == "backward_data":
        x64, g64 = x[:1].cpu().double(), grad_y[:1].cpu().double()
        reference = torch.ops.aten.convolution_backward(g64, x64, w64, None, list(stride), list(padding),
                                                        [1, 1], False, [0, 0], 1, [True, False, False])[0]
        return out[:1], reference
    x64, g64 = x.cpu().double(), grad_y[:, filters].cpu().double()
    reference = torch.ops.aten.convolution_backward(g64, x64, w64[filters], None, list(stride),
                                                    list(padding), [1, 1], False, [0, 0], 1, [False, True, False])[1]
    return out[filters], reference
