"""Issue 42, item 7: both reports list the incidents of the agent's live verdicts (open and recently ended),
with when each started, when the verdicts found it, its size and the likely cause they named, from the
run the live verdict found it on, not only once the change-point analysis can place the shift.

The history is written and judged as the daemon does it: each run added to a real History, then the
board's catch-up feeds it to the live verdicts and writes their incidents (``Board.save_incidents``); the
reports run through the command line on that file."""

import json
import random
import sqlite3
import time

import pytest

from sixdim.cli import main
from sixdim.http.board import Board
from sixdim.store.history import History
from sixdim.store.schema import SCHEMA_VERSION
from sixdim.verdicts.live import Verdicts
from tests.helpers import HEALTHY_CONDITIONS, make_record

INTERVAL = 900.0
BEFORE, SLOW = 120, 8
"""Runs before the hog, and slow runs while it lasts (then it stops)."""
BUSY = {**HEALTHY_CONDITIONS, "other_cpu_ratio": 0.80, "cpu_pressure_ratio": 0.95, "cgroup_cpu_pressure_ratio": 0.20}
"""A host already busy: the share of other processes high, the host's CPU pressure near full."""
HOG = {**BUSY, "other_cpu_ratio": 0.91, "cpu_pressure_ratio": 1.0, "cgroup_cpu_pressure_ratio": 0.55}
"""A new hog on it: other processes' share under the 20-point rule, the worker's own CPU stall up 35 points."""


def _record(rnd: random.Random, at: float, slow: bool):
    record = make_record(seconds=0.01 * (1.3 if slow else 1.0) * (1 + rnd.gauss(0, 0.01)), ended_at=at)
    record.conditions = dict(HOG if slow else BUSY)
    return record


class Daemon:
    """A history and the daemon's board with its live verdicts, fed one run at a time as the agent feeds them."""

    def __init__(self, path):
        # a twentieth of a second's wait for another process's lock, not the agent's quarter: the one lock taken in
        # this file is held until released, so a longer wait for it only cost each locked run 0.75 s
        self.history = History(path, busy_timeout=0.05)
        self.board = Board.from_history(self.history, Verdicts())
        self.rnd = random.Random(42)
        self.t0 = time.time() - (BEFORE + SLOW + 40) * INTERVAL
        self.times: list[float] = []

    def run(self, slow: bool) -> None:
        at = self.t0 + len(self.times) * INTERVAL
        record = _record(self.rnd, at, slow)
        self.history.add(record)
        self.board.catch_up(self.history)
        self.times.append(record.started_at)


def _report(capsys, *argv: str):
    assert main(list(argv)) == 0
    return capsys.readouterr().out


@pytest.fixture
def daemon(tmp_path):
    path = tmp_path / "history.db"
    d = Daemon(path)
    for _ in range(BEFORE):
        d.run(False)
    d.path = str(path)
    return d


def _incidents(capsys, path: str, *extra: str) -> list[dict]:
    entries = json.loads(_report(capsys, "report", "regressions", "--history", path, "--json", *extra))
    alone = [e for e in entries if e["kind"] == "incident"]
    carried = [e["incident"] for e in entries if "incident" in e]
    return alone + carried


def test_an_incident_is_listed_from_the_run_the_live_verdict_found_it_with_start_size_and_cause(daemon, capsys):
    found_at = None
    for i in range(SLOW):
        daemon.run(True)
        listed = _incidents(capsys, daemon.path, "--since", "2h")
        if listed and found_at is None:
            found_at = i
            break
    assert found_at is not None and found_at <= 3, "listed from the run the live verdict found it"
    while len(daemon.times) < BEFORE + SLOW:
        daemon.run(True)
    [incident] = [i for i in _incidents(capsys, daemon.path, "--since", "2h") if i["figure"] == "seconds"] or \
        _incidents(capsys, daemon.path, "--since", "2h")
    assert incident["state"] == "regression" and incident["open"] is True
    assert incident["started_at"] == daemon.times[BEFORE], "it started at the hog's first run"
    assert incident["started_at"] <= incident["found_at"] <= incident["regressed_at"]
    size = incident["change_ratio"] if incident["figure"] == "seconds" else 1 / incident["change_ratio"]
    assert size == pytest.approx(1.3, rel=0.05)
    assert incident["causes"][0]["cause"] == "host_load"
    text = _report(capsys, "report", "regressions", "--history", daemon.path, "--since", "2h")
    assert "Incidents of the agent's live verdicts" in text
    line = next(row for row in text.splitlines() if row.startswith("regression") and "ongoing" in row)
    assert "+30." in line or "\u221223." in line, line
    assert "host busy (the worker waited for a CPU 20% \u2192 55% of the span)" in line, line


def test_an_incident_that_ended_keeps_its_cause_and_says_when_it_ended(daemon, capsys):
    for _ in range(SLOW):
        daemon.run(True)
    for _ in range(30):
        daemon.run(False)
    listed = _incidents(capsys, daemon.path)
    assert listed, "the ended incident is still listed"
    assert all(not i["open"] for i in listed)
    ended = [i for i in listed if i["state"] == "regression"]
    assert ended and all(i["causes"][0]["cause"] == "host_load" for i in ended)
    # it ends once no run of the slow window (6 runs) is slow any more
    assert all(daemon.times[BEFORE + SLOW] < i["ended_at"] <= daemon.times[BEFORE + SLOW + 6] for i in ended)
    rows = json.loads(_report(capsys, "report", "--history", daemon.path, "--json"))
    [row] = rows
    assert [i["state"] for i in row["incidents"]].count("regression") >= 1
    text = _report(capsys, "report", "--history", daemon.path)
    assert "Incidents of the agent's live verdicts" in text and "ended " in text
    # --since after the end: an ended incident is not listed
    assert _incidents(capsys, daemon.path, "--since", "1m") == []


def test_an_incident_is_saved_once_it_changes_and_again_only_when_it_changes_again(tmp_path):
    history = History(tmp_path / "history.db")
    verdicts = Verdicts()
    rnd = random.Random(1)
    for i in range(BEFORE + 4):
        verdicts.add(_record(rnd, 1e9 + i * INTERVAL, i >= BEFORE))
    first = verdicts.unsaved_incidents()
    assert first, "an incident is open"
    assert len(verdicts.unsaved_incidents()) == len(first), "not marked saved until the history has it"
    history.save_incidents(incident.row() for incident, _ in first)
    for _, saved in first:
        saved()
    assert verdicts.unsaved_incidents() == []
    verdicts.add(_record(rnd, 1e9 + (BEFORE + 4) * INTERVAL, True))
    again = verdicts.unsaved_incidents()
    assert [i.opened_at for i, _ in again] == [i.opened_at for i, _ in first]
    history.save_incidents(incident.row() for incident, _ in again)
    rows = history.incidents()
    assert len(rows) == len(first), "an incident saved again updates its row"
    assert rows[0]["last_at"] == 1e9 + (BEFORE + 4) * INTERVAL - 5


def test_a_history_of_the_previous_schema_gets_the_incidents_table(tmp_path):
    path = tmp_path / "history.db"
    History(path).add(make_record())
    db = sqlite3.connect(path)
    db.execute("DROP TABLE incidents")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION - 1}")
    db.commit()
    db.close()
    history = History(path)
    assert history.incidents() == []
    assert len(list(history)) == 1


def test_incidents_a_locked_history_could_not_take_are_written_at_a_later_catch_up(daemon, caplog):
    from tests.helpers import Locker

    locker = Locker(daemon.path)
    try:
        for _ in range(4):
            daemon.run(True)  # the runs queue, the verdicts see them; the incidents cannot be written
        assert daemon.history.incidents() == []
    finally:
        locker.release()
    warnings = [r for r in caplog.records if "incident(s) of the regression verdicts could not be written" in r.message
                and r.levelname == "WARNING"]
    assert len(warnings) == 1, "said once, not at every catch-up"
    daemon.board.catch_up(daemon.history)
    [row] = daemon.history.incidents()
    assert row["started_at"] == daemon.times[BEFORE]
