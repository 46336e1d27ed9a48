"""An ONNX Runtime session on exactly the execution providers asked for, or ``unsupported``.

ONNX Runtime is forgiving where a benchmark must not be: a provider it does not know is dropped
with a warning, and one that fails to initialise (CUDA libraries missing, no GPU visible) falls
back to the CPU, so a "CUDA" run would quietly time the CPU. Here every requested provider must
be in ``onnxruntime.get_available_providers()``, and after the session is made the first one
must be the first in ``session.get_providers()``; otherwise the case is
:class:`~sixdim.workloads.context.Unsupported`, naming what is available. onnxruntime itself missing is
``unsupported`` too, naming the extra that installs it.

What a precision means for the providers: ``fp32`` is IEEE float32, so the CUDA provider's TF32
(on by default) is turned off; ``tf32`` turns it on. TensorRT builds its engines with TF32 allowed
whatever is asked (ONNX Runtime has no switch for it), and with fp16 kernels for ``fp16``; its
engines are cached beside the exports, so only a machine's first run pays for building them.

Imports onnxruntime: the worker process only.
"""

from __future__ import annotations

import os
from typing import Any

from sixdim.workloads.context import Unsupported

INSTALL_HINT = ('install the onnx extra: pip install "sixdim[onnx]" (CPU), or "sixdim[onnx-gpu]" on a CUDA host '
                '(onnxruntime-gpu: CUDA and TensorRT providers)')
GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")
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
        raise Unsupported(f"execution provider {', '.join(missing)} is not available in onnxruntime "
                          f"{ort.__version__} ({ort.get_device()} build); available: {', '.join(available)}"
                          + (f"; for GPU providers {INSTALL_HINT}" if set(missing) & set(GPU_PROVIDERS) else ""))


def session_options(ort: Any, params: dict[str, Any]) -> Any:
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                               OPTIMIZATION_LEVELS[params["graph_optimization"]])
    if params["intra_op_threads"]:
        options.intra_op_num_threads = params["intra_op_threads"]
    if params["inter_op_threads"]:
        options.inter_op_num_threads = params["inter_op_threads"]
    options.log_severity_level = 3  # errors only: the worker's output tail is for what went wrong
    return options


def provider_options(provider: str, precision: str, device_id: int, cache_dir: str) -> dict[str, str]:
    """Options per provider (see the module's docstring); the CPU provider takes none."""
    if provider == "CUDAExecutionProvider":
        return {"device_id": str(device_id), "use_tf32": "1" if precision == "tf32" else "0"}
    if provider == "TensorrtExecutionProvider":
        engines = os.path.join(cache_dir, "tensorrt")
        os.makedirs(engines, exist_ok=True)
        return {"device_id": str(device_id), "trt_fp16_enable": "True" if precision == "fp16" else "False",
                "trt_engine_cache_enable": "True", "trt_engine_cache_path": engines,
                "trt_timing_cache_enable": "True", "trt_timing_cache_path": engines}
    return {}


def create(ort: Any, path: str, providers: list[str], options: Any, per_provider: list[dict[str, str]]) -> Any:
    """The session, with the first requested provider really active (see the module's docstring)."""
    check_available(ort, providers)
    try:
        session = ort.InferenceSession(path, sess_options=options, providers=list(zip(providers, per_provider)))
    except Exception as exc:
        text = str(exc)
        if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
            raise Unsupported(f"{providers[0]} cannot run this model: {text.strip().splitlines()[0][:400]}") from None
        raise
    active = list(session.get_providers())
    if not active or active[0] != providers[0]:
        raise Unsupported(f"{providers[0]} did not initialise (onnxruntime fell back to {', '.join(active)}); "
                          f"available in this build: {', '.join(ort.get_available_providers())}")
    return session


def reference_session(ort: Any, path: str) -> Any:
    """A CPU session with every graph optimisation off: the reference for a user's model (its
    kernels and graph are not the ones being measured, unless the measured run is the CPU's own)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
