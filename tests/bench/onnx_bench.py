"""ONNX Runtime against PyTorch eager on the same model: latency p50/p99 and samples/s per batch size.

The models are the onnx workload's (sixdim's ResNet-50, BERT-large layers and GPT decoder as
:class:`sixdim.workloads.onnx.export.Serving` wraps them, exported into a cache on first use), with the
same weights and the same synthetic inputs in both engines. For each model and batch size the
engines are measured in interleaved rounds (eager, then each provider, ``--rounds`` times), so a
background load shifts them all alike; latency is single synchronised requests (pooled over the
rounds), throughput the median over the rounds of back-to-back requests for ``--seconds``.

On the CPU: ``CPUExecutionProvider`` against eager. On a GPU (``--device cuda``): the CUDA provider
(TF32 off, as eager's fp32 here) and TensorRT with CUDA as its fallback (TF32 allowed: TensorRT has
no switch for it) against eager; a provider this onnxruntime lacks, or that does not initialise,
is skipped with the reason. Prints a Markdown table with the machine and the versions:

    python tests/bench/onnx_bench.py                       # CPU, small models, batches 1, 2, 4, 8
    python tests/bench/onnx_bench.py --device cuda --size full --batches 1,2,4,32,128
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sixdim.workloads.measure.report import percentile  # noqa: E402


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model or platform.processor() or 'unknown CPU'}, {os.cpu_count()} logical CPUs"


def versions() -> str:
    from importlib import metadata

    import onnxruntime
    import torch

    found = [f"Python {platform.python_version()}", f"torch {torch.__version__}",
             f"onnxruntime {onnxruntime.__version__} ({onnxruntime.get_device()})"]
    for name in ("onnx", "onnxscript"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(found)


def measure(call: Callable[[], object], sync: Callable[[], None], batch: int, samples: int,
            seconds: float) -> tuple[list[float], float]:
    """Single synchronised requests (seconds each), then samples/s of back-to-back requests."""
    latencies = []
    for _ in range(samples):
        start = time.perf_counter()
        call()
        sync()
        latencies.append(time.perf_counter() - start)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        calls += 1
    sync()
    return latencies, batch * calls / (time.perf_counter() - start)


def engines(name: str, size: str, device: str, batch: int, cache_dir: str,
            threads: int) -> tuple[list[tuple[str, Any]], list[str]]:
    """(label, (call, sync)) for eager and each provider; and the reasons of those skipped."""
    import onnxruntime as ort
    import torch

    from sixdim.workloads.measure import flags
    from sixdim.workloads.onnx import export as onnx_export
    from sixdim.workloads.onnx import inputs as onnx_inputs
    from sixdim.workloads.onnx import session as onnx_session

    flags.apply("fp32")  # IEEE fp32 in eager (TF32 off), as the CUDA provider is set up below
    path, _ = onnx_export.exported(name, size, "fp32", cache_dir=cache_dir)
    sequence = onnx_export.default_sequence_length(name, size)
    vocabulary = int(onnx_export.architecture(name, size).get("vocab", 1000))
    probe = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    infos = onnx_inputs.from_ort(probe.get_inputs())
    feeds = onnx_inputs.make_inputs(infos, onnx_inputs.resolve_shapes(infos, batch, sequence, {}), vocabulary, 0)
    del probe
    target = torch.device(device)
    model = onnx_export.serving_model(name, size, "fp32", 0).to(target)
    tensor = torch.from_numpy(feeds["input"]).to(target)
    sync = (lambda: torch.cuda.synchronize(target)) if target.type == "cuda" else (lambda: None)

    def eager() -> object:
        with torch.inference_mode():
            return model(tensor)

    found: list[tuple[str, Any]] = [("PyTorch eager", (eager, sync))]
    skipped: list[str] = []
    choices = [["CPUExecutionProvider"]] if target.type == "cpu" else \
        [["CUDAExecutionProvider"], ["TensorrtExecutionProvider", "CUDAExecutionProvider"]]
    for providers in choices:
        label = "ORT " + "+".join(p.replace("ExecutionProvider", "") for p in providers)
        try:
            session = onnx_session.create(
                ort, str(path), providers,
                onnx_session.session_options(ort, {"graph_optimization": "all", "intra_op_threads": threads,
                                                   "inter_op_threads": 0}),
                [onnx_session.provider_options(p, "fp32", 0, cache_dir) for p in providers])
        except Exception as exc:  # Unsupported: the provider is missing or did not initialise
            skipped.append(f"{label}: {exc}")
            continue
        found.append((label, ((lambda s=session: s.run(None, feeds)), lambda: None)))
    return found, skipped


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--models", default="resnet50,bert_large,gpt")
    parser.add_argument("--size", default="", help="small or full (default: small on the CPU, full on a GPU)")
    parser.add_argument("--batches", default="1,2,4,8")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per engine")
    parser.add_argument("--samples", type=int, default=30, help="single requests per round (latency)")
    parser.add_argument("--seconds", type=float, default=1.0, help="back-to-back requests per round (throughput)")
    parser.add_argument("--warmup", type=int, default=10, help="requests before anything is timed")
    parser.add_argument("--cache-dir", default="", help="where the exports go (default: the workload's cache)")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads of both engines (default: torch's, also given to ONNX Runtime)")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"skipped: --device {args.device} but torch sees no CUDA GPU here ({machine()}); run it on a GPU host")
        return 0
    size = args.size or ("full" if args.device.startswith("cuda") else "small")
    rows, skipped = [], []
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            found, why = engines(name, size, args.device, batch, args.cache_dir, threads)
            skipped += [f"{name} batch {batch}: {reason}" for reason in why]
            for _, (call, sync) in found:
                for _ in range(args.warmup):
                    call()
                sync()
            latencies: dict[str, list[float]] = {label: [] for label, _ in found}
            rates: dict[str, list[float]] = {label: [] for label, _ in found}
            for _ in range(args.rounds):
                for label, (call, sync) in found:
                    lat, rate = measure(call, sync, batch, args.samples, args.seconds)
                    latencies[label] += lat
                    rates[label].append(rate)
            eager = statistics.median(rates["PyTorch eager"])
            for label, _ in found:
                rate = statistics.median(rates[label])
                rows.append((name, batch, label, percentile(latencies[label], 50) * 1e3,
                             percentile(latencies[label], 99) * 1e3, rate, rate / eager))
            print(f"{name} batch {batch} done", file=sys.stderr, flush=True)
    print(f"Machine: {machine()}; device {args.device}; {versions()}; {threads} CPU threads in both engines "
          f"(torch's, and ONNX Runtime's intra-op); models `{size}`, fp32, "
          f"{args.rounds} interleaved rounds × ({args.samples} single requests + {args.seconds:g} s back to back).\n")
    print("| model | batch | engine | p50 (ms) | p99 (ms) | samples/s | × eager |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, batch, label, p50, p99, rate, ratio in rows:
        print(f"| {name} | {batch} | {label} | {p50:.3f} | {p99:.3f} | {rate:,.0f} | {ratio:.2f} |")
    for reason in dict.fromkeys(skipped):
        print(f"\nskipped: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
