"""Compare sixdim's GEMM figures with torch.utils.benchmark on the same shapes and machine.

Usage: python -m tests.compare_gemm [--device cpu|cuda:0] [--shapes 512,1024,2048]

sixdim runs each shape through the real path (child worker, DeepSpark rule);
torch.utils.benchmark times ``torch.matmul`` with blocked_autorange at the same
thread count.  Prints a Markdown table for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path

import torch
import torch.utils.benchmark as benchmark

from agent.board import Board
from agent.devices import resolve
from agent.executor import Executor, GuardSettings
from agent.history import History
from collectors.nvml import NvmlCollector
from workloads import registry
from workloads.gemm import DTYPES


def reference_seconds(n: int, dtype: str, device: str) -> float:
    a = torch.randn(n, n, device=device).to(DTYPES[dtype])
    b = torch.randn(n, n, device=device).to(DTYPES[dtype])
    timer = benchmark.Timer("torch.matmul(a, b)", globals={"torch": torch, "a": a, "b": b},
                            num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=2.0).median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shapes", default="256,512,1024,2048")
    parser.add_argument("--dtype", default=None)
    args = parser.parse_args()
    nvml = NvmlCollector("compare")
    with tempfile.TemporaryDirectory() as tmp:
        executor = Executor(hostname="compare", history=History(Path(tmp) / "h.db"), board=Board(), nvml=nvml,
                            rapl=None, guard=GuardSettings(enabled=False))
        [device] = resolve([args.device], nvml)
        dtype = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
        print(f"machine: {platform.node()}, {device.model_name}, torch {torch.__version__}, "
              f"{torch.get_num_threads()} threads")
        print("\n| shape (M=N=K) | dtype | sixdim s/GEMM | sixdim FLOP/s | torch.utils.benchmark s | ratio | sixdim IQR/median |")
        print("|---|---|---|---|---|---|---|")
        for n in (int(s) for s in args.shapes.split(",")):
            record = executor.execute(registry.get("gemm"), {"m": n, "n": n, "k": n, "dtype": dtype}, device)
            if record.status != "ok":
                print(f"| {n} | {dtype} | {record.status}: {record.reason} | | | | |")
                continue
            ours = record.figures["seconds"]
            ref = reference_seconds(n, dtype, device.worker_device if device.type == "cpu" else "cuda")
            print(f"| {n} | {dtype} | {ours:.4e} | {record.figures['flops']:.3e} | {ref:.4e} | {ours / ref:.3f} | "
                  f"{record.figures['seconds_iqr_ratio']:.3f} |")


if __name__ == "__main__":
    main()
