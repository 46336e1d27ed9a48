"""``sixdim report`` (latest) over a workload whose latest suite run was interrupted (issue 42, item 8).

Was: a conv row read "3 cases: 3 ok" with a headline "geomean of 3", over a different mix of cases
than every full run's 20, and nothing said 17 never ran.  Now the row says the run was interrupted
and how many cases it left, and its headline is marked as over part of the cases, never to be taken
for a full run's (``"complete": false`` in the JSON)."""

import json
import time

import pytest

from sixdim.cli import main
from sixdim.core.results import INTERRUPTED, Interruption
from sixdim.store.history import History
from tests.helpers import make_record

SHAPES = 20
FULL_RUNS = 10
HOUR = 3600.0


def _conv(shape: int, start: float, **kwargs) -> object:
    # the small shapes are fast: a geometric mean over the first three is far above one over all 20
    record = make_record(workload="conv", shape=f"c={shape}", seconds=0.001 * (shape + 1), ended_at=start + shape + 1,
                         **kwargs)
    record.started_at = start  # a worker stamps its start on every case it runs
    return record


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """node1 GPU 0: ten full suite runs of conv's 20 shapes, an hour apart, then one interrupted by a
    shutdown after 3 of them (its one interruption record: conv the workload with cases left, 17 of
    them); and gemm on GPU 1, never interrupted."""
    path = tmp_path_factory.mktemp("interrupted") / "history.db"
    t0 = time.time() - (FULL_RUNS + 1) * HOUR
    h = History(path)
    for i in range(FULL_RUNS):
        for shape in range(SHAPES):
            h.add(_conv(shape, t0 + i * HOUR))
        h.add(make_record(gpu="1", uuid="GPU-b", ended_at=t0 + i * HOUR + 5))
    start = t0 + FULL_RUNS * HOUR
    for shape in range(3):
        h.add(_conv(shape, start))
    h.add_interruption(Interruption(
        suite="quick", hostname="node1", device_type="cuda", device="cuda:0", gpu="0", uuid="GPU-a",
        model_name="NVIDIA H100 80GB HBM3", pci_bus_id="00000000:17:00.0", reason=f"{INTERRUPTED} SIGTERM",
        started_at=start, ended_at=start + 4, cases_done=3, cases_left=17, running="conv c=3", workloads=["conv"]))
    h.close()
    return str(path)


def rows(capsys, history):
    assert main(["report", "--history", history, "--json"]) == 0
    return {(r["gpu"], r["workload"]): r for r in json.loads(capsys.readouterr().out)}


def test_an_interrupted_run_is_marked_and_its_headline_is_not_a_full_runs(capsys, history):
    found = rows(capsys, history)
    conv, gemm = found[("0", "conv")], found[("1", "gemm")]
    assert conv["cases"] == {"ok": 3}
    assert conv["interrupted"] == {"reason": f"{INTERRUPTED} SIGTERM", "at": pytest.approx(conv["last_run"] + 0, abs=5),
                                   "cases_ran": 3, "cases_left": 17, "cases_planned": 20,
                                   "suite_cases_left": 17, "workloads_left": ["conv"]}
    assert conv["cases_text"] == "3 cases: 3 ok; interrupted: 17 of 20 not run"
    assert conv["headline"]["complete"] is False and conv["headline"]["cases"] == 3
    assert conv["headline"]["text"].endswith("geomean of 3 (interrupted: 3 of 20 cases)")
    assert gemm["interrupted"] is None and gemm["headline"]["complete"] is True
    assert gemm["cases_text"] == "1 case: 1 ok"


def test_the_table_says_so_and_counts_the_interrupted_workloads(capsys, history):
    assert main(["report", "--history", history]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if " conv " in line)
    assert "interrupted: 17 of 20 not run" in line and "(interrupted: 3 of 20 cases)" in line
    assert "1 interrupted" in out.splitlines()[-1]


def test_the_run_before_an_interruption_is_whole_again_once_a_full_run_follows(capsys, history, tmp_path):
    """An interruption belongs to the suite run it stopped: the next full run of the workload is not
    marked."""
    import shutil

    path = tmp_path / "later.db"
    shutil.copy(history, path)
    h = History(path)
    start = time.time() - 60
    for shape in range(SHAPES):
        h.add(_conv(shape, start))
    h.close()
    conv = rows(capsys, str(path))[("0", "conv")]
    assert conv["interrupted"] is None and conv["cases"] == {"ok": SHAPES}
    assert conv["headline"]["complete"] is True and conv["headline"]["text"].endswith(f"geomean of {SHAPES}")
