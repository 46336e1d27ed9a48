"""Every kernel workload on the CPU, each checked against an independent computation."""

import math

import pytest
import torch

from sixdim.workloads import registry
from sixdim.workloads.context import RunContext, Unsupported
from sixdim.workloads.measure.correctness import check, corrupt_
from sixdim.workloads.measure.stats import deepspark_mean

FAST = {"rounds": 3, "min_round_seconds": 0.002, "warmup_seconds": 0.0}


def run_cases(name, first_of=None, **overrides):
    """Expand the workload's cases as the agent does, and run each in this process (only the first that
    ``first_of`` accepts, where given)."""
    spec = registry.get(name)
    module, _, function = spec.entry.partition(":")
    run = getattr(__import__(module, fromlist=[function]), function)
    results = []
    known = {p.name for p in spec.params}
    timing = {k: v for k, v in FAST.items() if k in known}
    cases = spec.cases({**timing, **overrides}, "cpu")
    if first_of is not None:
        cases = [c for c in cases if first_of(c)][:1]
    for case in cases:
        ctx = RunContext(device="cpu")
        try:
            results.append((case, run(case.params, ctx), ctx))
        except Unsupported as exc:
            results.append((case, exc, ctx))
    return results


# ---------------------------------------------------------------------------- GEMM

@pytest.mark.slow
def test_gemm_every_precision_and_transpose():
    results = run_cases("gemm", set="training", scale=64, precisions=["fp32", "bf16", "int8", "tf32", "fp8"])
    ops = set()
    for case, output, ctx in results:
        if case.precision in ("tf32", "fp8"):
            assert isinstance(output, Unsupported), case
            continue
        p = case.params
        ops.add(p["op"])
        assert output.status == "ok", (case.shape, case.precision, output.reason)
        assert output.figures["flops"] == pytest.approx(2 * p["m"] * p["n"] * p["k"] / output.figures["seconds"])
        assert output.figures["max_relative_error"] <= output.details["tolerance"]
        assert ctx.window_end > ctx.window_start
    assert ops == {"NN", "TN", "NT"}


def test_gemm_int8_is_exact_and_fp32_close():
    [(_, int8, _)] = run_cases("gemm", m=64, n=48, k=96, precisions=["int8"])
    assert int8.figures["max_relative_error"] == 0.0
    [(_, fp32, _)] = run_cases("gemm", m=64, n=48, k=96, precisions=["fp32"])
    assert fp32.figures["max_relative_error"] < 1e-5


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_gemm_catches_a_corrupted_output(precision):
    [(_, output, _)] = run_cases("gemm", m=64, n=64, k=64, precisions=[precision], corrupt=True)
    assert output.status == "incorrect"
    assert "exceeds the tolerance" in output.reason


def test_gemm_alpha_beta_one_means_c_is_added():
    from sixdim.workloads.kernels.gemm import _setup

    kernel, sample, _, _ = _setup({"m": 8, "n": 8, "k": 8, "op": "NN", "dtype": "fp32"}, torch.device("cpu"))
    kernel()
    produced, reference = sample()  # the reference is A·B + C, so agreement proves beta = 1
    assert torch.allclose(produced.double(), reference, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- convolution

def test_conv_passes_flops_and_layouts():
    results = run_cases("conv", set="quick", precisions=["fp32"], layouts=["nchw", "channels_last"])
    seen = set()
    for case, output, _ in results:
        p = case.params
        out_h = (p["h"] + 2 * p["pad_h"] - p["r"]) // p["stride_h"] + 1
        out_w = (p["w"] + 2 * p["pad_w"] - p["s"]) // p["stride_w"] + 1
        expected = 2 * p["n"] * p["k"] * out_h * out_w * p["c"] * p["r"] * p["s"]
        assert output.status == "ok", (case.shape, case.kernel_pass, output.reason)
        assert output.details["output_size"] == [out_h, out_w]
        assert output.figures["flops"] == pytest.approx(expected / output.figures["seconds"])
        seen.add((case.kernel_pass, p["layout"]))
    assert seen == {(pas, layout) for pas in ("forward", "backward_data", "backward_weight")
                    for layout in ("nchw", "channels_last")}


@pytest.mark.parametrize("kernel_pass", ["forward", "backward_data", "backward_weight"])
def test_conv_catches_a_corrupted_output(kernel_pass):
    """The pass's first quick case, with its output corrupted (running all ten quick cases, as each pass's test
    did, cost 2.5 s for the one output it read)."""
    [(_, output, _)] = run_cases("conv", first_of=lambda case: case.kernel_pass == kernel_pass, set="quick",
                                 precisions=["fp32"], layouts=["nchw"], corrupt=True)
    assert output.status == "incorrect"


# ---------------------------------------------------------------------------- RNN

def test_rnn_recurrence_matches_torch_cells():
    from sixdim.workloads.kernels.rnn import recurrence

    torch.manual_seed(0)
    hidden, batch, steps = 16, 3, 5
    x = torch.randn(steps, batch, 8, dtype=torch.float64)
    for cell, torch_cell in (("vanilla", torch.nn.RNNCell(8, hidden, nonlinearity="relu", bias=False)),
                             ("lstm", torch.nn.LSTMCell(8, hidden, bias=False))):
        torch_cell = torch_cell.double()
        xw = x @ torch_cell.weight_ih.t()  # the input projection, done outside as DeepBench requires
        ours = recurrence(cell, xw, torch_cell.weight_hh.detach())
        h = torch.zeros(batch, hidden, dtype=torch.float64)
        c = torch.zeros_like(h)
        for t in range(steps):
            if cell == "lstm":
                h, c = torch_cell(x[t], (h, c))
            else:
                h = torch_cell(x[t], h)
            assert torch.allclose(ours[t], h.detach()), (cell, t)


def test_rnn_gru_follows_deepbench_relu_candidate():
    from sixdim.workloads.kernels.rnn import recurrence

    xw = torch.tensor([[[0.5, -0.2, -3.0]]], dtype=torch.float64)  # one step, batch 1, hidden 1
    u = torch.zeros(3, 1, dtype=torch.float64)
    [[[h]]] = recurrence("gru", xw, u).tolist()
    z = 1 / (1 + math.exp(0.2))
    assert h == pytest.approx((1 - z) * max(0.0, -3.0))  # ReLU candidate: negative -> 0, so h = 0


def test_rnn_flops_and_passes():
    from sixdim.workloads.kernels.rnn import GATES

    results = run_cases("rnn", set="quick", precisions=["fp32"])
    for case, output, _ in results:
        p = case.params
        forward = 2 * p["batch"] * p["hidden"] * GATES[p["cell"]] * p["hidden"] * p["steps"]
        expected = forward if case.kernel_pass == "forward" else 2 * forward
        assert output.status == "ok", (case.shape, output.reason)
        assert output.figures["flops"] == pytest.approx(expected / output.figures["seconds"])
    assert {c.kernel_pass for c, _, _ in results} == {"forward", "backward"}


def test_rnn_catches_a_corrupted_output():
    results = run_cases("rnn", set="quick", precisions=["fp32"], corrupt=True)
    assert {o.status for _, o, _ in results} == {"incorrect"}


# ---------------------------------------------------------------------------- sparse GEMM

def test_sparse_gemm_counts_nonzeros_and_speedup():
    for case, output, _ in run_cases("sparse_gemm", set="quick"):
        p, d = case.params, output.details
        assert output.status == "ok"
        assert abs(d["density"] - (1 - p["sparsity"])) < 0.02
        assert output.figures["flops"] == pytest.approx(2 * d["nnz"] * p["n"] / output.figures["seconds"])
        assert output.figures["speedup"] == pytest.approx(d["dense_seconds"] / output.figures["seconds"])
        assert d["dense_seconds"] == pytest.approx(deepspark_mean(d["dense_round_seconds"]))
        # DeepBench's int32 CSR indices, read back from the tensor that ran; both kernels in one cache regime
        assert d["index_dtype"] == "int32"
        assert d["dense_cache_regime"] == d["cache_regime"]


def test_sparse_gemm_catches_a_corrupted_output():
    assert {o.status for _, o, _ in run_cases("sparse_gemm", set="quick", corrupt=True)} == {"incorrect"}


# ---------------------------------------------------------------------------- memory bandwidth, launch latency

def timed_share(rounds, calls_per_round, ctx) -> float:
    """How much of the measured window the timed calls fill: at most 1 whatever the load (the rounds
    are inside the window), and most of it for rounds that are what they say.  A figure that
    divides a round by its calls twice, or reports a tenth of it, fills a tenth."""
    return calls_per_round * sum(rounds) / (ctx.window_end - ctx.window_start)


def test_memory_bandwidth_counts_bytes_moved():
    results = {c.kernel_pass: (o, ctx) for c, o, ctx in run_cases("memory_bandwidth", size_bytes=8 * 2**20,
                                                                  min_round_seconds=0.05)}
    d2d, ctx = results["d2d"]
    rounds = d2d.details["round_seconds"]
    assert d2d.figures["seconds"] == pytest.approx(deepspark_mean(rounds))  # one copy, from the rounds
    assert 0.25 < timed_share(rounds, d2d.details["calls_per_round"], ctx) <= 1 + 1e-6
    assert d2d.details["bytes_moved"] == 2 * 8 * 2**20  # read and written
    assert d2d.figures["bytes_per_second"] == pytest.approx(2 * 8 * 2**20 / d2d.figures["seconds"])
    assert isinstance(results["h2d"][0], Unsupported) and isinstance(results["d2h"][0], Unsupported)
    [(_, corrupted, _)] = run_cases("memory_bandwidth", size_bytes=2**20, directions=["d2d"], corrupt=True)
    assert corrupted.status == "incorrect" and corrupted.details["mismatched_bytes"] == 1
    # one byte flipped (x ^ 0xFF): its error |255 - 2x| over the source's largest byte, 255 in 1 MiB of random bytes
    assert d2d.figures["max_relative_error"] == 0.0
    assert 0 < corrupted.figures["max_relative_error"] <= 1.0


def test_launch_latency_runs_every_launch():
    for _case, output, ctx in run_cases("launch_latency", launches_per_round=500):
        assert output.status == "ok" and output.figures["max_relative_error"] == 0.0
        rounds = output.details["round_seconds"]
        assert 0 < output.figures["seconds"] == pytest.approx(deepspark_mean(rounds))
        # seconds per launch, not per round: the rounds' 500 launches each fit in the measured window,
        # and fill most of it (a fixed bound such as "under 1 ms" is what a busy machine breaks)
        assert 0.25 < timed_share(rounds, 500, ctx) <= 1 + 1e-6


# ---------------------------------------------------------------------------- all-reduce

@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.slow
def test_allreduce_bandwidths_follow_nccl_tests(ranks):
    [(case, output, ctx)] = run_cases("allreduce", set="quick", scale=64, ranks=ranks, iterations=10)[:1]
    size = 4 * case.params["floats"]
    assert output.status == "ok", output.reason
    rounds = output.details["round_seconds"]
    assert output.figures["seconds"] == pytest.approx(deepspark_mean(rounds))  # one all-reduce, from the rounds
    # rank 0's window holds every round's all-reduces (at least 10, each round the slowest rank's) and,
    # between rounds, one small all-reduce of the round's time: the rounds fill most of it
    iterations = output.details["iterations_per_round"]
    assert iterations >= 10 and timed_share(rounds, iterations, ctx) > 0.25
    algbw = output.figures["bytes_per_second"]
    assert algbw == pytest.approx(size / output.figures["seconds"])
    assert output.figures["bus_bytes_per_second"] == pytest.approx(algbw * 2 * (ranks - 1) / ranks)
    assert output.details["ranks"] == ranks and output.details["backend"] == "gloo"
    assert output.figures["max_relative_error"] == 0.0
    assert ctx.window_end > ctx.window_start


@pytest.mark.slow
def test_allreduce_catches_a_wrong_sum():
    [(_, output, _)] = run_cases("allreduce", set="quick", scale=64, iterations=1, corrupt=True)[:1]
    assert output.status == "incorrect" and output.details["wrong_elements"] == 1
    # rank 0 added 1000 to one element: the sum is off by 1000 of the exact 1 + 2 (two ranks by default)
    ranks = output.details["ranks"]
    assert output.figures["max_relative_error"] == pytest.approx(1000.0 / (ranks * (ranks + 1) / 2))


# ---------------------------------------------------------------------------- inference percentiles, correctness

def test_inference_cases_report_p50_and_p99(monkeypatch):
    results = run_cases("gemm", set="inference", scale=16, max_batch=4, latency_samples=50, precisions=["fp32"])
    assert results and all(c.params["n"] <= 4 for c, _, _ in results)
    for _, output, _ in results:
        assert 0 < output.figures["latency_p50_seconds"] <= output.figures["latency_p99_seconds"]
        assert output.details["latency_samples"] == 50
    # which sample each figure is: the single calls' times answered as 1, 2, ... 100 ms (in a shuffled
    # order), p50 is the 50th and p99 the 99th
    from sixdim.workloads.measure import report

    asked = []

    def known_latencies(fn, device, ctx, *, samples, warmup_seconds, regime="warm"):
        asked.append(samples)
        return [i * 1e-3 for i in (list(range(100, 50, -1)) + list(range(1, 51)))][:samples]

    monkeypatch.setattr(report, "latency_percentiles", known_latencies)
    [(_, output, _)] = run_cases("gemm", set="inference", scale=16, max_batch=1, latency_samples=100,
                                 precisions=["fp32"])[:1]
    assert asked and asked[0] == 100
    assert output.figures["latency_p50_seconds"] == pytest.approx(0.050)
    assert output.figures["latency_p99_seconds"] == pytest.approx(0.099)


def test_percentile_is_nearest_rank():
    from sixdim.workloads.measure.report import percentile

    values = list(range(1, 101))
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50, 99, 100)


def test_check_flags_corruption_and_non_finite_values():
    reference = torch.randn(32, 32, dtype=torch.float64)
    good = reference.to(torch.bfloat16)
    assert check(good, reference, "bf16").correct
    bad = good.clone()
    corrupt_(bad)
    assert not check(bad, reference, "bf16").correct
    nan = good.clone()
    nan[3, 3] = float("nan")
    assert check(nan, reference, "bf16").max_relative_error == math.inf


def test_every_builtin_suite_expands_on_both_device_types():
    from sixdim.config.suites import preset_entries

    for suite in registry.SUITES:
        for entry in preset_entries(suite):
            for device_type in ("cpu", "cuda"):
                assert registry.get(entry.name).cases(entry.params, device_type), (suite, entry.name)
