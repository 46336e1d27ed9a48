"""Convergence: train a small model on a real dataset to a target accuracy, several times.

The dataset is scikit-learn's digits (1,797 8×8 handwritten digits), which the package ships:
nothing is downloaded at run time.  A fixed, seeded split holds out 20% for evaluation.  Each
run trains an MLP for ``epochs`` epochs, evaluating after each one:

- **accuracy**: the run's converged value, its test accuracy after the last epoch;
- **time to train** (AI-Rank's Time2train): from the start of training to the end of the first
  epoch whose test accuracy reached ``target_accuracy``; a run that never does has failed;
- **throughput**: training samples per second, by the DeepSpark rule over the epochs after the
  first (the warm-up epoch);
- **stability** (DeepSpark): over ``runs`` complete runs (seeds ``seed``, ``seed + 1``, ...),
  the median converged accuracy is the reference, and each run outside ±1% of it costs 20%.

``deterministic`` makes every operation deterministic (same seeds, same bits), so a GPU whose
results differ from its peers' stands out: the weights' SHA-256 is kept in the details.

Imports torch (and scikit-learn): the worker process only.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F

from sixdim.workloads.context import RunContext, WorkloadOutput
from sixdim.workloads.measure import flags
from sixdim.workloads.measure.dimensions import stability
from sixdim.workloads.measure.stats import deepspark_mean


def digits(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train and test tensors of scikit-learn's bundled digits, split 80/20 with a fixed seed."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
    cut = int(0.8 * len(x))
    train, test = order[:cut], order[cut:]
    return x[train].to(device), y[train].to(device), x[test].to(device), y[test].to(device)


def _model(hidden: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def train_once(params: dict[str, Any], seed: int, data: tuple, device: torch.device) -> dict[str, Any]:
    """One complete run: per-epoch accuracies, throughputs, time to target, final weights' digest."""
    x_train, y_train, x_test, y_test = data
    torch.manual_seed(seed)
    model = _model(params["hidden"]).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=params["learning_rate"])
    amp = params["precision"] == "amp"
    amp_dtype = torch.bfloat16 if device.type == "cpu" or torch.cuda.is_bf16_supported() else torch.float16
    scaler = torch.amp.GradScaler(device.type, enabled=amp and amp_dtype == torch.float16)
    batch = params["batch_size"]
    shuffle = torch.Generator().manual_seed(seed)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    accuracies, throughputs, epoch_ends, elapsed = [], [], [], []
    time_to_target = None
    sync()
    start = time.perf_counter()
    for _ in range(params["epochs"]):
        epoch_start = time.perf_counter()
        model.train()
        order = torch.randperm(len(x_train), generator=shuffle).to(device)
        for i in range(0, len(order), batch):
            index = order[i:i + batch]
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
                loss = F.cross_entropy(model(x_train[index]), y_train[index])
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        sync()
        throughputs.append(len(x_train) / (time.perf_counter() - epoch_start))
        model.eval()
        with torch.no_grad(), torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
        accuracies.append(accuracy)
        epoch_ends.append(time.time())
        elapsed.append(time.perf_counter() - start)
        if time_to_target is None and accuracy >= params["target_accuracy"]:
            time_to_target = elapsed[-1]
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return {"seed": seed, "accuracies": accuracies, "throughputs": throughputs, "time_to_target": time_to_target,
            "total_seconds": time.perf_counter() - start, "epoch_end_unix": epoch_ends, "epoch_elapsed": elapsed,
            "weights_sha256": digest.hexdigest()}


def ai_rank_log(run: dict[str, Any], begin_unix: float, target: float) -> list[str]:
    """The run as AI-Rank log lines (test_begin, eval_accuracy per epoch, target_quality_time, ...)."""
    lines = [f"AI-Rank-log {begin_unix:.3f} test_begin"]
    for epoch, (accuracy, stamp) in enumerate(zip(run["accuracies"], run["epoch_end_unix"]), start=1):
        lines.append(f"AI-Rank-log {stamp:.3f} eval_accuracy:{accuracy}, total_epoch_cnt:{epoch}")
    end = run["epoch_end_unix"][-1]
    if run["time_to_target"] is not None:
        lines.append(f"AI-Rank-log {end:.3f} target_quality_time:{run['time_to_target']:.2f}sec")
    lines.append(f"AI-Rank-log {end:.3f} test_finish")
    lines.append(f"AI-Rank-log {end:.3f} total_use_time:{run['total_seconds']:.2f}sec")
    steady = run["throughputs"][1:] or run["throughputs"]
    lines.append(f"AI-Rank-log {end:.3f} avg_ips:{statistics.fmean(steady):.2f}images/sec")
    return lines


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    device = torch.device(ctx.device)
    # Deterministic mode needs CUBLAS_WORKSPACE_CONFIG on a GPU (the worker sets it before cuBLAS starts);
    # the worker restores every flag after the case, so the mode does not leak into the next one.
    flags.apply("fp32", deterministic=params["deterministic"])
    data = digits(device)
    runs = []
    begin_unix = time.time()
    ctx.mark_window_start()
    for i in range(params["runs"]):
        ctx.progress(f"run {i + 1}/{params['runs']}")
        runs.append(train_once(params, params["seed"] + i, data, device))
    ctx.mark_window_end()
    converged = [r["accuracies"][-1] for r in runs]
    speeds = [deepspark_mean(r["throughputs"][1:]) if len(r["throughputs"]) > 3 else statistics.fmean(r["throughputs"])
              for r in runs]
    details: dict[str, Any] = {"runs": [{k: v for k, v in r.items() if k != "epoch_end_unix"} for r in runs],
               "dataset": "scikit-learn digits (1797 samples, 80/20 split, seed 1234)",
               "ai_rank_log": ai_rank_log(runs[0], begin_unix, params["target_accuracy"])}
    figures = {"accuracy": statistics.median(converged), "samples_per_second": statistics.median(speeds),
               "seconds": statistics.median(r["total_seconds"] for r in runs)}
    missed = [r["seed"] for r in runs if r["time_to_target"] is None]
    if len(runs) >= 5:
        figures["stability_ratio"], details["relative_differences"] = stability(converged)
    if missed:
        return WorkloadOutput(figures, details, status="failed",
                              reason=f"runs with seeds {missed} did not reach the target accuracy "
                                     f"{params['target_accuracy']} in {params['epochs']} epochs")
    figures["time_to_train_seconds"] = statistics.median(r["time_to_target"] for r in runs)
    return WorkloadOutput(figures, details)
