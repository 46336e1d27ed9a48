"""The onnx workload's providers with the real onnxruntime on the CPU: the session and provider options a
CUDA or TensorRT request produces (CPU fallback refused, TensorRT profiles from the case's shapes, the engine
and timing caches), providers missing or not started, and ONNX Runtime's real refusal of a CPU fallback.

The CPU wheel has one provider beside the CPU's: ``AzureExecutionProvider``, which claims no node of an
ordinary model. Requested alone it is what a GPU provider lacking a kernel looks like: every node would fall
back to the CPU, and with the fallback refused ONNX Runtime refuses the session, as it does for a CUDA
session with a CPU-only node (tests/test_gpu_onnx.py checks that one on a GPU)."""

import json
import os
import time

import pytest

onnxruntime = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed: pip install -e '.[test]'")
onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed: pip install -e '.[test]'")

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from sixdim.run.worker import run_case  # noqa: E402
from sixdim.workloads import registry  # noqa: E402
from sixdim.workloads.context import RunContext, Unsupported  # noqa: E402
from sixdim.workloads.onnx import inputs as onnx_inputs  # noqa: E402
from sixdim.workloads.onnx import session as onnx_session  # noqa: E402
from sixdim.workloads.onnx import workload as onnx_workload  # noqa: E402
from sixdim.workloads.onnx.info import TensorInfo  # noqa: E402

AZURE = "AzureExecutionProvider"
CPU = "CPUExecutionProvider"
FAST = {"rounds": 3, "min_round_seconds": 0.01, "warmup_seconds": 0.01, "latency_samples": 5, "power_seconds": 0.0}
PARAMS = {"graph_optimization": "all", "intra_op_threads": 1, "inter_op_threads": 0}


def save(path, nodes, inputs, outputs, initializers=()):
    model = helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, list(initializers)),
                              opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def dense_model(path):
    """y = relu(x·W) with a dynamic batch: compute nodes, none of them a shape computation."""
    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype("float32"), "W")
    return save(path, [helper.make_node("MatMul", ["x", "W"], ["xw"], name="dense"),
                       helper.make_node("Relu", ["xw"], ["y"], name="activation")],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [weights])


def shape_model(path):
    """The batch size read from the input's shape: nothing but a shape computation."""
    index = numpy_helper.from_array(np.array(0, dtype="int64"), "zero")
    return save(path, [helper.make_node("Shape", ["x"], ["shape"], name="shape_of_x"),
                       helper.make_node("Gather", ["shape", "zero"], ["n"], name="batch_of_x")],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                [helper.make_tensor_value_info("n", TensorProto.INT64, [])], [index])


def feeds_for(path, batch=2):
    infos = onnx_inputs.from_ort(onnxruntime.InferenceSession(path, providers=[CPU]).get_inputs())
    return onnx_inputs.make_inputs(infos, onnx_inputs.resolve_shapes(infos, batch, 8, {}), 10, 0)


def fresh_options():
    return onnx_session.session_options(onnxruntime, PARAMS)


# the options a request produces (pure)


@pytest.mark.parametrize("providers, refused", [
    (["CUDAExecutionProvider"], True),
    (["TensorrtExecutionProvider", "CUDAExecutionProvider"], True),
    ([AZURE], True),
    ([CPU], False),
    (["CUDAExecutionProvider", CPU], False),  # the CPU named: the fallback is asked for
])
def test_gpu_requests_refuse_the_cpu_fallback_unless_the_cpu_is_requested(providers, refused):
    config = onnx_session.session_config(providers)
    assert config == ({"session.disable_cpu_ep_fallback": "1"} if refused else {})
    options = onnx_session.session_options(onnxruntime, PARAMS, config)
    if refused:
        assert options.get_session_config_entry("session.disable_cpu_ep_fallback") == "1"
    else:
        with pytest.raises(RuntimeError, match="does not have configuration"):  # left at ONNX Runtime's default
            options.get_session_config_entry("session.disable_cpu_ep_fallback")


def test_tensorrt_options_carry_the_cases_shapes_as_profiles_and_both_caches(tmp_path):
    infos = (TensorInfo("input_ids", "int64", ("batch", "seq")),
             TensorInfo("attention_mask", "int64", ("batch", "seq")),
             TensorInfo("scale", "float32", (1,)))  # fixed: needs no profile
    shapes = {"input_ids": (4, 128), "attention_mask": (4, 128), "scale": (1,)}
    profile = onnx_session.tensorrt_profile(infos, shapes)
    assert profile == "input_ids:4x128,attention_mask:4x128"
    cache = onnx_session.engine_cache(str(tmp_path), dense_model(tmp_path / "m.onnx"), "fp16", profile,
                                      {"onnxruntime": "1.22.0", "tensorrt": "10.9.0"})
    options = onnx_session.provider_options("TensorrtExecutionProvider", "fp16", 3, engines=cache.engines,
                                            timing=cache.timing, profile=profile)
    assert options == {"device_id": "3", "trt_fp16_enable": "True",
                       "trt_engine_cache_enable": "True", "trt_engine_cache_path": cache.engines,
                       "trt_timing_cache_enable": "True", "trt_timing_cache_path": cache.timing,
                       "trt_profile_min_shapes": profile, "trt_profile_opt_shapes": profile,
                       "trt_profile_max_shapes": profile}
    assert cache.engines.startswith(str(tmp_path / "tensorrt") + os.sep)
    assert cache.timing.startswith(str(tmp_path / "tensorrt") + os.sep)
    assert not os.path.exists(cache.engines)  # computing the folders creates nothing
    assert onnx_session.provider_options("CUDAExecutionProvider", "fp32", 1) == {"device_id": "1", "use_tf32": "0"}
    assert onnx_session.provider_options(CPU, "fp32", 0) == {}
    # no dynamic input, or one TensorRT's syntax cannot name: no profile (built at the first run)
    assert onnx_session.tensorrt_profile((TensorInfo("x", "float32", (1, 3)),), {"x": (1, 3)}) == ""
    for odd in ("a:b", "a,b"):
        assert onnx_session.tensorrt_profile((TensorInfo(odd, "float32", ("batch",)),), {odd: (2,)}) == ""
    assert "trt_profile_min_shapes" not in onnx_session.provider_options("TensorrtExecutionProvider", "fp32", 0,
                                                                         engines=cache.engines)


def test_each_profile_model_and_runtime_has_its_own_engine_folder_and_the_timing_cache_is_shared(tmp_path):
    model = dense_model(tmp_path / "m.onnx")
    runtime = {"onnxruntime": "1.22.0", "tensorrt": "10.9.0"}
    base = onnx_session.engine_cache(str(tmp_path), model, "fp32", "x:1x8", runtime)
    assert onnx_session.engine_cache(str(tmp_path), model, "fp32", "x:1x8", runtime) == base  # the next run finds it
    others = [onnx_session.engine_cache(str(tmp_path), model, "fp32", "x:4x8", runtime),  # another batch
              onnx_session.engine_cache(str(tmp_path), model, "fp16", "x:1x8", runtime),
              onnx_session.engine_cache(str(tmp_path), model, "fp32", "x:1x8", {**runtime, "tensorrt": "10.10.0"})]
    assert len({o.engines for o in others} | {base.engines}) == 4
    assert others[0].timing == others[1].timing == base.timing != others[2].timing
    time.sleep(0.01)
    os.utime(model)  # the file changed in place: its old engines are not reused
    assert onnx_session.engine_cache(str(tmp_path), model, "fp32", "x:1x8", runtime).engines != base.engines
    before = onnx_session.prepare_engine_cache(base)
    assert before == {} and os.path.isdir(base.timing)
    assert json.loads((tmp_path / "tensorrt" / os.path.basename(base.engines) / "key.json").read_text())["profile"] \
        == "x:1x8"
    (tmp_path / "tensorrt" / os.path.basename(base.engines) / "TRTKernel_graph_sm90.engine").write_bytes(b"e")
    assert list(onnx_session.engine_files(base.engines)) == ["TRTKernel_graph_sm90.engine"]


# providers missing or not started


def test_a_requested_provider_the_build_lacks_is_unsupported_naming_it():
    with pytest.raises(Unsupported, match=r"^execution provider TensorrtExecutionProvider is not available in "
                                          r"onnxruntime .*available: .*CPUExecutionProvider.*sixdim\[onnx-gpu\]"):
        onnx_session.check_available(onnxruntime, [CPU, "TensorrtExecutionProvider"])
    with pytest.raises(Unsupported, match=r"^execution providers TensorrtExecutionProvider, CUDAExecutionProvider "
                                          r"are not available"):
        onnx_session.check_available(onnxruntime, ["TensorrtExecutionProvider", "CUDAExecutionProvider"])


def test_every_requested_provider_must_be_active_not_only_the_first():
    onnx_session.check_active(onnxruntime, ["TensorrtExecutionProvider", "CUDAExecutionProvider"],
                              ["TensorrtExecutionProvider", "CUDAExecutionProvider", CPU])
    with pytest.raises(Unsupported, match=r"^CUDAExecutionProvider did not initialise \(onnxruntime runs on "
                                          r"TensorrtExecutionProvider, CPUExecutionProvider instead\)"):
        onnx_session.check_active(onnxruntime, ["TensorrtExecutionProvider", "CUDAExecutionProvider"],
                                  ["TensorrtExecutionProvider", CPU])


# ONNX Runtime's real refusal, and which CPU nodes are allowed


def test_a_node_falling_back_to_the_cpu_is_unsupported_naming_it_and_the_provider(tmp_path):
    path = dense_model(tmp_path / "dense.onnx")
    details = {}
    with pytest.raises(Unsupported) as caught:
        onnx_session.create(onnxruntime, path, [AZURE], fresh_options, [{}], feeds_for(path), details)
    reason = str(caught.value)
    assert reason.startswith(f"{AZURE} falls back to the CPU for node(s) MatMul 'dense', Relu 'activation'"), reason
    assert "fallback to CPU EP has been explicitly disabled" in reason  # ONNX Runtime's own message
    assert details["cpu_fallback"] == "refused (session.disable_cpu_ep_fallback=1)"
    # without inputs to profile a run with, the refusal stands as it is
    with pytest.raises(Unsupported, match=f"^{AZURE} falls back to the CPU for some node"):
        onnx_session.create(onnxruntime, path, [AZURE], fresh_options(), [{}])


def test_the_workload_reports_the_fallback_and_runs_where_the_cpu_is_requested_too(tmp_path):
    path = dense_model(tmp_path / "dense.onnx")

    def case(providers):
        [one] = registry.get("onnx").cases({"model": path, "providers": providers, "latency_batches": [2],
                                             "throughput_batches": [], **FAST}, "cpu")
        return run_case(onnx_workload.run, one.params, RunContext("cpu"), uses_torch=True)

    refused = case([AZURE])
    assert refused["status"] == "unsupported"
    assert "falls back to the CPU for node(s) MatMul 'dense'" in refused["reason"], refused["reason"]
    allowed = case([AZURE, CPU])
    assert allowed["status"] == "ok", allowed.get("reason")
    assert allowed["details"]["cpu_fallback"] == "allowed: CPUExecutionProvider is among the requested providers"
    assert allowed["details"]["active_providers"] == [AZURE, CPU]


def test_onnx_runtimes_own_shape_computations_on_the_cpu_are_allowed_and_listed(tmp_path):
    path = shape_model(tmp_path / "shape.onnx")
    details = {}
    session = onnx_session.create(onnxruntime, path, [AZURE], fresh_options, [{}], feeds_for(path, 3), details)
    assert int(session.run(None, feeds_for(path, 3))[0]) == 3
    assert details["cpu_fallback"].startswith("allowed for ONNX Runtime's own shape computations")
    assert details["cpu_nodes"] == {"Gather": 1, "Shape": 1}
    assert details["session_create_seconds"] > 0
    assert not session.get_session_options().enable_profiling  # the measured session is not profiled


def test_which_cpu_nodes_are_shape_computations():
    def event(name, op, outputs, provider=CPU):
        return {"cat": "Node", "name": f"{name}_kernel_time", "args": {
            "op_name": op, "provider": provider, "output_type_shape": [{t: s} for t, s in outputs]}}

    events = [event("s", "Shape", [("int64", [4])]), event("s", "Shape", [("int64", [4])]),  # a second run
              event("scale", "Sqrt", [("float", [])]),
              event("det", "Det", [("float", [2])]),  # no GPU kernel, however small
              event("embed", "Gather", [("float", [128, 768])]),  # a shape operator on real data
              event("mm", "MatMul", [("float", [2, 4])], provider="CUDAExecutionProvider"),
              {"cat": "Node", "name": "s_fence_before", "args": {}}, {"cat": "Session", "name": "model_run"}]
    nodes = onnx_session.cpu_nodes(events)
    assert [(n.name, n.op, n.outputs) for n in nodes] == [("s", "Shape", ((4,),)), ("scale", "Sqrt", ((),)),
                                                          ("det", "Det", ((2,),)), ("embed", "Gather", ((128, 768),))]
    assert [onnx_session.is_shape_computation(n) for n in nodes] == [True, True, False, False]
    assert onnx_session.cpu_nodes({"not": "a list"}) == []


def test_the_cpu_provider_path_is_unchanged(tmp_path):
    """A CPU request refuses nothing and runs as before; its details say how long the session took."""
    path = dense_model(tmp_path / "dense.onnx")
    [one] = registry.get("onnx").cases({"model": path, "latency_batches": [2], "throughput_batches": [], **FAST},
                                       "cpu")
    result = run_case(onnx_workload.run, one.params, RunContext("cpu"), uses_torch=True)
    assert result["status"] == "ok", result.get("reason")
    details = result["details"]
    assert details["active_providers"] == [CPU] and "cpu_fallback" not in details
    assert details["session_create_seconds"] > 0 and "tensorrt_engine" not in details
    assert result["figures"]["max_relative_error"] < 1e-5
