"""The registry of named workloads, in the shape every workload follows.

Adding a workload is adding a spec here (its parameters and how they expand into
cases) and a ``run(case_params, context)`` function in its own module; nothing
else in the agent changes.  Everything here is torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sixdim.workloads.kernels import shapes
from sixdim.workloads.logs.model import COMMAND_FILE_FORMATS, COMMAND_FORMATS, UNITS
from sixdim.workloads.onnx import ONNX_MODELS
from sixdim.workloads.spec import Case, DeviceType, Param, ParamError, WorkloadSpec

_KERNEL_FIGURES = ("seconds", "seconds_iqr_ratio", "max_relative_error", "power_watts", "energy_joules")
_LATENCY_FIGURES = ("latency_p50_seconds", "latency_p99_seconds")
"""Figures of the kernels' results (workloads/measure/report.py ``kernel_output``), and the latency percentiles a
workload reports where its ``latency_samples`` is above 0."""

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8", "fp8_fast")
"""GEMM's precisions.  ``fp8`` is e4m3 with ``use_fast_accum=False`` (cuBLAS promotes partial sums to
FP32 now and then: the accurate form); ``fp8_fast`` the same with ``use_fast_accum=True``, the form
NVIDIA's FP8 tensor-core peak describes, so each has its own label and its own series."""
FLOAT_PRECISIONS = ("fp32", "fp16", "bf16")
FIXED_LAYOUT_PRECISIONS = ("int8", "fp8", "fp8_fast")
INTEGER_PRECISIONS = frozenset({"int8"})
"""Precisions whose operations are integer ones: their rate is shown in OP/s (TOP/s), not FLOP/s
(the exported figure keeps its name, sixdim_workload_flops, with the precision label saying which)."""
SETS = ("quick", "training", "inference", "full")
GEMM_SETS = SETS + ("square",)
SENTINEL_SETS = SETS + ("sentinel",)
"""Conv's and RNN's sets, with ``sentinel``: one representative training shape (shapes.CONV_SENTINEL,
shapes.RNN_SENTINEL), the cheap watch the frequent tier keeps on each kind of kernel."""

TIMING_PARAMS = (
    Param("rounds", int, "timed rounds; the speed figure is their DeepSpark mean", 5, 5, minimum=3),
    Param("min_round_seconds", float, "each round repeats the kernel until it lasts at least this long",
          0.05, 0.2, minimum=0.0),
    Param("warmup_seconds", float, "warm-up before timing, seconds (at least 3 calls)", 0.1, 0.5, minimum=0.0),
    Param("power_seconds", float, "length of the power phase after the timed rounds, seconds (back-to-back "
          "calls with the energy counter read at both ends; under 1 s: no power reported)", 3.0, 3.0,
          minimum=0.0),
)
SELF_TEST = Param("corrupt", bool, "self-test: corrupt one output element, so the run must report 'incorrect'",
                  False, False)
SLOWDOWN = Param("slowdown_seconds", float, "self-test: busy-wait this long inside every timed call, so the runs "
                 "are slower (a fire drill for the regression alert: restart the agent with it set); 0: off",
                 0.0, 0.0, minimum=0.0)


CONV_PASSES = ("forward", "backward_data", "backward_weight")
RNN_PASSES = ("forward", "backward")


def set_param(help_text: str) -> Param:
    return Param("set", str, help_text, "quick", "quick", choices=SETS)


SCALE = Param("scale", int, "divide every size of the set by this (CPU runs use small shapes)", 16, 1, minimum=1)


LATENCY_SAMPLES = Param("latency_samples", int, "also time this many single calls for p50/p99 latency (0: off)",
                        0, 0, minimum=0)
MAX_BATCH = Param("max_batch", int, "keep only shapes whose batch is at most this (0: all)", 0, 0, minimum=0)


def _select(sets: dict[str, list], params: dict[str, Any], batch_of: Callable[[Any], int]) -> list:
    """The shapes of the named set ("full": training then inference), scaled by ``scale``, and
    without those whose batch exceeds ``max_batch`` (when it is set)."""
    name = params["set"]
    chosen = sets["training"] + sets["inference"] if name == "full" else sets[name]
    return [s for s in shapes.scaled(chosen, params["scale"])
            if not params["max_batch"] or batch_of(s) <= params["max_batch"]]


def _gemm_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    if params["m"] or params["n"] or params["k"]:
        if not (params["m"] and params["n"] and params["k"]):
            raise ParamError("workload 'gemm': give all of m, n and k for an explicit shape, or none")
        chosen = [shapes.GemmShape(params["m"], params["n"], params["k"], params["op"], mode="")]
    else:
        sets = {"quick": shapes.GEMM_QUICK, "training": shapes.GEMM_TRAINING, "inference": shapes.GEMM_INFERENCE,
                "square": shapes.GEMM_SQUARE}
        chosen = _select(sets, params, lambda s: s.n)  # N is the batch in DeepBench's GEMMs
    cases: list[Case] = []
    seen: set[tuple] = set()
    for s in chosen:
        for precision in params["precisions"]:
            # int8 and fp8 (both forms) kernels take one layout (A row-major, B column-major): run each
            # shape once, as NT.
            op = "NT" if precision in FIXED_LAYOUT_PRECISIONS else s.op
            key = (s.m, s.n, s.k, op, s.mode, precision)
            if key in seen:
                continue
            seen.add(key)
            label = s.label if op == s.op else shapes.GemmShape(s.m, s.n, s.k, op, mode=s.mode).label
            cases.append(Case(params={**params, "m": s.m, "n": s.n, "k": s.k, "op": op, "dtype": precision},
                              precision=precision, shape=label, mode=s.mode))
    return cases


GEMM = WorkloadSpec(
    name="gemm",
    description="Dense GEMM D = A·B over DeepBench's shapes, transposes and precisions (int8, fp8 and fp8_fast, "
                "fp8 with fast accumulation, in their one layout, NT); seconds per GEMM, FLOP/s = 2·M·N·K / t of "
                "the requested shape (int8/fp8 padding is not counted), checked against a float64 reference.",
    entry="sixdim.workloads.kernels.gemm:run",
    params=(
        Param("set", str, "shape set: quick, DeepBench's training or inference set, full (both), or square "
              "(8192³)", "quick", "quick", choices=GEMM_SETS),
        Param("precisions", str, "precisions to run", list(PRECISIONS), list(PRECISIONS), choices=PRECISIONS,
              many=True),
        SCALE,
        Param("m", int, "explicit shape instead of the set: rows of A and D", 0, 0, minimum=0),
        Param("n", int, "explicit shape: columns of B and D", 0, 0, minimum=0),
        Param("k", int, "explicit shape: columns of A, rows of B", 0, 0, minimum=0),
        Param("op", str, "explicit shape's transposes (DeepBench's a_t, b_t)", "NN", "NN", choices=("NN", "TN", "NT")),
        MAX_BATCH, LATENCY_SAMPLES,
    ) + TIMING_PARAMS + (SELF_TEST, SLOWDOWN),
    expander=_gemm_cases,
    figures=_KERNEL_FIGURES + ("flops", "flop_per_joule") + _LATENCY_FIGURES,
    peak_kind="flops",
    shapes_help=f"square: 8192³; quick: {len(shapes.GEMM_QUICK)} shapes; "
                f"training: DeepBench's {len(shapes.GEMM_TRAINING)} "
                f"(NN, TN, NT); inference: DeepBench's {len(shapes.GEMM_INFERENCE)} server shapes",
)



def _conv_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    sets = {"quick": shapes.CONV_QUICK, "training": shapes.CONV_TRAINING, "inference": shapes.CONV_INFERENCE,
            "sentinel": shapes.CONV_SENTINEL}
    cases = []
    for s in _select(sets, params, lambda s: s.n):
        passes = [p for p in (("forward", "backward_data", "backward_weight") if s.mode == "training"
                              else ("forward",)) if p in params["passes"]]
        for layout in params["layouts"]:
            for precision in params["precisions"]:
                for kernel_pass in passes:
                    case_params = {**params, "w": s.w, "h": s.h, "c": s.c, "n": s.n, "k": s.k, "s": s.s, "r": s.r,
                                   "pad_w": s.pad_w, "pad_h": s.pad_h, "stride_w": s.stride_w,
                                   "stride_h": s.stride_h, "layout": layout, "dtype": precision, "pass": kernel_pass}
                    cases.append(Case(case_params, precision, f"{s.label},layout={layout}", s.mode, kernel_pass))
    return cases


CONV = WorkloadSpec(
    name="conv",
    description="2-D convolution over DeepBench's NCHW shapes (and channels-last): forward, backward-data and "
                "backward-weight timed apart; FLOP/s = 2·N·K·P·Q·C·R·S / t.",
    entry="sixdim.workloads.kernels.conv:run",
    params=(
        Param("set", str, "shape set: quick, DeepBench's training or inference set, full (both), or sentinel "
              "(one ResNet 3x3 training shape)", "quick", "quick", choices=SENTINEL_SETS),
        Param("precisions", str, "precisions to run", list(FLOAT_PRECISIONS), list(FLOAT_PRECISIONS),
              choices=FLOAT_PRECISIONS, many=True),
        Param("layouts", str, "memory layouts", ["nchw", "channels_last"], ["nchw", "channels_last"],
              choices=("nchw", "channels_last"), many=True),
        Param("passes", str, "passes to time (an inference shape has only forward)", list(CONV_PASSES),
              list(CONV_PASSES), choices=CONV_PASSES, many=True),
        SCALE, MAX_BATCH, LATENCY_SAMPLES,
    ) + TIMING_PARAMS + (SELF_TEST,),
    expander=_conv_cases,
    figures=_KERNEL_FIGURES + ("flops", "flop_per_joule") + _LATENCY_FIGURES,
    peak_kind="flops",
    shapes_help=f"sentinel: 1 shape; quick: {len(shapes.CONV_QUICK)} shapes; "
                f"training: DeepBench's {len(shapes.CONV_TRAINING)} "
                f"(forward, backward-data, backward-weight each); inference: {len(shapes.CONV_INFERENCE)} (forward)",
)


def _rnn_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    sets = {"quick": shapes.RNN_QUICK, "training": shapes.RNN_TRAINING, "inference": shapes.RNN_INFERENCE,
            "sentinel": shapes.RNN_SENTINEL}
    return [Case({**params, "cell": s.cell, "hidden": s.hidden, "batch": s.batch, "steps": s.steps,
                  "dtype": precision, "pass": kernel_pass}, precision, s.label, s.mode, kernel_pass)
            for s in _select(sets, params, lambda s: s.batch) for precision in params["precisions"]
            for kernel_pass in (("forward", "backward") if s.mode == "training" else ("forward",))
            if kernel_pass in params["passes"]]


RNN = WorkloadSpec(
    name="rnn",
    description="Recurrent layers by DeepBench's rules (vanilla ReLU, LSTM, GRU): input projection outside the "
                "timed region, backward computes weight gradients only.",
    entry="sixdim.workloads.kernels.rnn:run",
    params=(
        Param("set", str, "shape set: quick, DeepBench's training or inference set, full (both), or sentinel "
              "(one LSTM training layer)", "quick", "quick", choices=SENTINEL_SETS),
        Param("precisions", str, "precisions to run", ["fp32", "bf16"], list(FLOAT_PRECISIONS),
              choices=FLOAT_PRECISIONS, many=True),
        Param("passes", str, "passes to time (an inference layer has only forward)", list(RNN_PASSES),
              list(RNN_PASSES), choices=RNN_PASSES, many=True),
        SCALE, MAX_BATCH, LATENCY_SAMPLES,
    ) + TIMING_PARAMS + (SELF_TEST,),
    expander=_rnn_cases,
    figures=_KERNEL_FIGURES + ("flops", "flop_per_joule") + _LATENCY_FIGURES,
    peak_kind="flops",
    shapes_help=f"sentinel: 1 layer; quick: {len(shapes.RNN_QUICK)} layers; "
                f"training: DeepBench's {len(shapes.RNN_TRAINING)} "
                f"(forward and backward); inference: {len(shapes.RNN_INFERENCE)} (forward)",
)


def _sparse_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    name = "quick" if params["set"] == "quick" else "inference"  # DeepBench has only sparse inference shapes
    chosen = _select({"quick": shapes.SPARSE_QUICK, "inference": shapes.SPARSE_INFERENCE}, {**params, "set": name},
                     lambda s: s.n)
    return [Case({**params, "m": s.m, "n": s.n, "k": s.k, "sparsity": s.sparsity, "dtype": "fp32"}, "fp32",
                 s.label, s.mode) for s in chosen]


SPARSE_GEMM = WorkloadSpec(
    name="sparse_gemm",
    description="Sparse GEMM (CSR weights at 90% and 95% sparsity) over DeepBench's sparse inference shapes; "
                "time, FLOP/s of the nonzeros, and speedup over the same GEMM dense.",
    entry="sixdim.workloads.kernels.sparse_gemm:run",
    params=(set_param("shape set: quick, or DeepBench's inference set (training and full mean the same)"),
            SCALE, MAX_BATCH, LATENCY_SAMPLES) + TIMING_PARAMS + (SELF_TEST,),
    expander=_sparse_cases,
    figures=_KERNEL_FIGURES + ("flops", "flop_per_joule", "speedup") + _LATENCY_FIGURES,
    shapes_help=f"quick: {len(shapes.SPARSE_QUICK)} shapes; inference: DeepBench's {len(shapes.SPARSE_INFERENCE)}",
)


def _bandwidth_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    return [Case({**params, "direction": d}, "", f"size={params['size_bytes']}", "", d) for d in params["directions"]]


MEMORY_BANDWIDTH = WorkloadSpec(
    name="memory_bandwidth",
    description="Copy bandwidth in bytes/s: device-to-device (counts read + write), host-to-device and "
                "device-to-host (pinned host memory).",
    entry="sixdim.workloads.kernels.bandwidth:run",
    params=(
        Param("directions", str, "copies to time", ["d2d", "h2d", "d2h"], ["d2d", "h2d", "d2h"],
              choices=("d2d", "h2d", "d2h"), many=True),
        # 256 MiB on a GPU: read and written, 4x the largest L2 of the peaks table (B200, 126 MB), so the
        # copy streams from HBM; 1 GiB cost 13 s a direction on the H100 for the same plateau
        Param("size_bytes", int, "bytes per copy", 64 * 2**20, 256 * 2**20, minimum=1),
    ) + TIMING_PARAMS + (SELF_TEST,),
    expander=_bandwidth_cases,
    figures=("seconds", "bytes_per_second", "seconds_iqr_ratio", "max_relative_error"),
    peak_kind="bandwidth",
)


def _latency_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    return [Case({**params, "mode_of_launch": kind}, "", "elements=1", "", kind) for kind in params["kinds"]]


LAUNCH_LATENCY = WorkloadSpec(
    name="launch_latency",
    description="Kernel launch latency: host time per launch of a one-element kernel (launch), and per "
                "launch-and-synchronize (round_trip).",
    entry="sixdim.workloads.kernels.latency:run",
    params=(
        Param("kinds", str, "what to time", ["launch", "round_trip"], ["launch", "round_trip"],
              choices=("launch", "round_trip"), many=True),
        Param("launches_per_round", int, "launches timed together in each round", 2000, 10000, minimum=1),
        Param("rounds", int, "timed rounds; the figure is their DeepSpark mean", 5, 5, minimum=3),
    ),
    expander=_latency_cases,
    figures=("seconds", "seconds_iqr_ratio", "max_relative_error"),
    # launches per round change how far a round's one synchronisation is amortised: part of the figure
    label_params=("launches_per_round",),
)


def _allreduce_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    sizes = shapes.ALLREDUCE_QUICK if params["set"] == "quick" else shapes.ALLREDUCE_FLOATS
    ranks = f",ranks={params['ranks']}" if device_type == "cpu" else ""
    return [Case({**params, "floats": shapes.scale(f, params["scale"])}, "fp32",
                 f"floats={shapes.scale(f, params['scale'])}{ranks}", "training", "all_reduce")
            for f in sizes]


ALLREDUCE = WorkloadSpec(
    name="allreduce",
    description="All-reduce over every local GPU (NCCL) or CPU processes (gloo) at DeepBench's sizes: time, "
                "algbw and busbw as nccl-tests defines them. Runs once per host, from the first GPU's job.",
    entry="sixdim.workloads.kernels.allreduce:run",
    params=(
        set_param("sizes: quick (2), or DeepBench's 7 (training, inference and full mean the same)"),
        SCALE,
        Param("ranks", int, "CPU only: gloo processes (on GPUs every local GPU is a rank)", 2, 2, minimum=2),
        Param("iterations", int, "at least this many all-reduces per timed round", 5, 20, minimum=1),
        Param("min_round_seconds", float, "each timed round repeats the all-reduce, sized from the warm-up's rate, "
              "until it lasts about this long (a fixed count left launch and synchronisation about 5% of a "
              "100k-float round on an H100)", 0.05, 0.2, minimum=0.0),
        Param("rounds", int, "timed rounds; the figure is their DeepSpark mean", 5, 5, minimum=3),
        SELF_TEST,
    ),
    expander=_allreduce_cases,
    figures=("seconds", "bytes_per_second", "bus_bytes_per_second", "seconds_iqr_ratio", "max_relative_error"),
    # all-reduces per round amortise the round's synchronisation, as launch_latency's launches do
    label_params=("iterations",),
    shapes_help=f"quick: {shapes.ALLREDUCE_QUICK} floats; full: DeepBench's {shapes.ALLREDUCE_FLOATS}",
    scope="host",
    runs_in_ranks=True,
)

def _check_quality_params(params: dict[str, Any]) -> None:
    """A target that cannot be compared with what is reported, or a metric with no name, is a
    configuration error to report before the command runs, not a failed run hours later."""
    import math

    target = params["target_accuracy"]
    if not math.isfinite(target):
        raise ParamError(f"workload 'command' parameter 'target_accuracy': expected a finite number, got {target!r}")
    if target > 1 and params["accuracy_unit"] in ("ratio", "percent"):
        raise ParamError(f"workload 'command' parameter 'target_accuracy': {target:g} is above 1, but accuracies are "
                         "reported as ratios: give it as a ratio (e.g. 0.759 for 75.9%)")
    if not params["quality_metric"].strip():
        raise ParamError("workload 'command' parameter 'quality_metric': expected a name, "
                         "e.g. \"top1\" or \"eval_loss\"")


def _command_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    import os
    import re

    argv = params["argv"]
    if not argv and not params["log_files"]:
        raise ParamError("workload 'command': parameter 'argv' is required: the command as a list, "
                         "e.g. argv = [\"python\", \"train.py\"] (or, to read a finished run's files instead, "
                         "log_files = [\"runs/\"])")
    if argv and params["shell"] and len(argv) != 1:
        raise ParamError("workload 'command': with shell = true, argv must be one string (the shell command line)")
    for key in ("throughput_regex", "accuracy_regex", "time_regex"):
        try:
            re.compile(params[key])
        except re.error as exc:
            raise ParamError(f"workload 'command' parameter {key!r}: not a valid regular expression: {exc}") from None
    for pair in params["env"]:
        if "=" not in pair or pair.startswith("="):
            raise ParamError(f"workload 'command' parameter 'env': expected KEY=VALUE items, got {pair!r}")
    if not params["formats"] and not (params["throughput_regex"] or params["accuracy_regex"]):
        raise ParamError("workload 'command': nothing to read in its output: formats is empty and neither "
                         "throughput_regex nor accuracy_regex is set")
    _check_file_params(params)
    _check_quality_params(params)
    if argv:
        label = params["label"] or (_shell_program(argv[0]) if params["shell"] else os.path.basename(argv[0])
                                    ) + "@" + _command_digest(params)
    else:
        label = params["label"] or os.path.basename(params["log_files"][0].rstrip("/")) or "log_files"
    return [Case(dict(params), "", label, "training", "command")]




def _check_file_params(params: dict[str, Any]) -> None:
    """Tags name what log files hold: without log_files, or without a format that reads files, they
    would select nothing."""
    if any(not entry.strip() for entry in params["log_files"]):
        raise ParamError("workload 'command' parameter 'log_files': an entry is empty")
    if params["log_files"] and not set(params["formats"]) & set(COMMAND_FILE_FORMATS):
        raise ParamError("workload 'command' parameter 'log_files': formats names none of the file formats "
                         f"({', '.join(COMMAND_FILE_FORMATS)}): the files could not be read")
    tags = [key for key in ("quality_tags", "throughput_tag") if params[key]]
    if tags and not params["log_files"]:
        raise ParamError(f"workload 'command' parameter {tags[0]!r}: it names a tag of the run's log files, "
                         "but log_files is empty")


def _command_digest(params: dict[str, Any]) -> str:
    """8 hex digits of what runs (argv, shell, cwd, env, secrets redacted): two commands of one program
    get series of their own without their arguments in a label, and a rotated token keeps its series."""
    import hashlib
    import json

    from sixdim.core.redact import redact_params

    shown = redact_params({key: params[key] for key in ("argv", "shell", "cwd", "env")})
    return hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:8]


def _shell_program(line: str) -> str:
    """The default label of a shell command line: its program's name, after the leading ``NAME=VALUE``
    assignments (``HF_TOKEN=... python train.py`` is ``python``: a label is exported and kept, and an
    assignment is where a secret would be).  ``sh`` where there is no program, or the line does not
    parse (an unterminated quote: the shell would refuse it too)."""
    import os
    import re
    import shlex

    try:
        words = shlex.split(line)
    except ValueError:
        return "sh"
    program = next((w for w in words if not re.match(r"[A-Za-z_][A-Za-z0-9_]*=", w)), "")
    return os.path.basename(program) or "sh"


COMMAND = WorkloadSpec(
    name="command",
    description="Any framework: run a training command, sample power and memory while it runs, and read its "
                "AI-Rank, MLPerf (training or inference), Hugging Face, MindSpore or regex-matched output, and the "
                "TensorBoard, trainer_state.json or Lightning metrics.csv files it writes, into speed, quality (each "
                "metric's final value, named, with its direction), time to train and latency.",
    entry="sixdim.workloads.logs.command:run",
    params=(
        Param("argv", str, "the command, as a list of arguments (required, unless log_files is set: then without "
              "argv only the files are read, a finished run replayed)", [], [], many=True, allow_empty=True),
        Param("shell", bool, "run argv[0] as a shell command line instead", False, False),
        Param("cwd", str, "working directory (default: the agent's)", "", ""),
        Param("env", str, "extra environment, KEY=VALUE items", [], [], many=True, allow_empty=True),
        Param("formats", str, "log formats to read: of the output's lines (ai_rank, mlperf, hf_trainer, mindspore, "
              "keras, megatron, deepspeed) and of log_files (tensorboard, mindspore_summary, hf_trainer's "
              "trainer_state.json, lightning_csv); empty: only the regexes",
              list(COMMAND_FORMATS), list(COMMAND_FORMATS), choices=COMMAND_FORMATS, many=True, allow_empty=True),
        Param("log_files", str, "files the run writes, read after it ends: paths or globs, relative to cwd (a folder "
              "is searched for TensorBoard event files, MindSpore summaries, trainer_state.json and metrics.csv)",
              [], [], many=True,
              allow_empty=True),
        Param("quality_tags", str, "which TensorBoard tags, metrics.csv columns or trainer_state.json keys are "
              "quality metrics (default: the evaluations' metrics, e.g. val_acc, eval/loss, eval_accuracy)", [], [],
              many=True, allow_empty=True),
        Param("throughput_tag", str, "which tag, column or key is the throughput in samples/s (default: the one "
              "named like samples per second, e.g. train_samples_per_second)", "", ""),
        Param("batch_size", int, "samples per step, to turn MindSpore's per step time into samples/s (0: the time "
              "per step is kept as a detail only)", 0, 0, minimum=0),
        Param("throughput_regex", str, "regex whose first group is a throughput in samples/s", "", ""),
        Param("accuracy_regex", str, "regex whose first group is an evaluation of the quality metric (an accuracy, or "
              "e.g. a loss with higher_is_better = false)", "", ""),
        Param("time_regex", str, "regex whose first group (or whole match) is a line's own timestamp: seconds "
              "since the epoch, or a date such as 2023-05-12 10:11:12; evaluations are then timed by the log's "
              "clock, not by when sixdim read the line (a replayed log). Empty: the common formats are "
              "recognised ([2023-05-12 10:11:12,345], 2023-05-12 10:11:12, ISO 8601 with T and a zone, glog's "
              "I0512 10:11:12.345678)", "", ""),
        Param("quality_metric", str, "name of the quality metric accuracy_regex, AI-Rank's eval_accuracy and an MLPerf "
              "log of an unknown benchmark report (the exported metric label)", "accuracy", "accuracy"),
        Param("higher_is_better", bool, "that metric's direction: false for a loss, perplexity or error rate "
              "(MLPerf's known benchmarks have their own)", True, True),
        Param("accuracy_unit", str, "how that metric is logged: ratio (0-1), percent (0-100, reported as a ratio), "
              "score (its own scale: never rescaled, never the accuracy figure), or auto (a value with a % sign is "
              "percent; a higher-is-better series within [0, 1] a ratio, within [0, 100] percent; else a score)",
              "auto", "auto", choices=UNITS),
        Param("target_accuracy", float, "quality value that ends time to train, for logs that do not say, in the "
              "reported unit (a ratio for accuracies); met at or above it, or at or below with higher_is_better = "
              "false; 0: none", 0.0, 0.0, minimum=0.0),
        Param("warmup_throughputs", int, "leading throughput readings to skip as warm-up before DeepSpark's speed "
              "rule", 0, 0, minimum=0),
        Param("label", str, "the series' shape label (default: the program's name and 8 hex digits of the "
              "command: program@digits)", "", ""),
    ),
    expander=_command_cases,
    figures=("seconds", "samples_per_second", "accuracy", "time_to_train_seconds", "latency_p50_seconds",
             "latency_p90_seconds", "latency_p99_seconds", "quality"),
    label_params=("target_accuracy",),  # time to train is the time to reach it
    # how the run's output and files are read, not what runs (argv, shell, cwd and env are in the label)
    method_params=frozenset({"formats", "log_files", "quality_tags", "throughput_tag", "batch_size",
                             "throughput_regex", "accuracy_regex", "time_regex", "quality_metric", "higher_is_better",
                             "accuracy_unit", "warmup_throughputs"}),
    uses_torch=False,
)

MODELS = ("resnet50", "bert_large", "dlrm", "gpt", "lstm")


def _model_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    def batch(mode: str) -> str:
        """The batch where a suite sets one: ``batch`` for both modes, ``inference_batch`` for inference."""
        if params["batch"]:
            return f",batch={params['batch']}"
        if mode == "inference" and params["inference_batch"] != spec.param("inference_batch").default(device_type):
            return f",batch={params['inference_batch']}"
        return ""

    return [Case({**params, "model": model, "precision": precision, "mode": mode}, precision,
                 f"model={model},size={params['size']}{batch(mode)}", mode,
                 "train_step" if mode == "training" else "forward")
            for model in params["models"] for mode in params["modes"] for precision in params["precisions"]]


MODEL = WorkloadSpec(
    name="model",
    description="Training steps (or inference) of ResNet-50, BERT-large encoder layers, a DLRM-style model, a "
                "GPT-style decoder and an LSTM on synthetic data: samples/s by the DeepSpark rule over 5 "
                "steady-state windows; power (and samples per joule) from a power phase after them; memory.",
    entry="sixdim.workloads.models.model:run",
    params=(
        Param("models", str, "models to run", list(MODELS), list(MODELS), choices=MODELS, many=True),
        Param("precisions", str, "fp32, and automatic mixed precision (bf16, or fp16 with loss scaling)",
              ["fp32", "amp"], ["fp32", "amp"], choices=("fp32", "amp"), many=True),
        Param("modes", str, "training steps, and/or inference", ["training", "inference"],
              ["training", "inference"], choices=("training", "inference"), many=True),
        Param("size", str, "full: the published architecture; small: the same structure, CPU-sized",
              "small", "full", choices=("small", "full")),
        Param("batch", int, "batch size (0: the model's default for training, inference_batch for inference)",
              0, 0, minimum=0),
        Param("inference_batch", int, "inference batch size (DeepBench: up to 4 in the data centre)", 1, 4,
              minimum=1),
        Param("warmup_steps", int, "steps discarded before timing", 3, 10, minimum=0),
        Param("steps_per_window", int, "steps in each timed window", 3, 20, minimum=1),
        Param("windows", int, "timed windows (DeepSpark: 5, drop the fastest and slowest)", 5, 5, minimum=3),
        Param("latency_samples", int, "inference: single synchronized steps timed for p50/p99", 20, 200, minimum=0),
        Param("seed", int, "seed of the model's weights and the synthetic data", 0, 0),
        Param("power_seconds", float, "power phase after the windows: seconds of further steps with the energy "
              "counter read at both ends (under 1 s: no power reported)", 3.0, 3.0, minimum=0.0),
    ),
    expander=_model_cases,
    figures=("samples_per_second", "seconds", "seconds_iqr_ratio", "tokens_per_second", "power_watts",
             "energy_joules", "samples_per_joule") + _LATENCY_FIGURES,
)


def _linearity_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    base = f"model={params['model']},size={params['size']}"
    if params["nnodes"] > 1:  # node linearity: this node alone, then all nodes together
        if not params["rdzv_endpoint"]:
            raise ParamError("workload 'linearity': nnodes > 1 needs rdzv_endpoint (HOST:PORT of the rendezvous)")
        per_node = params["nproc_per_node"]
        return [Case({**params, "count": per_node, "nodes": nodes, "linearity_count": nodes}, params["precision"],
                     f"{base},nodes={nodes},ranks_per_node={per_node}", "training", "ddp_nodes")
                for nodes in (1, params["nnodes"])]
    counts = sorted(set(params["counts"]) | {1})  # the single-device run comes first: it is the reference
    return [Case({**params, "count": count, "nodes": 1, "linearity_count": count}, params["precision"],
                 f"{base},count={count}", "training", "ddp") for count in counts]


LINEARITY = WorkloadSpec(
    name="linearity",
    description="Card linearity (DeepSpark): one model's DDP training on 1 and N devices (NCCL on GPUs, gloo "
                "processes on a CPU); (throughput_N / N) / throughput_1, per card count.",
    entry="sixdim.workloads.models.linearity:run",
    params=(
        Param("model", str, "the model trained", "lstm", "resnet50", choices=MODELS),
        Param("size", str, "full or small (as for the model workload)", "small", "full", choices=("small", "full")),
        Param("precision", str, "fp32 or amp", "fp32", "amp", choices=("fp32", "amp")),
        Param("counts", int, "card counts to measure (1 is always added); on GPUs, up to the host's GPUs",
              [1, 2], [1, 2, 4, 8], many=True, minimum=1),
        Param("batch", int, "per-device batch (0: the model's default)", 0, 0, minimum=0),
        Param("inference_batch", int, "unused by linearity (training only)", 1, 1, minimum=1),
        Param("warmup_steps", int, "steps discarded before timing", 3, 10, minimum=0),
        Param("steps_per_window", int, "steps in each timed window", 5, 20, minimum=1),
        Param("windows", int, "timed windows (DeepSpark: 5)", 5, 5, minimum=3),
        Param("seed", int, "seed of the weights and data (the same on every rank)", 0, 0),
        Param("nnodes", int, "node linearity: nodes taking part (each runs sixdim run with the same values)",
              1, 1, minimum=1),
        Param("nproc_per_node", int, "node linearity: ranks on each node (its GPUs)", 1, 1, minimum=1),
        Param("rdzv_endpoint", str, "node linearity: HOST:PORT of the c10d rendezvous (torchrun's)", "", ""),
        Param("rdzv_id", str, "node linearity: a name shared by the nodes of one run", "sixdim", "sixdim"),
        Param("rdzv_timeout", int, "node linearity: seconds to wait for all nodes", 300, 300, minimum=1),
    ),
    expander=_linearity_cases,
    figures=("samples_per_second", "linearity_ratio"),
    label_params=("batch",),
    # nproc_per_node is in the node-linearity label where it is used; inference_batch is unused
    method_params=frozenset({"nproc_per_node", "inference_batch", "rdzv_endpoint", "rdzv_id", "rdzv_timeout"}),
    scope="host",
    runs_in_ranks=True,
)


def _convergence_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    shape = f"dataset=digits,model=mlp{params['hidden']},target={params['target_accuracy']:g},runs={params['runs']}"
    return [Case(dict(params), params["precision"], shape, "training", "convergence")]


CONVERGENCE = WorkloadSpec(
    name="convergence",
    description="Train an MLP on scikit-learn's bundled digits to a target accuracy, several seeded runs: "
                "accuracy, AI-Rank Time2train, throughput and DeepSpark stability.",
    entry="sixdim.workloads.models.convergence:run",
    params=(
        Param("target_accuracy", float, "test accuracy a run must reach", 0.95, 0.95, minimum=0.0),
        Param("epochs", int, "epochs per run (the converged value is the last epoch's accuracy)", 30, 30, minimum=1),
        Param("runs", int, "complete runs (DeepSpark stability needs 5)", 5, 5, minimum=1),
        Param("seed", int, "seed of the first run; run i uses seed + i", 0, 0),
        Param("deterministic", bool, "deterministic algorithms, so identical GPUs give identical bits", True, True),
        Param("precision", str, "fp32, or automatic mixed precision", "fp32", "fp32", choices=("fp32", "amp")),
        Param("hidden", int, "hidden units of the MLP", 128, 128, minimum=1),
        Param("batch_size", int, "training batch size", 64, 64, minimum=1),
        Param("learning_rate", float, "Adam learning rate", 1e-2, 1e-2, minimum=0.0),
    ),
    expander=_convergence_cases,
    figures=("accuracy", "samples_per_second", "seconds", "stability_ratio", "time_to_train_seconds"),
    label_params=("epochs", "deterministic", "batch_size", "learning_rate"),
)

ONNX_PRECISIONS = ("auto", "fp32", "tf32", "fp16")


def _short_provider(name: str) -> str:
    return name[:-len("ExecutionProvider")] if name.endswith("ExecutionProvider") and name != "ExecutionProvider" \
        else name


def _onnx_cases(spec: WorkloadSpec, params: dict[str, Any], device_type: DeviceType) -> list[Case]:
    """One case per batch size (latency batches, then throughput batches). A user's file that can
    be read now is checked now: a dynamic dimension no parameter sets is a ParamError here, not a
    failed run later (one that cannot be read yet is the worker's to report)."""
    import os

    from sixdim.workloads.onnx import info as onnx_info
    from sixdim.workloads.onnx import inputs as onnx_inputs

    model = params["model"].strip()
    try:
        dims = onnx_inputs.parse_dims(params["dims"])
    except onnx_inputs.DimError as exc:
        raise ParamError(f"workload 'onnx' parameter 'dims': {exc}") from None
    batches = list(dict.fromkeys(params["latency_batches"] + params["throughput_batches"]))
    if not batches:
        raise ParamError("workload 'onnx': latency_batches and throughput_batches are both empty: no batch to run")
    settings = "ep=" + "+".join(_short_provider(p) for p in params["providers"])
    if params["graph_optimization"] != "all":
        settings += f",opt={params['graph_optimization']}"
    if params["intra_op_threads"] or params["inter_op_threads"]:
        settings += f",threads={params['intra_op_threads']}x{params['inter_op_threads']}"
    if params["io_binding"]:
        settings += ",io=binding"
    sequence = f",seq={params['sequence_length']}" if params["sequence_length"] else ""
    if model in ONNX_MODELS:
        if dims:
            raise ParamError("workload 'onnx' parameter 'dims': only for a model file; sixdim's own models take "
                             "their batch sizes and sequence_length")
        precision = "fp32" if params["precision"] == "auto" else params["precision"]
        prefix = f"model={model},size={params['size']}"
        sequence = "" if model == "resnet50" else sequence
        extra: dict[str, Any] = {}
    else:
        if "/" not in model and not model.endswith(".onnx"):
            raise ParamError(f"workload 'onnx' parameter 'model': expected one of {', '.join(ONNX_MODELS)}, or the "
                             f"path of an .onnx file, got {model!r}")
        path = os.path.abspath(os.path.expanduser(model))
        detected = ""
        try:
            info = onnx_info.read(path)
        except (OSError, ValueError):  # OnnxInfoError is a ValueError
            info = None  # not there yet, or not readable by the daemon: the worker says what is wrong
        if info is not None:
            try:
                onnx_inputs.resolve_shapes(info.inputs, batches[0],
                                           params["sequence_length"] or onnx_inputs.DEFAULT_SEQUENCE_LENGTH, dims)
            except onnx_inputs.DimError as exc:
                raise ParamError(f"workload 'onnx' model {path!r}: {exc}") from None
            detected = onnx_info.precision_of(info.outputs)
        precision = detected if params["precision"] == "auto" else params["precision"]
        prefix = f"model={params['label'] or os.path.basename(path)}"
        sequence += "".join(f",{k}={v}" for k, v in sorted(dims.items()))
        extra = {"model": path, "detected_precision": detected}
    return [Case({**params, **extra, "batch": b}, precision, f"{prefix},batch={b}{sequence},{settings}", "inference",
                 "forward") for b in batches]


ONNX = WorkloadSpec(
    name="onnx",
    description="An ONNX model served by ONNX Runtime on the execution providers you name (the onnx extra): "
                "sixdim's ResNet-50, BERT-large layers or GPT decoder (exported once into a cache), or your own "
                ".onnx file. Per batch size: latency p50/p90/p99 of single requests, samples/s, power, energy "
                "per inference and memory, with outputs checked against PyTorch or a CPU run.",
    entry="sixdim.workloads.onnx.workload:run",
    params=(
        Param("model", str, f"one of sixdim's models ({', '.join(ONNX_MODELS)}: exported on first use), or the path "
              "of an .onnx file", "resnet50", "resnet50"),
        Param("size", str, "sixdim's models: full (the published architecture) or small (CPU-sized)", "small", "full",
              choices=("small", "full")),
        Param("precision", str, "auto: fp32 for sixdim's models, a file's output type for a file; fp32 (IEEE: TF32 "
              "off), tf32 (TF32 allowed on GPUs), fp16 (sixdim's models exported in fp16; GPU providers)", "auto",
              "auto", choices=ONNX_PRECISIONS),
        Param("latency_batches", int, "batch sizes of the latency cases (DeepBench: up to 4 in a data centre, 1 on "
              "devices)", [1, 2, 4], [1, 2, 4], many=True, minimum=1, allow_empty=True),
        Param("throughput_batches", int, "larger batch sizes of the throughput cases", [8], [32, 128], many=True,
              minimum=1, allow_empty=True),
        Param("sequence_length", int, "size of sequence dimensions (0: the model's own, 32 small, BERT 128 and GPT "
              "1024 full; 128 for a file)", 0, 0, minimum=0),
        Param("dims", str, "sizes of a file's other dynamic dimensions, NAME=SIZE (or INPUT:AXIS=SIZE for an "
              "unnamed one)", [], [], many=True, allow_empty=True),
        Param("vocab_size", int, "integer inputs (token ids) are drawn from [0, vocab_size) (0: the model's "
              "vocabulary; 1000 for a file)", 0, 0, minimum=0),
        Param("providers", str, "ONNX Runtime execution providers, in order of preference; each must be "
              "active, and one the machine lacks, or a node falling back to the CPU (unless CPUExecutionProvider "
              "is named), makes the case unsupported", ["CPUExecutionProvider"],
              ["CUDAExecutionProvider"], many=True),
        Param("graph_optimization", str, "ONNX Runtime's graph optimisation level", "all", "all",
              choices=("disable", "basic", "extended", "all")),
        Param("intra_op_threads", int, "threads inside an operator (0: ONNX Runtime's default, one per physical "
              "core)", 0, 0, minimum=0),
        Param("inter_op_threads", int, "threads across operators (0: ONNX Runtime's default)", 0, 0, minimum=0),
        Param("io_binding", bool, "bind inputs (copied once) and outputs on the device, so host copies are not "
              "timed", False, False),
        Param("latency_samples", int, "single requests timed one by one for p50/p90/p99 (0: none)", 50, 200,
              minimum=0),
    ) + TIMING_PARAMS + (
        Param("tolerance", float, "largest max relative error of the outputs (0: the precision's: fp32 1e-3, tf32 "
              "2e-2, fp16 5e-2)", 0.0, 0.0, minimum=0.0),
        Param("opset", int, "ONNX opset of sixdim's exports (0: torch's default)", 0, 0, minimum=0),
        Param("cache_dir", str, "folder of sixdim's exports and TensorRT engines (default: "
              "$XDG_CACHE_HOME/sixdim/onnx, or ~/.cache/sixdim/onnx)", "", ""),
        Param("label", str, "a file's name in the shape label (default: the file's name)", "", ""),
        Param("build_seconds", float, "time a TensorRT engine build may take, outside the case's timeout (the "
              "engine is cached, so only a run that builds it pays; at most 3600)", 1800.0, 1800.0,
              minimum=1.0, maximum=3600.0),
        Param("seed", int, "seed of sixdim's models' weights and of the synthetic inputs", 0, 0),
        SELF_TEST,
    ),
    expander=_onnx_cases,
    figures=_KERNEL_FIGURES + ("samples_per_second", "samples_per_joule", "latency_p90_seconds", "memory_bytes")
    + _LATENCY_FIGURES,
    label_params=("opset",),
    # the token ids drawn, where compiled engines are cached, how long a build may take, the check's bound
    method_params=frozenset({"vocab_size", "cache_dir", "build_seconds", "tolerance"}),
    shapes_help="one case per batch size: latency_batches, then throughput_batches; the label names the model "
                "(and size, or the file), batch, sequence length and dims when set, and the providers",
)

WORKLOADS: dict[str, WorkloadSpec] = {spec.name: spec for spec in (
    GEMM, CONV, RNN, SPARSE_GEMM, MEMORY_BANDWIDTH, LAUNCH_LATENCY, ALLREDUCE, COMMAND, CONVERGENCE, MODEL, LINEARITY,
    ONNX)}

SHORT_TIMING: dict[str, Any] = {"warmup_seconds": 0.1, "min_round_seconds": 0.05}
"""The tiers' timing: the CPU's defaults on every device.  Five rounds of at least 50 ms each still
time dozens of calls of the frequent tier's kernels on a GPU; a GPU's default (0.5 s of warm-up,
rounds of 0.2 s) costs 1.15 s more per case, the price of the daily quick suite's precision."""

WATCH = {"power_seconds": 0.0, **SHORT_TIMING}
"""The frequent tier's cases: no power phase (the power tier measures power)."""

# Built-in suites: what `sixdim run --suite NAME` and a configured `preset` run.
SUITES: dict[str, list[tuple[str, dict[str, Any]]]] = {
    # The frequent tier of the default schedule (every 15 minutes): one case of each kind of kernel,
    # chosen for what a regression shows in per second of device time (docs/BENCHMARKS.md, the cost of
    # watching), without power phases.
    "frequent": [
        ("gemm", {"set": "square", "precisions": ["bf16"], **WATCH}),
        ("conv", {"set": "sentinel", "precisions": ["bf16"], "layouts": ["nchw"], "passes": ["forward"], **WATCH}),
        ("rnn", {"set": "sentinel", "precisions": ["fp32"], "passes": ["forward"], **WATCH}),
        ("memory_bandwidth", {"directions": ["d2d"], **WATCH}),
        ("launch_latency", {"kinds": ["launch"]}),
    ],
    # The power tier (every 6 hours): representative cases with their power phases (3 s each).
    "power": [
        ("gemm", {"set": "square", "precisions": ["bf16", "fp32"], **SHORT_TIMING}),
        ("conv", {"set": "sentinel", "precisions": ["bf16"], "layouts": ["nchw"], "passes": ["forward"],
                  **SHORT_TIMING}),
        ("rnn", {"set": "sentinel", "precisions": ["fp32"], "passes": ["forward"], **SHORT_TIMING}),
        ("sparse_gemm", {"set": "quick", **SHORT_TIMING}),
    ],
    "quick": [
        ("gemm", {"set": "quick", "precisions": ["bf16", "fp32"]}),
        # 8192³ in every precision, fp8_fast included: the case judged by its fraction of peak, and
        # fp8_fast is the form NVIDIA's fp8 peak describes (one more 8192³ case, a few seconds)
        ("gemm", {"set": "square"}),
        ("conv", {"set": "quick", "precisions": ["bf16", "fp32"], "layouts": ["nchw"]}),
        ("rnn", {"set": "quick", "precisions": ["fp32"]}),
        ("sparse_gemm", {"set": "quick"}),
        ("memory_bandwidth", {}),
        ("launch_latency", {}),
        ("allreduce", {"set": "quick"}),
    ],
    "full": [
        ("gemm", {"set": "full"}),
        ("conv", {"set": "full"}),
        ("rnn", {"set": "full"}),
        ("sparse_gemm", {"set": "full"}),
        ("memory_bandwidth", {}),
        ("launch_latency", {}),
        ("allreduce", {"set": "full"}),
    ],
    "inference": [
        ("gemm", {"set": "inference", "max_batch": 4, "latency_samples": 200,
                  "precisions": ["fp16", "int8", "fp8", "fp8_fast"]}),
        ("conv", {"set": "inference", "max_batch": 4, "latency_samples": 200, "layouts": ["nchw"],
                  "precisions": ["fp16", "fp32"]}),
        ("rnn", {"set": "inference", "max_batch": 4, "latency_samples": 200, "precisions": ["fp32", "fp16"]}),
        ("sparse_gemm", {"set": "inference", "max_batch": 4, "latency_samples": 200}),
        # ONNX Runtime, where the onnx extra is installed (elsewhere these cases are unsupported)
        ("onnx", {"model": "resnet50"}),
        ("onnx", {"model": "bert_large"}),
        ("onnx", {"model": "gpt"}),
    ],
    "training": [
        ("model", {}),
        ("convergence", {}),
        ("linearity", {}),
    ],
}


class UnknownWorkloadError(ParamError):
    """No workload has that name."""


def get(name: str) -> WorkloadSpec:
    """The spec of a workload by name; the error names the known ones."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkloadError(f"unknown workload {name!r} (known: {', '.join(sorted(WORKLOADS))})") from None
