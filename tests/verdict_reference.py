"""Whole-series verdicts over RunRecords: the reference the tests and the simulation check against.

The daemon judges series online, one run at a time (:class:`sixdim.verdicts.detector.SeriesTracker`
through :mod:`sixdim.verdicts.live`).  Tests and tests/bench/regression_sim.py want the same
judgement over a whole list of runs or values: these functions drive the product's own tracker and
``version_verdict`` over it, so what they check is what the daemon computes.  They are not
product code: nothing in sixdim calls them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sixdim.core.results import RunRecord
from sixdim.verdicts.detector import (
    INCORRECT,
    INSUFFICIENT_DATA,
    UP,
    VERSION_KEYS,
    WATCHED,
    SeriesTracker,
    Settings,
    Verdict,
    VersionVerdict,
    series_label,
    version_verdict,
    versions,
)
from sixdim.verdicts.live import Verdicts


class Detector:
    """Evaluates whole series with one set of settings."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()

    def tracker(self, figure: str, workload: str = "", direction: int | None = None) -> SeriesTracker:
        return SeriesTracker(figure, self.settings, workload, direction)

    def evaluate(self, values: Sequence[float | None], figure: str, *, workload: str = "",
                 statuses: Sequence[str] | None = None, breaks: Iterable[int] = (),
                 direction: int | None = None) -> Verdict:
        """The verdict after the last of ``values`` (time order).  ``statuses`` parallel to values
        (``incorrect`` is a regression at once; other non-ok runs are skipped); ``breaks`` are the
        indices of runs that start a new segment (a version change)."""
        return self.trace(values, figure, workload=workload, statuses=statuses, breaks=breaks,
                          direction=direction)[-1]

    def trace(self, values: Sequence[float | None], figure: str, *, workload: str = "",
              statuses: Sequence[str] | None = None, breaks: Iterable[int] = (),
              direction: int | None = None) -> list[Verdict]:
        """The verdict after every run: what the online check said at each point."""
        tracker = self.tracker(figure, workload, direction)
        cut = set(breaks)
        out = [tracker.last] if not values else []
        for i, value in enumerate(values):
            if i in cut and i > 0:
                tracker.break_segment()
            out.append(tracker.update(value, statuses[i] if statuses is not None else "ok"))
        return out


def group_series(records: Iterable[Any]) -> dict[tuple[str, ...], list[Any]]:
    """RunRecords by series key (host, GPU, workload, shape, precision, mode, pass), each list in
    start-time order: the unit every verdict is computed within."""
    groups: dict[tuple[str, ...], list[Any]] = {}
    for record in records:
        groups.setdefault(record.key(), []).append(record)
    for runs in groups.values():
        runs.sort(key=lambda r: (r.started_at, r.ended_at))
    return groups


def version_breaks(records: Sequence[Any]) -> list[int]:
    """Indices of runs whose versions differ from the last run before them that had versions:
    segment starts."""
    out, known = [], None
    for i, record in enumerate(records):
        current = versions(record)
        if current is None:
            continue
        if known is not None and current != known:
            out.append(i)
        known = current
    return out


def _known_before(records: Sequence[Any], at: int) -> dict[str, str]:
    for record in reversed(records[:at]):
        current = versions(record)
        if current is not None:
            return current
    return {k: "" for k in VERSION_KEYS}


def _figure_values(records: Sequence[Any], figure: str) -> list[float | None]:
    return [r.figures.get(figure) if r.status == "ok" else None for r in records]


def evaluate_records(records: Sequence[Any], figure: str, settings: Settings | None = None) -> Verdict:
    """The verdict of one figure of one series (records in time order, one key)."""
    if not records:
        return Verdict(INSUFFICIENT_DATA, figure, WATCHED.get(figure, UP))
    return Detector(settings).evaluate(_figure_values(records, figure), figure, workload=records[0].workload,
                                       statuses=[r.status for r in records], breaks=version_breaks(records))


def evaluate_series(records: Sequence[Any], settings: Settings | None = None) -> dict[str, Verdict]:
    """Verdicts for every watched figure the series reports; ``incorrect`` alone gives a
    ``seconds`` verdict, so a failing correctness check is never silent."""
    present = {f for r in records for f in r.figures if f in WATCHED}
    if any(r.status == INCORRECT for r in records[-1:]):
        present.add("seconds")
    return {f: evaluate_records(records, f, settings) for f in sorted(present)}


def version_verdicts(records: Sequence[Any], figure: str, settings: Settings | None = None) -> list[VersionVerdict]:
    """One verdict per version change in a series' history, oldest first; the daemon exports
    the last one (``sixdim_version_change_ratio``), computed there by :mod:`sixdim.verdicts.live`."""
    out = []
    s = settings or Settings()
    breaks = version_breaks(records)
    bounds = [0, *breaks, len(records)]
    for n, at in enumerate(breaks):
        old, new = _known_before(records, at), versions(records[at]) or {}
        changes = {k: (old[k], new[k]) for k in VERSION_KEYS if old[k] != new[k]}
        # the "before" side as the agent has it: the segment's tracker's last runs, and the drift it named
        tracker = SeriesTracker(figure, s, records[at].workload)
        for record, value in zip(records[bounds[n]:at], _figure_values(records[bounds[n]:at], figure), strict=True):
            if value is not None:
                tracker.update(value, at=record.started_at)
        before_times, before = tracker.recent(max(s.version_runs, s.version_settle_runs))
        after_runs = [(r.started_at, v) for r, v in zip(records[at:bounds[n + 2]],
                                                         _figure_values(records[at:bounds[n + 2]], figure), strict=True)
                      if v is not None]
        out.append(version_verdict(list(before), [v for _, v in after_runs], figure, changes, settings,
                                   records[at].workload, series_label(records[at]), records[at].started_at,
                                   times=(list(before_times), [t for t, _ in after_runs]), trend=tracker.trend()))
    return out


def describe(verdict: VersionVerdict) -> str:
    """E.g. ``driver 550.54 → 560.28: bf16 gemm m=8192,n=8192,k=8192 −7.1% (p = 0.0004)``."""
    what = ", ".join(f"{k} {a} \u2192 {b}" for k, (a, b) in verdict.changes.items())
    if verdict.ratio is None or verdict.p_value is None:
        return f"{what}: {verdict.label} {verdict.figure}: {verdict.state}".replace("  ", " ")
    pct = (verdict.ratio - 1.0) * 100.0
    sign = "\u2212" if pct < 0 else "+"
    subject = verdict.label or verdict.figure
    return f"{what}: {subject} {sign}{abs(pct):.1f}% (p = {_fmt_p(verdict.p_value)})"


def _fmt_p(p: float) -> str:
    return f"{p:.2g}" if p < 1e-4 else f"{p:.4f}".rstrip("0").rstrip(".") if p < 0.1 else f"{p:.2f}"


def feed(verdicts: Verdicts, records: Iterable[RunRecord]) -> Verdicts:
    """Feed records in time order (what the daemon does with a history's runs)."""
    for record in sorted(records, key=lambda r: (r.started_at, r.ended_at)):
        verdicts.add(record)
    return verdicts
