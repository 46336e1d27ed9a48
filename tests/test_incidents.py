"""Incidents: a series out of ok, from the first run of the change until it is back, with its likely cause
kept all along (issue 42, item 1).

The live verdicts are fed run by run and looked at after each run, as the exporter's scrapes do; the cause
of ``sixdim_regression_cause`` and the alert is the incident's, and must not fall back to ``none`` while the
series is still out of ok.
"""

from __future__ import annotations

import random
from dataclasses import replace as copy

from sixdim.store.history import History
from sixdim.verdicts.detector import IMPROVEMENT, OK, REGRESSION
from sixdim.verdicts.live import CLOSED_KEPT, Incident, Verdicts
from tests.helpers import make_record
from tests.test_causes import INJECTIONS, healthy

START = 1e6
STEP = 40
"""The first slow run."""


def run(i: int, seconds: float, conditions: dict, **fields) -> object:
    return copy(make_record(seconds=seconds, ended_at=START + 600 * i), conditions=conditions, **fields)


def bursty_hog(n_slow: int = 16, n_after: int = 40, seed: int = 1) -> list:
    """40 quiet runs, then ``n_slow`` runs 20% slower while a neighbour takes the host's CPUs in bursts: its
    load shows in the first runs of the step, then only now and then (a batch job between its phases), so that
    the runs since the change show it in fewer than two thirds of them from the 8th slow run on; then
    ``n_after`` quiet runs at the old speed."""
    rnd = random.Random(seed)
    shows = [True, True, True, True, True, False, False, False, True, False, False, False, True, False, False, False]
    out = []
    for i in range(STEP + n_slow + n_after):
        conditions = healthy(rnd)
        slow = STEP <= i < STEP + n_slow
        if slow and shows[(i - STEP) % len(shows)]:
            INJECTIONS["host_load"](conditions)
        out.append(run(i, (0.012 if slow else 0.010) * (1 + rnd.gauss(0, 0.002)), conditions))
    return out


def test_the_cause_is_kept_from_the_first_regressed_look_until_the_series_is_ok_again():
    """Today's failure: once the series regressed, its cause became ``none`` while the slow runs went on, and
    the alert said "Likely cause: none".  Now every look from the first regressed one names host load until
    the series is back to ok, and none after."""
    verdicts = Verdicts()
    looks = []
    for record in bursty_hog():
        verdicts.add(record)
        [series] = verdicts.snapshot()
        looks.append((series.verdicts["flops"].state, [f.cause for f in series.causes][:1]))
    regressed = [i for i, (state, _) in enumerate(looks) if state == REGRESSION]
    assert regressed, looks[STEP:]
    back = next(i for i in range(regressed[0], len(looks)) if looks[i][0] == OK)
    assert all(causes == ["host_load"] for _, causes in looks[regressed[0]:back]), looks[regressed[0]:back]
    assert all(causes == [] for _, causes in looks[back:]), looks[back:]


def test_an_incident_says_what_when_how_much_why_and_whether_it_goes_on():
    records = bursty_hog()
    verdicts = Verdicts()
    for record in records[:STEP + 10]:
        verdicts.add(record)
    [incident] = verdicts.incidents()
    assert isinstance(incident, Incident) and incident.open and incident.ended_at is None
    assert incident.figure == "flops" and incident.state == REGRESSION and incident.now == REGRESSION
    assert incident.started_at == records[STEP].started_at  # the first slow run, not the first alarmed one
    assert incident.key == records[0].key() and "gemm" in incident.series
    assert abs(incident.ratio - 1 / 1.2) < 0.02 and abs(incident.latest_ratio - 1 / 1.2) < 0.02
    assert abs(incident.baseline - 1024 / 0.010) < 0.01 * 1024 / 0.010
    assert incident.causes[0].cause == "host_load" and incident.last_at == records[STEP + 9].started_at

    for record in records[STEP + 10:]:
        verdicts.add(record)
    [closed] = verdicts.incidents()
    assert not closed.open and closed.now in (OK, IMPROVEMENT) and closed.state == REGRESSION
    assert records[STEP + 16].started_at <= closed.ended_at <= records[-1].started_at
    assert closed.causes[0].cause == "host_load" and closed.started_at == incident.started_at
    assert abs(closed.ratio - 1 / 1.2) < 0.02
    # a closed incident is listed while it ended at or after ``since``
    assert verdicts.incidents(since=closed.ended_at) == [closed]
    assert verdicts.incidents(since=closed.ended_at + 1) == []
    [series] = verdicts.snapshot()
    assert series.causes == []


def test_a_named_cause_is_replaced_by_another_never_by_none():
    """A power limit cut while the host was busy: the later diagnosis names the limit first (a setting ranks
    before contention); a run that shows neither does not take the named cause away."""
    rnd = random.Random(5)
    verdicts = Verdicts()
    for i in range(STEP + 12):
        conditions = healthy(rnd)
        if STEP <= i < STEP + 4:
            INJECTIONS["host_load"](conditions)
        elif i >= STEP + 4:
            INJECTIONS["power_limit"](conditions)
        verdicts.add(run(i, 0.012 if i >= STEP else 0.010, conditions))
        if i == STEP + 4:
            assert verdicts.snapshot()[0].causes[0].cause == "host_load"
    [incident] = verdicts.incidents()
    assert incident.causes[0].cause == "power_limit", incident.causes


def test_incidents_are_a_function_of_the_runs_only(tmp_path):
    """The same runs give the same incidents and causes, however often and whenever they are looked at, and
    whether the conditions are kept in memory or read back from the history by row id (the daemon's)."""
    history = History(tmp_path / "h.db")
    records = bursty_hog(seed=3)
    looked, never = Verdicts(), Verdicts()
    for record in records:
        history.add(record)
        looked.add(record)
        looked.snapshot()
        never.add(record)
    restored = Verdicts()
    restored.restore(history)
    assert restored._read is not None  # the daemon's way: no run's conditions in memory
    assert all(not w.unsaved for w in restored._series.values())

    def seen(verdicts: Verdicts) -> list:  # a strength read back in double precision differs in its last digits
        return [copy(x, causes=tuple((f.cause, f.evidence) for f in x.causes)) for x in verdicts.incidents()]

    assert seen(looked) == seen(never) == seen(restored) != []
    assert looked.incidents()[0].causes[0].cause == "host_load"


def test_an_incorrect_result_opens_an_incident_at_its_run_and_few_closed_ones_are_kept():
    rnd = random.Random(2)
    verdicts = Verdicts()
    i = 0
    for _ in range(CLOSED_KEPT + 2):
        for _ in range(15):
            verdicts.add(run(i, 0.010, healthy(rnd)))
            i += 1
        wrong = run(i, 0.010, healthy(rnd), status="incorrect")
        verdicts.add(wrong)
        i += 1
        [incident] = [x for x in verdicts.incidents() if x.open]
        assert incident.started_at == wrong.started_at and incident.state == REGRESSION
        assert incident.reason == "incorrect result"
    verdicts.add(run(i, 0.010, healthy(rnd)))
    incidents = verdicts.incidents()
    assert len(incidents) == CLOSED_KEPT and not any(x.open for x in incidents)
    assert [x.started_at for x in incidents] == sorted(x.started_at for x in incidents)
