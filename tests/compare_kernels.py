"""Compare sixdim's GEMM and convolution figures with torch.utils.benchmark (and triton's do_bench, cold).

Usage: python -m tests.compare_kernels [--device cpu|cuda:0] [--gemm 256,512,1024,2048]

Same machine, same run, same shapes: sixdim runs each case through its real path
(child worker, calibrated rounds, DeepSpark rule); the reference tools time the
same operation (sixdim's GEMM is ``torch.mm(a, b, out=d)``) in this process, under the
torch flags sixdim's worker reports for the case.  Prints Markdown tables for
docs/BENCHMARKS.md.  ``tests/gpu_bench.py compare`` is the fuller GPU comparison (every
precision, cache regimes matched, do_bench_cudagraph for short kernels).
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
import torch.utils.benchmark as benchmark

from agent.board import Board
from agent.devices import resolve
from agent.executor import Executor, GuardSettings
from agent.history import History
from collectors.nvml import NvmlCollector
from workloads import registry


def apply_flags(record) -> None:
    """The torch flags the worker ran the case under (TF32, cuDNN autotuner, reduced-precision reductions)."""
    flags = record.details.get("torch_flags") or {}
    matmul = torch.backends.cuda.matmul
    if "matmul_allow_tf32" in flags:
        matmul.allow_tf32 = flags["matmul_allow_tf32"]
    if "cudnn_allow_tf32" in flags:
        torch.backends.cudnn.allow_tf32 = flags["cudnn_allow_tf32"]
    if "cudnn_benchmark" in flags:
        torch.backends.cudnn.benchmark = flags["cudnn_benchmark"]
    for half in ("fp16", "bf16"):
        if f"{half}_reduced_precision_reduction" in flags:
            setattr(matmul, f"allow_{half}_reduced_precision_reduction", flags[f"{half}_reduced_precision_reduction"])

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def reference(stmt: str, env: dict) -> tuple[float, float | None]:
    """torch.utils.benchmark median, and triton.testing.do_bench median where triton runs (CUDA)."""
    timer = benchmark.Timer(stmt, globals=env, num_threads=torch.get_num_threads())
    tub = timer.blocked_autorange(min_run_time=2.0).median
    do_bench = None
    if env.get("device", "cpu") != "cpu":
        try:
            import triton.testing

            code = compile(stmt, "<reference>", "eval")  # no parsing inside the timed calls
            do_bench = triton.testing.do_bench(lambda: eval(code, env), return_mode="median") / 1e3
        except Exception:
            do_bench = None
    return tub, do_bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--gemm", default="256,512,1024,2048", help="square GEMM sizes")
    args = parser.parse_args()
    nvml = NvmlCollector("compare")
    [device] = resolve([args.device], nvml)
    torch_device = "cuda" if device.type == "cuda" else "cpu"
    dtype = "bf16" if device.type == "cuda" else "fp32"
    with tempfile.TemporaryDirectory() as tmp:
        executor = Executor(hostname="compare", history=History(Path(tmp) / "h.db"), board=Board(), nvml=nvml,
                            rapl=None, guard=GuardSettings(enabled=False))
        print(f"machine: {platform.node()}, {device.model_name}, torch {torch.__version__}, "
              f"{torch.get_num_threads()} threads")
        print("\n| GEMM M=N=K (D = A·B) | dtype | sixdim s (regime) | torch.utils.benchmark s | ratio | do_bench s | ratio |")
        print("|---|---|---|---|---|---|---|")
        for n in (int(s) for s in args.gemm.split(",")):
            [record] = executor.execute(registry.get("gemm"), {"m": n, "n": n, "k": n, "precisions": [dtype]}, device)
            apply_flags(record)
            a = torch.randn(n, n, device=torch_device, dtype=DTYPES[dtype])
            b = torch.randn(n, n, device=torch_device, dtype=DTYPES[dtype])
            d = torch.empty(n, n, device=torch_device, dtype=DTYPES[dtype])
            tub, dob = reference("torch.mm(a, b, out=d)", {"torch": torch, "a": a, "b": b, "d": d,
                                                            "device": torch_device})
            del a, b, d
            _row(f"{n}", dtype, record, tub, dob)

        print("\n| conv (DeepBench quick shape, forward) | dtype | sixdim s | torch.utils.benchmark s | ratio | "
              "do_bench s | ratio |")
        print("|---|---|---|---|---|---|---|")
        overrides = {"set": "quick", "precisions": [dtype], "layouts": ["nchw"]}
        if device.type == "cpu":
            overrides["scale"] = 4
        for record in executor.execute(registry.get("conv"), overrides, device):
            if record.kernel_pass != "forward":
                continue
            p = record.params
            apply_flags(record)
            x = torch.randn(p["n"], p["c"], p["h"], p["w"], device=torch_device, dtype=DTYPES[dtype])
            w = torch.randn(p["k"], p["c"], p["r"], p["s"], device=torch_device, dtype=DTYPES[dtype])
            tub, dob = reference("F.conv2d(x, w, stride=stride, padding=padding)",
                                 {"F": F, "x": x, "w": w, "stride": (p["stride_h"], p["stride_w"]),
                                  "padding": (p["pad_h"], p["pad_w"]), "device": torch_device})
            _row(record.shape.rsplit(",layout", 1)[0], dtype, record, tub, dob)


def _row(label: str, dtype: str, record, tub: float, dob: float | None) -> None:
    if record.status != "ok":
        print(f"| {label} | {dtype} | {record.status}: {record.reason} | | | | |")
        return
    ours = record.figures["seconds"]
    regime = record.details.get("cache_regime", "-")
    dob_cells = f"{dob:.4e} | {ours / dob:.3f}" if dob else "n/a (needs triton on CUDA) | -"
    print(f"| {label} | {dtype} | {ours:.4e} ({regime}) | {tub:.4e} (warm) | {ours / tub:.3f} | {dob_cells} |")


if __name__ == "__main__":
    main()
