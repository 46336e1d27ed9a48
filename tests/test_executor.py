"""One worker, many cases: each case is its own record, whatever happens to the others."""

from agent.board import Board
from agent.devices import cpu_device
from agent.executor import Executor
from agent.history import History
from collectors.nvml import NvmlCollector
from workloads.spec import Case, Param, WorkloadSpec


def by_kind_cases(spec, params, device_type):
    return [Case({"kind": kind}, precision="fp32", shape=f"case={i}") for i, kind in enumerate(params["kinds"])]


SPEC = WorkloadSpec(name="faults", description="test", entry="tests.fault_workloads:by_kind", expander=by_kind_cases,
                    params=(Param("kinds", str, "what each case does", ["ok"], ["ok"], many=True),))


def test_each_case_is_recorded_and_a_crash_costs_only_its_case(tmp_path):
    history = History(tmp_path / "h.db")
    board = Board()
    executor = Executor(hostname="h", history=history, board=board, nvml=NvmlCollector("h"), rapl=None)
    records = executor.execute(SPEC, {"kinds": ["ok", "unsupported", "raise", "ok", "crash", "ok"]}, cpu_device())
    assert [r.status for r in records] == ["ok", "unsupported", "failed", "ok", "failed", "ok"]
    assert records[1].reason == "no fp8 on this device (simulated)"
    assert records[2].reason == "ValueError: bad case"
    assert "SIGSEGV" in records[4].reason
    assert records[5].started_at > records[4].started_at  # the case after the crash ran in a fresh worker
    assert [r.shape for r in history] == [f"case={i}" for i in range(6)]
    assert {r.shape for r in board.latest()} == {"case=0", "case=3", "case=5"}  # only good results export


def test_a_suite_shares_one_worker(tmp_path):
    executor = Executor(hostname="h", history=History(tmp_path / "h.db"), board=Board(), nvml=NvmlCollector("h"),
                        rapl=None)
    records = executor.execute_many([(SPEC, {"kinds": ["ok"]}), (SPEC, {"kinds": ["ok", "ok"]})], cpu_device())
    assert [r.status for r in records] == ["ok", "ok", "ok"]
    assert len({r.started_at for r in records}) == 1  # one worker ran all three cases
    ok = records[0]
    assert ok.figures["seconds"] == 0.25 and ok.details["telemetry"]["window_seconds"] > 0.04
