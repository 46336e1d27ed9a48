"""``sixdim report regressions`` over a real history: the shifts, their versions, direction,
filters, the table, and the errors a person meets."""

import dataclasses
import json
import random
import sqlite3
import subprocess
import sys
import time

import pytest

from sixdim.cli import main
from sixdim.store.history import History
from tests.helpers import make_record

RUNS = 100
HOUR = 3600.0


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """Two series on one host, both upgraded from driver 550.54 to 560.28 at run 60:

    - A (m=8): the upgrade makes it 7% slower (FLOP/s 0.93x);
    - B (m=16): the upgrade does nothing, but at run 80 it gets 6% faster (no version change).
    A few failed runs in between (they carry no figures and are not analysed)."""
    path = tmp_path_factory.mktemp("report") / "history.db"
    rnd = random.Random(7)
    t0 = time.time() - RUNS * HOUR
    h = History(path)
    starts = {}
    for i in range(RUNS):
        driver = "550.54" if i < 60 else "560.28"
        a = make_record(seconds=0.01 * (1 + rnd.gauss(0, 0.01)) / (0.93 if i >= 60 else 1.0),
                        ended_at=t0 + i * HOUR, driver=driver)
        b = make_record(seconds=0.02 * (1 + rnd.gauss(0, 0.01)) * (0.94 if i >= 80 else 1.0),
                        ended_at=t0 + i * HOUR + 600, driver=driver, shape="m=16,n=16,k=16")
        h.add(a)
        h.add(b)
        starts[("A", i)], starts[("B", i)] = a.started_at, b.started_at
        if i % 30 == 5:
            h.add(make_record("failed", ended_at=t0 + i * HOUR + 1200, driver=driver))
    h.close()
    return {"path": str(path), "starts": starts}


def report(capsys, *args):
    code = main(["report", "regressions", *args])
    out, err = capsys.readouterr()
    return code, out, err


def shifts(capsys, history, *args):
    code, out, err = report(capsys, "--history", history["path"], "--json", *args)
    assert code == 0, err
    return json.loads(out)


def by(found, shape, figure):
    [shift] = [s for s in found if s["shape"] == shape and s["figure"] == figure]
    return shift


def test_a_driver_upgrade_that_costs_seven_percent_is_a_regression_at_the_upgrade(capsys, history):
    found = shifts(capsys, history)
    assert len(found) == 4, [(s["shape"], s["figure"], s["change_ratio"]) for s in found]
    flops = by(found, "m=8,n=8,k=8", "flops")
    assert flops["kind"] == "shift" and flops["state"] == "regression"
    assert flops["change_ratio"] == pytest.approx(0.93, abs=0.01)
    assert flops["at"] == history["starts"][("A", 60)]  # the first run under the new driver
    assert flops["versions_before"]["driver"] == "550.54" and flops["versions_after"]["driver"] == "560.28"
    assert flops["versions_before"]["cuda_runtime"] == flops["versions_after"]["cuda_runtime"] == "12.4"
    assert flops["version_changed"] == ["driver"]
    assert flops["p_value"] < 1e-10
    assert (flops["runs_before"], flops["runs_after"]) == (60, 40)
    assert {k: flops[k] for k in ("hostname", "gpu", "uuid", "workload", "precision", "mode", "pass")} == {
        "hostname": "node1", "gpu": "0", "uuid": "GPU-a", "workload": "gemm", "precision": "bf16",
        "mode": "training", "pass": "forward"}
    assert flops["model_name"] == "NVIDIA H100 80GB HBM3"
    assert flops["median_after"] / flops["median_before"] == pytest.approx(flops["change_ratio"])
    # the same shift in time is worse too: larger is worse for seconds
    seconds = by(found, "m=8,n=8,k=8", "seconds")
    assert seconds["state"] == "regression" and seconds["change_ratio"] == pytest.approx(1 / 0.93, abs=0.01)


def test_direction_decides_the_state_and_a_harmless_upgrade_is_not_listed(capsys, history):
    found = shifts(capsys, history)
    seconds = by(found, "m=16,n=16,k=16", "seconds")
    assert seconds["state"] == "improvement" and seconds["change_ratio"] == pytest.approx(0.94, abs=0.01)
    assert seconds["at"] == history["starts"][("B", 80)]
    assert seconds["version_changed"] == [] and seconds["versions_before"] == seconds["versions_after"]
    flops = by(found, "m=16,n=16,k=16", "flops")
    assert flops["state"] == "improvement" and flops["change_ratio"] == pytest.approx(1 / 0.94, abs=0.01)
    # B's own driver upgrade at run 60 changed nothing: no shift there
    assert not [s for s in found if s["shape"] == "m=16,n=16,k=16" and s["version_changed"]]
    assert [s["at"] for s in found] == sorted(s["at"] for s in found)  # oldest first


def test_since_state_figure_and_workload_filter_the_list(capsys, history):
    recent = shifts(capsys, history, "--since", "30h")  # B's change (20 h ago) but not A's (40 h ago)
    assert {(s["shape"], s["figure"]) for s in recent} == {("m=16,n=16,k=16", "seconds"), ("m=16,n=16,k=16", "flops")}
    assert shifts(capsys, history, "--since", "600") == []
    assert len(shifts(capsys, history, "--since", "2w")) == 4
    assert {s["state"] for s in shifts(capsys, history, "--state", "regression")} == {"regression"}
    assert {s["figure"] for s in shifts(capsys, history, "--figure", "seconds")} == {"seconds"}
    assert shifts(capsys, history, "--workload", "conv") == []
    assert len(shifts(capsys, history, "--workload", "gemm")) == 4


def test_the_minimum_effect_comes_from_the_configuration(capsys, history, tmp_path):
    assert shifts(capsys, history, "--regression-min-effect", "0.08") == []  # every shift here is 6-8%
    config = tmp_path / "sixdim.toml"
    config.write_text('[regression.effects]\n"gemm/seconds" = 0.08\n')
    assert {s["figure"] for s in shifts(capsys, history, "--config", str(config))} == {"flops"}


def test_the_table_names_the_versions_and_the_change(capsys, history):
    code, out, _ = report(capsys, "--history", history["path"])
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["when", "(UTC)", "state"]
    flops = next(line for line in lines if "m=8,n=8,k=8" in line and " flops " in line)
    assert "regression" in flops and "driver 550.54 \u2192 560.28" in flops and "\u22127." in flops
    improved = next(line for line in lines if "m=16,n=16,k=16" in line and " seconds " in line)
    assert "improvement" in improved and "\u22126." in improved and improved.rstrip().endswith("-")
    assert "4 shift(s): 2 regression(s), 2 improvement(s)" in out


def test_a_run_that_did_not_say_its_versions_is_not_a_version_change(capsys, tmp_path):
    """Runs without versions (an environment the worker never reported) take the versions said
    before them, as the online detector's segments do: the shift at such a run is not put down to
    a change of every version, and it is found in one piece, not cut there."""
    path = tmp_path / "history.db"
    rnd = random.Random(11)
    t0 = time.time() - RUNS * HOUR
    h = History(path)
    starts = {}
    for i in range(RUNS):
        record = make_record(seconds=0.01 * (1 + rnd.gauss(0, 0.01)) / (0.93 if i >= 60 else 1.0),
                             ended_at=t0 + i * HOUR)
        if i in (30, 60, 61):
            record = dataclasses.replace(record, environment={})
        h.add(record)
        starts[i] = record.started_at
    h.close()
    found = shifts(capsys, {"path": str(path)})
    assert {s["figure"] for s in found} == {"flops", "seconds"}, found
    flops = by(found, "m=8,n=8,k=8", "flops")
    assert flops["state"] == "regression" and flops["at"] == starts[60]
    assert flops["version_changed"] == [] and flops["versions_before"] == flops["versions_after"]
    assert flops["versions_after"]["driver"] == "550.54.15"
    assert (flops["runs_before"], flops["runs_after"]) == (60, 40)


def test_nothing_found_says_so(capsys, history):
    code, out, _ = report(capsys, "--history", history["path"], "--since", "10m")
    assert code == 0 and out.startswith("no shifts found since ")


def test_a_missing_history_is_exit_2_naming_the_file(capsys, tmp_path):
    missing = tmp_path / "nowhere" / "history.db"
    code, out, err = report(capsys, "--history", str(missing))
    assert code == 2 and out == ""
    assert err.startswith("sixdim: error: ") and str(missing) in err
    assert not missing.parent.exists()  # a report creates nothing


def test_a_file_that_is_not_a_history_is_exit_2_naming_it(capsys, tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("not a database\n" * 100)
    code, _, err = report(capsys, "--history", str(junk))
    assert code == 2 and str(junk) in err and "not a database" in err
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).execute("CREATE TABLE other (x)").connection.close()
    code, _, err = report(capsys, "--history", str(empty))
    assert code == 2 and str(empty) in err and "runs" in err


def test_a_bad_since_is_a_usage_error(capsys, history):
    for bad in ("3x", "-5m", "0", "nan", ""):
        with pytest.raises(SystemExit) as stopped:
            main(["report", "regressions", "--history", history["path"], "--since", bad])
        assert stopped.value.code == 2
        assert "--since" in capsys.readouterr().err


def test_the_report_writes_nothing_to_the_history(capsys, history, tmp_path):
    copy = tmp_path / "history.db"
    copy.write_bytes(open(history["path"], "rb").read())
    before = copy.read_bytes()
    assert len(shifts(capsys, {"path": str(copy)})) == 4
    assert copy.read_bytes() == before
    wal = tmp_path / "history.db-wal"  # SQLite's companion of a WAL database, as any reader makes it
    assert not wal.exists() or wal.stat().st_size == 0


def test_a_history_in_a_folder_it_cannot_write_is_read_as_it_is(capsys, history, tmp_path, monkeypatch):
    """Where SQLite cannot create the -shm companion (a read-only folder, another user's), a history
    with no -wal file is read immutable; with a -wal file (uncommitted runs) it is an error."""
    real = sqlite3.connect

    def no_shm(database, *args, **kwargs):
        db = real(database, *args, **kwargs)
        if "immutable=1" not in str(database):
            db.close()
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return db

    monkeypatch.setattr(sqlite3, "connect", no_shm)
    copy = tmp_path / "history.db"
    copy.write_bytes(open(history["path"], "rb").read())
    assert len(shifts(capsys, {"path": str(copy)})) == 4
    (tmp_path / "history.db-wal").write_bytes(b"")
    code, _, err = report(capsys, "--history", str(copy))
    assert code == 2 and str(copy) in err and "readonly" in err


def test_the_history_comes_from_the_environment_like_other_commands(capsys, history, monkeypatch):
    monkeypatch.setenv("SIXDIM_HISTORY", history["path"])
    code, out, _ = report(capsys, "--json")
    assert code == 0 and len(json.loads(out)) == 4


def test_report_without_a_kind_is_the_latest_report_not_this_one(capsys, history):
    assert main(["report", "--history", history["path"], "--json"]) == 0
    assert {row["workload"] for row in json.loads(capsys.readouterr().out)} == {"gemm"}  # rows, not shifts
    with pytest.raises(SystemExit) as exit:
        main(["report", "--help"])
    assert exit.value.code == 0
    assert "regressions" in capsys.readouterr().out


@pytest.mark.slow
def test_the_command_line_loads_no_numpy_until_a_report_runs(cli_env, history):
    """``import sixdim.cli`` stays light; the command itself works end to end in a child."""
    probe = ("import sys, sixdim.cli; sixdim.cli.build_parser(); "
             "print(sorted(m for m in ('numpy', 'scipy') if m in sys.modules))")
    light = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=cli_env, timeout=60)
    assert light.stdout.strip() == "[]", light.stderr
    cli_env = {**cli_env, "SIXDIM_HISTORY": history["path"]}
    result = subprocess.run([sys.executable, "-m", "sixdim", "report", "regressions", "--json", "--figure", "flops"],
                            capture_output=True, text=True, env=cli_env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(s["state"] for s in json.loads(result.stdout)) == ["improvement", "regression"]


# --- issue 25: drifts, spikes at an upgrade, rows SQLite cannot read ---------------------------------

@pytest.fixture(scope="module")
def drifting(tmp_path_factory):
    """Two series on one host, both upgraded from driver 550.54 to 560.28 halfway, 1% Gaussian noise
    (tests/bench/noise_models.py):

    - C (m=32, 400 runs): slower by 0.05% a run, compounded, all along; the upgrade at run 200 does
      nothing;
    - D (m=64, 300 runs): the upgrade at run 200 costs 5%; runs 198 and 199, just before it, are
      spikes 25% slow."""
    from tests.bench import noise_models as nm

    path = tmp_path_factory.mktemp("drifting") / "history.db"
    t0 = time.time() - 400 * HOUR
    h = History(path)
    starts = {}
    c = nm.drift(nm.series(21, "gauss_1", 1, 400)[0], 0.0005)
    d = nm.series(22, "gauss_1", 1, 300, 0.05, 200)[0]
    d[198:200] *= 1.25
    for i in range(400):
        driver = "550.54" if i < 200 else "560.28"
        record = make_record(seconds=0.03 * c[i], ended_at=t0 + i * HOUR, driver=driver, shape="m=32,n=32,k=32")
        h.add(record)
        starts[("C", i)] = record.started_at
        if i < 300:
            record = make_record(seconds=0.04 * d[i], ended_at=t0 + i * HOUR + 600, driver=driver,
                                 shape="m=64,n=64,k=64")
            h.add(record)
            starts[("D", i)] = record.started_at
    h.close()
    return {"path": str(path), "starts": starts}


def test_a_slow_drift_is_listed_as_a_drift_and_never_put_down_to_the_upgrade(capsys, drifting):
    """Was: seven regressions of 2-4% here, one every 50-70 runs (in about a quarter of such series one
    of them sits at the upgrade and names it)."""
    found = [s for s in shifts(capsys, drifting) if s["shape"] == "m=32,n=32,k=32"]
    assert {(s["kind"], s["figure"]) for s in found} == {("drift", "seconds"), ("drift", "flops")}, found
    seconds = by(found, "m=32,n=32,k=32", "seconds")
    assert seconds["state"] == "drift" and seconds["direction"] == "worse" and seconds["version_changed"] == []
    assert seconds["change_ratio"] == pytest.approx(1.0005 ** 399, abs=0.03)
    assert (seconds["at"], seconds["until"]) == (drifting["starts"][("C", 0)], drifting["starts"][("C", 399)])
    assert seconds["runs"] == 400 and seconds["level_end"] > seconds["level_start"]
    assert seconds["versions_before"]["driver"] == "550.54" and seconds["versions_after"]["driver"] == "560.28"
    assert by(found, "m=32,n=32,k=32", "flops")["direction"] == "worse"  # fewer FLOP/s: worse too
    # a drift still going on is listed whenever it started, and the table says what it is
    assert {s["kind"] for s in shifts(capsys, drifting, "--since", "2h")} == {"drift"}
    code, out, _ = report(capsys, "--history", drifting["path"], "--figure", "seconds")
    line = next(line for line in out.splitlines() if "m=32,n=32,k=32" in line)
    assert "worse drift" in line and "400 runs to " in line and line.rstrip().endswith("-")
    assert "; 1 drift(s)" in out


def test_a_drift_has_a_state_of_its_own_so_counting_regressions_counts_steps_only(capsys, drifting):
    """Issue 42, item 8: a drift said ``"state": "regression"``, so a consumer of the JSON counting
    regressions counted the drift too.  A drift is ``"state": "drift"`` with its ``"direction"``; a
    shift says its direction too; ``--state`` picks either."""
    found = shifts(capsys, drifting)
    states = {(s["kind"], s["state"], s["direction"]) for s in found}
    assert states == {("drift", "drift", "worse"), ("shift", "regression", "worse")}, states
    regressions = [s for s in found if s["state"] == "regression"]
    assert {s["shape"] for s in regressions} == {"m=64,n=64,k=64"}  # the upgrade's step; the drift is not one
    assert {s["kind"] for s in shifts(capsys, drifting, "--state", "regression")} == {"shift"}
    drifts = shifts(capsys, drifting, "--state", "drift")
    assert {(s["kind"], s["shape"]) for s in drifts} == {("drift", "m=32,n=32,k=32")}
    # a drift the worse way is still diagnosed (a list of causes, here none recorded: empty)
    assert all("causes" in s for s in drifts)


def test_spikes_just_before_an_upgrade_do_not_drop_the_version_from_its_shift(capsys, drifting):
    """Was: the FLOP/s shift listed 2 runs early, at the first spike, with no version change."""
    found = [s for s in shifts(capsys, drifting) if s["shape"] == "m=64,n=64,k=64"]
    assert {(s["kind"], s["figure"]) for s in found} == {("shift", "seconds"), ("shift", "flops")}, found
    for shift in found:
        assert shift["at"] == drifting["starts"][("D", 200)] and shift["version_changed"] == ["driver"]
        assert (shift["runs_before"], shift["runs_after"]) == (200, 100)
    assert by(found, "m=64,n=64,k=64", "seconds")["change_ratio"] == pytest.approx(1.05, abs=0.01)


def test_figures_sqlite_cannot_read_and_figures_that_are_no_number(capsys, tmp_path):
    """The figures are read out of each row's JSON by SQLite; a row with a NaN in it (Python writes
    one, SQLite refuses it) is parsed in Python instead, and a bool or a text is no figure."""
    path = tmp_path / "history.db"
    rnd = random.Random(5)
    t0 = time.time() - RUNS * HOUR
    h = History(path)
    for i in range(RUNS):
        odd: dict[str, object] = {}
        if 10 <= i < 20:
            odd = {"power_watts": float("nan")}
        elif 20 <= i < 30:
            odd = {"memory_bytes": True, "peak_ratio": "high"}
        h.add(make_record(seconds=0.01 * (1 + rnd.gauss(0, 0.01)) / (0.93 if i >= 60 else 1.0),
                          ended_at=t0 + i * HOUR, **odd))
    h.close()
    found = shifts(capsys, {"path": str(path)})
    assert {(s["kind"], s["figure"]) for s in found} == {("shift", "flops"), ("shift", "seconds")}, found
    assert {s["runs_before"] for s in found} == {60}  # the NaN rows' seconds count
