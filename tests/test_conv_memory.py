"""A convolution case holds only what its pass reads (the H200 run of 2026-11-26 found the forward case
holding two output-sized tensors it never used: its memory was 1.2-2.8 times a hand measurement).

The output's size now comes from arithmetic instead of a forward call kept alive: checked here against
torch's own convolution on every DeepBench shape (meta tensors: shapes only, no arithmetic).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sixdim.workloads.kernels import conv
from sixdim.workloads.kernels.shapes import CONV_INFERENCE, CONV_TRAINING


@pytest.mark.parametrize("shapes", [CONV_TRAINING, CONV_INFERENCE], ids=["training", "inference"])
def test_the_output_size_is_torchs_for_every_deepbench_shape(shapes):
    for shape in shapes:
        x = torch.empty(1, shape.c, shape.h, shape.w, device="meta")
        weight = torch.empty(shape.k, shape.c, shape.r, shape.s, device="meta")
        stride, padding = (shape.stride_h, shape.stride_w), (shape.pad_h, shape.pad_w)
        y = F.conv2d(x, weight, stride=stride, padding=padding)
        assert conv.output_size(shape.h, shape.w, shape.r, shape.s, stride, padding) == tuple(y.shape[2:]), shape


def test_a_forward_case_makes_no_output_gradient(monkeypatch):
    """The forward pass never reads an output gradient, so it must not allocate one: the tensors the
    workload makes from random data are its input and weights only."""
    made: list[tuple[int, ...]] = []
    real_randn = torch.randn

    def recording_randn(*size, **kwargs):
        made.append(tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size))
                    else tuple(size))
        return real_randn(*size, **kwargs)

    monkeypatch.setattr(conv.torch, "randn", recording_randn)
    params = {"n": 2, "c": 3, "h": 9, "w": 11, "k": 4, "r": 3, "s": 3, "stride_h": 1, "stride_w": 2,
              "pad_h": 1, "pad_w": 0, "layout": "nchw", "dtype": "fp32", "rounds": 3, "min_round_seconds": 0.0,
              "warmup_seconds": 0.0, "power_seconds": 0.0, "latency_samples": 0}
    from sixdim.workloads.context import RunContext

    for kernel_pass, expected in (("forward", 2), ("backward_data", 3), ("backward_weight", 3)):
        made.clear()
        output = conv.run({**params, "pass": kernel_pass}, RunContext(device="cpu"))
        assert output.status == "ok", output.reason
        assert len(made) == expected, (kernel_pass, made)
    assert made[-1] == (2, 4, *conv.output_size(9, 11, 3, 3, (1, 2), (1, 0)))  # the gradient has the output's shape
