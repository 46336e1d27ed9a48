"""``sixdim report latest``, and ``sixdim report`` with no report named: the latest result of each
workload per device, as a table in the terminal (or ``--json``).

One row per (host, device, workload) of the history:

- **last run**: when the workload's latest run ended (its newest record's end), in the local time zone,
  and how long ago;
- **cases**: the cases of that latest run by status, failures apart from the cases that did not run
  (:func:`sixdim.core.results.status_counts_text`, as ``sixdim run`` and the daemon's log say it),
  and, where an interruption stopped that run (a shutdown, Ctrl-C, the agent's death: the history's
  ``interruptions``), how many of its cases it left (:func:`interruption`);
- **headline**: the speed of its ``ok`` cases (the first speed figure they report: FLOP/s,
  samples/s, bytes/s, else the time): the one case's value, or the geometric mean over the cases
  (over all their shapes and precisions; :func:`sixdim.verdicts.summary.geometric_mean`); that of
  an interrupted run is over the cases that ran, so it says so and is marked ``"complete": false``
  (a different mix of cases from a full run's: not to be compared with one);
- **verdict**: the worst live regression state over the workload's series on that device
  (regression, then suspicious, ok, improvement, insufficient data), with how many series are in
  each; a series whose latest version or GPU-setting change regressed a figure counts as a
  regression.  These are the daemon's own verdicts: the last runs of each series fed to
  :class:`sixdim.verdicts.live.Verdicts` by :meth:`~sixdim.verdicts.live.Verdicts.restore`, exactly as the agent
  restores them at start, then :meth:`~sixdim.verdicts.live.Verdicts.snapshot`;
- **worst series** and **likely cause**: for a regression or a suspicious verdict, the series and
  figure that are worst, and the most likely cause the agent names for it
  (``SeriesVerdicts.causes``, what it exports as ``sixdim_regression_cause``).

**The latest run of a workload** on a device: its newest record's worker run (the records with its
suite and start time: a worker stamps its start on every case it runs), and the worker runs of the
same suite recorded just before it (a worker that crashed and the one that ran the rest after it) as
long as none of them repeats a case already taken.  A one-off ``sixdim run`` is the latest run of
its workload until the suite runs it again.

**Reading.** The history is read read-only (``mode=ro``, :mod:`sixdim.store.reader`), never ``details``
nor ``params``: the last :attr:`~sixdim.verdicts.live.Verdicts.restore_runs` runs of each series (what the
daemon restores; the latest run of every workload is among them), then the ``conditions`` of those
runs only for the series with something to explain (a regression, a suspicious verdict, or a
version change that regressed), read by id.  Their verdicts are the same the second time (a
series' verdicts depend on its own runs only), now with their causes.

This module is imported by :mod:`sixdim.report.command` (and so by the command line) to register the
command's arguments, so it imports nothing heavy at import time: the verdicts load inside the command.

Exit codes: 0 the table (or JSON) was printed, whatever the verdicts (a view, not a check: alert
on ``sixdim_regression_state``); 2 bad usage, configuration, or a history that is missing or not a
sixdim database (the message names the file).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from sixdim.config import add_insecure_permissions_flag, add_option_flags, load
from sixdim.core import exits
from sixdim.core.durations import EXAMPLES, duration_argument
from sixdim.core.results import RunRecord
from sixdim.report import incidents
from sixdim.store import reader
from sixdim.store.rows import RunRow

OPTION_KEYS = ("agent.history", "regression.min_effect")
"""The configuration options ``sixdim report latest`` takes as flags."""

STATES: tuple[str, ...] = ("regression", "suspicious", "ok", "improvement", "insufficient_data")
"""The verdict states, worst first: a workload's verdict is the first of these among its series'."""
NOTEWORTHY = ("regression", "suspicious")
"""The states whose series get a likely cause."""
CAUSES_KEPT = 3
"""Causes kept per series in the JSON, most likely first (the table shows the first)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``sixdim report latest`` (the parser is :mod:`sixdim.report.command`'s)."""
    parser.add_argument("--config", metavar="FILE",
                        help="TOML configuration file, for agent.history and the [regression] settings [SIXDIM_CONFIG]")
    parser.add_argument("--since", type=duration_argument, metavar="DURATION",
                        help=f"list only workloads whose latest run ended at or after now - DURATION: {EXAMPLES} "
                             "(default: all; the verdicts always use each series' last runs, whenever they ran)")
    parser.add_argument("--workload", "-w", action="append", metavar="NAME", help="only this workload (repeatable)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list, one object per row, instead of the table")
    add_option_flags(parser, OPTION_KEYS)
    add_insecure_permissions_flag(parser)


# ---------------------------------------------------------------------------- reading

def read(path: str, runs: int) -> list[RunRow]:
    """The last ``runs`` runs of every series, in the order they were recorded: the rows
    :func:`sixdim.report.data.record_of` makes RunRecords of."""
    out: list[RunRow] = []
    with reader.reading(path) as db:
        for rows in reader.recent_per_series(db, runs):
            out += rows
    return out


def read_interruptions(path: str) -> list[Any]:
    """The history's interrupted suite runs (:func:`sixdim.store.reader.interruptions`), oldest first."""
    with reader.reading(path) as db:
        return reader.interruptions(db)


class _Runs:
    """Rows read, as a history :meth:`sixdim.verdicts.live.Verdicts.restore` reads its runs from (a
    :class:`sixdim.verdicts.live.RunSource`: runs with their conditions, not read back by id): already the
    last runs of each series, in recording order.  A row that is no run (broken JSON, an unknown status)
    is left out and remembered in :attr:`error`; restore would only log it."""

    def __init__(self, rows: Sequence[RunRow], conditions: dict[int, dict[str, Any]] | None = None) -> None:
        self.rows = rows
        self.conditions = conditions or {}
        self.error: Exception | None = None

    def recent_per_series(self, runs: int, upto_id: int | None = None) -> Iterator[RunRecord]:
        from sixdim.report.data import record_of

        for row in self.rows:
            try:
                record = record_of(row, self.conditions.get(row.id))
            except (ValueError, TypeError, AttributeError) as exc:
                self.error = self.error or exc
                continue
            yield record


def _restore(rows: Sequence[RunRow], settings: Any, path: str,
             conditions: dict[int, dict[str, Any]] | None = None) -> list[Any]:
    from sixdim.store.errors import HistoryError
    from sixdim.verdicts.live import Verdicts

    runs = _Runs(rows, conditions)
    verdicts = Verdicts(settings)
    verdicts.restore(runs)  # the read-only rows (a sixdim.verdicts.live.RunSource), as the daemon's History
    if runs.error is not None:
        raise HistoryError(f"cannot read history database {path}: a row is broken ({runs.error})")
    return verdicts.snapshot()


def live_verdicts(rows: Sequence[RunRow], path: str, settings: Any = None) -> list[Any]:
    """The agent's verdicts now (``SeriesVerdicts``), with the likely causes of the series that have
    something to explain: the conditions of their rows only are read, by id, and they are restored
    again with them (the same verdicts: a series' verdicts depend on its own runs only)."""
    snapshot = _restore(rows, settings, path)
    explain = {tuple(sv.record.key()) for sv in snapshot if series_state(sv) in NOTEWORTHY}
    if not explain:
        return snapshot
    wanted = [row for row in rows if row.key in explain]
    with reader.reading(path) as db:
        conditions = reader.conditions(db, (row.id for row in wanted))
    if not conditions:  # a history written before conditions were recorded
        return snapshot
    redone = {tuple(sv.record.key()): sv for sv in _restore(wanted, settings, path, conditions)}
    return [redone.get(tuple(sv.record.key()), sv) for sv in snapshot]


# ---------------------------------------------------------------------------- the rows

def latest_run(runs: Sequence[RunRow]) -> list[RunRow]:
    """The latest run of one workload on one device, from its rows in recording order (see the
    module's docstring): the newest worker run, and the worker runs of the same suite just before
    it while none repeats a series already taken."""
    taken: list[RunRow] = []
    seen: set[tuple[str, ...]] = set()
    suite = runs[-1].suite
    i = len(runs) - 1
    while i >= 0 and runs[i].suite == suite:
        started = runs[i].started_at
        j = i
        while j >= 0 and runs[j].suite == suite and runs[j].started_at == started:
            j -= 1
        group = runs[j + 1:i + 1]
        keys = {row.key for row in group}
        if taken and keys & seen:
            break
        taken[:0] = group
        seen |= keys
        i = j
    return taken


def series_state(sv: Any) -> str | None:
    """A series' state: the worst of its figures' verdicts, and ``regression`` when its latest version
    or setting change regressed a figure; None where it has none."""
    states = {v.state for v in sv.verdicts.values()}
    if any(c.state == "regression" for c in sv.changes.values()):
        states.add("regression")
    known = [s for s in STATES if s in states]
    return known[0] if known else None


def _worst(sv: Any, state: str) -> dict[str, Any]:
    """The worst figure of a noteworthy series: in its state, the largest change."""
    from sixdim.report.format import change_label

    found: list[tuple[float, dict[str, Any]]] = []
    for figure, v in sv.verdicts.items():
        if v.state == state:
            found.append((_size(v.ratio), {"figure": figure, "change_ratio": _finite(v.ratio), "version_change": None}))
    if state == "regression":
        for figure, c in sv.changes.items():
            if c.state == "regression":
                old = {k: a for k, (a, _) in c.changes.items()}
                new = {k: b for k, (_, b) in c.changes.items()}
                found.append((_size(c.ratio), {"figure": figure, "change_ratio": _finite(c.ratio),
                                               "version_change": change_label(old, new, settings=True)}))
    return max(found, key=lambda x: x[0])[1]


def _finite(ratio: float | None) -> float | None:
    """A ratio for the JSON: None where there is none, or none that is a number."""
    return ratio if ratio is not None and math.isfinite(ratio) else None


def _size(ratio: float | None) -> float:
    return abs(math.log(ratio)) if ratio is not None and ratio > 0 and math.isfinite(ratio) else 0.0


def headline(run: Iterable[RunRow], stopped: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The speed of the run's ok cases: the first speed figure any of them reports (FLOP/s, samples/s,
    bytes/s, else the time), the one case's value or the geometric mean over the cases that report
    it; None where no ok case reports a speed.  ``stopped``: the run's interruption
    (:func:`interruption`): the mean is then over the cases that ran only, a different mix from a
    full run's, so it is marked (``"complete": false``, and its text says so), never to be compared
    with a full run's."""
    from sixdim.core.catalog import SPEED_FIGURES
    from sixdim.report.format import figure_name, fmt
    from sixdim.verdicts.summary import geometric_mean

    ok = [(row, figures) for row in run
          if row.status == "ok" and isinstance(figures := json.loads(row.figures), dict)]
    for figure in SPEED_FIGURES:
        values = [(row.precision, float(v)) for row, figures in ok
                  if isinstance(v := figures.get(figure), (int, float)) and not isinstance(v, bool)  # (JSON's)
                  and math.isfinite(v) and v > 0]
        if values:
            break
    else:
        return None
    precisions = {p for p, _ in values}
    precision = precisions.pop() if len(precisions) == 1 else ""
    value = values[0][1] if len(values) == 1 else geometric_mean([v for _, v in values])
    if value is None:
        return None
    text = fmt(figure, value, precision)
    text = text if len(values) == 1 else f"{text} geomean of {len(values)}"
    if stopped is not None:
        ran, planned = stopped["cases_ran"], stopped["cases_planned"]
        text += f" (interrupted: {ran} of {planned} cases)" if planned else " (interrupted)"
    return {"figure": figure, "name": figure_name(figure, precision), "value": value, "cases": len(values),
            "how": "one case" if len(values) == 1 else "geometric mean", "complete": stopped is None, "text": text}


def interruption(run: Sequence[RunRow], runs: Sequence[RunRow], interruptions: Sequence[Any]) -> dict[str, Any] | None:
    """The interruption that stopped a workload's latest run (``run``, from :func:`latest_run` over the
    workload's rows on the device, ``runs``), or None: the newest interrupted suite run of the same
    device and suite with the workload among those it left cases of, that started at or before the
    run's first worker and stopped at or after it (a suite run's workers start after the suite run,
    and the interruption stops the last).

    The cases it left of this workload: all the interruption's where the workload was the only one
    left; else as many as the workload's previous run had beyond this one's; None where neither
    says (its first run, interrupted)."""
    newest = run[-1]
    device, suite, workload = newest.device, newest.suite, newest.workload
    first = min(row.started_at for row in run)
    found = next((i for i in reversed(interruptions)
                  if (i.hostname, i.device_type, i.gpu, i.uuid) == device and i.suite == suite
                  and workload in i.workloads and i.started_at <= first <= i.ended_at), None)
    if found is None:
        return None
    ran = len(run)
    if list(found.workloads) == [workload]:
        left: int | None = found.cases_left
    else:
        earlier = [row for row in runs if row.started_at < first]
        previous = latest_run(earlier) if earlier and earlier[-1].suite == suite else []
        left = len(previous) - ran if len(previous) > ran else None
    return {"reason": found.reason, "at": found.ended_at, "cases_ran": ran, "cases_left": left,
            "cases_planned": ran + left if left is not None else None, "suite_cases_left": found.cases_left,
            "workloads_left": list(found.workloads)}


def _cases_text(counts: Counter, stopped: dict[str, Any] | None) -> str:
    """The cases by status, and what an interruption left: ``3 cases: 3 ok; interrupted: 17 of 20 not run``."""
    from sixdim.core.results import status_counts_text

    text = status_counts_text(counts)
    if stopped is None:
        return text
    if stopped["cases_left"] is not None:
        return f"{text}; interrupted: {stopped['cases_left']} of {stopped['cases_planned']} not run"
    return f"{text}; interrupted (the suite run left {stopped['suite_cases_left']} case(s))"


def rows(history: Sequence[RunRow], snapshot: Sequence[Any], *, now: float,
         interruptions: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """One row per (host, device, workload), as :func:`table` shows it and ``--json`` prints it;
    ``interruptions``: the history's interrupted suite runs, oldest first (:func:`read_interruptions`)."""
    from sixdim.report.format import gpu_order

    runs: dict[tuple[Any, ...], list[RunRow]] = {}
    for row in history:
        runs.setdefault((row.device, row.workload), []).append(row)
    verdicts: dict[tuple[Any, ...], list[Any]] = {}
    for sv in snapshot:
        key = sv.record.key()
        verdicts.setdefault((tuple(key.device), key.workload), []).append(sv)
    out: list[dict[str, Any]] = []
    for (device, workload), found in sorted(runs.items(), key=lambda x: (gpu_order(x[0][0]), x[0][1])):
        run = latest_run(found)
        stopped = interruption(run, found, interruptions)
        newest = run[-1]
        ended = max(row.ended_at for row in run)
        counts = Counter(row.status for row in run)
        states: Counter = Counter()
        unhealthy: list[dict[str, Any]] = []
        for sv in verdicts.get((device, workload), ()):
            state = series_state(sv)
            if state is None:
                continue
            states[state] += 1
            if state in NOTEWORTHY:
                r = sv.record
                unhealthy.append({"precision": r.precision, "shape": r.shape, "mode": r.mode, "pass": r.kernel_pass,
                                  "state": state, **_worst(sv, state),
                                  "causes": [f.to_dict() for f in sv.causes[:CAUSES_KEPT]]})
        unhealthy.sort(key=lambda u: (STATES.index(u["state"]), -_size(u["change_ratio"])))
        verdict = next((s for s in STATES if states[s]), None)
        hostname, device_type, gpu, uuid = device
        out.append({
            "hostname": hostname, "device_type": device_type, "gpu": gpu, "uuid": uuid,
            "model_name": newest.model_name, "workload": workload, "suite": newest.suite,
            "last_run": ended, "last_run_local": _local(ended).isoformat(timespec="seconds"),
            "age_seconds": max(0.0, now - ended),
            "cases": {s: counts[s] for s in sorted(counts)}, "cases_text": _cases_text(counts, stopped),
            "interrupted": stopped,
            "headline": headline(run, stopped),
            "verdict": verdict, "series": {s: states[s] for s in STATES if states[s]},
            "unhealthy": unhealthy,
            "cause": _cause(unhealthy[0]) if unhealthy else None,
        })
    return out


def _cause(worst: dict[str, Any]) -> str | None:
    """The most likely cause of the worst series, as a person reads it ("power limit lowered (power
    limit 700 W → 500 W)"), or None where none could be named (no conditions recorded)."""
    from sixdim.verdicts.causes import Finding, describe

    causes = worst["causes"]
    if not causes:
        return None
    return describe([Finding(causes[0]["cause"], causes[0]["evidence"])], limit=1)


# ---------------------------------------------------------------------------- output

def _local(at: float) -> datetime:
    return datetime.fromtimestamp(at).astimezone()


def ago(seconds: float) -> str:
    """How long ago, as a person says it: ``40 s ago``, ``12 min ago``, ``2 h ago``, ``3 d ago``."""
    seconds = max(0.0, seconds)
    for limit, unit, size in ((90, "s", 1), (90 * 60, "min", 60), (36 * 3600, "h", 3600)):
        if seconds < limit:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds / 86400:.0f} d ago"


def _series_label(u: dict[str, Any]) -> str:
    """The worst series, less what its row already says: precision, shape, the figure and its change."""
    from sixdim.report.format import figure_name, percent

    what = " ".join(p for p in (u["precision"], u["shape"]) if p)
    return f"{what}: {figure_name(u['figure'], u['precision'])} {percent(u['change_ratio'])}"


def device_text(row: dict[str, Any], ambiguous: bool = False) -> str:
    """``cuda:0``, ``cpu``; with the UUID's start where one host's index names two boards."""
    from sixdim.report.format import short_uuid

    name = f"{row['device_type']}:{row['gpu']}" if row["gpu"] else row["device_type"]
    return f"{name} {short_uuid(row['uuid'])}" if ambiguous and row["uuid"] else name


def table(found: Sequence[dict[str, Any]]) -> str:
    """The rows as an aligned table under a header (:func:`sixdim.core.text.table`)."""
    from sixdim.core import text

    zone = datetime.now().astimezone().strftime("%Z") or "local"
    boards: dict[tuple[str, str, str], set[str]] = {}
    for r in found:
        boards.setdefault((r["hostname"], r["device_type"], r["gpu"]), set()).add(r["uuid"])
    lines = [("host", "device", "workload", f"last run ({zone})", "", "cases", "headline", "verdict", "series",
              "worst series", "likely cause")]
    for r in found:
        worst = r["unhealthy"][0] if r["unhealthy"] else None
        lines.append((
            r["hostname"], device_text(r, len(boards[(r["hostname"], r["device_type"], r["gpu"])]) > 1), r["workload"],
            _local(r["last_run"]).strftime("%Y-%m-%d %H:%M"), ago(r["age_seconds"]), r["cases_text"],
            r["headline"]["text"] if r["headline"] else "-",
            (r["verdict"] or "-").replace("_", " "),
            ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in r["series"].items()) or "-",
            _series_label(worst) if worst else "-",
            r["cause"] or ("-" if worst is None else "none named (no conditions recorded)")))
    return text.table(lines)


def command(args: argparse.Namespace) -> int:
    """``sixdim report latest`` (and ``sixdim report``): 0 when the table was printed, whatever it says."""
    from sixdim.verdicts.detector import settings_from
    from sixdim.verdicts.live import Verdicts

    config = load(args.config, flags=args)
    started = time.perf_counter()
    settings = settings_from(config)
    keep = Verdicts(settings).restore_runs
    history = read(config.history, keep)
    if args.workload:
        wanted = set(args.workload)
        history = [row for row in history if row.workload in wanted]
    now = time.time()
    snapshot = live_verdicts(history, config.history, settings) if history else []
    found = rows(history, snapshot, now=now, interruptions=read_interruptions(config.history) if history else ())
    if args.since is not None:
        found = [r for r in found if r["last_run"] >= now - args.since]
    listed = incidents.read(config.history, now - (incidents.RECENT_SECONDS if args.since is None else args.since),
                            args.workload) if history else []
    for row in found:  # each row's own: its device's incidents of its workload
        row["incidents"] = [i for i in listed if i["workload"] == row["workload"]
                            and all(i[label] == row[label] for label in ("hostname", "device_type", "gpu", "uuid"))]
    if args.json:
        print(json.dumps(found, indent=2))
        return exits.OK
    if not found:
        scope = f" since {_local(now - args.since):%Y-%m-%d %H:%M}" if args.since is not None else ""
        which = f" of {', '.join(args.workload)}" if args.workload else ""
        print(f"no runs{which}{scope} in {config.history}")
        return exits.OK
    devices = len({(r["hostname"], r["device_type"], r["gpu"], r["uuid"]) for r in found})
    verdicts = Counter(r["verdict"] for r in found)
    print(table(found))
    if listed:
        window = (f"the last {incidents.RECENT_SECONDS / 3600:g} h" if args.since is None
                  else f"since {_local(now - args.since):%Y-%m-%d %H:%M}")
        print(f"\nIncidents of the agent's live verdicts, open or ended in {window}:")
        print(incidents.table(listed, now))
        print(incidents.summary(listed))
    stopped = sum(r["interrupted"] is not None for r in found)
    print(f"\n{len(found)} workload(s) on {devices} device(s): {verdicts['regression']} with a regression, "
          f"{verdicts['suspicious']} suspicious" + (f", {stopped} interrupted" if stopped else "") +
          f"; the agent's verdicts over each series' last {keep} runs, "
          f"from {config.history} ({time.perf_counter() - started:.1f} s)")
    return exits.OK

