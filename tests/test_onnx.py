"""The onnx workload with the real onnxruntime on the CPU: sixdim's GPT exported and served through the
executor, its figures against a hand-timed ``InferenceSession.run`` loop; correctness (ok, a corrupted output,
a tampered export); providers the machine lacks; a user's file run from a TOML configuration alone; dynamic
dimensions checked at configuration time; the daemon's side never importing onnxruntime."""

import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

onnxruntime = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed: pip install -e '.[test]'")
onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed: pip install -e '.[test]'")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from sixdim.collectors.nvml import NvmlCollector  # noqa: E402
from sixdim.config import ConfigError, load  # noqa: E402
from sixdim.run.devices import cpu_device  # noqa: E402
from sixdim.run.executor import Executor  # noqa: E402
from sixdim.run.worker import run_case  # noqa: E402
from sixdim.store.history import History  # noqa: E402
from sixdim.workloads import registry  # noqa: E402
from sixdim.workloads.context import RunContext  # noqa: E402
from sixdim.workloads.measure.stats import deepspark_mean  # noqa: E402
from sixdim.workloads.onnx import export as onnx_export  # noqa: E402
from sixdim.workloads.onnx import info as onnx_info  # noqa: E402
from sixdim.workloads.onnx import inputs as onnx_inputs  # noqa: E402
from sixdim.workloads.onnx import workload as onnx_workload  # noqa: E402
from sixdim.workloads.spec import ParamError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FAST = {"rounds": 5, "min_round_seconds": 0.02, "warmup_seconds": 0.05, "latency_samples": 40, "power_seconds": 0.0}
"""Few repetitions: the test is about the path and the figures' consistency, not their precision."""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """sixdim's small GPT exported once for the module, as the worker would (same key, same folder)."""
    folder = tmp_path_factory.mktemp("onnx-cache")
    path, now = onnx_export.exported("gpt", "small", "fp32", cache_dir=str(folder))
    assert now and path.is_file()
    return folder, path


def execute(tmp_path, **params):
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), nvml=NvmlCollector("h"),
                        rapl=None)
    return executor.execute(registry.get("onnx"), params, cpu_device(), timeout=120.0)


def hand_timed(path, batch, calls=60):
    """Median seconds of single ``InferenceSession.run`` calls on the same model, inputs, provider and
    threads (one: a thread pool's spinning makes a loaded 2-core machine's timings swing far more)."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    infos = onnx_inputs.from_ort(session.get_inputs())
    feeds = onnx_inputs.make_inputs(infos, onnx_inputs.resolve_shapes(infos, batch, 32, {}), 1000, 0)
    for _ in range(5):
        session.run(None, feeds)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    del session
    return statistics.median(times)


@pytest.mark.slow
def test_sixdims_model_runs_through_the_executor_as_fast_as_a_hand_timed_loop(tmp_path, cache):
    folder, path = cache
    before = {1: hand_timed(path, 1), 4: hand_timed(path, 4)}
    records = execute(tmp_path, model="gpt", cache_dir=str(folder), latency_batches=[1], throughput_batches=[4],
                      intra_op_threads=1, **FAST)
    after = {1: hand_timed(path, 1), 4: hand_timed(path, 4)}
    assert [r.status for r in records] == ["ok", "ok"], [r.reason for r in records]
    assert [r.shape for r in records] == ["model=gpt,size=small,batch=1,ep=CPU,threads=1x0",
                                          "model=gpt,size=small,batch=4,ep=CPU,threads=1x0"]
    assert all(r.precision == "fp32" and r.mode == "inference" for r in records)
    for record in records:
        f, d = record.figures, record.details
        assert d["exported_now"] is False and d["model_file"] == str(path)  # the cache was used
        assert d["active_providers"][0] == "CPUExecutionProvider"
        assert 0 < f["latency_p50_seconds"] <= f["latency_p90_seconds"] <= f["latency_p99_seconds"]
        assert 0 <= f["max_relative_error"] < 1e-4 and d["tolerance"] == onnx_workload.TOLERANCES["fp32"]
        assert record.environment["onnxruntime"] == onnxruntime.__version__
        assert "CPUExecutionProvider" in record.environment["onnxruntime_providers"]
        batch = d["batch"]
        # samples/s follows from the workload's own rounds (DeepSpark rule over batch / round time)
        assert f["samples_per_second"] == pytest.approx(deepspark_mean([batch / s for s in d["round_seconds"]]))
        # against the hand-timed loop right before and after: a ratio, generous for a loaded machine
        low, high = min(before[batch], after[batch]) / 4, max(before[batch], after[batch]) * 4
        assert low <= f["latency_p50_seconds"] <= high, (f["latency_p50_seconds"], before[batch], after[batch])
        assert low <= batch / f["samples_per_second"] <= high, (f["samples_per_second"], before[batch], after[batch])


def run_in_process(**params):
    """One case through the worker's own case runner, in this process (the executor path is above)."""
    [case] = registry.get("onnx").cases({"latency_batches": [2], "throughput_batches": [], **FAST,
                                         "latency_samples": 5, **params}, "cpu")
    return run_case(onnx_workload.run, case.params, RunContext("cpu"), uses_torch=True)


@pytest.mark.slow
def test_a_corrupted_output_is_incorrect_with_its_error(cache):
    folder, _ = cache
    result = run_in_process(model="gpt", cache_dir=str(folder), corrupt=True)
    assert result["status"] == "incorrect" and "max relative error" in result["reason"]
    assert result["figures"]["max_relative_error"] > 1 and result["figures"]["samples_per_second"] > 0


@pytest.mark.slow
def test_a_tampered_export_is_incorrect_against_pytorch(cache, tmp_path):
    """The reference is PyTorch's own model, not the file: changed weights in the cached export are caught."""
    folder, path = cache
    copy = tmp_path / "cache" / path.parent.name
    shutil.copytree(path.parent, copy)
    model = onnx.load(str(copy / onnx_export.MODEL_FILE))
    weight = max(model.graph.initializer, key=lambda t: len(t.raw_data))
    values = numpy_helper.to_array(weight) * 1.5
    weight.CopyFrom(numpy_helper.from_array(values, weight.name))
    onnx.save(model, str(copy / onnx_export.MODEL_FILE))
    result = run_in_process(model="gpt", cache_dir=str(tmp_path / "cache"))
    assert result["details"]["model_file"] == str(copy / onnx_export.MODEL_FILE)
    assert result["status"] == "incorrect", result
    assert result["figures"]["max_relative_error"] > onnx_workload.TOLERANCES["fp32"]


@pytest.mark.slow
def test_io_binding_runs_and_checks_on_the_cpu_too(cache):
    folder, _ = cache
    result = run_in_process(model="gpt", cache_dir=str(folder), io_binding=True)
    assert result["status"] == "ok", result.get("reason")
    assert result["figures"]["max_relative_error"] < 1e-4


@pytest.mark.slow
def test_a_provider_the_machine_lacks_is_unsupported_naming_the_available_ones(tmp_path, cache):
    folder, _ = cache
    [record] = execute(tmp_path, model="gpt", cache_dir=str(folder), providers=["CUDAExecutionProvider"],
                       latency_batches=[1], throughput_batches=[], **FAST)
    assert record.status == "unsupported"
    assert "CUDAExecutionProvider" in record.reason and "CPUExecutionProvider" in record.reason
    assert "sixdim[onnx-gpu]" in record.reason  # how to get a GPU build
    assert record.shape == "model=gpt,size=small,batch=1,ep=CUDA"
    made_up = run_in_process(model="gpt", cache_dir=str(folder), providers=["NoSuchExecutionProvider",
                                                                           "CPUExecutionProvider"])
    assert made_up["status"] == "unsupported" and "NoSuchExecutionProvider" in made_up["reason"]
    assert "available: " in made_up["reason"] and "CPUExecutionProvider" in made_up["reason"]


def tiny_model(path, x_dims=("batch", 8), ids_dims=("batch", "seq")):
    """A user's model: y = relu(x·W + mean over seq of E[ids]), with a dynamic batch (and sequence)."""
    rng = __import__("numpy").random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 4)).astype("float32"), "W"),
               numpy_helper.from_array(rng.standard_normal((50, 4)).astype("float32"), "E"),
               numpy_helper.from_array(__import__("numpy").array([1], dtype="int64"), "axes")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Gather", ["E", "ids"], ["emb"]),
             helper.make_node("ReduceMean", ["emb", "axes"], ["pooled"], keepdims=0),
             helper.make_node("Add", ["xw", "pooled"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_dims)),
                                              helper.make_tensor_value_info("ids", TensorProto.INT64, list(ids_dims))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.mark.slow
def test_a_users_file_runs_from_a_toml_configuration_alone(tmp_path, cli_env):
    model = tiny_model(tmp_path / "tiny.onnx")
    config = tmp_path / "sixdim.toml"
    config.write_text(textwrap.dedent(f"""
        [[suites]]
        name = "my-model"
        interval_seconds = 3600
        devices = ["cpu"]
        workloads = [
            {{name = "onnx", params = {{model = "{model}", vocab_size = 50, sequence_length = 6, latency_batches = [1, 3], throughput_batches = [], rounds = 3, min_round_seconds = 0.01, warmup_seconds = 0.01, latency_samples = 10, power_seconds = 0}}}},
        ]
    """))  # noqa: E501 - a TOML inline table cannot span lines
    [suite] = load(str(config)).suites
    assert [w.name for w in suite.workloads] == ["onnx"]
    result = subprocess.run([sys.executable, "-m", "sixdim", "run", "--config", str(config), "--suite", "my-model",
                             "-d", "cpu", "--json"],
                            capture_output=True, text=True, env=cli_env, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    assert [r["shape"] for r in records] == ["model=tiny.onnx,batch=1,seq=6,ep=CPU",
                                             "model=tiny.onnx,batch=3,seq=6,ep=CPU"]
    for record in records:
        assert record["status"] == "ok" and record["suite"] == "my-model" and record["precision"] == "fp32"
        assert record["details"]["input_shapes"] == {"x": [record["details"]["batch"], 8],
                                                     "ids": [record["details"]["batch"], 6]}
        assert record["details"]["reference"].startswith("onnxruntime CPUExecutionProvider")
        assert record["figures"]["max_relative_error"] < 1e-5 and record["figures"]["samples_per_second"] > 0


@pytest.mark.slow
def test_a_dynamic_dimension_no_parameter_sets_is_a_configuration_error(tmp_path):
    model = tiny_model(tmp_path / "image.onnx", x_dims=("batch", "features"))
    spec = registry.get("onnx")
    with pytest.raises(ParamError, match=r"'features' \(axis 1\).*dims = \[\"features=SIZE\"\]"):
        spec.cases({"model": str(model)}, "cpu")
    assert len(spec.cases({"model": str(model), "dims": ["features=8"]}, "cpu")) == 4  # batches 1, 2, 4 and 8
    with pytest.raises(ParamError, match="'height', which is no dynamic dimension"):
        spec.cases({"model": str(model), "dims": ["features=8", "height=3"]}, "cpu")
    config = tmp_path / "bad.toml"
    config.write_text(f'[[suites]]\nname = "s"\ninterval_seconds = 60\nworkloads = [{{name = "onnx", params = '
                      f'{{model = "{model}"}}}}]\n')
    with pytest.raises(ConfigError, match="features"):
        load(str(config))
    # not knowable at configuration time (the file is not there yet): the run fails naming the dimension
    later = tmp_path / "later.onnx"
    [case] = spec.cases({"model": str(later), "latency_batches": [1], "throughput_batches": [], **FAST}, "cpu")
    tiny_model(later, x_dims=("batch", "features"))
    result = run_case(onnx_workload.run, case.params, RunContext("cpu"), uses_torch=True)
    assert result["status"] == "failed" and "'features'" in result["reason"]


@pytest.mark.slow
def test_a_fixed_batch_other_than_the_case_is_unsupported(tmp_path):
    model = tiny_model(tmp_path / "fixed.onnx", x_dims=(1, 8), ids_dims=(1, "seq"))
    [one, two] = registry.get("onnx").cases({"model": str(model), "latency_batches": [1, 2], "throughput_batches": [],
                                             "vocab_size": 50, **FAST}, "cpu")
    assert run_case(onnx_workload.run, one.params, RunContext("cpu"), uses_torch=True)["status"] == "ok"
    result = run_case(onnx_workload.run, two.params, RunContext("cpu"), uses_torch=True)
    assert result["status"] == "unsupported" and "fixed batch of 1" in result["reason"]


def test_the_reader_sees_what_onnxruntime_declares(cache, tmp_path):
    _, path = cache
    for model in (path, tiny_model(tmp_path / "tiny.onnx")):
        info = onnx_info.read(model)
        session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        assert info.inputs == onnx_inputs.from_ort(session.get_inputs())
        assert [o.name for o in info.outputs] == [o.name for o in session.get_outputs()]
    assert onnx_info.read(path).inputs[0].dims == ("batch", "seq")  # the export's named dynamic dimensions
    for junk in (b"", b"not an onnx model at all", path.read_bytes()[:200]):
        (tmp_path / "junk.onnx").write_bytes(junk)
        with pytest.raises(onnx_info.OnnxInfoError):
            onnx_info.read(tmp_path / "junk.onnx")


def test_the_first_sample_is_the_same_at_every_batch_size():
    infos = (onnx_info.TensorInfo("input_ids", "int64", ("batch", "seq")),
             onnx_info.TensorInfo("attention_mask", "int64", ("batch", "seq")),
             onnx_info.TensorInfo("pixels", "float16", ("batch", 3)), onnx_info.TensorInfo("keep", "bool", ("batch",)))
    one = onnx_inputs.make_inputs(infos, onnx_inputs.resolve_shapes(infos, 1, 5, {}), 7, 3)
    four = onnx_inputs.make_inputs(infos, onnx_inputs.resolve_shapes(infos, 4, 5, {}), 7, 3)
    for name, value in one.items():
        assert (four[name][:1] == value).all() and four[name].shape[0] == 4 and value.dtype == four[name].dtype
    assert one["input_ids"].max() < 7 and (four["attention_mask"] == 1).all() and four["keep"].all()


def test_the_cache_key_changes_with_what_decides_the_export():
    base = onnx_export.folder_name(onnx_export.cache_key("gpt", "small", "fp32", 0, 0))
    for changed in (("gpt", "full", "fp32", 0, 0), ("gpt", "small", "fp16", 0, 0), ("gpt", "small", "fp32", 17, 0),
                    ("gpt", "small", "fp32", 0, 1), ("bert_large", "small", "fp32", 0, 0)):
        assert onnx_export.folder_name(onnx_export.cache_key(*changed)) != base
    key = onnx_export.cache_key("gpt", "small", "fp32", 0, 0)
    assert key["torch"] and key["onnxscript"] and key["architecture"]["vocab"] == 1000


def test_the_inference_suite_runs_sixdims_models_through_onnxruntime():
    entries = [params for name, params in registry.SUITES["inference"] if name == "onnx"]
    assert [e["model"] for e in entries] == ["resnet50", "bert_large", "gpt"]
    for device_type in ("cpu", "cuda"):
        for params in entries:
            cases = registry.get("onnx").cases(params, device_type)
            assert cases and all(c.mode == "inference" for c in cases)
    cuda = registry.get("onnx").cases({"model": "resnet50"}, "cuda")
    assert [c.shape for c in cuda][-1] == "model=resnet50,size=full,batch=128,ep=CUDA"


def test_the_daemons_side_never_imports_onnxruntime_or_onnx(tmp_path):
    model = tiny_model(tmp_path / "tiny.onnx")
    code = textwrap.dedent(f"""
        import sys
        import sixdim.cli, sixdim.daemon.serve, sixdim.config
        from sixdim.workloads import registry
        registry.get("onnx").cases({{"model": {str(model)!r}}}, "cpu")
        registry.get("onnx").cases({{"model": "gpt"}}, "cuda")
        loaded = sorted(m for m in ("onnxruntime", "onnx", "onnxscript", "torch", "numpy") if m in sys.modules)
        print(",".join(loaded))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


@pytest.mark.slow
def test_onnxruntime_missing_is_unsupported_naming_the_extra(tmp_path):
    """An install where ``import onnxruntime`` fails (a package that raises ImportError shadows the real one)."""
    shadow = tmp_path / "shadow" / "onnxruntime"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named onnxruntime (shadowed by the test)')\n")
    code = textwrap.dedent("""
        import json
        from sixdim.run.worker import run_case, software_environment
        from sixdim.workloads.onnx import workload as onnx
        from sixdim.workloads import registry
        from sixdim.workloads.context import RunContext
        [case] = registry.get("onnx").cases({"latency_batches": [1], "throughput_batches": []}, "cpu")
        print(json.dumps([run_case(onnx.run, case.params, RunContext("cpu")), software_environment("cpu")]))
    """)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'shadow'}{os.pathsep}{ROOT}"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    outcome, environment = json.loads(result.stdout)
    assert outcome["status"] == "unsupported" and 'pip install "sixdim[onnx]"' in outcome["reason"]
    # the worker still starts, and its environment says why there is no onnxruntime version
    assert environment["torch"] and environment["onnxruntime"] == "" and "shadowed" in environment["onnxruntime_error"]
