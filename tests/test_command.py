"""Command workloads with real child scripts: AI-Rank, MLPerf and free-text output; failing and hanging."""

import os
import sys
import textwrap
import time

import pytest

from agent.board import Board
from agent.devices import cpu_device
from agent.executor import Executor
from agent.history import History
from collectors.nvml import NvmlCollector
from workloads import registry
from workloads.logparse import TrainingLog, parse_ai_rank
from workloads.spec import ParamError


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def run_command(tmp_path, timeout=60.0, **params):
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), board=Board(), nvml=NvmlCollector("h"),
                        rapl=None)
    [record] = executor.execute(registry.get("command"), params, cpu_device(), timeout=timeout)
    return record


AI_RANK_SCRIPT = """
    import time
    print("- AI-Rank-log 1558631910.424 test_begin", flush=True)
    for epoch, acc in enumerate([0.16, 0.32, 0.47, 0.64, 0.76, 0.80, 0.85], start=1):
        print(f"AI-Rank-log {1558631910.424 + epoch} eval_accuracy:{acc}, total_epoch_cnt:{epoch}, ips:{1000 + 10 * epoch}images/sec", flush=True)
        time.sleep(0.05)
    print("AI-Rank-log 1558631918.454 target_quality_time:8.03sec")
    print("AI-Rank-log 1558631922.454 test_finish")
    print("AI-Rank-log 1558631922.455 total_use_time:12.03sec")
    print("AI-Rank-log 1558631922.456 avg_ips:1190images/sec")
"""


def test_ai_rank_log(tmp_path):
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "ai_rank.py", AI_RANK_SCRIPT)],
                         label="toy-airank")
    assert record.status == "ok", record.reason
    ips = [1000 + 10 * e for e in range(1, 8)]
    expected_speed = (sum(ips) - min(ips) - max(ips)) / (len(ips) - 2)  # DeepSpark rule, 7 reports
    assert record.figures["samples_per_second"] == pytest.approx(expected_speed)
    assert record.figures["accuracy"] == 0.85
    assert record.figures["time_to_train_seconds"] == pytest.approx(8.03)
    assert record.figures["seconds"] == pytest.approx(12.03)
    assert (record.workload, record.shape, record.kernel_pass) == ("command", "toy-airank", "command")
    assert "torch" not in record.environment  # a command runs in any framework: no torch loaded beside it
    assert record.figures["memory_bytes"] > 0  # sampled while the command ran


MLPERF_SCRIPT = """
    import json
    def log(key, value=None, time_ms=0, **metadata):
        print(":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME",
                                        "key": key, "value": value, "metadata": metadata}), flush=True)
    log("run_start", time_ms=1000)
    for epoch in range(6):
        log("throughput", 500.0 + epoch, time_ms=1000 + 100 * epoch, epoch_num=epoch)
        log("eval_accuracy", 0.70 + 0.01 * epoch, time_ms=1050 + 100 * epoch, epoch_num=epoch)
    log("run_stop", time_ms=4500, status="success")
"""


def test_mlperf_log(tmp_path):
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "mlperf.py", MLPERF_SCRIPT)])
    assert record.status == "ok", record.reason
    assert record.figures["time_to_train_seconds"] == pytest.approx(3.5)  # run_stop - run_start
    assert record.figures["accuracy"] == pytest.approx(0.75)
    assert record.figures["samples_per_second"] == pytest.approx((501 + 502 + 503 + 504) / 4)
    assert record.shape == os.path.basename(sys.executable)  # the default label: the program's name


FREE_TEXT_SCRIPT = """
    import time
    for step in range(5):
        print(f"step {step}: loss={1.0 / (step + 1):.3f} speed {200 + step} img/s", flush=True)
        time.sleep(0.1)
        print(f"validation top1 = {0.5 + 0.1 * step:.2f}", flush=True)
"""


def test_free_text_with_regexes_and_a_target(tmp_path):
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "free.py", FREE_TEXT_SCRIPT)],
                         formats=[], throughput_regex=r"speed (\d+) img/s", accuracy_regex=r"top1 = ([\d.]+)",
                         target_accuracy=0.7)
    assert record.status == "ok", record.reason
    assert record.figures["samples_per_second"] == pytest.approx(202.0)  # DeepSpark rule over 200..204
    assert record.figures["accuracy"] == pytest.approx(0.9)
    # 0.7 is printed after the third step (3 sleeps of 0.1 s): time to train is measured by sixdim
    assert 0.25 < record.figures["time_to_train_seconds"] < 2.0


def test_shell_command_and_environment(tmp_path):
    record = run_command(tmp_path, argv=["echo \"speed $RATE img/s\"; echo \"speed $RATE img/s\""], shell=True,
                         env=["RATE=321"], throughput_regex=r"speed (\d+)", formats=[])
    assert record.figures["samples_per_second"] == 321.0


def test_failing_command_is_a_failure_with_its_output(tmp_path):
    failing = script(tmp_path, "fail.py", "import sys\nprint('CUDA error: device-side assert triggered')\nsys.exit(7)\n")
    record = run_command(tmp_path, argv=[sys.executable, failing])
    assert record.status == "failed"
    assert "exited with code 7" in record.reason and "device-side assert" in record.reason


def test_hanging_command_times_out_and_is_stopped(tmp_path):
    pid_file = tmp_path / "pid"
    hanging = script(tmp_path, "hang.py", f"""
        import os, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        print("training...", flush=True)
        time.sleep(600)
    """)
    started = time.monotonic()
    record = run_command(tmp_path, timeout=3.0, argv=[sys.executable, hanging])
    assert record.status == "timeout"
    assert time.monotonic() - started < 3.0 + 3.0 + 5.0
    import psutil

    pid = int(pid_file.read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_mlperf_aborted_run_is_a_failure(tmp_path):
    aborted = MLPERF_SCRIPT.replace('status="success"', 'status="aborted"')
    record = run_command(tmp_path, argv=[sys.executable, script(tmp_path, "aborted.py", aborted)])
    assert record.status == "failed" and "aborted" in record.reason


@pytest.mark.parametrize("params, fragment", [
    ({}, "'argv' is required"),
    ({"argv": ["a", "b"], "shell": True}, "one string"),
    ({"argv": ["x"], "throughput_regex": "("}, "not a valid regular expression"),
    ({"argv": ["x"], "env": ["NOEQUALS"]}, "KEY=VALUE"),
])
def test_bad_command_parameters(params, fragment):
    with pytest.raises(ParamError, match=fragment):
        registry.get("command").cases(params, "cpu")


def test_ai_rank_units_and_bullets():
    log = TrainingLog()
    assert parse_ai_rank("- AI-Rank-log 1558631918.455 avg_ips:1190images/sec", log)
    assert log.average_throughput == 1190.0
    assert not parse_ai_rank("an ordinary line", log)
