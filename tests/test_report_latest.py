"""``sixdim report`` with no report named (``sixdim report latest``): the latest result of each workload per
device in the terminal, with the agent's live verdict and the likely cause, over a real history."""

import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import time

import pytest

from sixdim.cli import main
from sixdim.core.conditions import setting_versions
from sixdim.report import latest
from sixdim.store.history import History
from tests.helpers import HEALTHY_CONDITIONS, make_record

RUNS = 60
HOUR = 3600.0
ZONE = "XST-5:30"
"""A POSIX time zone (no tzdata needed): UTC+05:30, named XST."""
BASE = HEALTHY_CONDITIONS
POWER_CAUSE = "power limit lowered (power limit 700 W \u2192 500 W)"


def _conditions(rnd, **changed):
    return {**BASE, "temperature_celsius": 61.0 + rnd.gauss(0, 0.5),
            "sm_clock_hertz": 1.98e9 * (1 + rnd.gauss(0, 0.002)), "load_per_cpu": 0.1 + abs(rnd.gauss(0, 0.02)),
            **changed}


def _case(rnd, *, started, ended, seconds=0.01, status="ok", workload="gemm", shape="m=8,n=8,k=8", gpu="0",
          uuid="GPU-a", precision="bf16", conditions=None, **figures):
    record = make_record(status, workload=workload, seconds=seconds * (1 + rnd.gauss(0, 0.01)), ended_at=ended,
                         gpu=gpu, uuid=uuid, shape=shape, **figures)
    record.started_at, record.precision = started, precision
    if conditions is not None:  # and the settings among them in the environment, as the executor writes them
        record.conditions = conditions
        record.environment.update(setting_versions(conditions))
    return record


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """One suite run an hour for 60 hours on node1, each worker run's cases sharing its start time:

    - GPU 0, gemm m=8 and m=16: from run 48 the GPU's power limit is 500 W, not 700 W (a setting: a
      known break point), and m=8 is 8% slower from then; m=16 is unchanged.  Its last run also
      has an int8 case that is unsupported, and an m=32 case that failed in a worker started after
      the first one crashed;
    - GPU 0, memcpy 64MiB: bytes/s only, steady, recording no conditions (so no power limit either);
    - GPU 1, gemm m=8: 6% slower from run 54, no condition changed.

    And node2's CPU ran gemm three times, the last six hours ago."""
    path = tmp_path_factory.mktemp("latest") / "history.db"
    rnd = random.Random(11)
    now = time.time()
    t0 = now - RUNS * HOUR
    h = History(path)
    for i in range(RUNS):
        start = t0 + i * HOUR
        power = {"power_limit_watts": 500.0, "sw_power_cap_ratio": 0.7} if i >= 48 else {}
        gpu0 = _conditions(rnd, **power)
        h.add(_case(rnd, started=start, ended=start + 10, seconds=0.01 * (1.08 if i >= 48 else 1.0),
                    conditions=gpu0))
        h.add(_case(rnd, started=start, ended=start + 20, seconds=0.02, shape="m=16,n=16,k=16", conditions=gpu0))
        if i == RUNS - 1:
            h.add(_case(rnd, started=start, ended=start + 21, status="unsupported", precision="int8"))
            h.add(_case(rnd, started=start + 25, ended=start + 30, status="failed", shape="m=32,n=32,k=32"))
        memcpy = _case(rnd, started=start, ended=start + 40, workload="memcpy", shape="64MiB")
        memcpy.figures = {"seconds": 0.064, "bytes_per_second": 1.05e12 * (1 + rnd.gauss(0, 0.005))}
        h.add(memcpy)
        h.add(_case(rnd, started=start + 60, ended=start + 70, seconds=0.01 * (1.06 if i >= 54 else 1.0), gpu="1",
                    uuid="GPU-b", conditions=_conditions(rnd)))
    for i in range(3):
        cpu = _case(rnd, started=now - (8 - i) * HOUR, ended=now - (8 - i) * HOUR + 5, seconds=0.5, gpu="", uuid="",
                    precision="fp32")
        cpu.hostname, cpu.device_type, cpu.device = "node2", "cpu", "cpu"
        h.add(cpu)
    h.close()
    return {"path": str(path), "now": now, "t0": t0}


def _cli(history, *args, env=None):
    """The real command line in a child: ``python -m sixdim`` with the history from the environment."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SIXDIM_")},
           "SIXDIM_HISTORY": history["path"], "TZ": ZONE, **(env or {})}
    return subprocess.run([sys.executable, "-m", "sixdim", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def _cells(line):
    return re.split(r"\s{2,}", line.strip())


def _table(out):
    """The table's header and its rows by (host, device, workload), each row's cells by header."""
    lines = out.splitlines()
    head = _cells(lines[0])
    head.insert(head.index(next(h for h in head if h.startswith("last run"))) + 1, "age")  # its header is blank
    rows = {}
    for line in lines[1:]:
        if not line.strip():
            break
        cells = _cells(line)
        assert len(cells) == len(head), (head, cells)
        row = dict(zip(head, cells))
        rows[(row["host"], row["device"], row["workload"])] = row
    return head, rows


def test_report_with_no_arguments_prints_the_latest_result_of_each_workload(history):
    """``sixdim report``, nothing else: one row per host, device and workload, with the latest run's time in
    local time and as an age, its cases by status, its headline speed, the verdict and the likely cause."""
    result = _cli(history, "report")
    assert result.returncode == 0, result.stderr
    head, rows = _table(result.stdout)
    assert head[:6] == ["host", "device", "workload", "last run (XST)", "age", "cases"]
    assert head[6:] == ["headline", "verdict", "series", "worst series", "likely cause"]
    assert list(rows) == [("node1", "cuda:0", "gemm"), ("node1", "cuda:0", "memcpy"), ("node1", "cuda:1", "gemm"),
                          ("node2", "cpu", "gemm")]

    gemm = rows[("node1", "cuda:0", "gemm")]
    last = history["t0"] + (RUNS - 1) * HOUR + 30  # the failed case's end, in the worker restarted after a crash
    assert gemm["last run (XST)"] == time.strftime("%Y-%m-%d %H:%M", time.gmtime(last + 5.5 * HOUR))
    assert gemm["age"] == "60 min ago"
    # the last run only (not the 59 before it), the case of the restarted worker included
    assert gemm["cases"] == "4 cases: 2 ok; failures: 1 failed; not run: 1 unsupported"
    assert re.fullmatch(r"\d+(\.\d+)? kFLOP/s geomean of 2", gemm["headline"])
    assert gemm["verdict"] == "regression"
    assert gemm["series"].startswith("1 regression")  # m=16 is not (the failed and unsupported ones have none)
    assert re.fullmatch(r"bf16 m=8,n=8,k=8: FLOP/s \u2212[5-9]\.\d%", gemm["worst series"])
    assert gemm["likely cause"] == POWER_CAUSE

    memcpy = rows[("node1", "cuda:0", "memcpy")]
    assert memcpy["cases"] == "1 case: 1 ok"
    assert re.fullmatch(r"1\.0\d\d TB/s", memcpy["headline"])  # the one case's bytes/s, no mean
    assert (memcpy["verdict"], memcpy["series"], memcpy["likely cause"]) == ("ok", "1 ok", "-")

    other = rows[("node1", "cuda:1", "gemm")]
    assert other["verdict"] == "regression" and other["series"] == "1 regression"
    assert other["likely cause"] == "no recorded condition changed"
    assert re.fullmatch(r"\d+(\.\d+)? kFLOP/s", other["headline"])

    cpu = rows[("node2", "cpu", "gemm")]
    assert (cpu["age"], cpu["cases"], cpu["verdict"]) == ("6 h ago", "1 case: 1 ok", "insufficient data")

    footer = result.stdout.splitlines()[-1]
    assert footer.startswith("4 workload(s) on 3 device(s): 2 with a regression, 0 suspicious")
    assert history["path"] in footer


def test_json_parses_and_says_what_the_table_says(history, capsys, monkeypatch):
    monkeypatch.setenv("SIXDIM_HISTORY", history["path"])
    assert main(["report"]) == 0
    _, table = _table(capsys.readouterr().out)
    assert main(["report", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert len(found) == len(table) == 4
    for row in found:
        cells = table[(row["hostname"], latest.device_text(row), row["workload"])]
        assert cells["cases"] == row["cases_text"]
        assert cells["headline"] == row["headline"]["text"]
        assert cells["verdict"] == row["verdict"].replace("_", " ")
        assert cells["likely cause"] == (row["cause"] or "-")
        assert cells["age"] == latest.ago(row["age_seconds"])
    gemm = found[0]
    assert (gemm["hostname"], gemm["gpu"], gemm["uuid"], gemm["workload"]) == ("node1", "0", "GPU-a", "gemm")
    assert gemm["model_name"] == "NVIDIA H100 80GB HBM3" and gemm["suite"] == "quick"
    assert gemm["cases"] == {"failed": 1, "ok": 2, "unsupported": 1}
    assert gemm["headline"]["figure"] == "flops" and gemm["headline"]["cases"] == 2
    assert gemm["headline"]["how"] == "geometric mean"
    assert gemm["last_run"] == pytest.approx(history["t0"] + (RUNS - 1) * HOUR + 30)
    assert gemm["series"]["regression"] == 1
    [worst] = gemm["unhealthy"]
    assert (worst["shape"], worst["state"], worst["figure"]) == ("m=8,n=8,k=8", "regression", "flops")
    assert worst["version_change"] == "power limit 700 W \u2192 500 W"  # the setting change regressed it
    assert worst["causes"][0] == {"cause": "power_limit", "evidence": "power limit 700 W \u2192 500 W"}
    assert gemm["cause"] == POWER_CAUSE
    memcpy = found[1]
    assert memcpy["headline"]["figure"] == "bytes_per_second" and memcpy["headline"]["how"] == "one case"
    assert memcpy["unhealthy"] == [] and memcpy["cause"] is None


def test_since_and_workload_narrow_the_rows(history, capsys, monkeypatch):
    monkeypatch.setenv("SIXDIM_HISTORY", history["path"])
    assert main(["report", "--json", "--since", "2h"]) == 0  # node2's CPU last ran 6 hours ago
    assert [(r["hostname"], r["workload"]) for r in json.loads(capsys.readouterr().out)] == [
        ("node1", "gemm"), ("node1", "memcpy"), ("node1", "gemm")]
    assert main(["report", "latest", "-w", "memcpy"]) == 0
    _, rows = _table(capsys.readouterr().out)
    assert list(rows) == [("node1", "cuda:0", "memcpy")]
    assert main(["report", "--since", "1m"]) == 0
    assert re.fullmatch(rf"no runs since \d{{4}}-\d\d-\d\d \d\d:\d\d in {re.escape(history['path'])}\n",
                        capsys.readouterr().out)


def test_a_missing_history_or_another_database_is_one_line_and_exit_2(tmp_path, history):
    missing = tmp_path / "nowhere.db"
    result = _cli(history, "report", env={"SIXDIM_HISTORY": str(missing)})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == f"sixdim: error: history database {missing}: no such file"
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    result = _cli(history, "report", "--history", str(other))
    assert result.returncode == 2
    assert result.stderr.strip() == f"sixdim: error: {other} is not a sixdim history database (it has no table 'runs')"


def test_help_says_what_each_column_is(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["report", "--help"])
    assert exit.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "'sixdim report' (or 'sixdim report latest') prints the latest result of each workload" in text
    with pytest.raises(SystemExit):
        main(["report", "latest", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("local time, and how long ago", "failures apart from the cases that did not run",
                  "geometric mean", "'geomean of N'", "likely cause", "--since DURATION", "--json", "--history"):
        assert words in text


def test_an_empty_history_says_so(tmp_path, capsys):
    History(tmp_path / "empty.db").close()
    assert main(["report", "--history", str(tmp_path / "empty.db")]) == 0
    assert capsys.readouterr().out == f"no runs in {tmp_path / 'empty.db'}\n"


def _reordered(rows):
    """The same rows as a row type whose fields come in the reverse order (the properties the reports use
    carried over): a report that reads a field by its position would read another field from these."""
    from collections import namedtuple

    from sixdim.store.rows import RunRow

    base = namedtuple("ReversedRunRow", reversed(RunRow._fields))
    reversed_row = type("ReversedRunRow", (base,), {"__slots__": (), "key": RunRow.key, "device": RunRow.device})
    found = [reversed_row(**row._asdict()) for row in rows]
    assert [tuple(row) for row in found] != [tuple(row) for row in rows]
    return found


def test_the_latest_report_reads_each_run_by_its_fields_not_their_order(history):
    """``sixdim report`` reads the store's rows by field name (sixdim.store.rows.RunRow): the same rows with
    their fields reordered give the same table, verdicts and causes (regressions included)."""
    from sixdim.report.data import record_of

    path = history["path"]
    rows = latest.read(path, 64)
    moved = _reordered(rows)
    assert [record_of(row).to_dict() for row in moved] == [record_of(row).to_dict() for row in rows]
    stops = latest.read_interruptions(path)
    expected = latest.rows(rows, latest.live_verdicts(rows, path), now=history["now"], interruptions=stops)
    found = latest.rows(moved, latest.live_verdicts(moved, path), now=history["now"], interruptions=stops)
    assert found == expected
    assert [r["cause"] for r in expected].count(POWER_CAUSE) == 1  # the causes were read again, by run id


def test_the_html_reports_model_reads_each_run_by_its_fields_not_their_order(history):
    """The HTML report's live verdicts and the causes of a regressing setting change, from its series' last runs
    (sixdim.report.data.SeriesData.recent), are the same from rows whose fields are reordered."""
    from sixdim.report.data import read
    from sixdim.report.model import Report

    def judged(report):
        out = []
        for sv in report.verdicts():
            causes = [(c.cause, c.evidence) for figure, change in sorted(sv.changes.items())
                      for c in report.change_causes(sv.record.key(), change)]
            out.append((tuple(sv.record.key()), {f: v.state for f, v in sv.verdicts.items()},
                        [(c.cause, c.evidence) for c in sv.causes], causes))
        return out

    report = Report(read(history["path"], keep_recent=64), now=history["now"])
    moved = Report(read(history["path"], keep_recent=64), now=history["now"])
    for s in moved.data.series.values():
        s.recent = _reordered(s.recent)
    expected = judged(report)
    assert judged(moved) == expected
    assert any(causes and causes[0][0] == "power_limit" for *_, causes in expected)  # a change's cause, read by id
