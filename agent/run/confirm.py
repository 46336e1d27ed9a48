"""Confirmation runs: a series of a frequent suite that ran slow or turned suspicious is measured again soon, alone.

A frequent tier runs every 15 minutes; the detector's fast rule needs three runs past a step, so a
real 5% regression would take 30-45 minutes to confirm, and a single slow run (a neighbour's burst)
would sit ``suspicious`` for as long.  When a series of a suite with ``confirm_per_hour`` above 0 turns
suspicious, or its run just judged is slower than its baseline by the minimum effect (one slow run: the
first sign of a step), the scheduler runs that one case again after :data:`CONFIRM_DELAY_SECONDS` (long
enough for a short burst to pass, short enough to confirm a regression within minutes); a confirmation
the idle guard skipped is asked for again.  The run is an ordinary run of the suite, recorded and
judged like any: a real step is confirmed by it, a one-off is outvoted.

:class:`ConfirmationBudget` is the policy, standard library only and clock-free (the caller passes
the time), so the scheduler and the time-to-detect simulation (tests/bench/detect_sim.py) use the same
code: one confirmation pending per series at a time, at most ``per_hour`` started in any hour on a
device for one suite.  Measured there (docs/REGRESSIONS.md, "Time to detect on the default schedule"):
asking on one slow run and again after a skip is what finds a 5% step within the hour on a GPU that is
busy 30% of the time, at about 21 confirmations a day instead of 5 (at 1% noise).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

CONFIRM_DELAY_SECONDS = 120.0
"""How long after the suspicious run its confirmation starts."""

CONFIRM_STATES = frozenset({"suspicious"})
"""The verdict states that ask for a confirmation (a ``regression`` needs none: it is confirmed)."""

HOUR = 3600.0


def wants_confirmation(states: dict[str, str], slow: bool = False) -> bool:
    """Whether a series whose watched figures are in ``states`` (figure -> state) needs another run now:
    some figure is suspicious, or the run just judged was slow (``slow``:
    :meth:`sixdim.verdicts.detector.SeriesTracker.slow_run`), and none has
    regressed yet."""
    values = set(states.values())
    return (slow or bool(values & CONFIRM_STATES)) and "regression" not in values



class ConfirmationBudget:
    """Which confirmation runs to start, for one suite on one device."""

    def __init__(self, per_hour: int, delay: float = CONFIRM_DELAY_SECONDS) -> None:
        self.per_hour = per_hour
        self.delay = delay
        self._started: deque[float] = deque()
        """When each confirmation of the last hour was granted (its planned start)."""
        self._pending: set[Hashable] = set()

    def ask(self, series: Hashable, now: float) -> float | None:
        """A series turned (or stays) suspicious at ``now``: when to run its confirmation, or None where
        one is already pending for it or the hour's budget is spent."""
        if self.per_hour <= 0 or series in self._pending:
            return None
        at = now + self.delay
        while self._started and self._started[0] <= at - HOUR:
            self._started.popleft()
        if len(self._started) >= self.per_hour:
            return None
        self._started.append(at)
        self._pending.add(series)
        return at

    def done(self, series: Hashable) -> None:
        """The series' confirmation ran (or could not): another may be asked for."""
        self._pending.discard(series)
