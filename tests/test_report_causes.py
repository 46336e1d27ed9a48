"""The likely cause of each regression in the offline reports: ``sixdim report regressions`` (JSON
``causes`` and the table's "likely cause") and ``sixdim report html`` (the verdicts now, the version
changes and the change points), from the conditions recorded with the runs either side, read by id."""

import html
import json
import random
import re
import sqlite3
import time

import pytest

from sixdim.cli import main
from sixdim.core.conditions import setting_versions
from sixdim.store import reader
from sixdim.store.history import History
from tests.helpers import HEALTHY_CONDITIONS, make_record

RUNS = 100
HOUR = 3600.0
EVIL = '<script>alert("x")</script>'
BASE = {**HEALTHY_CONDITIONS, "unavailable": {"cpu_quota_cpus": "no cgroup limit"}}
POWER = "power limit 700 W \u2192 500 W"
GOVERNOR = f"CPU governor performance \u2192 {EVIL}"


def _conditions(rnd, **changed):
    out = {**BASE, "temperature_celsius": 61.0 + rnd.gauss(0, 0.5),
           "sm_clock_hertz": 1.98e9 * (1 + rnd.gauss(0, 0.002)), "load_per_cpu": 0.1 + abs(rnd.gauss(0, 0.02))}
    out.update(changed)
    return out


def _run(rnd, i, *, seconds, at, gpu="0", uuid="GPU-a", host="node1", driver="550.54", shape="m=8,n=8,k=8",
         conditions=None):
    record = make_record(seconds=seconds * (1 + rnd.gauss(0, 0.01)), ended_at=at, driver=driver, gpu=gpu, uuid=uuid,
                         shape=shape)
    record.hostname = host
    if conditions is not None:  # and the settings among them in the environment, as the executor writes them
        record.conditions = conditions
        record.environment.update(setting_versions(conditions))
    return record


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """One run an hour for 100 hours, 1% noise, each series on its own GPU, conditions recorded:

    - A (GPU 0): 8% slower from run 86, where its power limit drops 700 -> 500 W and the share of
      the span at the power cap rises 2% -> 70% (the power limit is a setting: a known break point,
      like a version change);
    - B (GPU 1): 6% slower from run 70, no condition changed;
    - C (node2): 8% slower from run 86, where the CPU governor changes to a text with a script tag;
    - D (GPU 2): 6% faster from run 70 (an improvement), no condition changed;
    - E (GPU 3): 7% slower at its driver upgrade 550.54 -> 560.28 at run 60, no condition changed."""
    path = tmp_path_factory.mktemp("causes") / "history.db"
    rnd = random.Random(5)
    t0 = time.time() - RUNS * HOUR
    h = History(path)
    starts = {}
    for i in range(RUNS):
        at = t0 + i * HOUR
        power = {"power_limit_watts": 500.0, "sw_power_cap_ratio": 0.7} if i >= 86 else {}
        runs = {
            "A": _run(rnd, i, seconds=0.01 * (1.08 if i >= 86 else 1.0), at=at, conditions=_conditions(rnd, **power)),
            "B": _run(rnd, i, seconds=0.02 * (1.06 if i >= 70 else 1.0), at=at + 300, gpu="1", uuid="GPU-b",
                      shape="m=16,n=16,k=16", conditions=_conditions(rnd)),
            "C": _run(rnd, i, seconds=0.03 * (1.08 if i >= 86 else 1.0), at=at + 600, host="node2",
                      shape="m=32,n=32,k=32",
                      conditions=_conditions(rnd, **({"cpu_governor": EVIL} if i >= 86 else {}))),
            "D": _run(rnd, i, seconds=0.04 * (0.94 if i >= 70 else 1.0), at=at + 900, gpu="2", uuid="GPU-d",
                      shape="m=64,n=64,k=64", conditions=_conditions(rnd)),
            "E": _run(rnd, i, seconds=0.05 * (1 / 0.93 if i >= 60 else 1.0), at=at + 1200, gpu="3", uuid="GPU-e",
                      driver="550.54" if i < 60 else "560.28", shape="m=128,n=128,k=128", conditions=_conditions(rnd)),
        }
        for name, record in runs.items():
            h.add(record)
            starts[(name, i)] = record.started_at
        if i % 30 == 5:  # a failed run, with no conditions: no ok run of either side
            h.add(make_record("failed", ended_at=at + 1500, driver="550.54"))
    h.close()
    return {"path": str(path), "starts": starts}


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """A history written before conditions were recorded: one 7% step at run 60, no conditions."""
    path = tmp_path_factory.mktemp("bare") / "history.db"
    rnd = random.Random(9)
    t0 = time.time() - RUNS * HOUR
    h = History(path)
    for i in range(RUNS):
        h.add(_run(rnd, i, seconds=0.01 * (1.07 if i >= 60 else 1.0), at=t0 + i * HOUR))
    h.close()
    return str(path)


def report(capsys, path, *args):
    code = main(["report", "regressions", "--history", path, *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def shifts(capsys, path, *args):
    return json.loads(report(capsys, path, "--json", *args))


def of(found, shape, figure="seconds", kind="shift"):
    [shift] = [s for s in found if s["shape"] == shape and s["figure"] == figure and s["kind"] == kind]
    return shift


def test_a_lowered_power_limit_is_the_likely_cause_of_its_shift(capsys, history):
    found = shifts(capsys, history["path"])
    for figure in ("seconds", "flops"):
        a = of(found, "m=8,n=8,k=8", figure)
        assert a["state"] == "regression" and a["at"] == history["starts"][("A", 86)]
        assert a["version_changed"] == ["power_limit"]
        assert a["causes"] == [{"cause": "power_limit", "evidence": POWER},  # the power cap it explains is not named
                               {"cause": "version", "evidence": "power_limit 700 W \u2192 500 W"}], a["causes"]
    # every shift carries the field, each cause a cause and its evidence, at most 3
    assert all(len(s["causes"]) <= 3 and all(set(c) == {"cause", "evidence"} for c in s["causes"]) for s in found)


def test_no_condition_changed_says_none_an_improvement_names_nothing_and_a_version_is_the_last_resort(capsys,
                                                                                                       history):
    found = shifts(capsys, history["path"])
    b = of(found, "m=16,n=16,k=16")
    assert b["state"] == "regression" and b["at"] == history["starts"][("B", 70)]
    assert b["causes"] == [{"cause": "none", "evidence": "no recorded condition changed"}]
    d = of(found, "m=64,n=64,k=64")
    assert d["state"] == "improvement" and d["causes"] == []  # the diagnosis names causes of a slowdown
    e = of(found, "m=128,n=128,k=128")
    assert e["version_changed"] == ["driver"] and e["at"] == history["starts"][("E", 60)]
    assert e["causes"] == [{"cause": "version", "evidence": "driver 550.54 \u2192 560.28"}]
    c = of(found, "m=32,n=32,k=32")
    assert c["causes"] == [{"cause": "cpu_frequency", "evidence": GOVERNOR}]


def test_the_table_shows_the_likely_cause(capsys, history):
    out = report(capsys, history["path"], "--figure", "seconds")
    lines = out.splitlines()
    assert re.search(r"version change +likely cause$", lines[0].rstrip())
    line = next(x for x in lines if "m=8,n=8,k=8" in x)
    assert line.rstrip().endswith(POWER)
    assert next(x for x in lines if "m=16,n=16,k=16" in x).rstrip().endswith("no recorded condition changed")
    assert next(x for x in lines if "m=64,n=64,k=64" in x).rstrip().endswith(" -")
    assert re.search(r"driver 550\.54 \u2192 560\.28 +driver 550\.54 \u2192 560\.28$",
                     next(x for x in lines if "m=128,n=128,k=128" in x).rstrip())


def test_a_history_without_conditions_gives_no_cause(capsys, bare, tmp_path):
    [flops] = [s for s in shifts(capsys, bare) if s["figure"] == "flops"]
    assert flops["state"] == "regression" and flops["causes"] == []
    line = next(x for x in report(capsys, bare).splitlines() if " flops " in x)
    assert line.rstrip().endswith(" -")
    # a history of schema 3 (no conditions column), read as it is: read-only, never migrated
    old = tmp_path / "old.db"
    old.write_bytes(open(bare, "rb").read())
    with sqlite3.connect(old) as db:
        db.execute("ALTER TABLE runs DROP COLUMN conditions")
        db.execute("PRAGMA user_version = 3")
    db.close()
    found = shifts(capsys, str(old))
    assert {s["figure"] for s in found} == {"flops", "seconds"} and all(s["causes"] == [] for s in found)
    with sqlite3.connect(old) as db:
        assert "conditions" not in {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    db.close()


def test_the_conditions_are_read_by_id_for_the_runs_around_the_listed_shifts_only(capsys, history, monkeypatch):
    asked: list[int] = []
    real = reader.conditions

    def counting(db, ids):
        ids = list(ids)
        asked.extend(ids)
        return real(db, ids)

    monkeypatch.setattr(reader, "conditions", counting)
    shifts(capsys, history["path"], "--figure", "seconds")
    # A, B, C and E: at most 20 ok runs either side each (the improvement is not diagnosed)
    assert 0 < len(asked) <= 4 * 40 and len(set(asked)) == len(asked)
    asked.clear()
    shifts(capsys, history["path"], "--state", "improvement")
    assert asked == []


def test_reader_conditions_skips_runs_without_any(history):
    with reader.reading(history["path"]) as db:
        ids = [row[0] for row in db.execute("SELECT id FROM runs ORDER BY id LIMIT 12")]
        statuses = dict(db.execute("SELECT id, status FROM runs"))
        found = reader.conditions(db, [*ids, 10 ** 9])
    assert set(found) == {i for i in ids if statuses[i] == "ok"}  # the failed run recorded none
    assert all(c["power_limit_watts"] == 700.0 and c["cpu_governor"] == "performance" for c in found.values())


@pytest.fixture(scope="module")
def drifting(tmp_path_factory):
    """F: 0.05% slower a run over 400 runs while the share of the span in thermal slowdown climbs
    from 0 to 80% and the GPU from 60 to 85 degrees C."""
    from tests.bench import noise_models as nm

    path = tmp_path_factory.mktemp("drift") / "history.db"
    rnd = random.Random(3)
    t0 = time.time() - 400 * HOUR
    values = nm.drift(nm.series(21, "gauss_1", 1, 400)[0], 0.0005)
    h = History(path)
    for i in range(400):
        record = make_record(seconds=0.03 * values[i], ended_at=t0 + i * HOUR, shape="m=32,n=32,k=32")
        record.conditions = _conditions(rnd, hw_thermal_slowdown_ratio=0.8 * i / 399,
                                         temperature_celsius=60.0 + 25.0 * i / 399)
        h.add(record)
    h.close()
    return str(path)


def test_a_drift_compares_its_first_runs_with_its_last(capsys, drifting):
    drift = of(shifts(capsys, drifting), "m=32,n=32,k=32", kind="drift")
    assert drift["state"] == "drift" and drift["direction"] == "worse"  # diagnosed as a slowdown
    assert [c["cause"] for c in drift["causes"]] == ["thermal"], drift["causes"]
    assert drift["causes"][0]["evidence"].startswith("thermal slowdown 78% of the span (2% before), GPU ")


# ---------------------------------------------------------------------------- the HTML page

def _rows(page, heading):
    """The cells of the table under a heading, as text (tags dropped, entities decoded)."""
    start = page.index(f"<h3>{heading}</h3>")
    end = page.find("<h3>", start + 1)
    part = page[start:end if end > 0 else None]
    out = []
    for row in re.findall(r"<tr>(.*?)</tr>", part, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        out.append([html.unescape(re.sub(r"<[^>]+>", " ", c.replace("<wbr>", ""))).strip() for c in cells])
    return out


@pytest.fixture(scope="module")
def page(history, tmp_path_factory):
    pytest.importorskip("plotly")
    out = tmp_path_factory.mktemp("page") / "report.html"
    assert main(["report", "html", str(out), "--history", history["path"]]) == 0
    return out.read_text()


def test_the_page_shows_the_likely_cause_of_the_verdicts_now(page):
    """The agent's own causes (``SeriesVerdicts.causes``): C's governor; A's lowered power limit started a
    new segment (a setting is a break point): its verdict is the version change's, below."""
    rows = [r for r in _rows(page, "Verdicts now") if r]
    c = [r for r in rows if "m=32,n=32,k=32" in r[2] and r[0] == "regression"]
    assert c and all(r[8] == GOVERNOR for r in c), c
    assert all(r[8] == "\u2014" for r in rows if r[0] == "improvement")


def test_the_page_shows_the_likely_cause_of_version_changes_and_change_points(page):
    changes = [r for r in _rows(page, "Version changes that moved a figure") if r]
    e = [r for r in changes if "m=128" in r[4]]
    assert e and all(r[-1] == "driver 550.54 \u2192 560.28" for r in e)
    a = [r for r in changes if "m=8,n=8,k=8" in r[4]]
    assert a and all(r[2] == r[-1] == POWER for r in a)  # the setting's change, and the cause that names it
    points = [r for r in _rows(page, "Change points in the history") if r]
    assert next(r for r in points if "m=8,n=8,k=8" in r[4])[-2:] == [POWER, POWER]
    assert next(r for r in points if "m=16,n=16,k=16" in r[4])[-1] == "no recorded condition changed"
    assert next(r for r in points if "m=64,n=64,k=64" in r[4])[-1] == "\u2014"


def test_a_cause_from_the_history_is_escaped_on_the_page(page):
    assert EVIL not in page
    escaped = "CPU governor performance \u2192 &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"  # as Jinja2 escapes
    assert f">{escaped}</td>" in page  # the cell
    assert f'title="CPU frequency lower ({escaped})"' in page  # and its title, every cause named


def test_a_page_of_a_history_without_conditions_names_no_cause(bare, tmp_path):
    pytest.importorskip("plotly")
    out = tmp_path / "bare.html"
    assert main(["report", "html", str(out), "--history", bare]) == 0
    text = out.read_text()
    points = [r for r in _rows(text, "Change points in the history") if r]
    assert points and all(r[-1] == "\u2014" for r in points)
    assert "<th>Likely cause</th>" in text  # the column is there, empty


def test_a_run_that_read_no_setting_is_no_break_point(capsys, tmp_path):
    """A run recovered after its agent died says its versions but read no power limit: like the live
    verdicts, the report takes it for an unchanged setting: the one shift is the real 700 -> 500 W change at
    run 70, named from 700 W even when the run just before it is a recovered one."""
    rnd = random.Random(3)
    t0 = time.time() - RUNS * HOUR
    path = str(tmp_path / "history.db")
    h = History(path)
    for i in range(RUNS):
        power = {"power_limit_watts": 500.0, "sw_power_cap_ratio": 0.7} if i >= 70 else {}
        record = _run(rnd, i, seconds=0.01 * (1.08 if i >= 70 else 1.0), at=t0 + i * HOUR,
                      conditions=_conditions(rnd, **power))
        if i in (30, 69, 80):  # recovered: no conditions and no settings in its environment
            record.conditions = {}
            for key in ("power_limit", "clocks", "ecc", "mig"):
                record.environment.pop(key, None)
        h.add(record)
    h.close()
    found = [s for s in shifts(capsys, path) if s["figure"] == "seconds"]
    assert [(s["kind"], s["version_changed"]) for s in found] == [("shift", ["power_limit"])], found
    assert found[0]["at"] == pytest.approx(t0 + 70 * HOUR - 5)
    assert found[0]["versions_before"]["power_limit"] == "700 W"  # not the recovered run's unsaid ""
    assert found[0]["versions_after"]["power_limit"] == "500 W"
