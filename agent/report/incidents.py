"""The incidents of the agent's live verdicts, as both terminal reports list them.

The daemon's live verdicts (:mod:`sixdim.verdicts.live`) open an **incident** when a series leaves ok and close
it when every figure is back; the board writes each one to the history as it opens, goes on and ends
(``History.save_incidents``).  An operator paged at night runs one command and reads what regressed, since
when, by how much, the likely cause the agent named, and whether it still goes on: ``sixdim report`` lists the
open incidents and those that ended in the last :data:`RECENT_SECONDS` (or ``--since``) under its table, and
``sixdim report regressions`` lists them beside the change points it finds.  The offline analysis needs about
8 runs after a shift to place it; an incident is there from the run the live verdict found it.

What they read is what the agent said, when it said it: nothing is judged again here, so it costs a read of
one small table.  A history no agent served (``sixdim run --history`` alone) has no incidents.

Shared by :mod:`sixdim.report.latest` and :mod:`sixdim.report.regressions` (which never import each other).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from sixdim.core import text
from sixdim.store import reader

RECENT_SECONDS = 24 * 3600.0
"""Incidents that ended within this long are listed by ``sixdim report`` when no ``--since`` is given."""
KIND = "incident"
"""The ``"kind"`` of an incident's entry in ``sixdim report regressions --json`` (beside ``shift`` and ``drift``)."""
SERIES = ("hostname", "device_type", "gpu", "uuid", "workload", "precision", "shape", "mode", "pass")
"""An entry's series fields, as the reports' JSON names them (``pass``: the history's ``kernel_pass``)."""


def read(path: str, since: float | None = None, workloads: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The incidents kept in the history at ``path`` that are open or ended at or after ``since``, as
    :func:`entry` makes them, the earliest start first."""
    with reader.reading(path) as db:
        return [entry(row) for row in reader.incidents(db, since, workloads)]


def utc(at: float | None) -> str | None:
    """A time as ISO 8601 UTC (``2026-11-29T03:12:00Z``); None where there is none."""
    if at is None:
        return None
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def entry(row: Mapping[str, Any]) -> dict[str, Any]:
    """One incident as the reports' JSON gives it: its series, figure and worst state, ``open``, the times
    (Unix seconds and UTC) it started (its first run of the change), was found (the live verdicts first
    saw it), became a regression and ended, its size (``change_ratio``: the figure's current over baseline at
    its worst; ``latest_ratio`` now) and its likely causes, most likely first."""
    out: dict[str, Any] = {name: row["kernel_pass" if name == "pass" else name] for name in SERIES}
    out.update(model_name=row["model_name"], series=row["series"], figure=row["figure"], kind=KIND,
               state=row["state"], direction="worse", open=row["ended_at"] is None, now=row["now"])
    for name, column in (("started_at", "started_at"), ("found_at", "opened_at"), ("regressed_at", "regressed_at"),
                         ("ended_at", "ended_at"), ("last_at", "last_at")):
        out[name], out[f"{name}_utc"] = row[column], utc(row[column])
    out.update(baseline=row["baseline"], change_ratio=row["ratio"], latest_ratio=row["latest_ratio"],
               reason=row["reason"], causes=[dict(c) for c in row["causes"]])
    return out


def key(item: Mapping[str, Any]) -> tuple[str, ...]:
    """The series of an entry (an incident's or a shift's)."""
    return tuple(item[name] for name in SERIES)


def match(shifts: Sequence[dict[str, Any]], incidents: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give each shift the incident that is the same regression (``"incident"``), and return the incidents
    no shift is: those the change-point analysis cannot place yet (found by the live verdicts a few runs
    ago), and those it does not list (a brief one, or one on a noisy series).

    A shift is an incident's when it is of the same series, makes the figure worse, and its first run
    lies between the incident's start less the runs the live verdicts took to find it (the two place a
    step a run or two apart) and its end; the closest to the start, the same figure first."""
    by_series: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for shift in shifts:
        if shift.get("kind") == "shift" and shift.get("direction") == "worse":
            by_series.setdefault(key(shift), []).append(shift)
    alone = []
    for incident in incidents:
        lead = max(0.0, (incident["found_at"] or incident["started_at"]) - incident["started_at"])
        end = math.inf if incident["ended_at"] is None else incident["ended_at"]
        fits = [s for s in by_series.get(key(incident), ())
                if incident["started_at"] - lead <= s["at"] <= end and "incident" not in s]
        if not fits:
            alone.append(incident)
            continue
        best = min(fits, key=lambda s: (s["figure"] != incident["figure"], abs(s["at"] - incident["started_at"])))
        best["incident"] = incident
    return alone


def minute(at: float | None) -> str:
    """A time to the minute, UTC (``-`` where there is none)."""
    return "-" if at is None else datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M")


def _clock(at: float | None, day_of: float) -> str:
    """A time as HH:MM where it is on the day of ``day_of``, else with its date (UTC)."""
    if at is None:
        return "-"
    when = datetime.fromtimestamp(at, timezone.utc)
    same = when.date() == datetime.fromtimestamp(day_of, timezone.utc).date()
    return when.strftime("%H:%M" if same else "%Y-%m-%d %H:%M")


def change(ratio: float | None) -> str:
    """A current/baseline ratio as a signed percentage (``-`` where unknown)."""
    from sixdim.report.format import percent

    return percent(ratio, "-")


def _ago(seconds: float) -> str:
    minutes = max(0, round(seconds / 60))
    if minutes < 90:
        return f"{minutes} min"
    hours = minutes / 60
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


def status(incident: Mapping[str, Any], now: float) -> str:
    """Whether it goes on: "ongoing, 2.1 h" or "ended 04:10 (1.5 h)"."""
    if incident["open"]:
        return f"ongoing, {_ago(now - incident['started_at'])}"
    return (f"ended {_clock(incident['ended_at'], incident['started_at'])} "
            f"({_ago(incident['ended_at'] - incident['started_at'])})")


def cause(incident: Mapping[str, Any]) -> str:
    """The most likely cause as a person reads it: "host load (the worker waited for a CPU 52% -> 82% ...)"."""
    from sixdim.core.conditions import CAUSE_BY_NAME

    causes = incident["causes"]
    if not causes:
        return "- (no conditions recorded)"
    first = causes[0]
    if first["cause"] == "none":
        return first["evidence"]
    known = CAUSE_BY_NAME.get(first["cause"])
    return f"{known.title if known else first['cause']} ({first['evidence']})"


def table(incidents: Sequence[Mapping[str, Any]], now: float) -> str:
    """One line per incident, the earliest start first: its worst state, when it started (UTC), when the
    live verdicts found it and when it became a regression, the figure's change at its worst and now,
    whether it goes on, the device, the series and figure, and the likely cause."""
    from sixdim.verdicts.detector import series_label

    rows = [("state", "started (UTC)", "found", "regression", "worst", "latest", "status", "host", "gpu", "series",
             "figure", "likely cause")]
    for i in incidents:
        label = series_label(SimpleNamespace(precision=i["precision"], workload=i["workload"], shape=i["shape"]))
        mode = "/".join(p for p in (i["mode"], i["pass"]) if p and p != "forward")
        rows.append((i["state"], minute(i["started_at"]), _clock(i["found_at"], i["started_at"]),
                     _clock(i["regressed_at"], i["started_at"]), change(i["change_ratio"]), change(i["latest_ratio"]),
                     status(i, now), i["hostname"], i["gpu"], label + (f" ({mode})" if mode else ""),
                     i["figure"], cause(i)))
    return text.table(rows)


def summary(incidents: Sequence[Mapping[str, Any]]) -> str:
    """"3 incident(s) of the agent's live verdicts: 1 open, 2 regression(s)"."""
    opened = sum(1 for i in incidents if i["open"])
    regressions = sum(1 for i in incidents if i["state"] == "regression")
    return (f"{len(incidents)} incident(s) of the agent's live verdicts: {opened} open, {regressions} "
            f"regression(s), {len(incidents) - regressions} suspicious")

