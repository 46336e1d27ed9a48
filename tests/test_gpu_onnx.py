"""GPU acceptance of the onnx workload's provider checks: run only where an NVIDIA GPU and onnxruntime-gpu's
CUDA provider exist; skipped with the reason elsewhere (tests/test_onnx_providers.py checks the same paths on
the CPU wheel).

- A model with a node the CUDA provider has no kernel for (``Det``) is ``unsupported`` on
  ``CUDAExecutionProvider`` alone, naming the node and carrying ONNX Runtime's refusal of the CPU
  fallback; with ``CPUExecutionProvider`` requested too it runs, the fallback recorded as allowed.
- sixdim's small GPT on the CUDA provider is not made unsupported by the shape computations ONNX
  Runtime keeps on the CPU by choice.
- Where TensorRT's provider is built in: the engine is built in the session's creation on the first
  run and loaded from the cache on the second.

Cases run through the executor, in worker processes, so this process never holds a CUDA context.
"""

from __future__ import annotations

import pytest

from sixdim.run.devices import resolve
from sixdim.run.executor import Executor, GuardSettings
from sixdim.store.history import History
from sixdim.workloads import registry
from tests.conftest import nvml_or_skip

pytestmark = pytest.mark.gpu

FAST = {"rounds": 3, "min_round_seconds": 0.02, "warmup_seconds": 0.05, "latency_samples": 5, "power_seconds": 0.0}
CUDA, CPU, TRT = "CUDAExecutionProvider", "CPUExecutionProvider", "TensorrtExecutionProvider"


@pytest.fixture(scope="module")
def nvml():
    return nvml_or_skip(torch_cuda=False)


@pytest.fixture(scope="module")
def ort(nvml):
    hint = "pip install -e '.[onnx-gpu]'"
    onnxruntime = pytest.importorskip("onnxruntime", reason=f"onnxruntime is not installed: {hint}")
    pytest.importorskip("onnx", reason=f"onnx is not installed: {hint}")
    if CUDA not in onnxruntime.get_available_providers():
        pytest.skip(f"onnxruntime {onnxruntime.__version__} here has no CUDA provider "
                    f"({onnxruntime.get_available_providers()}): install the onnx-gpu extra")
    return onnxruntime


def execute(nvml, tmp_path, params):
    executor = Executor(hostname="gpu-test", history=History(tmp_path / "h.db"), nvml=nvml, rapl=None,
                        guard=GuardSettings(enabled=False, max_utilization=0.05))
    return executor.execute_many([(registry.get("onnx"), params)], resolve(["cuda:0"], nvml)[0], timeout=600)


def det_model(path):
    """y = relu(x·W) beside d = det(m): ``Det`` has a CPU kernel only (ONNX Runtime's OperatorKernels.md)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype("float32"), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"], name="dense"), helper.make_node("Relu", ["xw"], ["y"]),
         helper.make_node("Det", ["m"], ["d"], name="det")], "det",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8]),
         helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, ["batch"])], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def test_a_cpu_only_node_is_unsupported_on_the_cuda_provider_with_the_fallback_reason(nvml, ort, tmp_path):
    model = det_model(tmp_path / "det.onnx")
    params = {"model": model, "latency_batches": [2], "throughput_batches": [], **FAST}
    [refused] = execute(nvml, tmp_path, {**params, "providers": [CUDA]})
    assert refused.status == "unsupported", (refused.status, refused.reason)
    assert refused.reason.startswith(f"{CUDA} falls back to the CPU for node(s) Det 'det'"), refused.reason
    assert "fallback to CPU EP has been explicitly disabled" in refused.reason
    [allowed] = execute(nvml, tmp_path, {**params, "providers": [CUDA, CPU]})
    assert allowed.status == "ok", (allowed.status, allowed.reason)
    assert allowed.details["cpu_fallback"] == "allowed: CPUExecutionProvider is among the requested providers"
    assert allowed.details["active_providers"][0] == CUDA


def test_sixdims_model_is_not_refused_for_onnx_runtimes_own_shape_computations(nvml, ort, tmp_path):
    [record] = execute(nvml, tmp_path, {"model": "gpt", "size": "small", "providers": [CUDA],
                                        "cache_dir": str(tmp_path / "onnx"), "latency_batches": [2],
                                        "throughput_batches": [], **FAST})
    assert record.status == "ok", (record.status, record.reason)
    fallback = record.details["cpu_fallback"]
    assert fallback == "refused (session.disable_cpu_ep_fallback=1)" or \
        fallback.startswith("allowed for ONNX Runtime's own shape computations"), fallback
    assert record.details["session_create_seconds"] > 0


def test_tensorrt_builds_its_engine_in_the_session_once_then_loads_it_from_the_cache(nvml, ort, tmp_path):
    if TRT not in ort.get_available_providers():
        pytest.skip(f"onnxruntime {ort.__version__} here has no TensorRT provider ({ort.get_available_providers()})")
    model = det_model(tmp_path / "det.onnx")
    params = {"model": model, "providers": [TRT, CUDA, CPU], "cache_dir": str(tmp_path / "onnx"),
              "latency_batches": [4], "throughput_batches": [], **FAST}
    [first] = execute(nvml, tmp_path, params)
    [second] = execute(nvml, tmp_path, params)
    for record in (first, second):
        if record.status == "unsupported" and TRT in record.reason:
            pytest.skip(f"TensorRT's provider does not start here: {record.reason}")
        assert record.status == "ok", (record.status, record.reason)
        assert record.details["tensorrt_profile"] == "x:4x8,m:4x3x3"
    assert first.details["tensorrt_engine"] == "built"
    assert second.details["tensorrt_engine"] == "cached"
    assert second.details["tensorrt_engine_cache"] == first.details["tensorrt_engine_cache"]


def _power_checked(record) -> dict:
    """The CUDA provider's power phase: queued runs on the GPU, the busy share checked, and power only with it."""
    from sixdim.workloads.onnx.power import UNIT_KIND

    assert record.status == "ok", (record.status, record.reason)
    phase = record.details.get("power")
    assert phase, record.details.get("power_note")
    assert phase["unit"] == UNIT_KIND and phase["queued_runs"] >= 2, phase
    assert phase.get("gpu_busy_samples", 0) >= 3, phase  # the check ran: the phase was given the GPU
    if "power_note" in record.details:
        assert "power_watts" not in record.figures, (record.figures, record.details["power_note"])
    else:
        assert phase["gpu_busy_share"] >= 0.9 and record.figures["power_watts"] > 0, (phase, record.figures)
    return phase


def test_the_cuda_providers_power_phase_runs_on_the_gpu_and_is_checked(nvml, ort, tmp_path):
    """Issue 45, item 2: the phase ran with device=cpu, so its blocks were synchronous (the GPU idle during each
    NVML read) and its busy share was never checked.  Small GPT: whatever its share, power only with >= 90%."""
    [record] = execute(nvml, tmp_path, {"model": "gpt", "size": "small", "providers": [CUDA],
                                        "cache_dir": str(tmp_path / "onnx"), "latency_batches": [],
                                        "throughput_batches": [8], **{**FAST, "power_seconds": 2.0}})
    _power_checked(record)


@pytest.mark.slow
def test_a_gpu_bound_model_keeps_the_gpu_busy_through_its_power_phase(nvml, ort, tmp_path):
    """ResNet-50 at batch 32 with IO binding keeps the GPU busy for milliseconds a run: with the runs queued on a
    thread, the NVML reads no longer idle it, and its power is reported (busy >= 90%)."""
    [record] = execute(nvml, tmp_path, {"model": "resnet50", "size": "full", "providers": [CUDA],
                                        "io_binding": True, "cache_dir": str(tmp_path / "onnx"),
                                        "latency_batches": [], "throughput_batches": [32],
                                        **{**FAST, "power_seconds": 2.0}})
    phase = _power_checked(record)
    assert "power_note" not in record.details, (record.details["power_note"], phase)
