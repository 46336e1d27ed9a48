#!/usr/bin/env python3
"""GPU checks of sixdim's figures against independent measurements, one subcommand each.

Usage (from the repository root):

    python3 tests/bench/gpu_bench.py all --out DIR            # every subcommand, budgeted to about 8 minutes
    python3 tests/bench/gpu_bench.py compare --out DIR        # or one subcommand: compare, peak, repeat,
                                                       # power, memory, models
    python3 tests/bench/gpu_bench.py all --out DIR --quick    # shrunk (automatic where there is no GPU)

Subcommands:

- ``compare``: sixdim's GEMM and convolution kernels (their ``run()``, in this process, through the
  worker's per-case isolation) against ``torch.utils.benchmark.Timer.blocked_autorange`` and
  ``triton.testing.do_bench`` (and ``do_bench_cudagraph`` for kernels under 50 µs) timing the same
  call on tensors of the same shape, dtype and layout, under the same torch flags; the ratio is
  sixdim / the best tool of sixdim's cache regime (cold: L2 flushed per call, as do_bench does;
  warm: blocked_autorange and the CUDA-graph bench).
- ``peak``: bf16 8192³ through sixdim (the CLI's worker path, and in-process) against the best of
  5 × 50 plain ``torch.matmul`` calls timed with CUDA events, as fractions of the published peak.
- ``repeat``: N back-to-back ``sixdim run --json`` runs of a quick-like subset (``all``: the GEMM
  subset, so 5 runs fit); CV of ``seconds`` per case across runs; GEMMs above 1 ms with a CV of 1%
  or more are flagged.
- ``power``: a long GEMM (bf16 8192³) and a short one (bf16 2048³, tens of µs a call), each with a 5 s
  power phase through ``sixdim run``, while ``nvidia-smi -lms 100`` samples power.draw (and
  .instant/.average where the driver has them); the mean over sixdim's power phase [start_unix,
  end_unix] against sixdim's power_watts, and GFLOP/J from each.
- ``memory``: sixdim's ``memory_bytes`` (one worker, many cases) against
  ``torch.cuda.max_memory_allocated`` measured by hand, in a fresh process per case, for the same
  operands and kernel.
- ``cold``: the cold µs-scale GEMMs that differed most from do_bench at equal clocks, each call timed
  three ways, interleaved: sixdim's rounds, sixdim's flushed call one at a time (its whole
  distribution) and do_bench's distribution, so a gap is shown to be the statistic or the method.
- ``models``: sixdim's model workload at full size against a hand-written loop over the same model
  (``sixdim.workloads.models.model.build``): samples/s, ratio, sixdim's power and memory.

Each subcommand writes ``DIR/<name>.json`` (rewritten after every case, so a kill keeps what was
done), catches its own failure (recorded as ``status: failed`` with the traceback) and prints a
summary table.  ``all`` runs each one in its own child process with a time limit, so a crash or
hang in one loses nothing of the others, and prints every table at the end.  Nothing here changes
a GPU setting; GPU memory is freed after each case.  Calls of the sixdim CLI pass ``--no-guard``
(the idle guard is tested by tests/test_gpu.py); their history goes to a temporary directory.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import inspect
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # torch's cuda:N = nvidia-smi's and NVML's index N

from tests.bench import gpu_smi  # noqa: E402  (torch-free)

ORDER = ("power", "peak", "compare", "memory", "repeat", "models", "cold")
BUDGETS = {"power": 45.0, "peak": 30.0, "compare": 135.0, "memory": 55.0, "repeat": 120.0, "models": 95.0,
           "cold": 60.0}
"""Seconds per subcommand on an H100 (sum 9 min; ``all`` adds process start-ups: about 9.3 min)."""
ALL_EXTRA = {"repeat": ["--set", "gemm"]}
"""``all`` (not --quick): repeat the GEMM set, whose 5 runs fit the budget (quick-like needs ~45 s a run)."""
QUICK_BUDGETS = {"power": 30.0, "peak": 30.0, "compare": 40.0, "memory": 40.0, "repeat": 40.0, "models": 40.0,
                 "cold": 20.0}
GRACE = float(os.environ.get("GPU_BENCH_GRACE", "60"))
"""``all``: a child may run this long past its budget (its last case in flight) before it is killed."""
WITHIN = 0.02
GRAPH_BELOW_SECONDS = 50e-6
FIXED = ("int8", "fp8")
PROBE_PREFIX = "GPU-BENCH-PROBE: "


# ----------------------------------------------------------------------------- small utilities

def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become None, tuples lists, anything else unknown a string."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(clean(data), indent=2, allow_nan=False))
    os.replace(tmp, path)


def fmt_s(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)) or seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


def fmt_num(value: Any, digits: int = 3, suffix: str = "") -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}g}{suffix}"


def fmt_bytes(value: Any) -> str:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    for factor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {unit}"
    return f"{value:.0f} B"


def fmt_ratio(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) or not math.isfinite(value) else f"{value:.3f}"


def table(rows: list[list[str]]) -> str:
    rows = [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def get(mapping: Any, *keys: str, default: Any = None) -> Any:
    for key in keys:
        if not isinstance(mapping, dict) or key not in mapping:
            return default
        mapping = mapping[key]
    return mapping


class Budget:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self.start = time.monotonic()

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def allows(self, estimate: float = 0.0) -> bool:
        return self.left() > estimate


def host_info() -> dict[str, Any]:
    info: dict[str, Any] = {"hostname": platform.node(), "machine": platform.machine(),
                            "python": platform.python_version(), "cpus": os.cpu_count()}
    cells, reason = gpu_smi.query(["name", "driver_version", "uuid"], 0)
    info["nvidia_smi"] = dict(zip(("name", "driver_version", "uuid"), cells)) if cells else reason
    return info


def torch_info(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda or "",
                            "threads": torch.get_num_threads(), "device": device,
                            "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(name=props.name, capability=f"{props.major}.{props.minor}",
                    memory_bytes=props.total_memory, l2_cache_bytes=getattr(props, "L2_cache_size", None),
                    multiprocessors=props.multi_processor_count, cudnn=str(torch.backends.cudnn.version()))
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception as exc:
        info["triton"] = f"unavailable: {type(exc).__name__}: {exc}"
    return info


def gpu_name(device: str) -> str:
    """The device name as NVML reports it (what agent/core/peaks.toml matches), else torch's."""
    if not device.startswith("cuda"):
        from sixdim.collectors.host import cpu_model_name

        return cpu_model_name()
    try:
        from sixdim.collectors.nvml import NvmlCollector

        nvml = NvmlCollector("bench")
        if nvml.availability().available:
            return nvml.gpu(int(device.split(":")[1])).name
    except Exception:
        pass
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def kill_tree(pid: int) -> None:
    """Terminate a process this script started and every process below it (by pid), then kill."""
    try:
        import psutil

        root = psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except Exception:
        procs = []
    for proc in procs:
        try:
            proc.terminate()
        except Exception:
            pass
    try:
        import psutil

        _, alive = psutil.wait_procs(procs, timeout=5)
        for proc in alive:
            try:
                proc.kill()
            except Exception:
                pass
    except Exception:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ----------------------------------------------------------------------------- sixdim, two ways

def sixdim_env(history_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")}
    env["SIXDIM_HISTORY"] = str(Path(history_dir) / "history.db")
    env["SIXDIM_LOG_LEVEL"] = "warning"
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


def suite_toml(name: str, workloads: list[tuple[str, dict[str, Any]]], devices: list[str],
               timeout_seconds: float = 600.0) -> str:
    entries = ", ".join(toml_value({"name": w, "params": p}) for w, p in workloads)
    return (f'[[suites]]\nname = "{name}"\ninterval_seconds = 86400\ndevices = {toml_value(devices)}\n'
            f"timeout_seconds = {timeout_seconds!r}\nworkloads = [{entries}]\n")


def sixdim_cli(run_args: list[str], *, timeout: float, config_text: str | None = None) -> dict[str, Any]:
    """``sixdim run ... --json --no-guard`` in a child (``python -m sixdim``): records and how it went."""
    tmp = tempfile.mkdtemp(prefix="gpu-bench-")
    cmd = [sys.executable, "-m", "sixdim", "run", *run_args, "--json", "--no-guard"]
    if config_text is not None:
        config = Path(tmp) / "bench.toml"
        config.write_text(config_text)
        cmd += ["--config", str(config)]
    info: dict[str, Any] = {"cmd": cmd[1:], "config": config_text}
    start = time.time()
    proc = subprocess.Popen(cmd, cwd=REPO, env=sixdim_env(tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        stdout, stderr = proc.communicate()
        info["error"] = f"timed out after {timeout:.0f} s"
    info.update(returncode=proc.returncode, seconds=time.time() - start, started_unix=start,
                stderr_tail=(stderr or "")[-2000:])
    try:
        info["records"] = json.loads(stdout) if stdout.strip() else []
    except json.JSONDecodeError as exc:
        info["records"] = []
        info.setdefault("error", f"no JSON on stdout ({exc}): {stdout[-500:]}")
    if not info["records"] and "error" not in info:
        info["error"] = f"exit code {proc.returncode}, no records: {(stderr or '')[-500:]}"
    shutil.rmtree(tmp, ignore_errors=True)
    return info


_FLAGS_READY = False


def prepare_inprocess() -> None:
    """What the worker does at start: note torch's default flags (and CUBLAS_WORKSPACE_CONFIG)."""
    global _FLAGS_READY
    if _FLAGS_READY:
        return
    try:
        from sixdim.workloads.measure import flags

        flags.remember_defaults()
    except Exception as exc:  # an older or newer flags module: carry on with torch's state
        log(f"note: sixdim.workloads.measure.flags.remember_defaults unavailable: {exc}")
    _FLAGS_READY = True


def cases_of(workload: str, overrides: dict[str, Any], device: str) -> list[Any]:
    from sixdim.workloads import registry

    spec = registry.get(workload)
    names = {p.name for p in spec.params}
    return [(spec, case) for case in spec.cases({k: v for k, v in overrides.items() if k in names},
                                                "cuda" if device.startswith("cuda") else "cpu")]


def run_inprocess(spec: Any, case: Any, device: str, meter: Any = None) -> dict[str, Any]:
    """One case as the worker runs it (isolation, torch_flags, memory figures), in this process."""
    from sixdim.workloads.context import RunContext

    prepare_inprocess()
    module_name, _, function_name = spec.entry.partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    ctx = RunContext(device=device, energy=meter)
    try:
        from sixdim.run.worker import run_case
    except ImportError:
        run_case = None
    if run_case is not None:
        try:
            return run_case(function, case.params, ctx, True)
        except TypeError:  # a changed signature: the plain call below
            pass
    try:
        output = function(case.params, ctx)
        return {"status": output.status, "reason": output.reason, "figures": dict(output.figures),
                "details": dict(output.details)}
    except Exception as exc:
        status = "unsupported" if type(exc).__name__ == "Unsupported" else "failed"
        return {"status": status, "reason": f"{type(exc).__name__}: {exc}", "figures": {}, "details": {}}


def free_cuda() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception:
        pass


# ----------------------------------------------------------------------------- the same kernels, by hand

def precision_flags(precision: str, conv: bool) -> dict[str, bool]:
    """sixdim's meaning of a precision as torch flags (used when a result carries no torch_flags)."""
    half = precision in ("fp16", "bf16")
    return {"matmul_allow_tf32": precision == "tf32", "cudnn_allow_tf32": precision == "tf32",
            "cudnn_benchmark": conv, "deterministic": False,
            "fp16_reduced_precision_reduction": not half, "bf16_reduced_precision_reduction": not half}


def set_flags(flags: dict[str, Any]) -> dict[str, Any]:
    import torch

    matmul = torch.backends.cuda.matmul
    if "matmul_allow_tf32" in flags:
        matmul.allow_tf32 = bool(flags["matmul_allow_tf32"])
    if "cudnn_allow_tf32" in flags:
        torch.backends.cudnn.allow_tf32 = bool(flags["cudnn_allow_tf32"])
    if "cudnn_benchmark" in flags:
        torch.backends.cudnn.benchmark = bool(flags["cudnn_benchmark"])
    if "deterministic" in flags:
        torch.use_deterministic_algorithms(bool(flags["deterministic"]))
    if "fp16_reduced_precision_reduction" in flags:
        matmul.allow_fp16_reduced_precision_reduction = bool(flags["fp16_reduced_precision_reduction"])
    if "bf16_reduced_precision_reduction" in flags:
        matmul.allow_bf16_reduced_precision_reduction = bool(flags["bf16_reduced_precision_reduction"])
    return {"matmul_allow_tf32": bool(matmul.allow_tf32), "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
            "fp16_reduced_precision_reduction": bool(matmul.allow_fp16_reduced_precision_reduction),
            "bf16_reduced_precision_reduction": bool(matmul.allow_bf16_reduced_precision_reduction)}


def restore_flags() -> None:
    try:
        from sixdim.workloads.measure import flags

        flags.restore()
    except Exception:
        pass


def padding_rule(precision: str, m: int, n: int, k: int) -> tuple[int, int, int]:
    """What the int8/fp8 kernels need on CUDA (the rule gemm.py documents), for results without padded_shape."""
    up = lambda v, q: -(-v // q) * q  # noqa: E731
    if precision == "int8":
        return max(17, up(m, 8)), up(n, 8), up(k, 8)
    if precision == "fp8":
        return up(m, 16), up(n, 16), up(k, 16)
    return m, n, k


def conv_output_size(p: dict[str, Any]) -> tuple[int, int]:
    return ((p["h"] + 2 * p["pad_h"] - p["r"]) // p["stride_h"] + 1,
            (p["w"] + 2 * p["pad_w"] - p["s"]) // p["stride_w"] + 1)


def build_kernel(workload: str, params: dict[str, Any], details: dict[str, Any] | None, device: Any
                 ) -> tuple[Callable[[], Any], list[Any], dict[str, Any]]:
    """The call sixdim times, written out here: (fn, tensors kept alive, description).

    GEMM fp32/tf32/fp16/bf16: ``torch.mm(a, b, out=d)`` with DeepBench's transposes as views;
    int8: ``torch._int_mm`` with B column-major; fp8: ``torch._scaled_mm`` e4m3 with unit scales and
    bf16 output; both at the padded shape sixdim reports.  Conv: ``F.conv2d`` or
    ``aten.convolution_backward`` with sixdim's output mask."""
    import torch
    import torch.nn.functional as F

    cuda = device.type == "cuda"
    if workload == "gemm":
        precision, m, n, k, op = params["dtype"], params["m"], params["n"], params["k"], params["op"]
        if precision in FIXED:
            padded = get(details or {}, "padded_shape")
            pm, pn, pk = ((padded["m"], padded["n"], padded["k"]) if padded else
                          padding_rule(precision, m, n, k) if cuda else (m, n, k))
            if precision == "int8":
                a = torch.randint(-8, 8, (pm, pk), dtype=torch.int8, device=device)
                bt = torch.randint(-8, 8, (pn, pk), dtype=torch.int8, device=device)
                b = bt.t()
                return (lambda: torch._int_mm(a, b)), [a, bt], {"call": "torch._int_mm(a, b)", "shape": [pm, pn, pk]}
            a = torch.empty(pm, pk, dtype=torch.float8_e4m3fn, device=device)
            a.copy_(torch.randn(pm, pk, dtype=torch.bfloat16, device=device))
            bt = torch.empty(pn, pk, dtype=torch.float8_e4m3fn, device=device)
            bt.copy_(torch.randn(pn, pk, dtype=torch.bfloat16, device=device))
            b = bt.t()
            one = torch.ones((), device=device)

            def fp8() -> Any:
                return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            return fp8, [a, bt, one], {"call": "torch._scaled_mm(a, b, one, one, out_dtype=bf16)",
                                       "shape": [pm, pn, pk]}
        dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
        a = (torch.randn(k, m, dtype=dtype, device=device).t() if op[0] == "T"
             else torch.randn(m, k, dtype=dtype, device=device))
        b = (torch.randn(n, k, dtype=dtype, device=device).t() if op[1] == "T"
             else torch.randn(k, n, dtype=dtype, device=device))
        d = torch.empty(m, n, dtype=dtype, device=device)
        return (lambda: torch.mm(a, b, out=d)), [a, b, d], {"call": f"torch.mm(a, b, out=d) op={op}",
                                                            "shape": [m, n, k]}
    if workload == "conv":
        dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[params["dtype"]]
        fmt = torch.channels_last if params.get("layout") == "channels_last" else torch.contiguous_format
        n, c, h, w, k, r, s = (params[x] for x in ("n", "c", "h", "w", "k", "r", "s"))
        stride, padding = (params["stride_h"], params["stride_w"]), (params["pad_h"], params["pad_w"])
        p, q = conv_output_size(params)
        kernel_pass = params["pass"]
        kept: list[Any] = []
        x = torch.randn(n, c, h, w, dtype=dtype, device=device).contiguous(memory_format=fmt)
        weight = torch.randn(k, c, r, s, dtype=dtype, device=device).contiguous(memory_format=fmt)
        kept += [x, weight]
        if kernel_pass == "forward":
            return (lambda: F.conv2d(x, weight, stride=stride, padding=padding)), kept, {"call": "F.conv2d"}
        grad_y = torch.randn(n, k, p, q, dtype=dtype, device=device).contiguous(memory_format=fmt)
        kept.append(grad_y)
        mask = [True, False, False] if kernel_pass == "backward_data" else [False, True, False]

        def backward() -> Any:
            return torch.ops.aten.convolution_backward(grad_y, x, weight, None, list(stride), list(padding),
                                                       [1, 1], False, [0, 0], 1, mask)
        return backward, kept, {"call": f"aten.convolution_backward mask={mask}"}
    raise ValueError(f"no hand-written kernel for {workload}")


def _kwargs_for(function: Callable, **wanted: Any) -> dict[str, Any]:
    try:
        names = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return wanted
    return {k: v for k, v in wanted.items() if k in names}


def reference_times(fn: Callable[[], Any], device: Any, *, min_run_time: float, graph: bool,
                    triton_testing: Any) -> dict[str, Any]:
    """The same call timed by torch.utils.benchmark (warm), do_bench (cold) and, for short kernels,
    do_bench_cudagraph (warm, no launch overhead).  Seconds per call, medians."""
    import torch
    import torch.utils.benchmark as benchmark

    cuda = device.type == "cuda"
    for _ in range(3):
        fn()
    if cuda:
        torch.cuda.synchronize(device)
    out: dict[str, Any] = {}
    begun = time.monotonic()
    try:
        measured = benchmark.Timer(stmt="fn()", globals={"fn": fn},
                                   num_threads=torch.get_num_threads()).blocked_autorange(min_run_time=min_run_time)
        out["timer"] = {"seconds": measured.median, "mean": measured.mean, "iqr": measured.iqr,
                        "blocks": len(measured.times), "calls_per_block": measured.number_per_run, "regime": "warm",
                        "span": [begun, time.monotonic()]}
    except Exception as exc:
        out["timer"] = {"error": f"{type(exc).__name__}: {exc}"}
    if not cuda:
        out["do_bench"] = {"error": "do_bench needs CUDA"}
        return out
    if triton_testing is None:
        out["do_bench"] = {"error": "triton is not installed"}
        return out
    try:
        begun = time.monotonic()
        seconds, statistic = _bench(triton_testing.do_bench, fn, warmup=100, rep=300)
        out["do_bench"] = {"seconds": seconds, "regime": "cold", "statistic": statistic,
                           "span": [begun, time.monotonic()]}
    except Exception as exc:
        out["do_bench"] = {"error": f"{type(exc).__name__}: {exc}"}
    if graph:
        try:
            begun = time.monotonic()
            with torch.cuda.stream(torch.cuda.Stream()):  # graphs cannot be captured on the default stream
                seconds, statistic = _bench(triton_testing.do_bench_cudagraph, fn, rep=100)
            torch.cuda.synchronize()
            out["do_bench_cudagraph"] = {"seconds": seconds, "regime": "warm", "statistic": statistic,
                                         "span": [begun, time.monotonic()]}
        except Exception as exc:
            out["do_bench_cudagraph"] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def _bench(function: Callable, fn: Callable[[], Any], **kwargs: Any) -> tuple[float, str]:
    """A triton bench function's median in seconds; its default statistic where it has no return_mode."""
    try:
        ms = function(fn, **_kwargs_for(function, return_mode="median", **kwargs))
        statistic = "median" if "return_mode" in _kwargs_for(function, return_mode=1) else "tool default"
    except (AssertionError, TypeError, ValueError):
        ms = function(fn, **_kwargs_for(function, **kwargs))
        statistic = "tool default"
    if isinstance(ms, (list, tuple)):
        ms = ms[0]
    return float(ms) / 1e3, statistic


class ClockWatch:
    """NVML readings of one GPU every 20 ms on a thread, so that each tool's timed span gets its mean
    SM clock, mean power and the share of readings under the software power cap.

    Why: on a large GEMM the tools differ by a few percent, and the first suspect is not the timing
    but the GPU's clock, which the power cap lowers under sustained load (sixdim times after a
    warm-up of seconds; blocked_autorange and do_bench time bursts of well under a second).  With the
    clocks of each span side by side, a gap explained by the clock shows as the same ratio in MHz.
    Torch-free; a no-op where NVML is unavailable.
    """

    PERIOD = 0.02

    def __init__(self, device: str):
        import threading

        self._readings: list[tuple[float, float | None, float | None, int | None]] = []
        self._stop = threading.Event()
        self._thread: Any = None
        self._nvml: Any = None
        self._index = int(device.split(":")[1]) if device.startswith("cuda:") else None
        if self._index is None:
            return
        try:
            from sixdim.collectors.nvml import NvmlCollector

            nvml = NvmlCollector("bench-clocks")
            if nvml.availability().available:
                self._nvml = nvml
                self._thread = threading.Thread(target=self._loop, daemon=True)
                self._thread.start()
        except Exception:
            self._nvml = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                s = self._nvml.sample(self._index)
                self._readings.append((s.time, s.sm_clock_hertz, s.power_watts, s.clock_event_mask))
            except Exception:
                pass
            self._stop.wait(self.PERIOD)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def over(self, span: Any) -> dict[str, Any] | None:
        """Mean SM clock (MHz), mean power (W) and power-capped share over [start, end]."""
        if not span or None in span or not self._readings:
            return None
        start, end = span
        inside = [r for r in self._readings if start <= r[0] <= end]
        if not inside:
            return None
        clocks = [r[1] for r in inside if r[1] is not None]
        watts = [r[2] for r in inside if r[2] is not None]
        masks = [r[3] for r in inside if r[3] is not None]
        return {"readings": len(inside), "seconds": end - start,
                "sm_clock_mhz": statistics.fmean(clocks) / 1e6 if clocks else None,
                "power_watts": statistics.fmean(watts) if watts else None,
                "power_capped_share": sum(1 for m in masks if m & 0x004) / len(masks) if masks else None}


# ----------------------------------------------------------------------------- compare

GPU_GEMM_SHAPES = [(8192, 8192, 8192, "NN"), (5124, 9124, 2560, "TN"), (2560, 7133, 2560, "NT"),
                   (1760, 128, 1760, "NN"), (35, 8457, 2560, "NN")]
"""8192³ and DeepBench training shapes from ~0.3 ms down to a few µs (bf16 on an H100)."""
CPU_GEMM_SHAPES = [(256, 256, 256, "NN"), (110, 16, 110, "NN"), (320, 570, 160, "TN")]
ALL_PRECISIONS = ["bf16", "fp32", "tf32", "fp16", "int8", "fp8"]


def compare_plan(quick: bool) -> list[tuple[str, dict[str, Any]]]:
    """Most informative first, so the budget cuts the least: 8192³ in every precision, the DeepBench
    shapes in bf16 and fp32, conv, then the DeepBench shapes in the other precisions."""
    shapes = CPU_GEMM_SHAPES if quick else GPU_GEMM_SHAPES
    plan: list[tuple[str, dict[str, Any]]] = []

    def gemm(shape: tuple, precisions: list[str]) -> None:
        m, n, k, op = shape
        plan.extend(("gemm", {"m": m, "n": n, "k": k, "op": op, "precisions": [p]}) for p in precisions)

    gemm(shapes[0], ALL_PRECISIONS)
    for shape in shapes[1:]:
        gemm(shape, ["bf16", "fp32"] if not quick else ["bf16", "fp32", "int8"])
    for precision in ("fp32", "bf16"):
        plan.append(("conv", {"set": "quick", "precisions": [precision], "layouts": ["nchw"],
                              "_shapes": 2 if quick else 3}))
    if not quick:
        for shape in shapes[1:]:
            gemm(shape, ["tf32", "fp16", "int8", "fp8"])
    return plan


def sixdim_timing(quick: bool) -> dict[str, Any]:
    """sixdim's own defaults on a GPU; shortened in quick mode.  No power phase in comparisons."""
    return {"power_seconds": 0.0, **({"min_round_seconds": 0.02, "warmup_seconds": 0.05} if quick else {})}


def cmd_compare(args: argparse.Namespace, result: dict[str, Any], save: Callable[[], None]) -> None:
    import torch

    device = torch.device(args.device)
    result["environment"] = torch_info(args.device)
    try:
        import triton.testing as triton_testing
    except Exception as exc:
        triton_testing = None
        result["triton"] = f"unavailable ({type(exc).__name__}: {exc}): do_bench columns are '-'"
    min_run_time = 0.1 if args.quick else 0.5
    result["settings"] = {"timer_min_run_time": min_run_time, "do_bench": {"warmup_ms": 100, "rep_ms": 300},
                          "do_bench_cudagraph_below_seconds": GRAPH_BELOW_SECONDS, "within": WITHIN,
                          "sixdim_overrides": sixdim_timing(args.quick)}
    result["cases"] = rows = []
    budget = Budget(args.budget_seconds)
    for workload, overrides in compare_plan(args.quick):
        overrides = dict(overrides)
        keep_shapes = overrides.pop("_shapes", None)
        planned = cases_of(workload, {**overrides, **sixdim_timing(args.quick)}, args.device)
        if workload == "conv":
            training = [c for c in planned if c[1].mode == "training"]
            shapes = list(dict.fromkeys(c.shape for _, c in training))[:keep_shapes or None]
            planned = [c for c in training if c[1].shape in shapes]
        for spec, case in planned:
            row: dict[str, Any] = {"kernel": spec.name, "shape": case.shape, "precision": case.precision,
                                   "pass": case.kernel_pass}
            if not budget.allows(5.0):
                row.update(status="skipped", reason="budget")
                rows.append(row)
                continue
            try:
                compare_case(spec, case, args.device, device, row, min_run_time, triton_testing)
            except Exception as exc:
                row.update(status=row.get("status", "failed"), error=f"{type(exc).__name__}: {exc}",
                           traceback=traceback.format_exc(limit=6))
            finally:
                restore_flags()
                free_cuda()
            rows.append(row)
            save()
            log(f"compare {row['kernel']} {row['shape']} {row['precision']} {row['pass']}: {row.get('status')} "
                f"sixdim {fmt_s(get(row, 'sixdim', 'seconds'))} ({get(row, 'sixdim', 'regime') or '-'}) "
                f"ratio {fmt_ratio(row.get('ratio'))}")
    result["problems"] = [f"{r['kernel']} {r['shape']} {r['precision']} {r['pass']}: "
                          f"{r.get('error') or r.get('status')} {r.get('reason') or ''}".strip()
                          for r in rows if r.get("error") or r.get("status") in ("failed", "incorrect", "timeout")]
    compared = [r for r in rows if isinstance(r.get("ratio"), float)]
    worst = max(compared, key=lambda r: abs(r["ratio"] - 1), default=None)
    result["summary"] = {"cases": len(rows), "compared": len(compared),
                         "within_2pct": sum(1 for r in compared if r["within_2pct"]),
                         "skipped_for_budget": sum(1 for r in rows if r.get("status") == "skipped"),
                         "worst": {k: worst[k] for k in ("kernel", "shape", "precision", "pass", "ratio")}
                         if worst else None}


def compare_case(spec: Any, case: Any, device_name: str, device: Any, row: dict[str, Any], min_run_time: float,
                 triton_testing: Any) -> None:
    watch = ClockWatch(device_name)
    try:
        _compare_case(spec, case, device_name, device, row, min_run_time, triton_testing, watch)
    finally:
        watch.stop()


def _compare_case(spec: Any, case: Any, device_name: str, device: Any, row: dict[str, Any], min_run_time: float,
                  triton_testing: Any, watch: ClockWatch) -> None:
    out = run_inprocess(spec, case, device_name)
    figures, details = out.get("figures") or {}, out.get("details") or {}
    row.update(status=out["status"], reason=out.get("reason", ""))
    clocks: dict[str, Any] = {"sixdim": watch.over(out.get("window"))}
    row["clocks"] = clocks
    if "seconds" not in figures:
        return
    row["sixdim"] = {"seconds": figures["seconds"], "regime": details.get("cache_regime"),
                     "timing_method": details.get("timing_method"), "calls_per_round": details.get("calls_per_round"),
                     "round_seconds": details.get("round_seconds"), "flops": figures.get("flops"),
                     "flop_count": details.get("flop_count"), "padded_shape": details.get("padded_shape"),
                     "torch_flags": details.get("torch_flags"), "memory_bytes": figures.get("memory_bytes")}
    wanted = details.get("torch_flags") or precision_flags(case.precision, conv=spec.name == "conv")
    row["flags_used"] = set_flags(wanted)
    row["flags_source"] = "sixdim's torch_flags" if details.get("torch_flags") else "precision table (no torch_flags)"
    fn, kept, description = build_kernel(spec.name, case.params, details, device)
    row["reference_call"] = description
    short = figures["seconds"] < GRAPH_BELOW_SECONDS
    refs = reference_times(fn, device, min_run_time=min_run_time, graph=short, triton_testing=triton_testing)
    del fn, kept
    for name, ref in refs.items():
        if isinstance(ref, dict) and ref.get("span"):
            clocks[name] = watch.over(ref["span"])
    row.update(refs)
    regime = details.get("cache_regime") or ("cold" if str(details.get("timing_method", "")).endswith("flushed")
                                             else "warm")
    same = {name: refs[name]["seconds"] for name in ("timer", "do_bench", "do_bench_cudagraph")
            if isinstance(get(refs, name, "seconds"), float) and refs[name].get("regime") == regime}
    if same:
        tool = min(same, key=same.get)
        row.update(reference_tool=tool, reference_seconds=same[tool], ratio=figures["seconds"] / same[tool])
        row["within_2pct"] = abs(row["ratio"] - 1) <= WITHIN
    else:
        row["ratio_note"] = f"no tool measured the {regime} regime here"


def summary_compare(result: dict[str, Any]) -> str:
    rows = [["kernel", "shape", "precision", "pass", "sixdim", "regime", "timer", "do_bench", "graph", "ratio",
             "within 2%?", "MHz sixdim/tool"]]
    for r in result.get("cases", []):
        status = r.get("status")
        if status != "ok" and "sixdim" not in r:
            rows.append([r["kernel"], short_shape(r["shape"]), r["precision"], r["pass"], status or "-",
                         "-", "-", "-", "-", "-", (r.get("reason") or r.get("error") or "")[:40], "-"])
            continue
        within = r.get("within_2pct")
        rows.append([r["kernel"], short_shape(r["shape"]), r["precision"], r["pass"],
                     fmt_s(get(r, "sixdim", "seconds")), get(r, "sixdim", "regime") or "-",
                     fmt_s(get(r, "timer", "seconds")), fmt_s(get(r, "do_bench", "seconds")),
                     fmt_s(get(r, "do_bench_cudagraph", "seconds")),
                     fmt_ratio(r.get("ratio")) + (f" ({r['reference_tool']})" if r.get("reference_tool") else ""),
                     "-" if within is None
                     else ("yes" if within else "NO") + ("" if status == "ok" else f" [{status}]"),
                     clock_pair(r)])
    s = result.get("summary") or {}
    return (table(rows) + f"\n{s.get('within_2pct', 0)} of {s.get('compared', 0)} compared cases within 2% of the "
            f"best tool in sixdim's cache regime (cold: do_bench; warm: blocked_autorange, do_bench_cudagraph); "
            f"{s.get('skipped_for_budget', 0)} skipped for the time budget" +
            (f"\n{result['triton']}" if result.get("triton") else ""))


def clock_pair(row: dict[str, Any]) -> str:
    """Mean SM clock during sixdim's timed rounds / during the reference tool's run, in MHz."""
    mine = get(row, "clocks", "sixdim", "sm_clock_mhz")
    tool = get(row, "clocks", row.get("reference_tool") or "", "sm_clock_mhz")
    if not isinstance(mine, float) or not isinstance(tool, float):
        return "-"
    return f"{mine:.0f}/{tool:.0f}"


def short_shape(shape: str) -> str:
    return shape.replace(",layout=nchw", "").replace(",pad=0x0", "")


# ----------------------------------------------------------------------------- peak

def cmd_peak(args: argparse.Namespace, result: dict[str, Any], save: Callable[[], None]) -> None:
    from sixdim.core import peaks

    size = 512 if args.quick else 8192
    name = gpu_name(args.device) if args.device.startswith("cuda") else "cpu"
    entry = peaks.find(name) if args.device.startswith("cuda") else None
    peak = entry.flops.get("bf16") if entry else None
    result.update(size=size, device_name=name, peak_entry=entry.name if entry else None, peak_flops=peak)
    flop = 2 * size ** 3

    log(f"peak: sixdim run (worker path), bf16 {size}³")
    cli = sixdim_cli(["--workload", "gemm", "-p", f"m={size}", "-p", f"n={size}", "-p", f"k={size}",
                      "-p", "precisions=bf16", "-p", "power_seconds=0", "--device", args.device],
                     timeout=max(60.0, args.budget_seconds))
    record = (cli.get("records") or [None])[0]
    result["sixdim_cli"] = {"error": cli.get("error"), "seconds_wall": cli.get("seconds"),
                            "status": get(record, "status"), "reason": get(record, "reason"),
                            "seconds": get(record, "figures", "seconds"), "flops": get(record, "figures", "flops"),
                            "peak_ratio": get(record, "figures", "peak_ratio"),
                            "timing_method": get(record, "details", "timing_method"),
                            "cache_regime": get(record, "details", "cache_regime")}
    save()

    import torch

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    result["environment"] = torch_info(args.device)
    log("peak: sixdim in-process")
    [(spec, case)] = cases_of("gemm", {"m": size, "n": size, "k": size, "precisions": ["bf16"],
                                       **sixdim_timing(args.quick)}, args.device)
    out = run_inprocess(spec, case, args.device)
    result["sixdim_inprocess"] = {"status": out["status"], "reason": out.get("reason"),
                                  "seconds": get(out, "figures", "seconds"), "flops": get(out, "figures", "flops"),
                                  "timing_method": get(out, "details", "timing_method")}
    restore_flags()
    free_cuda()
    save()

    log("peak: plain torch.matmul, best of 5 × 50 calls")
    a = torch.randn(size, size, dtype=torch.bfloat16, device=device)
    b = torch.randn(size, size, dtype=torch.bfloat16, device=device)
    calls = 10 if args.quick else 50

    def best_of(repeats: int = 5) -> list[float]:
        for _ in range(5):
            torch.matmul(a, b)
        times = []
        for _ in range(repeats):
            if cuda:
                torch.cuda.synchronize(device)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(calls):
                    torch.matmul(a, b)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3 / calls)
            else:
                t0 = time.perf_counter()
                for _ in range(calls):
                    torch.matmul(a, b)
                times.append((time.perf_counter() - t0) / calls)
        return times

    plain_flags = set_flags({})  # torch's defaults, untouched: "plain"
    plain = best_of()
    result["matmul_plain"] = {"flags": plain_flags, "seconds_per_call": plain, "best": min(plain),
                              "flops": flop / min(plain), "calls": calls}
    result["matmul_sixdim_flags"] = {}
    sixdim_flags = set_flags(precision_flags("bf16", conv=False))
    same = best_of()
    result["matmul_sixdim_flags"] = {"flags": sixdim_flags, "seconds_per_call": same, "best": min(same),
                                     "flops": flop / min(same), "calls": calls}
    restore_flags()
    a = b = None  # noqa: F841  (frees the operands before the next subcommand's memory use)
    free_cuda()
    for key in ("sixdim_cli", "sixdim_inprocess", "matmul_plain", "matmul_sixdim_flags"):
        flops = result[key].get("flops")
        result[key]["fraction_of_peak"] = flops / peak if peak and flops else None
    result["problems"] = [f"{key}: {result[key].get('error') or result[key].get('status')} "
                          f"{result[key].get('reason') or ''}".strip()
                          for key in ("sixdim_cli", "sixdim_inprocess")
                          if result[key].get("error") or result[key].get("status") != "ok"]


def summary_peak(result: dict[str, Any]) -> str:
    rows = [["path", "time per GEMM", "TFLOP/s", "fraction of peak"]]
    for key, label in (("sixdim_cli", "sixdim run (worker)"), ("sixdim_inprocess", "sixdim in-process"),
                       ("matmul_plain", "torch.matmul, best of 5 (torch flags)"),
                       ("matmul_sixdim_flags", "torch.matmul, best of 5 (sixdim flags)")):
        part = result.get(key) or {}
        seconds = part.get("seconds", part.get("best"))
        rows.append([label + (f" [{part['status']}]" if part.get("status") not in (None, "ok") else ""),
                     fmt_s(seconds), fmt_num((part.get("flops") or float("nan")) / 1e12, 4),
                     fmt_ratio(part.get("fraction_of_peak"))])
    peak = result.get("peak_flops")
    return (table(rows) + f"\nbf16 {result.get('size')}³ on {result.get('device_name')}; dense peak "
            f"{fmt_num((peak or float('nan')) / 1e12, 5)} TFLOP/s "
            f"({result.get('peak_entry') or 'no entry in agent/core/peaks.toml'})")


# ----------------------------------------------------------------------------- repeat

REPEAT_SETS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "quick-like": [("gemm", {"set": "square", "precisions": ["bf16", "fp32"]}),
                   ("gemm", {"set": "quick", "precisions": ["bf16", "fp32"]}),
                   ("conv", {"set": "quick", "precisions": ["bf16"], "layouts": ["nchw"]})],
    "gemm": [("gemm", {"set": "square", "precisions": ["bf16", "fp16", "fp32"]}),
             ("gemm", {"set": "quick", "precisions": ["fp32"]})],
    "cpu": [("gemm", {"set": "quick", "precisions": ["fp32"], "min_round_seconds": 0.02, "warmup_seconds": 0.05}),
            ("conv", {"set": "quick", "precisions": ["fp32"], "layouts": ["nchw"], "min_round_seconds": 0.02,
                      "warmup_seconds": 0.05})],
}


def cmd_repeat(args: argparse.Namespace, result: dict[str, Any], save: Callable[[], None]) -> None:
    set_name = args.set or ("cpu" if args.quick else "quick-like")
    workloads = [(w, {**p, "power_seconds": args.power_seconds}) for w, p in REPEAT_SETS[set_name]]
    config = suite_toml("repeat", workloads, [args.device])
    runs = args.runs if args.runs else (3 if args.quick else 5)
    result.update(set=set_name, workloads=workloads, runs_planned=runs, power_seconds=args.power_seconds)
    result["runs"] = []
    budget = Budget(args.budget_seconds)
    last = 30.0 if args.quick else 60.0
    for i in range(runs):
        if i >= 2 and not budget.allows(last * 1.1):
            result["runs_skipped_for_budget"] = runs - i
            break
        log(f"repeat: run {i + 1}/{runs} ({set_name})")
        cli = sixdim_cli(["--suite", "repeat", "--device", args.device], timeout=max(120.0, budget.left() + GRACE),
                         config_text=config)
        last = cli.get("seconds") or last
        result["runs"].append({"seconds_wall": cli.get("seconds"), "returncode": cli.get("returncode"),
                               "error": cli.get("error"),
                               "stderr_tail": cli.get("stderr_tail") if cli.get("error") else "",
                               "cases": [{"workload": r["workload"], "shape": r["shape"], "precision": r["precision"],
                                          "pass": r["kernel_pass"], "status": r["status"], "reason": r["reason"],
                                          "seconds": get(r, "figures", "seconds"),
                                          "round_cv": get(r, "details", "distribution", "cv"),
                                          "regime": get(r, "details", "cache_regime"),
                                          "timing_method": get(r, "details", "timing_method")}
                                         for r in cli.get("records") or []]})
        aggregate_repeat(result)
        save()
    aggregate_repeat(result)
    result["problems"] = [f"run {i + 1}: {run['error']}" for i, run in enumerate(result["runs"]) if run.get("error")]
    result["problems"] += [f"{e['workload']} {e['shape']} {e['precision']} {e['pass']}: {s}"
                           for e in result["cases"] for s in set(e["statuses"]) if s not in ("ok", "unsupported")]


def aggregate_repeat(result: dict[str, Any]) -> None:
    """Per case across the runs so far: mean, CV of ``seconds``, and the flag (GEMM > 1 ms, CV >= 1%)."""
    by_case: dict[tuple, dict[str, Any]] = {}
    for run in result["runs"]:
        for c in run["cases"]:
            entry = by_case.setdefault((c["workload"], c["shape"], c["precision"], c["pass"]),
                                       {"workload": c["workload"], "shape": c["shape"], "precision": c["precision"],
                                        "pass": c["pass"], "seconds": [], "statuses": [], "round_cv": [],
                                        "regime": c["regime"], "timing_method": c["timing_method"]})
            entry["statuses"].append(c["status"])
            if c["status"] == "ok" and isinstance(c["seconds"], float):
                entry["seconds"].append(c["seconds"])
                entry["round_cv"].append(c["round_cv"])
    result["cases"] = []
    for entry in by_case.values():
        values = entry["seconds"]
        mean = statistics.fmean(values) if values else None
        cv = statistics.stdev(values) / mean if len(values) >= 2 and mean else None
        entry.update(mean=mean, cv=cv, max_over_min=(max(values) / min(values)) if values else None)
        entry["flagged"] = bool(entry["workload"] == "gemm" and mean and mean > 1e-3 and cv is not None and cv >= 0.01)
        result["cases"].append(entry)
    result["flagged"] = [f"{e['shape']} {e['precision']}" for e in result["cases"] if e["flagged"]]


def summary_repeat(result: dict[str, Any]) -> str:
    rows = [["workload", "shape", "precision", "pass", "regime", "runs ok", "mean", "CV across runs", "max/min",
             "flag"]]
    for e in result.get("cases", []):
        rows.append([e["workload"], short_shape(e["shape"]), e["precision"], e["pass"], e.get("regime") or "-",
                     f"{len(e['seconds'])}/{len(e['statuses'])}", fmt_s(e.get("mean")),
                     "-" if e.get("cv") is None else f"{100 * e['cv']:.2f}%", fmt_ratio(e.get("max_over_min")),
                     "CV>=1% (GEMM >1 ms)" if e.get("flagged") else ""])
    walls = [r["seconds_wall"] for r in result.get("runs", []) if r.get("seconds_wall")]
    return (table(rows) + f"\n{len(result.get('runs', []))} runs of set '{result.get('set')}' "
            f"(wall {', '.join(f'{w:.0f} s' for w in walls)}); flagged: {len(result.get('flagged', []))}")


# ----------------------------------------------------------------------------- power

POWER_CASES = (("long", 8192, "bf16"), ("short", 2048, "bf16"))
"""The power check's GEMMs on a GPU: 8192³ bf16 (about 1.4 ms a call on an H100) and 2048³ bf16 (tens of µs),
so the energy counter's watts are compared with nvidia-smi's both for back-to-back long kernels and for
short ones where launch gaps and the flush between calls are a real share of the phase."""
QUICK_POWER_CASES = {"cuda": (("long", 4096, "bf16"), ("short", 1024, "bf16")),
                     "cpu": (("long", 256, "fp32"), ("short", 64, "fp32"))}
"""``--quick``: smaller GEMMs, by device type."""


def cmd_power(args: argparse.Namespace, result: dict[str, Any], save: Callable[[], None]) -> None:
    cuda = args.device.startswith("cuda")
    cases = QUICK_POWER_CASES["cuda" if cuda else "cpu"] if args.quick else POWER_CASES
    power_seconds = args.power_seconds if args.power_seconds > 0 else (1.0 if args.quick else 5.0)
    index = int(args.device.split(":")[1]) if cuda else 0
    result.update(power_seconds=power_seconds, cases=[])
    sampler = None
    if gpu_smi.smi() is not None and cuda:
        fields, unsupported = gpu_smi.supported_power_fields(index)
        result.update(smi_fields=fields, smi_unsupported=unsupported)
        if fields:
            try:
                sampler = gpu_smi.PowerSampler(index, fields, period_ms=100).start()
                time.sleep(1.0)
            except Exception as exc:  # sixdim's own figure is still worth having
                sampler = None
                result["smi_note"] = f"nvidia-smi sampling failed to start: {type(exc).__name__}: {exc}"
    else:
        result["smi_note"] = "nvidia-smi not found" if gpu_smi.smi() is None else "not a GPU run"
    budget = Budget(args.budget_seconds)
    clis = []
    try:
        for label, size, precision in cases:
            if clis and not budget.allows(power_seconds + 10):
                result["cases"].append({"label": label, "size": size, "precision": precision,
                                        "skipped": "the budget was spent"})
                continue
            log(f"power: {label}: sixdim run gemm {size}³ {precision}, power phase {power_seconds:g} s")
            cli = sixdim_cli(["--workload", "gemm", "-p", f"m={size}", "-p", f"n={size}", "-p", f"k={size}",
                              "-p", f"precisions={precision}", "-p", f"power_seconds={power_seconds}",
                              "--device", args.device], timeout=max(90.0, budget.left()))
            clis.append((label, size, precision, cli))
            if sampler is not None:
                time.sleep(1.5)  # power.draw may be a 1 s average: let it cover the phase's end
    finally:
        samples = sampler.stop() if sampler is not None else []
    result["smi_samples"] = samples
    if sampler is not None:
        result["smi_clock_offset_seconds"] = sampler.clock_offset()
        result["smi_unparsed"] = sampler.unparsed
    problems = []
    for label, size, precision, cli in clis:
        case = power_case(result, sampler, samples, cli, cuda)
        case.update(label=label, size=size, precision=precision)
        result["cases"].append(case)
        problems += [f"{label}: {p}" for p in case.pop("problems", [])]
    result["problems"] = problems


def power_case(result: dict[str, Any], sampler: Any, samples: list[dict[str, Any]], cli: dict[str, Any],
               cuda: bool) -> dict[str, Any]:
    """One GEMM's power phase against nvidia-smi's samples over the same span."""
    record = (cli.get("records") or [None])[0]
    figures, details = get(record, "figures") or {}, get(record, "details") or {}
    phase = details.get("power") or {}
    case: dict[str, Any] = {}
    case["sixdim"] = {"error": cli.get("error"), "status": get(record, "status"), "reason": get(record, "reason"),
                      "power_watts": figures.get("power_watts"), "energy_joules": figures.get("energy_joules"),
                      "flop_per_joule": figures.get("flop_per_joule"), "flops": figures.get("flops"),
                      "seconds": figures.get("seconds"), "peak_ratio": figures.get("peak_ratio"),
                      "power": phase, "power_note": details.get("power_note"),
                      "flop_count": details.get("flop_count"), "stderr_tail": cli.get("stderr_tail")}
    start, end = phase.get("start_unix"), phase.get("end_unix")
    comparison: dict[str, Any] = {}
    if samples and start and end:
        offset = sampler.clock_offset() if sampler else None
        time_key = "t" if offset is None or abs(offset) < 2.0 else "received"  # a bad parse: this process's clock
        comparison["time_base"] = "nvidia-smi timestamp (local time)" if time_key == "t" else "time the line was read"
        for field in result.get("smi_fields", []):
            mean, n = gpu_smi.window_mean(samples, field, start, end, time_key)
            late, n_late = gpu_smi.window_mean(samples, field, start + (end - start) / 2, end, time_key)
            entry = {"mean_watts": mean, "samples": n, "second_half_mean_watts": late, "second_half_samples": n_late}
            if mean and figures.get("power_watts"):
                entry["sixdim_over_smi"] = figures["power_watts"] / mean
                calls, flop_count = phase.get("calls"), details.get("flop_count")
                if calls and flop_count and phase.get("seconds"):
                    entry["gflop_per_joule_from_smi"] = calls * flop_count / (mean * phase["seconds"]) / 1e9
            comparison[field] = entry
    elif not samples:
        comparison["note"] = result.get("smi_note") or "no nvidia-smi samples"
    else:
        comparison["note"] = "sixdim reported no power phase window (details.power.start_unix/end_unix)"
    case["comparison"] = comparison
    if figures.get("flop_per_joule"):
        case["sixdim"]["gflop_per_joule"] = figures["flop_per_joule"] / 1e9
    if record is None or get(record, "status") != "ok":
        case["problems"] = [(f"sixdim run: {cli.get('error') or get(record, 'status')} "
                             f"{get(record, 'reason') or ''}").strip()]
    elif cuda and not figures.get("power_watts"):
        case["problems"] = [f"no power_watts on a GPU: {details.get('power_note')}"]
    return case


def summary_power(result: dict[str, Any]) -> str:
    parts = []
    for case in result.get("cases", []):
        if case.get("skipped"):
            parts.append(f"{case['label']}: gemm {case['size']}³ {case['precision']}: skipped ({case['skipped']})")
            continue
        s = case.get("sixdim") or {}
        comparison = case.get("comparison") or {}
        rows = [["source", "mean W over power phase", "second half W", "samples", "sixdim / source", "GFLOP/J"]]
        rows.append(["sixdim (energy counter)", fmt_num(s.get("power_watts"), 4), "-",
                     str(get(s, "power", "readings") or "-"), "1" if s.get("power_watts") else "-",
                     fmt_num(s.get("gflop_per_joule"), 4)])
        for field in result.get("smi_fields", []) or []:
            entry = comparison.get(field) or {}
            rows.append([f"nvidia-smi {field}", fmt_num(entry.get("mean_watts"), 4),
                         fmt_num(entry.get("second_half_mean_watts"), 4), str(entry.get("samples", "-")),
                         fmt_ratio(entry.get("sixdim_over_smi")), fmt_num(entry.get("gflop_per_joule_from_smi"), 4)])
        phase = s.get("power") or {}
        parts.append(
            f"{case['label']}: gemm {case['size']}³ {case['precision']}\n" + table(rows) +
            f"\n{fmt_s(s.get('seconds'))} per GEMM, "
            f"{fmt_num((s.get('flops') or float('nan')) / 1e12, 4)} TFLOP/s, "
            f"peak ratio {fmt_ratio(s.get('peak_ratio'))}; "
            f"power phase {fmt_num(phase.get('seconds'), 3)} s, {phase.get('calls', '-')} calls, "
            f"{fmt_num(s.get('energy_joules'), 4)} J" +
            (f"; {s.get('power_note')}" if s.get("power_note") else "") +
            (f"; {comparison['note']}" if comparison.get("note") else "") +
            (f"; sixdim: {s['status']} {s.get('reason') or ''}" if s.get("status") not in (None, "ok") else "") +
            (f"; error: {s['error']}" if s.get("error") else ""))
    return "\n\n".join(parts) or "no power case ran"


# ----------------------------------------------------------------------------- cold

COLD_CASES = (("1760x128x1760", 1760, 128, 1760, "NN", ("tf32", "fp16", "bf16", "fp32")),
              ("1760x128x1760", 1760, 128, 1760, "NT", ("int8",)),
              ("35x8457x2560", 35, 8457, 2560, "NN", ("bf16", "fp16")))
"""The cold µs-scale GEMMs whose gap to do_bench was largest on the H100 (2026-11-25) at equal clocks."""


def cmd_cold(args: argparse.Namespace, result: dict[str, Any], save: Callable[[], None]) -> None:
    """The same cold call timed three ways, interleaved: sixdim's rounds (the mean of 50 flushed calls,
    5 rounds, DeepSpark mean), sixdim's flushed call one at a time (its distribution: mean and median),
    and triton's do_bench (median, and its whole distribution).  Tells whether a gap is the statistic
    (mean against median) or the method."""
    import torch

    from sixdim.workloads.measure import timing
    from sixdim.workloads.measure.stats import deepspark_mean, summarize

    prepare_inprocess()
    device = torch.device(args.device)
    try:
        import triton.testing as triton_testing
    except Exception as exc:
        triton_testing = None
        result["triton"] = f"unavailable ({type(exc).__name__}: {exc})"
    budget = Budget(args.budget_seconds)
    calls = 50 if args.quick else 500
    result["cases"] = rows = []
    for label, m, n, k, op, precisions in COLD_CASES:
        for precision in precisions:
            if not budget.allows(8.0):
                rows.append({"shape": label, "precision": precision, "skipped": "budget"})
                continue
            if device.type != "cuda" and precision in FIXED:
                continue
            params = {"m": m, "n": n, "k": k, "op": op, "dtype": precision}
            scale = 1 if device.type == "cuda" else 8
            params.update(m=max(1, m // scale), n=max(1, n // scale), k=max(1, k // scale))
            row: dict[str, Any] = {"shape": label, "op": op, "precision": precision}
            rows.append(row)
            previous = set_flags(precision_flags(precision, conv=False))
            try:
                fn, kept, description = build_kernel("gemm", params, None, device)
                row["call"] = description
                timing.calibrate(fn, device, 0.1, 0.0)
                if device.type != "cuda":
                    row["note"] = "no CUDA: nothing to compare"
                    continue
                rounds = [timing._flushed(fn, device, 50) for _ in range(5)]
                single = [timing._flushed(fn, device, 1) for _ in range(calls)]
                row["sixdim_rounds"] = {"round_means": rounds, "deepspark_mean": deepspark_mean(rounds)}
                row["sixdim_single"] = summarize(single)
                if triton_testing is not None:
                    times = triton_testing.do_bench(fn, warmup=25, rep=100, return_mode="all")
                    row["do_bench"] = summarize([t / 1e3 for t in times])
                    after = [timing._flushed(fn, device, 50) for _ in range(5)]  # interleaved: after do_bench too
                    row["sixdim_rounds_after"] = {"round_means": after, "deepspark_mean": deepspark_mean(after)}
                    median = row["do_bench"]["median"]
                    row["mean_over_do_bench_median"] = row["sixdim_rounds"]["deepspark_mean"] / median
                    row["single_median_over_do_bench_median"] = row["sixdim_single"]["median"] / median
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                set_flags(previous)
                free_cuda()
                save()


def summary_cold(result: dict[str, Any]) -> str:
    rows = [["shape", "precision", "sixdim rounds", "single mean", "single median", "single q3", "do_bench median",
             "do_bench mean", "rounds/do_bench", "single median/do_bench"]]
    for r in result.get("cases", []):
        s, d = r.get("sixdim_single") or {}, r.get("do_bench") or {}
        rows.append([f"{r['shape']} {r.get('op', '')}", r["precision"],
                     fmt_s(get(r, "sixdim_rounds", "deepspark_mean")), fmt_s(s.get("mean")), fmt_s(s.get("median")),
                     fmt_s(s.get("q3")), fmt_s(d.get("median")), fmt_s(d.get("mean")),
                     fmt_ratio(r.get("mean_over_do_bench_median")),
                     fmt_ratio(r.get("single_median_over_do_bench_median"))
                     + (f" {r.get('skipped') or r.get('error') or r.get('note') or ''}")])
    return table(rows)


# ----------------------------------------------------------------------------- memory

def memory_workloads(quick: bool) -> list[tuple[str, dict[str, Any]]]:
    common = {"power_seconds": 0.0, "min_round_seconds": 0.02 if quick else 0.05,
              "warmup_seconds": 0.05 if quick else 0.1}
    if quick:
        return [("gemm", {"m": 256, "n": 256, "k": 256, "precisions": ["fp32", "bf16", "int8"], **common}),
                ("conv", {"set": "quick", "precisions": ["fp32"], "layouts": ["nchw"], **common})]
    return [("gemm", {"m": 8192, "n": 8192, "k": 8192, "precisions": ["bf16", "int8", "fp8"], **common}),
            ("gemm", {"m": 4096, "n": 4096, "k": 4096, "op": "TN", "precisions": ["fp32"], **common}),
            ("gemm", {"m": 1760, "n": 128, "k": 1760, "precisions": ["bf16"], **common}),
            ("gemm", {"m": 35, "n": 8457, "k": 2560, "precisions": ["fp8"], **common}),
            ("conv", {"set": "quick", "precisions": ["bf16"], "layouts": ["nchw"], **common})]


def cmd_memory(args: argparse.Namespace, result: dict[str, Any], save: Callable[[], None]) -> None:
    workloads = [w for w in memory_workloads(args.quick)
                 if not getattr(args, "workload", "") or w[0] == args.workload]
    result["workloads"] = workloads
    log(f"memory: sixdim run, {len(workloads)} workload entries in one worker")
    budget = Budget(args.budget_seconds)
    cli = sixdim_cli(["--suite", "memory", "--device", args.device], timeout=max(120.0, args.budget_seconds),
                     config_text=suite_toml("memory", workloads, [args.device]))
    records = cli.get("records") or []
    result["sixdim_run"] = {"error": cli.get("error"), "seconds_wall": cli.get("seconds"),
                            "returncode": cli.get("returncode"),
                            "stderr_tail": cli.get("stderr_tail") if cli.get("error") else ""}
    result["cases"] = rows = []
    for r in records:
        rows.append({"workload": r["workload"], "shape": r["shape"], "precision": r["precision"],
                     "pass": r["kernel_pass"], "status": r["status"], "reason": r["reason"],
                     "params": r["params"], "padded_shape": get(r, "details", "padded_shape"),
                     "regime": get(r, "details", "cache_regime"),
                     "sixdim_memory_bytes": get(r, "figures", "memory_bytes"),
                     "sixdim_memory_reserved_bytes": get(r, "figures", "memory_reserved_bytes"),
                     "sixdim_device_memory_bytes": get(r, "figures", "device_memory_bytes")})
    save()
    todo = [row for row in rows if row["status"] == "ok"]
    parallel = 4 if args.device.startswith("cuda") else 2
    log(f"memory: {len(todo)} hand measurements, each in a fresh process ({parallel} at a time)")

    def probe(row: dict[str, Any]) -> None:
        if not budget.allows(5.0):
            row["hand"] = {"error": "skipped: budget"}
            return
        spec = {"workload": row["workload"], "params": row["params"], "padded_shape": row["padded_shape"]}
        row["hand"] = run_probe(spec, args.device, timeout=max(60.0, budget.left() + 30))
        # sixdim counts the peak from the end of warm-up (timing.settle_peak): the hand figure that means
        # the same is the steady peak, over calls after the first (cuDNN's autotuner runs in the first)
        hand = get(row, "hand", "steady_peak_bytes")
        if isinstance(hand, (int, float)) and hand > 0 and isinstance(row["sixdim_memory_bytes"], (int, float)):
            row["sixdim_over_hand"] = row["sixdim_memory_bytes"] / hand
            row["difference_bytes"] = row["sixdim_memory_bytes"] - hand

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(probe, todo))
    save()
    result["problems"] = ([f"sixdim run: {cli['error']}"] if cli.get("error") else []) + [
        f"{r['workload']} {r['shape']} {r['precision']} {r['pass']}: {r['status']} {r['reason']}"
        for r in rows if r["status"] not in ("ok", "unsupported")] + [
        f"{r['workload']} {r['shape']} {r['precision']} {r['pass']}: hand: {r['hand']['error']}"
        for r in rows if get(r, "hand", "error")]
    compared = [r for r in rows if isinstance(r.get("sixdim_over_hand"), float)]
    result["summary"] = {"compared": len(compared),
                         "max_abs_difference_bytes": max((abs(r["difference_bytes"]) for r in compared), default=None)}


def run_probe(spec: dict[str, Any], device: str, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # what sixdim's worker sets, so workspaces match
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, str(Path(__file__).resolve()), "_memory-probe", "--device", device,
           "--spec", json.dumps(spec)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"probe timed out after {timeout:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith(PROBE_PREFIX):
            return json.loads(line[len(PROBE_PREFIX):])
    return {"error": f"probe exit code {done.returncode}: {(done.stdout + done.stderr)[-800:]}"}


def memory_probe(spec: dict[str, Any], device_name: str) -> dict[str, Any]:
    """In a fresh process: reset the peak, allocate the case's operands, run its kernel, read the peaks."""
    import resource

    import torch

    device = torch.device(device_name)
    cuda = device.type == "cuda"
    params = spec["params"]
    precision = params["dtype"]
    set_flags(precision_flags(precision, conv=spec["workload"] == "conv"))
    out: dict[str, Any] = {"method": "torch.cuda.max_memory_allocated, fresh process" if cuda else
                           "peak RSS of a fresh process (ru_maxrss); no allocator statistics on a CPU"}
    if cuda:
        torch.empty(1, device=device)  # the context and the allocator, before the first reset
        one = torch.ones(1, 1, device=device)
        torch.mm(one, one)  # cuBLAS's workspace, which sixdim's worker also allocates before a case's baseline
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    fn, kept, description = build_kernel(spec["workload"], params, {"padded_shape": spec.get("padded_shape")}, device)
    out["call"] = description
    if not cuda:
        for _ in range(3):
            fn()
        out["kernel_peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return out
    torch.cuda.synchronize(device)
    out["operand_bytes"] = torch.cuda.memory_allocated(device) - base
    out["allocation_peak_bytes"] = torch.cuda.max_memory_allocated(device) - base
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    out["first_call_peak_bytes"] = torch.cuda.max_memory_allocated(device) - base
    torch.cuda.reset_peak_memory_stats(device)
    for _ in range(3):
        fn()
    torch.cuda.synchronize(device)
    out["steady_peak_bytes"] = torch.cuda.max_memory_allocated(device) - base
    out["kernel_peak_bytes"] = max(out["first_call_peak_bytes"], out["steady_peak_bytes"])
    out["reserved_peak_bytes"] = torch.cuda.max_memory_reserved(device)
    out["workspace_config"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    return out


def summary_memory(result: dict[str, Any]) -> str:
    rows = [["workload", "shape", "precision", "pass", "regime", "sixdim memory_bytes", "hand peak", "hand steady",
             "operands", "sixdim/hand steady"]]
    for r in result.get("cases", []):
        hand = r.get("hand") or {}
        rows.append([r["workload"], short_shape(r["shape"]), r["precision"], r["pass"], r.get("regime") or "-",
                     fmt_bytes(r.get("sixdim_memory_bytes")) if r["status"] == "ok" else r["status"],
                     fmt_bytes(hand.get("kernel_peak_bytes")) if "error" not in hand else hand["error"][:40],
                     fmt_bytes(hand.get("steady_peak_bytes")), fmt_bytes(hand.get("operand_bytes")),
                     fmt_ratio(r.get("sixdim_over_hand"))])
    run = result.get("sixdim_run") or {}
    return table(rows) + (f"\nsixdim run error: {run['error']}" if run.get("error") else "")


# ----------------------------------------------------------------------------- models

GPU_MODEL_CASES = [("resnet50", "training", "amp"), ("bert_large", "training", "amp"), ("gpt", "training", "amp"),
                   ("resnet50", "inference", "amp"), ("dlrm", "training", "fp32"), ("lstm", "training", "fp32"),
                   ("resnet50", "training", "fp32"), ("gpt", "inference", "amp"), ("bert_large", "inference", "amp"),
                   ("dlrm", "training", "amp"), ("lstm", "training", "amp")]
CPU_MODEL_CASES = [("resnet50", "training", "fp32"), ("bert_large", "training", "amp"), ("gpt", "inference", "fp32"),
                   ("dlrm", "training", "fp32"), ("lstm", "training", "fp32")]


def cmd_models(args: argparse.Namespace, result: dict[str, Any], save: Callable[[], None]) -> None:
    result["environment"] = torch_info(args.device)
    cuda = args.device.startswith("cuda")
    size = "small" if args.quick else "full"
    meter = None
    if cuda:
        try:
            from sixdim.workloads.measure import energy

            meter = energy.meter_for(args.device, None)
            result["energy_meter"] = meter.source if meter.available else meter.reason
        except Exception as exc:
            result["energy_meter"] = f"unavailable: {exc}"
    overrides: dict[str, Any] = {"size": size}
    if args.quick:
        overrides.update(warmup_steps=2, steps_per_window=2, latency_samples=5, power_seconds=0.0)
    result.update(size=size, overrides=overrides)
    result["cases"] = rows = []
    budget = Budget(args.budget_seconds)
    estimate = 5.0
    cases = CPU_MODEL_CASES if args.quick else GPU_MODEL_CASES
    for model, mode, precision in cases[max(0, getattr(args, "skip", 0)):]:
        row: dict[str, Any] = {"model": model, "mode": mode, "precision": precision}
        rows.append(row)
        if not budget.allows(estimate):
            row.update(status="skipped", reason="budget")
            continue
        started = time.monotonic()
        try:
            [(spec, case)] = cases_of("model", {**overrides, "models": [model], "modes": [mode],
                                                "precisions": [precision]}, args.device)
            log(f"models: sixdim {model} {mode} {precision} ({size})")
            out = run_inprocess(spec, case, args.device, meter)
            figures, details = out.get("figures") or {}, out.get("details") or {}
            row.update(status=out["status"], reason=out.get("reason"), sixdim={
                "samples_per_second": figures.get("samples_per_second"), "seconds": figures.get("seconds"),
                "power_watts": figures.get("power_watts"), "samples_per_joule": figures.get("samples_per_joule"),
                "memory_bytes": figures.get("memory_bytes"),
                "memory_reserved_bytes": figures.get("memory_reserved_bytes"),
                "batch": details.get("batch"), "steps_per_window": details.get("steps_per_window"),
                "power_note": details.get("power_note"), "torch_flags": details.get("torch_flags"),
                "amp_dtype": details.get("amp_dtype")})
            restore_flags()
            free_cuda()
            save()
            params = case.params
            log(f"models: hand loop {model} {mode} {precision}")
            row["hand"] = hand_loop(params, args.device,
                                    warmup=params["warmup_steps"],
                                    steps=params["steps_per_window"] * params["windows"])
            ours, theirs = get(row, "sixdim", "samples_per_second"), row["hand"].get("samples_per_second")
            if ours and theirs:
                row["sixdim_over_hand"] = ours / theirs
        except Exception as exc:
            row.update(status="failed", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=6))
        finally:
            restore_flags()
            free_cuda()
        estimate = max(estimate, time.monotonic() - started)
        save()
    result["problems"] = [f"{r['model']} {r['mode']} {r['precision']}: {r.get('error') or r.get('status')} "
                          f"{r.get('reason') or ''}".strip()
                          for r in rows if r.get("error") or r.get("status") in ("failed", "incorrect", "timeout")]


def hand_loop(params: dict[str, Any], device_name: str, *, warmup: int, steps: int) -> dict[str, Any]:
    """A plain loop over the same model (sixdim.workloads.models.model.build): warm-up, then timed steps between
    synchronizes, samples/s; IEEE fp32 (TF32 off) plus autocast for amp, as sixdim's model workload."""
    import torch

    from sixdim.workloads.models import model as models

    device = torch.device(device_name)
    cuda = device.type == "cuda"
    flags = set_flags({"matmul_allow_tf32": False, "cudnn_allow_tf32": False, "cudnn_benchmark": True})
    name, size, training = params["model"], params["size"], params["mode"] == "training"
    batch_size = params["batch"] or (models.SIZES[name][size]["batch"] if training else params["inference_batch"])
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    generator = torch.Generator().manual_seed(params["seed"])
    torch.manual_seed(params["seed"])
    model, batch, loss_of = models.build(name, size, device, batch_size, generator)
    model = model.to(device)
    model.train(training)
    amp = params["precision"] == "amp"
    amp_dtype = torch.bfloat16 if not cuda or torch.cuda.is_bf16_supported() else torch.float16
    scaler = torch.amp.GradScaler(device.type, enabled=amp and amp_dtype == torch.float16)
    optimizer = None
    if training:
        optimizer = (torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if name == "resnet50"
                     else torch.optim.AdamW(model.parameters(), lr=1e-4))

    def forward() -> Any:
        return model(batch[0], batch[1]) if name == "dlrm" else model(batch[0])

    def step() -> None:
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            if not training:
                with torch.no_grad():
                    forward()
                return
            loss = loss_of(forward(), batch)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    elapsed = time.perf_counter() - start
    out = {"samples_per_second": batch_size * steps / elapsed, "seconds_per_step": elapsed / steps,
           "batch": batch_size, "warmup_steps": warmup, "timed_steps": steps, "flags": flags,
           "amp_dtype": str(amp_dtype) if amp else None}
    if cuda:
        out["memory_bytes"] = torch.cuda.max_memory_allocated(device) - base
    return out


def summary_models(result: dict[str, Any]) -> str:
    rows = [["model", "mode", "precision", "status", "sixdim samples/s", "hand samples/s", "sixdim/hand", "power W",
             "sixdim memory", "hand memory"]]
    for r in result.get("cases", []):
        rows.append([r["model"], r["mode"], r["precision"], r.get("status", "-"),
                     fmt_num(get(r, "sixdim", "samples_per_second"), 5),
                     fmt_num(get(r, "hand", "samples_per_second"), 5),
                     fmt_ratio(r.get("sixdim_over_hand")), fmt_num(get(r, "sixdim", "power_watts"), 4),
                     fmt_bytes(get(r, "sixdim", "memory_bytes")), fmt_bytes(get(r, "hand", "memory_bytes"))])
    return table(rows) + f"\nsize={result.get('size')}; energy meter: {result.get('energy_meter', '-')}"


# ----------------------------------------------------------------------------- driver

COMMANDS: dict[str, tuple[Callable, Callable]] = {
    "compare": (cmd_compare, summary_compare), "peak": (cmd_peak, summary_peak), "repeat": (cmd_repeat, summary_repeat),
    "power": (cmd_power, summary_power), "memory": (cmd_memory, summary_memory), "models": (cmd_models, summary_models),
    "cold": (cmd_cold, summary_cold),
}


def summarize(name: str, result: dict[str, Any]) -> str:
    head = f"== {name}: {result.get('status')} in {fmt_num(result.get('seconds'), 4)} s"
    if result.get("error"):
        head += f" ({result['error']})"
    try:
        body = COMMANDS[name][1](result)
    except Exception as exc:
        body = f"(no table: {type(exc).__name__}: {exc})"
    return head + "\n" + body


def run_one(name: str, args: argparse.Namespace) -> int:
    out = Path(args.out)
    path = out / f"{name}.json"
    result: dict[str, Any] = {"subcommand": name, "status": "running", "started_unix": time.time(),
                              "device": args.device, "quick": args.quick, "budget_seconds": args.budget_seconds,
                              "host": host_info(), "argv": sys.argv[1:]}
    save = lambda: write_json(path, result)  # noqa: E731
    save()
    log(f"{name}: start (device {args.device}, budget {args.budget_seconds:.0f} s{', quick' if args.quick else ''})")
    try:
        COMMANDS[name][0](args, result, save)
        problems = result.get("problems") or []
        result["status"] = "failed" if problems else "ok"
        if problems:
            result["error"] = f"{len(problems)} problem(s): " + "; ".join(problems)[:500]
    except BaseException as exc:  # recorded, and the next subcommand still runs
        result["status"] = "failed"
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
        if isinstance(exc, KeyboardInterrupt):
            raise
    finally:
        result["ended_unix"] = time.time()
        result["seconds"] = result["ended_unix"] - result["started_unix"]
        save()
        free_cuda()
    print(summarize(name, result), flush=True)
    return 0 if result["status"] == "ok" else 1


def cmd_all(args: argparse.Namespace) -> int:
    out = Path(args.out)
    names = [n for n in ORDER if not args.only or n in args.only.split(",")]
    budgets = QUICK_BUDGETS if args.quick else BUDGETS
    total = args.budget_seconds or sum(budgets[n] for n in names)
    scale = total / sum(budgets[n] for n in names)
    start = time.monotonic()
    hard_end = start + total + 2 * GRACE
    overview: dict[str, Any] = {"started_unix": time.time(), "device": args.device, "quick": args.quick,
                                "budget_seconds": total, "host": host_info(), "subcommands": {}}
    log(f"all: {', '.join(names)} on {args.device}, budget {total:.0f} s{' (quick)' if args.quick else ''}")
    for name in names:
        budget = budgets[name] * scale
        left = start + total - time.monotonic()
        path = out / f"{name}.json"
        if left < 10:
            write_json(path, {"subcommand": name, "status": "skipped", "reason": "the overall budget was spent"})
            overview["subcommands"][name] = {"status": "skipped"}
            continue
        budget = min(budget, max(10.0, left))
        cmd = [sys.executable, str(Path(__file__).resolve()), name, "--out", str(out), "--device", args.device,
               "--budget-seconds", f"{budget:.0f}"] + (["--quick"] if args.quick else ALL_EXTRA.get(name, []))
        limit = min(budget + GRACE, max(15.0, hard_end - time.monotonic()))
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            code = proc.wait()
            try:
                partial = json.loads(path.read_text())
            except Exception:
                partial = {"subcommand": name}
            partial.update(status="killed", error=f"still running {limit:.0f} s after start (budget {budget:.0f} s): "
                                                  f"killed; the cases above were kept")
            write_json(path, partial)
        overview["subcommands"][name] = {"exit_code": code, "seconds": time.monotonic() - t0}
    overview["seconds"] = time.monotonic() - start
    print("\n" + "=" * 100, flush=True)
    rows = [["subcommand", "status", "seconds", "file"]]
    for name in names:
        path = out / f"{name}.json"
        try:
            result = json.loads(path.read_text())
        except Exception as exc:
            result = {"status": f"no result ({type(exc).__name__})"}
        overview["subcommands"].setdefault(name, {})["status"] = result.get("status")
        if result.get("status") not in ("skipped",) and name in COMMANDS:
            print(summarize(name, result) + "\n", flush=True)
        rows.append([name, str(result.get("status")), fmt_num(result.get("seconds"), 4), str(path)])
    write_json(out / "all.json", overview)
    print(table(rows), flush=True)
    print(f"all: {overview['seconds']:.0f} s in total; JSON under {out}", flush=True)
    return 0 if all(s.get("status") == "ok" for s in overview["subcommands"].values()) else 1


def default_device() -> str:
    try:
        import logging

        from sixdim.collectors.nvml import NvmlCollector

        logging.getLogger("collectors").setLevel(logging.ERROR)  # "NVML unavailable" is the answer, not news
        nvml = NvmlCollector("bench")
        if nvml.availability().available and nvml.gpus:
            return "cuda:0"
    except Exception:
        pass
    return "cpu"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in ("all",) + ORDER:
        sub = commands.add_parser(name, help=f"run {name}" if name != "all" else "every subcommand, each in a child")
        sub.add_argument("--out", required=True, help="directory for the JSON results")
        sub.add_argument("--device", default=None, help="cuda:N or cpu (default: cuda:0 where NVML sees a GPU)")
        sub.add_argument("--quick", action="store_true", help="small shapes and short times (automatic on a CPU)")
        sub.add_argument("--budget-seconds", type=float, default=None,
                         help="stop starting new cases after this long (default per subcommand; all: their sum)")
        if name == "all":
            sub.add_argument("--only", default="", help="comma-separated subset, e.g. compare,power")
        if name == "repeat":
            sub.add_argument("--runs", type=int, default=0, help="back-to-back runs (default 5; 3 with --quick)")
            sub.add_argument("--set", choices=sorted(REPEAT_SETS), default=None,
                             help="cases: quick-like (GEMM square bf16/fp32 + quick bf16/fp32, conv quick bf16; "
                                  "the default), gemm (square bf16/fp16/fp32 + quick fp32: what 'all' runs), cpu")
        if name == "memory":
            sub.add_argument("--workload", default="", choices=["", "gemm", "conv"],
                             help="only this workload's cases (default: GEMMs and convolutions)")
        if name == "models":
            sub.add_argument("--skip", type=int, default=0,
                             help="leave out the first N rows (those an earlier run measured)")
        if name in ("repeat", "power"):
            sub.add_argument("--power-seconds", type=float, default=0.0 if name == "repeat" else -1.0,
                             help="sixdim's power phase per case (repeat: 0 = off; power: default 5, 1 with --quick)")
    probe = commands.add_parser("_memory-probe", help=argparse.SUPPRESS)
    probe.add_argument("--device", required=True)
    probe.add_argument("--spec", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "_memory-probe":
        print(PROBE_PREFIX + json.dumps(clean(memory_probe(json.loads(args.spec), args.device))), flush=True)
        return 0
    args.device = args.device or default_device()
    if args.device == "cpu":
        args.quick = True
    if args.command == "all":
        if args.budget_seconds is not None and args.budget_seconds <= 0:
            args.budget_seconds = None
        return cmd_all(args)
    if args.budget_seconds is None:
        args.budget_seconds = (QUICK_BUDGETS if args.quick else BUDGETS)[args.command]
    return run_one(args.command, args)


if __name__ == "__main__":
    sys.exit(main())
