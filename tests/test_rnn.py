"""The RNN workload: a hand-written BPTT that a CUDA graph can capture, checked against autograd,
and a correctness check that passes correct half-precision kernels at DeepBench's step counts.

On the CPU these run DeepBench's real step counts (GRU 187 and 1500, vanilla 50 with hidden 1024)
at small batch and hidden sizes, so they take seconds.  The CUDA-only tests (skipped without a
GPU) capture and replay the real thing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from sixdim.workloads import registry
from sixdim.workloads.context import RunContext, WorkloadOutput
from sixdim.workloads.kernels.rnn import GATES, Recurrence, recurrence, run
from sixdim.workloads.measure import flags

FAST = {"rounds": 3, "min_round_seconds": 0.002, "warmup_seconds": 0.0, "power_seconds": 0.0}


def _cpu_runs(dtype: torch.dtype) -> bool:
    try:
        torch.mm(torch.ones(2, 2, dtype=dtype), torch.ones(2, 2, dtype=dtype))
        return True
    except RuntimeError:
        return False


HALF = [pytest.param(p, marks=pytest.mark.skipif(not _cpu_runs(d), reason=f"this torch has no CPU {p} GEMM"))
        for p, d in (("bf16", torch.bfloat16), ("fp16", torch.float16))]
"""Half precisions, each where this torch's CPU build has its GEMM (the CUDA tests need them anyway)."""


@pytest.fixture(autouse=True)
def restored_flags() -> Iterator[None]:
    """run() sets torch's precision flags; the worker restores them after each case, and so do we."""
    yield
    flags.restore()


def params_for(cell: str, hidden: int, batch: int, steps: int, precision: str, kernel_pass: str,
               **extra: Any) -> dict[str, Any]:
    """A case's parameters as the registry builds them, with the shape replaced."""
    case = registry.get("rnn").cases({**FAST, "set": "quick", "precisions": [precision]}, "cpu")[0]
    return {**case.params, "cell": cell, "hidden": hidden, "batch": batch, "steps": steps, "pass": kernel_pass,
            **extra}


def run_case(device: str = "cpu", *args: Any, **extra: Any) -> WorkloadOutput:
    return run(params_for(*args, **extra), RunContext(device=device))


def random_layer(cell: str, steps: int, batch: int, hidden: int, dtype: torch.dtype = torch.float64,
                 device: str = "cpu", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """xw, U and the states' gradient, scaled as the workload scales them."""
    generator = torch.Generator().manual_seed(seed)
    width = GATES[cell] * hidden
    xw = 0.1 * torch.randn(steps, batch, width, generator=generator, dtype=torch.float64)
    u = 0.5 / hidden ** 0.5 * torch.randn(width, hidden, generator=generator, dtype=torch.float64)
    grad = torch.randn(steps, batch, hidden, generator=generator, dtype=torch.float64)
    return tuple(t.to(device=device, dtype=dtype) for t in (xw, u, grad))  # type: ignore[return-value]


# ---------------------------------------------------------------------------- the manual BPTT

@pytest.mark.parametrize("cell", sorted(GATES))
def test_static_forward_and_manual_backward_match_autograd_in_float64(cell):
    # Larger xw than the workload's, so the ReLUs and gates leave their linear regions.
    xw, u, grad = random_layer(cell, steps=9, batch=3, hidden=6)
    xw = 10 * xw
    layer = Recurrence(cell, xw, u, training=True)
    states = layer.forward().clone()
    u_ref = u.clone().requires_grad_(True)
    reference = recurrence(cell, xw, u_ref)
    assert torch.allclose(states, reference.detach(), rtol=1e-12, atol=1e-14)
    du_ref = torch.autograd.grad(reference, u_ref, grad)[0]
    du = layer.backward(grad)
    assert torch.allclose(du, du_ref, rtol=1e-12, atol=1e-14), (du - du_ref).abs().max()
    # Inference keeps one step's activations, and gives the same states.
    assert torch.allclose(Recurrence(cell, xw, u, training=False).forward(), states, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cell", sorted(GATES))
def test_timed_calls_reuse_their_buffers_and_build_no_autograd_graph(cell):
    """What a CUDA graph replays must write to the same memory every call and record nothing."""
    xw, u, grad = random_layer(cell, steps=4, batch=2, hidden=5, dtype=torch.float32)
    layer = Recurrence(cell, xw, u.requires_grad_(True), training=True)
    first = layer.forward()
    assert first.data_ptr() == layer.forward().data_ptr() == layer.h[1].data_ptr()
    du = layer.backward(grad)
    assert du.data_ptr() == layer.backward(grad).data_ptr()
    assert first.grad_fn is None and du.grad_fn is None
    with pytest.raises(RuntimeError, match="keeps no activations"):
        Recurrence(cell, xw, u, training=False).backward(grad)


def test_reference_follows_the_kernels_relu_branch_only_near_the_kink():
    xw = torch.tensor([[[1e-4, 0.5, -0.5]]], dtype=torch.float64)  # one step, batch 1, hidden 3
    u = torch.zeros(3, 3, dtype=torch.float64)
    kernel_branches = torch.tensor([[[False, False, True]]])  # the first is at the kink; the others are not
    plain = recurrence("vanilla", xw, u)
    followed = recurrence("vanilla", xw, u, kernel_branches, band=0.01)
    assert plain.tolist() == [[[1e-4, 0.5, 0.0]]]
    assert followed.tolist() == [[[0.0, 0.5, 0.0]]]  # only the near-zero one took the kernel's branch
    assert recurrence("vanilla", xw, u, kernel_branches, band=0.0).tolist() == plain.tolist()


# ---------------------------------------------------------------------------- half precision at DeepBench's steps

REAL_STEPS = [("gru", 64, 4, 187), ("vanilla", 1024, 2, 50), ("lstm", 128, 4, 150), ("gru", 32, 2, 1500)]
"""DeepBench's step counts (its GRU 187 and 1500, vanilla 50 at hidden 1024, LSTM 150), small batch."""


@pytest.mark.parametrize("kernel_pass", ["forward", "backward"])
@pytest.mark.parametrize("precision", HALF)
@pytest.mark.parametrize("cell, hidden, batch, steps", REAL_STEPS)
@pytest.mark.slow
def test_half_precision_is_correct_at_deepbench_step_counts(cell, hidden, batch, steps, precision, kernel_pass):
    output = run_case("cpu", cell, hidden, batch, steps, precision, kernel_pass)
    assert output.status == "ok", output.reason
    assert output.figures["max_relative_error"] <= output.details["tolerance"]
    assert output.details["timing_method"] == "perf_counter"  # the CPU: no CUDA graph
    assert output.details["flop_count"] == (1 if kernel_pass == "forward" else 2) * 2 * batch * hidden \
        * GATES[cell] * hidden * steps


@pytest.mark.parametrize("kernel_pass", ["forward", "backward"])
@pytest.mark.parametrize("precision", ["fp32", *HALF])
@pytest.mark.parametrize("cell, hidden, batch, steps", REAL_STEPS[:2])
@pytest.mark.slow
def test_corrupted_output_is_incorrect_at_deepbench_step_counts(cell, hidden, batch, steps, precision, kernel_pass):
    output = run_case("cpu", cell, hidden, batch, steps, precision, kernel_pass, corrupt=True)
    assert output.status == "incorrect"
    assert "exceeds the tolerance" in output.reason


def test_a_wrong_recurrence_is_incorrect_in_bf16(monkeypatch):
    """Not only a spoiled element: a backward that drops the recurrence's direct path (z·h) fails too."""
    monkeypatch.setattr(torch, "addmm", lambda bias, a, b, out: torch.mm(a, b, out=out))
    output = run_case("cpu", "gru", 64, 4, 187, "bf16", "backward")
    assert output.status == "incorrect", output.figures


@pytest.mark.parametrize("precision, tf32, half_reduction", [("fp32", False, True), ("bf16", False, False)])
def test_precision_flags_come_from_the_flags_module(precision, tf32, half_reduction):
    flags.apply("tf32")  # a previous case's flags: run() must set its own
    run_case("cpu", "lstm", 16, 2, 3, precision, "forward")
    assert flags.current() == flags.for_precision(precision)
    assert flags.current()["matmul_allow_tf32"] is tf32
    assert flags.current()["bf16_reduced_precision_reduction"] is half_reduction


# ---------------------------------------------------------------------------- CUDA graphs (GPU only)

def cuda(test):
    """A GPU-only test: marked ``gpu`` (so ``pytest -m gpu``, the GPU kit's set, runs it), skipped without CUDA."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(test))


@cuda
@pytest.mark.parametrize("cell", sorted(GATES))
def test_forward_and_backward_replay_from_a_cuda_graph(cell):
    xw, u, grad = random_layer(cell, steps=30, batch=8, hidden=256, dtype=torch.bfloat16, device="cuda")
    layer = Recurrence(cell, xw, u, training=True)
    eager_states = layer.forward().clone()
    eager_du = layer.backward(grad).clone()
    for call, eager in ((layer.forward, eager_states), (lambda: layer.backward(grad), eager_du)):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            call()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = call()
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.allclose(out.float(), eager.float(), rtol=1e-2, atol=1e-3)


@cuda
@pytest.mark.parametrize("precision", ["fp32", *HALF])
def test_run_on_cuda_times_a_cuda_graph_and_is_correct(precision):
    for cell, hidden, batch, steps in [("gru", 1536, 32, 187), ("vanilla", 1760, 32, 50), ("lstm", 1024, 64, 25)]:
        for kernel_pass in ("forward", "backward"):
            output = run_case("cuda:0", cell, hidden, batch, steps, precision, kernel_pass, latency_samples=3)
            assert output.status == "ok", (cell, kernel_pass, output.reason)
            assert output.details["timing_method"] == "cuda_graph_events", (cell, kernel_pass, output.details)
            assert output.figures["latency_p50_seconds"] > 0
