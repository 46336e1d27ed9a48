"""The warm-up sized by measured stability, and the round sized from it (issue 41, item 2).

Each kernel here moves a fake clock by a known amount per call, so what the warm-up decides depends
on the rule alone, never on how busy the machine is."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sixdim.workloads.context import RunContext
from sixdim.workloads.measure import operands, timing

CPU = torch.device("cpu")


class FakeKernel:
    """A kernel whose n-th call (from 0) lasts ``seconds(n, now)`` on a clock only it moves."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, seconds) -> None:
        self.now, self.calls, self.seconds = 0.0, 0, seconds
        monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: self.now))

    def __call__(self) -> None:
        self.now += self.seconds(self.calls, self.now)
        self.calls += 1


def test_a_steady_kernel_stops_warming_up_once_two_blocks_agree(monkeypatch):
    kernel = FakeKernel(monkeypatch, lambda n, now: 0.001)
    per_call, settled = timing.warm_up(kernel, CPU, warmup_seconds=1.0)
    assert settled and per_call == pytest.approx(0.001)
    # 1 call, then 10 (10 ms: shorter than a 20 ms block, not compared), then two blocks of 20
    assert kernel.calls == 51
    assert kernel.now == pytest.approx(0.051)  # a twentieth of the 1 s budget


def test_a_ramping_kernel_is_warmed_until_the_ramp_is_over(monkeypatch):
    """Like a GPU's clock rising under load: 2 ms per call falling linearly to 1 ms over the first
    100 ms, flat after.  Consecutive blocks differ by more than 3% all along the ramp."""
    kernel = FakeKernel(monkeypatch, lambda n, now: 0.001 * (2 - min(now, 0.1) / 0.1))
    per_call, settled = timing.warm_up(kernel, CPU, warmup_seconds=1.0)
    assert settled
    assert per_call == pytest.approx(0.001, rel=0.03)
    assert 0.1 <= kernel.now < 0.2


def test_a_kernel_that_never_settles_is_warmed_for_the_whole_budget(monkeypatch):
    kernel = FakeKernel(monkeypatch, lambda n, now: 0.001 * 1.005 ** n)  # ever slower: no two blocks agree
    per_call, settled = timing.warm_up(kernel, CPU, warmup_seconds=0.3)
    assert not settled
    assert 0.3 <= kernel.now < 0.3 + 0.05  # the budget, overrun by at most about one block


def test_without_a_budget_the_warm_up_is_three_calls_and_not_settled(monkeypatch):
    kernel = FakeKernel(monkeypatch, lambda n, now: 0.001)
    assert timing.warm_up(kernel, CPU, warmup_seconds=0.0) == (pytest.approx(0.001), False)
    assert kernel.calls == timing.MIN_WARMUP_CALLS == 3


def test_a_settled_warm_up_sizes_the_round_without_timing_it_again(monkeypatch):
    kernel = FakeKernel(monkeypatch, lambda n, now: 0.001)
    calls = timing.calibrate(kernel, CPU, warmup_seconds=1.0, min_round_seconds=0.05)
    assert 0.05 <= calls * 0.001 <= 0.05 * timing.CALIBRATION_MARGIN + 0.001  # the target, 10% to spare
    assert kernel.calls == 51  # the warm-up's calls only: no block of the target length timed after it


@pytest.mark.parametrize("stall_at", [2, 3])
def test_calibration_is_not_fooled_by_one_stall(monkeypatch, stall_at):
    """No budget, so the warm-up (3 calls) does not settle and calibration times blocks.  A 50 ms stall
    in the warm-up's last call (the estimate says 51 ms a call: a one-call block) or in calibration's
    first block must not end it with a block far shorter than the 20 ms target."""
    kernel = FakeKernel(monkeypatch, lambda n, now: 0.001 + (0.05 if n == stall_at else 0.0))
    block = timing.calibrate(kernel, CPU, warmup_seconds=0.0, min_round_seconds=0.02)
    assert 20 <= block <= 25


def test_time_rounds_keeps_the_deepspark_rounds_and_the_calibrated_calls():
    done = []

    def kernel() -> None:
        done.append(sum(range(200)))

    result = timing.time_rounds(kernel, CPU, RunContext(device="cpu"), rounds=5, min_round_seconds=0.005,
                                warmup_seconds=0.02)
    assert len(result.round_seconds) == 5 and all(s > 0 for s in result.round_seconds)
    assert result.calls_per_round >= 1 and result.method == "perf_counter"


def test_operands_are_the_same_on_every_run_of_a_device():
    first = operands.normal((64, 32), operands.generator(CPU), torch.bfloat16)
    again = operands.normal((64, 32), operands.generator(CPU), torch.bfloat16)
    assert first.dtype == torch.bfloat16 and torch.equal(first, again)
    assert 0.8 < first.float().std().item() < 1.2


def test_random_bytes_are_seeded_uniform_and_of_any_size():
    size = 2**16 + 3  # not a whole number of the 8-byte words they are drawn as
    drawn = operands.random_bytes(size, CPU)
    assert drawn.dtype == torch.uint8 and drawn.numel() == size
    assert torch.equal(drawn, operands.random_bytes(size, CPU))
    counts = torch.bincount(drawn, minlength=256)
    assert counts.numel() == 256 and counts.min() > 0.6 * size / 256 and counts.max() < 1.4 * size / 256
    assert not torch.equal(drawn, operands.random_bytes(size, CPU, seed=1))
