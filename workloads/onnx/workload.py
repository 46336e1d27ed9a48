"""The ``onnx`` workload: an ONNX model served by ONNX Runtime, rated like every other workload.

One case is one batch size. The model is a file the user names, or one of sixdim's own
(:mod:`sixdim.workloads.onnx.export`, exported once into a cache). The session runs on exactly the
providers asked for (:mod:`sixdim.workloads.onnx.session`: a provider missing or not started, or a
node falling back to the CPU, is ``unsupported``), with inputs made from the model's declared shapes
and types (:mod:`sixdim.workloads.onnx.inputs`). TensorRT builds its engine (or loads it from the
cache) while the session is created, from profiles of the case's input shapes: before the warm-up,
outside the timed rounds (``session_create_seconds`` in the details). Then, as for every kernel:

- **Timing**: warm-up and calibration, then ``rounds`` timed rounds of back-to-back
  ``session.run`` calls (:func:`sixdim.workloads.measure.timing.time_rounds`), on the host clock:
  ``session.run`` returns only once its outputs are on the host (with IO binding, once they are
  synchronised), so what is timed includes the device's work and the copies a client pays for.
  ``seconds`` is the DeepSpark mean of the rounds, ``samples_per_second`` the DeepSpark mean of
  batch / round time.
- **Latency**: ``latency_samples`` single requests, each timed alone: p50, p90 and p99.
- **Power**: the power phase (:func:`sixdim.workloads.measure.timing.power_phase`), giving watts, joules and
  samples per joule (energy per inference in the details); on a GPU provider on the worker's GPU, with
  the runs queued on a thread so the GPU stays busy while the energy counter is read, and the GPU's busy
  share checked (:mod:`sixdim.workloads.onnx.power`).
- **Memory**: on a CPU the executor's peak resident memory of the worker; on a GPU what the worker
  process holds on the GPU (NVML) at the end of the case less what it held before the session:
  ONNX Runtime's arena and workspaces, which torch's allocator statistics cannot see.
- **Correctness**: sixdim's own models against the same model in PyTorch in float64 on the CPU
  (the first sample), a user's model against a CPU session with graph optimisations off (every
  output); max relative error against :data:`TOLERANCES`; a mismatch is ``incorrect``.

Imports torch and onnxruntime: the worker process only.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable
from typing import Any

from sixdim.workloads.context import RunContext, Unsupported, WorkloadOutput
from sixdim.workloads.onnx import ONNX_MODELS
from sixdim.workloads.onnx import inputs as onnx_inputs
from sixdim.workloads.onnx import session as onnx_session

TOLERANCES = {"fp64": 1e-6, "fp32": 1e-3, "tf32": 2e-2, "fp16": 5e-2, "bf16": 1e-1}
"""Largest max-relative-error of a whole model's output per precision. Looser than a kernel's
(:data:`sixdim.workloads.measure.correctness.TOLERANCES`): tens of layers, fused kernels and other convolution
algorithms each add their rounding. fp32 measured on the CPU provider: about 5e-7 (sixdim's
models against float64). A wrong kernel or weight gives errors of order 1."""
INTEGER_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")

_references: dict[str, Any] = {}
"""Reference outputs of sixdim's models' first sample, by model and input: computed once per worker."""


def is_own_model(model: str) -> bool:
    return model in ONNX_MODELS


def _export_precision(precision: str) -> str:
    """sixdim's models are exported (and their references built) in fp16 or fp32; tf32 is fp32 weights
    run with TF32 allowed."""
    return "fp16" if precision == "fp16" else "fp32"


def run(params: dict[str, Any], ctx: RunContext) -> WorkloadOutput:
    ort = onnx_session.import_runtime()
    providers = list(params["providers"])
    onnx_session.check_available(ort, providers)
    own = is_own_model(params["model"])
    precision = _precision(params, own)
    cache_dir = params["cache_dir"] or str(_default_cache_dir())
    details: dict[str, Any] = {**onnx_session.describe(ort), "requested_providers": providers}
    if own:
        path = _own_model_file(params, precision, cache_dir, ctx, details)
    else:
        path = params["model"]
        if not os.path.isfile(path):
            raise FileNotFoundError(f"model file {path!r} does not exist (or is not a file)")
    batch = params["batch"]
    infos = _declared_inputs(ort, str(path))  # before the session: TensorRT's profiles are made from them
    fixed = onnx_inputs.fixed_batch(infos)
    if fixed is not None and fixed[1] != batch:
        raise Unsupported(f"the model's input {fixed[0]!r} has a fixed batch of {fixed[1]}, not {batch}: run it "
                          f"with latency_batches = [{fixed[1]}] and throughput_batches = []")
    sequence = params["sequence_length"] or _default_sequence(params, own)
    shapes = onnx_inputs.resolve_shapes(infos, batch, sequence, onnx_inputs.parse_dims(params["dims"]))
    if sequence:
        details["sequence_length"] = sequence
    vocabulary = params["vocab_size"] or (_own_vocabulary(params) if own else onnx_inputs.DEFAULT_VOCABULARY)
    try:
        feeds = onnx_inputs.make_inputs(infos, shapes, vocabulary, params["seed"])
    except TypeError as exc:
        raise Unsupported(str(exc)) from None
    details.update(input_shapes={k: list(v) for k, v in shapes.items()}, model_file=str(path), batch=batch,
                   precision=precision)
    if any(info.element_type.startswith(("int", "uint")) for info in infos):
        details["vocab_size"] = vocabulary
    device_id = int(ctx.device.partition(":")[2] or 0)
    per_provider, engines = _provider_options(ort, providers, precision, device_id, cache_dir, str(path), infos,
                                              shapes, ctx, details)
    memory_before = _gpu_memory(ctx.device)

    def create() -> Any:  # TensorRT builds its engines here, before timing
        return onnx_session.create(ort, str(path), providers, lambda: onnx_session.session_options(ort, params),
                                   per_provider, feeds, details)

    if engines is not None and not engines[1]:  # an engine to build: its own time, not the case's timeout
        with ctx.one_off_build(params["build_seconds"], f"the TensorRT engine of {os.path.basename(str(path))}"):
            session = create()
    else:
        session = create()
    details["active_providers"] = list(session.get_providers())
    if engines is not None:
        _engine_origin(engines, details)
    call, fetch = _runner(ort, session, feeds, providers[0], device_id, params["io_binding"])
    names = [output.name for output in session.get_outputs()]
    return _measure(call, fetch, params, ctx, details, lambda outputs: _check(
        ort, params, own, precision, providers[0], str(path), feeds, outputs, names, details), memory_before)


def _declared_inputs(ort: Any, path: str) -> tuple[Any, ...]:
    """The model's declared inputs, read from the file (:mod:`sixdim.workloads.onnx.info`); where
    that reader cannot, from a CPU session's view (ONNX Runtime's own error for a broken file)."""
    from sixdim.workloads.onnx import info as onnx_info

    try:
        return onnx_info.read(path).inputs
    except (OSError, onnx_info.OnnxInfoError):
        return onnx_inputs.from_ort(onnx_session.reference_session(ort, path).get_inputs())


def _provider_options(ort: Any, providers: list[str], precision: str, device_id: int, cache_dir: str, path: str,
                      infos: tuple[Any, ...], shapes: dict[str, tuple[int, ...]], ctx: RunContext,
                      details: dict[str, Any]) -> tuple[list[dict[str, str]], tuple[str, dict[str, int]] | None]:
    """Each provider's options; for TensorRT also its engine folder and the engines already in it."""
    if "TensorrtExecutionProvider" not in providers:
        return [onnx_session.provider_options(p, precision, device_id) for p in providers], None
    profile = onnx_session.tensorrt_profile(infos, shapes)
    cache = onnx_session.engine_cache(cache_dir, path, precision, profile, onnx_session.runtime_environment())
    before = onnx_session.prepare_engine_cache(cache)
    details.update(tensorrt_engine_cache=cache.engines, tensorrt_profile=profile or
                   "none: built at the first run (no dynamic input, or one TensorRT's profile syntax cannot name)")
    if not before:
        ctx.progress(f"building the TensorRT engine for {', '.join(f'{k}={list(v)}' for k, v in shapes.items())} "
                     f"(first run of this shape; cached in {cache.engines})")
    options = [onnx_session.provider_options(p, precision, device_id, engines=cache.engines, timing=cache.timing,
                                             profile=profile) for p in providers]
    return options, (cache.engines, before)


def _engine_origin(engines: tuple[str, dict[str, int]], details: dict[str, Any]) -> None:
    """Whether the session loaded TensorRT's engines from the cache or built them (in its creation:
    ``session_create_seconds`` says how long that took)."""
    folder, before = engines
    after = onnx_session.engine_files(folder)
    if before and after == before:
        details["tensorrt_engine"] = "cached"
    elif after:
        details["tensorrt_engine"] = "built"
    else:
        details["tensorrt_engine"] = "not built yet: at the first run, in the warm-up"


def _measure(call: Callable[[], object], fetch: Callable[[], list[Any]], params: dict[str, Any], ctx: RunContext,
             details: dict[str, Any], check: Callable[[list[Any]], Any], memory_before: int | None) -> WorkloadOutput:
    """Timed rounds and single-request latencies on the host clock, the power phase (on the worker's GPU for a
    GPU provider: :func:`power_device`), then the check."""
    import torch

    from sixdim.workloads.measure.report import Measurement, kernel_output, percentile
    from sixdim.workloads.measure.stats import deepspark_mean
    from sixdim.workloads.measure.timing import latency_percentiles, time_rounds
    from sixdim.workloads.onnx import power as onnx_power

    host = torch.device("cpu")  # session.run() returns after the device's work: time it on the host clock
    batch = params["batch"]
    timing = time_rounds(call, host, ctx, rounds=params["rounds"], min_round_seconds=params["min_round_seconds"],
                         warmup_seconds=params["warmup_seconds"])
    latencies = latency_percentiles(call, host, ctx, samples=params["latency_samples"], warmup_seconds=0.0) \
        if params["latency_samples"] else None
    power, power_details = onnx_power.power(call, power_device(params, ctx), ctx, seconds=params["power_seconds"],
                                            seconds_per_call=timing.seconds_per_call, batch=batch)
    figures = {"samples_per_second": deepspark_mean([batch / s for s in timing.round_seconds])}
    if latencies:
        figures["latency_p90_seconds"] = percentile(latencies, 90)
    phase = power_details.get("power", {})
    if power.get("energy_joules") and phase.get("calls"):
        details["joules_per_request"] = power["energy_joules"] / phase["calls"]
        details["joules_per_sample"] = power["energy_joules"] / (phase["calls"] * batch)
    memory = _gpu_memory(ctx.device)
    if memory is not None and memory_before is not None:
        ctx.memory = {"memory_bytes": float(max(0, memory - memory_before))}
        figures["memory_bytes"] = ctx.memory["memory_bytes"]
        details["memory_source"] = "nvml: the worker's GPU memory at the case's end less before its session"
    elif ctx.device.startswith("cuda"):
        ctx.memory = {}
        details["memory_note"] = "NVML does not list this process on the GPU (another PID namespace?)"
    verdict = check(fetch())
    output = kernel_output(Measurement(timing, latencies, power, power_details), verdict, figures=figures,
                           details=details)
    if not all(math.isfinite(v) for k, v in output.figures.items() if k != "max_relative_error"):
        return WorkloadOutput(output.figures, output.details, status="failed",
                              reason="a non-finite figure (no time measured?)")
    return output


def power_device(params: dict[str, Any], ctx: RunContext) -> Any:
    """The device the power phase runs on: the worker's GPU for a GPU provider (its runs are queued there,
    and the GPU's busy share is checked), else the CPU."""
    import torch

    if params["providers"][0] in onnx_session.GPU_PROVIDERS and ctx.device.startswith("cuda"):
        return torch.device(ctx.device)
    return torch.device("cpu")


def _runner(ort: Any, session: Any, feeds: dict[str, Any], provider: str, device_id: int,
            io_binding: bool) -> tuple[Callable[[], object], Callable[[], list[Any]]]:
    """The call to time, and how to get its outputs on the host afterwards."""
    if not io_binding:
        return (lambda: session.run(None, feeds)), (lambda: list(session.run(None, feeds)))
    device = "cuda" if provider in onnx_session.GPU_PROVIDERS else "cpu"
    binding = session.io_binding()
    for name, value in feeds.items():  # inputs copied to the device once, outside the timed calls
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, device, device_id))
    for output in session.get_outputs():
        binding.bind_output(output.name, device, device_id)

    def bound() -> object:
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        return binding

    def fetch() -> list[Any]:
        bound()
        return list(binding.copy_outputs_to_cpu())

    return bound, fetch


def _check(ort: Any, params: dict[str, Any], own: bool, precision: str, provider: str, path: str,
           feeds: dict[str, Any], outputs: list[Any], names: list[str], details: dict[str, Any]) -> Any:
    """The correctness verdict (see the module's docstring); ``corrupt`` spoils a judged output first.

    Floating-point outputs are judged by their max relative error. Integer and boolean outputs (an
    argmax, a mask) are judged only where a model has nothing else: a near-tie may flip between
    providers, so elsewhere their mismatching fraction is recorded, not judged."""
    import numpy as np

    from sixdim.workloads.measure.correctness import Check

    outputs = [np.array(o, copy=True) for o in outputs]
    tolerance = params["tolerance"] or _tolerance(precision, provider, details)
    if own:
        sample = feeds["input"][:1]
        weights = _export_precision(precision)
        key = hashlib.sha256(repr((params["model"], params["size"], weights, params["seed"])).encode()
                             + sample.tobytes()).hexdigest()
        if key not in _references:
            from sixdim.workloads.onnx.export import reference

            _references.clear()  # one model's reference at a time: the worker's memory stays small
            _references[key] = reference(params["model"], params["size"], weights, params["seed"], sample)
        expected, outputs, judged = [_references[key]], [outputs[0][:1]], [0]
        details["reference"] = "PyTorch float64 on the CPU, the first sample"
    else:
        expected = onnx_session.reference_session(ort, path).run(None, feeds)
        floats = [i for i, o in enumerate(expected) if np.asarray(o).dtype.name not in INTEGER_TYPES]
        judged = floats or list(range(len(expected)))
        details["reference"] = "onnxruntime CPUExecutionProvider, graph optimisations off"
    if params["corrupt"]:
        _spoil(outputs[judged[0]])
    errors = {names[i]: _max_relative_error(outputs[i], expected[i]) for i in judged}
    details["output_errors"] = errors
    mismatched = {names[i]: float(np.mean(np.asarray(outputs[i]) != np.asarray(expected[i])))
                  for i in range(len(expected)) if i not in judged}
    if mismatched:
        details["integer_output_mismatch_ratio"] = mismatched
    return Check(max(errors.values(), default=0.0), tolerance)


def _spoil(output: Any) -> None:
    """Self-test: make the first element of an output plainly wrong, in place."""
    import numpy as np

    flat = output.reshape(-1)
    if not flat.size:
        return
    if flat.dtype == np.bool_:
        flat[0] = not flat[0]
    elif flat.dtype.kind in "iu":  # integer outputs are judged exactly: one off is wrong
        flat[0] = flat[0] + 1 if flat[0] < np.iinfo(flat.dtype).max else flat[0] - 1
    else:
        flat[0] = flat[0] + 100 + np.abs(flat.astype(np.float64)).max()


def _max_relative_error(output: Any, reference: Any) -> float:
    """max |output - reference| / max |reference| in float64; inf for a non-finite output or a
    shape that differs."""
    import numpy as np

    got, want = np.asarray(output, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if got.shape != want.shape or not np.isfinite(got).all():
        return math.inf
    if not got.size:
        return 0.0
    scale = float(np.abs(want).max())
    error = float(np.abs(got - want).max())
    return error / scale if scale > 0 else error


def _tolerance(precision: str, provider: str, details: dict[str, Any]) -> float:
    if provider == "TensorrtExecutionProvider" and precision == "fp32":
        details["tolerance_note"] = "TensorRT allows TF32 in fp32 layers: the tf32 tolerance applies"
        return TOLERANCES["tf32"]
    return TOLERANCES.get(precision, 0.0 if precision == "" else TOLERANCES["fp32"])


def _precision(params: dict[str, Any], own: bool) -> str:
    """What the case's numbers are: the parameter, or for ``auto`` fp32 for sixdim's models and the
    type of a user's model's first floating-point output ("" when it has none)."""
    if params["precision"] != "auto":
        return params["precision"]
    if own:
        return "fp32"
    return params.get("detected_precision", "") or _detected_precision(params["model"])


def _detected_precision(path: str) -> str:
    from sixdim.workloads.onnx import info as onnx_info

    try:
        return onnx_info.precision_of(onnx_info.read(path).outputs)
    except (OSError, onnx_info.OnnxInfoError):
        return ""


def _own_model_file(params: dict[str, Any], precision: str, cache_dir: str, ctx: RunContext,
                    details: dict[str, Any]) -> str:
    from sixdim.workloads.onnx import export as onnx_export

    if precision == "fp16" and params["providers"][0] not in onnx_session.GPU_PROVIDERS:
        raise Unsupported("fp16 needs a GPU provider: ONNX Runtime's CPU provider lacks fp16 kernels for these "
                          "models (and its fp16 graph optimisations crash on the transformers)")
    path, now = onnx_export.exported(params["model"], params["size"], _export_precision(precision), seed=params["seed"],
                                     opset=params["opset"], cache_dir=cache_dir, progress=ctx.progress)
    details.update(exported_now=now, exporter="torch.onnx.export(dynamo=True)")
    return str(path)


def _default_cache_dir() -> Any:
    from sixdim.workloads.onnx.export import default_cache_dir

    return default_cache_dir()


def _default_sequence(params: dict[str, Any], own: bool) -> int:
    """The size of sequence dimensions: a transformer's own at its size, 128 for a file (0 for
    ResNet-50, which has none)."""
    if not own:
        return onnx_inputs.DEFAULT_SEQUENCE_LENGTH
    from sixdim.workloads.onnx.export import default_sequence_length

    return default_sequence_length(params["model"], params["size"])


def _own_vocabulary(params: dict[str, Any]) -> int:
    from sixdim.workloads.models.model import SIZES

    return int(SIZES[params["model"]][params["size"]].get("vocab", onnx_inputs.DEFAULT_VOCABULARY))


def _gpu_memory(device: str) -> int | None:
    """GPU memory NVML says this process holds on the worker's GPU, or None (CPU, no NVML, or NVML
    does not list the process, as in a container without the host's PID namespace)."""
    if not device.startswith("cuda"):
        return None
    try:
        import pynvml
        import torch

        uuid = str(torch.cuda.get_device_properties(torch.device(device)).uuid)
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
        for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if process.pid == os.getpid() and process.usedGpuMemory is not None:
                return int(process.usedGpuMemory)
    except Exception:
        return None
    return None
