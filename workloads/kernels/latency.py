"""Kernel launch latency: what one launch of a trivial kernel costs, as its own workload.

``launch``: the host-side time per launch of a one-element kernel, launches issued
back to back (the GPU runs each faster than the host issues the next, so the host
is what is measured), synchronized once per round.  ``round_trip``: one launch
followed by a synchronize, the latency a dependent step sees.  On the CPU the
same loops measure the framework's per-operation dispatch overhead.

Imports torch: the worker process only.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from sixdim.workloads.context import RunContext, WorkloadOutput
from sixdim.workloads.measure.stats import deepspark_mean, summarize


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    x = torch.zeros(1, device=device)
    round_trip = params["mode_of_launch"] == "round_trip"
    calls = params["launches_per_round"]

    def one_round() -> float:
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            x.add_(1.0)
            if round_trip:
                sync()
        elapsed = time.perf_counter() - start
        sync()
        return elapsed / calls

    ctx.progress("warming up")
    for _ in range(3):
        one_round()
    ctx.mark_window_start()
    rounds = [one_round() for _ in range(params["rounds"])]
    ctx.mark_window_end()
    distribution = summarize(rounds)
    expected = (3 + params["rounds"]) * calls
    wrong = x.item() != expected
    figures = {"seconds": deepspark_mean(rounds), "seconds_iqr_ratio": distribution["iqr_ratio"],
               "max_relative_error": abs(x.item() - expected) / expected}
    details = {"round_seconds": rounds, "launches_per_round": calls, "distribution": distribution}
    if wrong:
        return WorkloadOutput(figures, details, status="incorrect",
                              reason=f"incorrect: {expected} increments gave {x.item()}")
    return WorkloadOutput(figures, details)
