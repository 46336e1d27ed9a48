"""An ONNX Runtime session on exactly the execution providers asked for, or ``unsupported``.

ONNX Runtime is forgiving where a benchmark must not be: a provider it does not know is dropped
with a warning, one that fails to initialise (CUDA libraries missing, no GPU visible) falls back to
the CPU, and a node that no requested provider has a kernel for runs on the CPU, node by node,
without a word, so a "CUDA" run would quietly time the CPU, wholly or in part. Here:

- every requested provider must be in ``onnxruntime.get_available_providers()`` before, and in
  ``session.get_providers()`` after the session is made (each one, not only the first);
- with any provider other than the CPU's requested, and the CPU's not among them, the session is
  made with ``session.disable_cpu_ep_fallback = 1``: ONNX Runtime then refuses to create it when
  a node would be placed on the CPU. That refusal names no node, so the placement is then read
  from a profiled run of a session that allows the fallback (:func:`cpu_nodes`). ONNX Runtime puts
  small shape computations (``Shape`` → ``Gather`` → ``Concat`` feeding a ``Reshape``) on the CPU
  by choice, beside the CUDA provider, because the GPU kernels read those values on the host
  (:func:`is_shape_computation`): those are allowed, and listed in the case's details. Any other
  node on the CPU makes the case :class:`~sixdim.workloads.context.Unsupported`, naming the nodes
  and the provider, with ONNX Runtime's own message. Naming ``CPUExecutionProvider`` among the
  providers allows the fallback (recorded as such).

onnxruntime itself missing is ``unsupported`` too, naming the extra that installs it.

What a precision means for the providers: ``fp32`` is IEEE float32, so the CUDA provider's TF32
(on by default) is turned off; ``tf32`` turns it on. TensorRT builds its engines with TF32 allowed
whatever is asked (ONNX Runtime has no switch for it), and with fp16 kernels for ``fp16``.

**TensorRT engines.** Built with explicit optimisation profiles, min = opt = max = the case's input
shapes (:func:`tensorrt_profile`), so ONNX Runtime builds the engine while it creates the session,
before the warm-up and the timed rounds, not in the first ``run`` (which, without profiles, also
rebuilds the engine whenever a shape leaves the range seen so far). Engines are cached, with
TensorRT's timing cache, beside sixdim's exports under the ``cache_dir`` parameter's folder
(``tensorrt/``): one folder per model file (path, size and modification time), precision, profile
and ONNX Runtime and TensorRT versions (:func:`engine_cache`), since ONNX Runtime names an engine
after the model's graph only, and a profile that differs would rebuild (and overwrite) the engine of
another batch size on every run. So only a machine's first run of a case pays for the build; the
case's details say whether the engine came from the cache, and how long creating the session took.
A build has its own allowance (the ``onnx`` workload's ``build_seconds``, announced to the runner
through :meth:`~sixdim.workloads.context.RunContext.one_off_build`) instead of the case's timeout: a
first build of a large model (BERT-large at a large batch takes minutes) stopped by that timeout
would write no engine, and every later run would build again.

Imports onnxruntime: the worker process only.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sixdim.workloads.context import Unsupported
from sixdim.workloads.onnx.info import TensorInfo

INSTALL_HINT = ('install the onnx extra: pip install "sixdim[onnx]" (CPU), or "sixdim[onnx-gpu]" on a CUDA host '
                '(onnxruntime-gpu: CUDA and TensorRT providers)')
GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")
CPU_PROVIDER = "CPUExecutionProvider"
DISABLE_CPU_FALLBACK = "session.disable_cpu_ep_fallback"
"""ONNX Runtime's session configuration key: with "1", creating a session fails when a node would
run on the CPU provider it adds implicitly."""
FALLBACK_REFUSED = "fallback to CPU EP has been explicitly disabled"
"""In ONNX Runtime's message when it refuses a session for that reason."""
SHAPE_OPS = frozenset({
    "Shape", "Size", "Gather", "GatherElements", "Unsqueeze", "Squeeze", "Concat", "Slice", "Split", "Cast",
    "Reshape", "Flatten", "Identity", "Transpose", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Sqrt",
    "Reciprocal", "Pow", "Floor", "Ceil", "Min", "Max", "Clip", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "Not", "And", "Or", "Where", "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "Range",
    "ConstantOfShape", "Expand", "Tile"})
"""Operators of the shape computations ONNX Runtime keeps on the CPU beside a GPU provider."""
SHAPE_VALUES = 64
"""At most this many values in each output of such a node (a shape, an index, a scale)."""
MAX_NAMED_NODES = 8
"""Nodes named in an unsupported reason (then "and N more")."""
ENGINE_CACHE_FORMAT = 1
"""Bump when what decides a TensorRT engine (the provider options set here) changes."""
OPTIMIZATION_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
                       "all": "ORT_ENABLE_ALL"}


def import_runtime() -> Any:
    """The onnxruntime module, or Unsupported naming the extra to install."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise Unsupported(f"onnxruntime is not installed ({exc}): {INSTALL_HINT}") from None
    return onnxruntime


def describe(ort: Any) -> dict[str, Any]:
    """The runtime's version, build and providers, for the case's details."""
    return {"onnxruntime": ort.__version__, "onnxruntime_device": ort.get_device(),
            "onnxruntime_cuda_version": str(getattr(ort, "cuda_version", "") or ""),
            "available_providers": list(ort.get_available_providers())}


RUNTIME_DISTRIBUTIONS = ("onnxruntime-gpu", "onnxruntime", "onnxruntime-openvino", "onnxruntime-directml",
                         "onnxruntime-training")
"""The wheels that install the ``onnxruntime`` module (one at a time: they overwrite each other)."""


def runtime_environment() -> dict[str, str]:
    """What the worker records in every result's environment where onnxruntime is installed
    (nothing where it is not, without trying to import it): its version, which wheel provides it,
    the providers built in, the CUDA it was built for, and TensorRT's version where its wheel is
    installed. Recorded for every case of the worker, as NCCL's version is, so that a series'
    versions do not depend on which workloads shared its worker."""
    import importlib.util
    from importlib import metadata

    if importlib.util.find_spec("onnxruntime") is None:
        return {}
    try:
        import onnxruntime as ort

        env = {"onnxruntime": str(ort.__version__),
               "onnxruntime_providers": ",".join(ort.get_available_providers()),
               "onnxruntime_cuda": str(getattr(ort, "cuda_version", "") or "")}
    except Exception as exc:  # a broken install: say so rather than fail the worker
        return {"onnxruntime": "", "onnxruntime_error": f"{type(exc).__name__}: {exc}"}
    for name in RUNTIME_DISTRIBUTIONS:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        env["onnxruntime_package"] = name
        break
    if "TensorrtExecutionProvider" in env["onnxruntime_providers"]:
        for name in ("tensorrt", "tensorrt-cu12", "tensorrt-cu13", "tensorrt-libs"):
            try:
                env["tensorrt"] = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
    return env


def check_available(ort: Any, providers: list[str]) -> None:
    """Unsupported unless every requested provider is built into this onnxruntime."""
    available = list(ort.get_available_providers())
    missing = [p for p in providers if p not in available]
    if missing:
        named = f"providers {', '.join(missing)} are" if len(missing) > 1 else f"provider {missing[0]} is"
        raise Unsupported(f"execution {named} not available in onnxruntime "
                          f"{ort.__version__} ({ort.get_device()} build); available: {', '.join(available)}"
                          + (f"; for GPU providers {INSTALL_HINT}" if set(missing) & set(GPU_PROVIDERS) else ""))


def check_active(ort: Any, providers: list[str], active: list[str]) -> None:
    """Unsupported unless every requested provider is among the session's (ONNX Runtime drops one
    that fails to initialise, with a log line only, and runs on the others and the CPU)."""
    missing = [p for p in providers if p not in active]
    if missing:
        raise Unsupported(f"{', '.join(missing)} did not initialise (onnxruntime runs on {', '.join(active)} "
                          f"instead); available in this build: {', '.join(ort.get_available_providers())}")


def refuses_cpu_fallback(providers: list[str]) -> bool:
    """Whether the session is made with the CPU fallback disabled: a provider other than the CPU's
    is requested, and the CPU's is not (naming it allows the fallback; ONNX Runtime also refuses
    the two together)."""
    return any(p != CPU_PROVIDER for p in providers) and CPU_PROVIDER not in providers


def session_config(providers: list[str]) -> dict[str, str]:
    """The session configuration entries for these providers (see the module's docstring)."""
    return {DISABLE_CPU_FALLBACK: "1"} if refuses_cpu_fallback(providers) else {}


def session_options(ort: Any, params: dict[str, Any], config: dict[str, str] | None = None) -> Any:
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                               OPTIMIZATION_LEVELS[params["graph_optimization"]])
    if params["intra_op_threads"]:
        options.intra_op_num_threads = params["intra_op_threads"]
    if params["inter_op_threads"]:
        options.inter_op_num_threads = params["inter_op_threads"]
    options.log_severity_level = 3  # errors only: the worker's output tail is for what went wrong
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    return options


def tensorrt_profile(inputs: Sequence[TensorInfo], shapes: Mapping[str, tuple[int, ...]]) -> str:
    """The value of TensorRT's ``trt_profile_{min,opt,max}_shapes`` for one case:
    ``"input_ids:4x128,attention_mask:4x128"``, every input with a dynamic dimension at its shape in
    this case. "" when no input is dynamic (TensorRT then builds at session creation anyway), or
    when one cannot be written in that syntax (a scalar, or a name with ``,`` or ``:``): the engine
    is then built at the first run, in the warm-up."""
    dynamic = [info for info in inputs if info.dims is None or any(not isinstance(d, int) for d in info.dims)]
    if any(not shapes.get(info.name) or "," in info.name or ":" in info.name for info in dynamic):
        return ""
    return ",".join(f"{info.name}:{'x'.join(str(d) for d in shapes[info.name])}" for info in dynamic)


@dataclass(frozen=True)
class EngineCache:
    """Where one case's TensorRT engines and the runtime's timing cache live (see the module's docstring)."""

    engines: str
    timing: str
    key: dict[str, Any]


def engine_cache(cache_dir: str, model: str, precision: str, profile: str, runtime: Mapping[str, str]) -> EngineCache:
    """The folders under ``cache_dir/tensorrt`` for this model file, precision, profile and runtime
    (``runtime``: the onnxruntime and tensorrt versions); nothing is created."""
    try:
        status = os.stat(model)
        identity = [os.path.realpath(model), status.st_size, status.st_mtime_ns]
    except OSError:
        identity = [os.path.realpath(model), 0, 0]
    versions = {name: str(runtime.get(name, "")) for name in ("onnxruntime", "tensorrt")}
    key = {"model": identity, "precision": precision, "profile": profile, "runtime": versions,
           "format": ENGINE_CACHE_FORMAT}
    root = os.path.join(cache_dir, "tensorrt")
    timing = "timing-" + _digest(versions)[:12]
    return EngineCache(os.path.join(root, _digest(key)[:16]), os.path.join(root, timing), key)


def prepare_engine_cache(cache: EngineCache) -> dict[str, int]:
    """Create the cache's folders (and the engine folder's ``key.json``, for a person looking);
    the engine files already there, by name, with their modification times."""
    os.makedirs(cache.engines, exist_ok=True)
    os.makedirs(cache.timing, exist_ok=True)
    key_file = os.path.join(cache.engines, "key.json")
    if not os.path.exists(key_file):
        with open(key_file, "w") as handle:
            json.dump(cache.key, handle, indent=1)
    return engine_files(cache.engines)


def engine_files(folder: str) -> dict[str, int]:
    """The engine files in a folder, by name, with their modification times (ns)."""
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".engine")]
    except OSError:
        return {}
    out = {}
    for name in names:
        try:
            out[name] = os.stat(os.path.join(folder, name)).st_mtime_ns
        except OSError:
            continue
    return out


def provider_options(provider: str, precision: str, device_id: int, cache_dir: str = "", *,
                     engines: str = "", timing: str = "", profile: str = "") -> dict[str, str]:
    """Options per provider (see the module's docstring); the CPU provider takes none. TensorRT's
    engines go to ``engines`` (else ``cache_dir/tensorrt``, created here), its timing cache to
    ``timing`` (else beside the engines), with ``profile`` as min, opt and max shapes when given."""
    if provider == "CUDAExecutionProvider":
        return {"device_id": str(device_id), "use_tf32": "1" if precision == "tf32" else "0"}
    if provider == "TensorrtExecutionProvider":
        if not engines:
            engines = os.path.join(cache_dir, "tensorrt")
            os.makedirs(engines, exist_ok=True)
        options = {"device_id": str(device_id), "trt_fp16_enable": "True" if precision == "fp16" else "False",
                   "trt_engine_cache_enable": "True", "trt_engine_cache_path": engines,
                   "trt_timing_cache_enable": "True", "trt_timing_cache_path": timing or engines}
        if profile:
            options.update(trt_profile_min_shapes=profile, trt_profile_opt_shapes=profile,
                           trt_profile_max_shapes=profile)
        return options
    return {}


def create(ort: Any, path: str, providers: list[str], options: Any, per_provider: list[dict[str, str]],
           feeds: Mapping[str, Any] | None = None, details: dict[str, Any] | None = None) -> Any:
    """The session, on every requested provider, with no node silently on the CPU (see the module's
    docstring). ``options``: the SessionOptions, or a function making fresh ones (then the fallback,
    when refused, can be diagnosed with another session). ``feeds``: inputs for that diagnosis, a
    profiled run; without them a refused fallback is unsupported as it stands. What was found goes
    into ``details`` (``cpu_fallback``, ``cpu_nodes``, ``session_create_seconds``)."""
    check_available(ort, providers)
    make = options if callable(options) else (lambda: options)
    config = session_config(providers)
    info = details if details is not None else {}
    if config:
        info["cpu_fallback"] = "refused (session.disable_cpu_ep_fallback=1)"
    elif any(p != CPU_PROVIDER for p in providers):
        info["cpu_fallback"] = "allowed: CPUExecutionProvider is among the requested providers"
    start = time.perf_counter()
    first = make()
    for key, value in config.items():
        first.add_session_config_entry(key, value)
    try:
        session = _session(ort, path, providers, first, per_provider)
    except Exception as exc:
        if not config or FALLBACK_REFUSED not in str(exc):
            raise
        message = _first_line(str(exc))
        if feeds is None or not callable(options):
            raise Unsupported(f"{'+'.join(providers)} falls back to the CPU for some node(s): {message}") from None
        session = _with_shape_computations(ort, path, providers, make, per_provider, feeds, message, info)
    info["session_create_seconds"] = time.perf_counter() - start
    check_active(ort, providers, list(session.get_providers()))
    return session


def _session(ort: Any, path: str, providers: list[str], options: Any, per_provider: list[dict[str, str]]) -> Any:
    try:
        return ort.InferenceSession(path, sess_options=options, providers=list(zip(providers, per_provider)))
    except Exception as exc:
        text = str(exc)
        if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
            raise Unsupported(f"{providers[0]} cannot run this model: {_first_line(text)}") from None
        raise


def _with_shape_computations(ort: Any, path: str, providers: list[str], make: Callable[[], Any],
                             per_provider: list[dict[str, str]], feeds: Mapping[str, Any], message: str,
                             info: dict[str, Any]) -> Any:
    """ONNX Runtime refused the session because a node would run on the CPU: find which, from a
    profiled run with the fallback allowed. Only shape computations: the session, with the fallback
    allowed (and not profiled); anything else: Unsupported naming the nodes."""
    with tempfile.TemporaryDirectory(prefix="sixdim-placement-") as folder:
        options = make()
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(folder, "placement")
        probe = _session(ort, path, providers, options, per_provider)
        check_active(ort, providers, list(probe.get_providers()))  # one that did not start: say that
        try:
            probe.run(None, dict(feeds))
            with open(probe.end_profiling()) as handle:
                events = json.load(handle)
        except Exception as exc:
            raise Unsupported(f"{'+'.join(providers)} falls back to the CPU for some node(s), which a profiled run "
                              f"could not name ({type(exc).__name__}: {_first_line(str(exc))}): {message}") from None
        finally:
            del probe
    nodes = cpu_nodes(events)
    fallen = [node for node in nodes if not is_shape_computation(node)]
    if fallen:
        named = ", ".join(f"{n.op} {n.name!r}" for n in fallen[:MAX_NAMED_NODES])
        more = f" and {len(fallen) - MAX_NAMED_NODES} more" if len(fallen) > MAX_NAMED_NODES else ""
        raise Unsupported(f"{'+'.join(providers)} falls back to the CPU for node(s) {named}{more} (no kernel on "
                          f"the requested providers): {message}")
    info["cpu_fallback"] = ("allowed for ONNX Runtime's own shape computations only (the fallback-refusing session "
                            "was refused for them)")
    info["cpu_nodes"] = {op: sum(1 for n in nodes if n.op == op) for op in sorted({n.op for n in nodes})}
    return _session(ort, path, providers, make(), per_provider)


@dataclass(frozen=True)
class PlacedNode:
    """A node as a profiled run saw it: its name, operator, provider and output shapes."""

    name: str
    op: str
    provider: str
    outputs: tuple[tuple[int, ...], ...]


def cpu_nodes(events: Any) -> list[PlacedNode]:
    """The nodes a profiled run (ONNX Runtime's ``end_profiling`` JSON) ran on the CPU provider, in
    the order of the profile."""
    out: dict[str, PlacedNode] = {}
    for event in events if isinstance(events, list) else []:
        if not isinstance(event, dict) or event.get("cat") != "Node" or \
                not str(event.get("name", "")).endswith("_kernel_time"):
            continue
        args = event.get("args") or {}
        if args.get("provider") != CPU_PROVIDER:
            continue
        name = str(event["name"])[:-len("_kernel_time")]
        shapes = []
        for output in args.get("output_type_shape") or []:
            for dims in (output.values() if isinstance(output, dict) else []):
                shapes.append(tuple(int(d) for d in dims) if isinstance(dims, list) else ())
        out.setdefault(name, PlacedNode(name, str(args.get("op_name", "")), CPU_PROVIDER, tuple(shapes)))
    return list(out.values())


def is_shape_computation(node: PlacedNode) -> bool:
    """Whether a node on the CPU is one ONNX Runtime puts there by choice: an operator of shape
    arithmetic (:data:`SHAPE_OPS`, every one with a CUDA kernel) whose outputs are all small
    (:data:`SHAPE_VALUES` values at most), as the values a GPU kernel reads on the host are. A node
    with no GPU kernel (the reason for a real fallback) fails one test or the other, unless it is a
    shape operator on a tiny tensor."""
    return node.op in SHAPE_OPS and all(math.prod(shape) <= SHAPE_VALUES for shape in node.outputs)


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:400]


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def reference_session(ort: Any, path: str) -> Any:
    """A CPU session with every graph optimisation off: the reference for a user's model (its
    kernels and graph are not the ones being measured, unless the measured run is the CPU's own)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
