"""The likely cause of a regression, from the conditions recorded with each run.

:func:`diagnose` compares the conditions (``sixdim.core.conditions``) of the runs before a change
with those of the runs since, and names each cause whose evidence is **large enough to matter**
(a threshold per condition, below) and **consistent** (at least two thirds of the runs since the
change show it, and at least two of them), ranked: settings an operator changed first, then faults,
throttling, contention and software versions (``Cause.tier``), and within a tier the strongest
evidence first.  When nothing qualifies it says so: ``none``, "no recorded condition changed".

It compares a series with itself, so a condition that is always the same (a GPU that always runs at
its power cap for this kernel, a link that always reads Gen1 while idle) never names a cause.

Standard library only: the daemon calls it for the series it exports as unhealthy.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from sixdim.core.conditions import CAUSE_BY_NAME, CONDITIONS

CONSISTENT = 2 / 3
"""Share of the runs since the change that must show a cause's evidence."""
MIN_AFTER = 2
MIN_BEFORE = 3

SHARE_RISE = 0.25
"""A clock event's share of the span must rise by this much (25 points) to be a cause."""
SETTING_CHANGE = 0.05
"""A power limit or applications clock must move by 5%."""
CLOCK_DROP = 0.05
"""The mean SM clock or the CPU frequency must fall by 5% (10% for the CPU: it varies more)."""
CPU_FREQUENCY_DROP = 0.10
OTHER_CPU_RISE = 0.20
"""Other processes' share of the host's CPU must rise by 20 points."""
LOAD_RISE = 0.5
"""Or the 1-minute load per CPU by 0.5."""
PRESSURE_RISE = 0.10
"""Memory pressure (share of the span some task waited for memory) must rise by 10 points."""
CPU_PRESSURE_RISE = 0.10
"""Or the share of the span some task waited for a CPU (the kernel's PSI: the worker's cgroup's, or the
host's) by 10 points: for a CPU-bound thread at least 11% less CPU time, from any starting share (see
docs/CAUSES.md for the noise it stands above).  Unlike ``other_cpu_ratio``, it does not saturate when the
host was already busy: one more process on a full host still lengthens the worker's wait."""
QUOTA_DROP = 0.10


@dataclass(frozen=True)
class Finding:
    """One named cause and its evidence."""

    cause: str
    """A ``sixdim.core.conditions.CAUSES`` name (the ``cause`` label)."""
    evidence: str
    """What changed, as a person reads it: "power limit 700 W → 500 W"."""
    strength: float = 1.0
    """How far beyond its threshold the evidence is (orders causes within a tier)."""

    @property
    def tier(self) -> int:
        return CAUSE_BY_NAME[self.cause].tier

    def to_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "evidence": self.evidence}


NONE = Finding("none", "no recorded condition changed", 0.0)


def _number(conditions: Mapping[str, Any], name: str) -> float | None:
    value = conditions.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])


class _Sides:
    """The runs before and since a change, read one condition at a time."""

    def __init__(self, before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]):
        self.before, self.after = before, after

    def numbers(self, name: str) -> tuple[list[float], list[float]]:
        b = [v for v in (_number(c, name) for c in self.before) if v is not None]
        a = [v for v in (_number(c, name) for c in self.after) if v is not None]
        return b, a

    def shift(self, name: str, changed: Callable[[float, float], bool]) -> tuple[float, float] | None:
        """(before median, after median) where enough runs since show ``changed(before_median, run)``."""
        b, a = self.numbers(name)
        if len(b) < MIN_BEFORE or len(a) < MIN_AFTER:
            return None
        base = _median(b)
        hits = sum(1 for v in a if changed(base, v))
        if hits < MIN_AFTER or hits < CONSISTENT * len(a):
            return None
        return base, _median(a)

    def texts(self, name: str) -> tuple[str, str] | None:
        """(usual text before, text since) where a text condition changed consistently."""
        b = [c[name] for c in self.before if isinstance(c.get(name), str)]
        a = [c[name] for c in self.after if isinstance(c.get(name), str)]
        if len(b) < MIN_BEFORE or len(a) < MIN_AFTER:
            return None
        usual = max(set(b), key=b.count)
        changed = [v for v in a if v != usual]
        if len(changed) < MIN_AFTER or len(changed) < CONSISTENT * len(a):
            return None
        return usual, max(set(changed), key=changed.count)


def _watts(v: float) -> str:
    return f"{v:,.0f} W"


def _mhz(v: float) -> str:
    return f"{v / 1e6:,.0f} MHz"


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%"


def _flag(v: float) -> str:
    return "on" if v >= 0.5 else "off"


def _settings(s: _Sides) -> list[Finding]:
    out = []
    limit = s.shift("power_limit_watts", lambda b, v: v <= b * (1 - SETTING_CHANGE))
    if limit:
        out.append(Finding("power_limit", f"power limit {_watts(limit[0])} → {_watts(limit[1])}",
                           (1 - limit[1] / limit[0]) / SETTING_CHANGE))
    for name, what in (("applications_sm_clock_hertz", "applications SM clock"),
                       ("applications_memory_clock_hertz", "applications memory clock")):
        moved = s.shift(name, lambda b, v: v <= b * (1 - SETTING_CHANGE))
        if moved:
            out.append(Finding("clock_setting", f"{what} {_mhz(moved[0])} → {_mhz(moved[1])}",
                               (1 - moved[1] / moved[0]) / SETTING_CHANGE))
            break
    else:
        held = s.shift("applications_clocks_setting_ratio", lambda b, v: v - b >= SHARE_RISE)
        if held:
            out.append(Finding("clock_setting", f"clocks held by a clock setting {_pct(held[1])} of the span "
                                                f"({_pct(held[0])} before)", (held[1] - held[0]) / SHARE_RISE))
    for name, cause, what in (("ecc_enabled", "ecc_mode", "ECC"), ("mig_enabled", "mig_mode", "MIG")):
        flipped = s.shift(name, lambda b, v: (v >= 0.5) != (b >= 0.5))
        if flipped:
            out.append(Finding(cause, f"{what} {_flag(flipped[0])} → {_flag(flipped[1])}", 1.0))
    return out


def _faults(s: _Sides) -> list[Finding]:
    out = []
    memory = []
    for name, what in (("remapped_rows_failed", "row remapping failed"),
                       ("remapped_rows_pending", "remapped rows pending"),
                       ("retired_pages_pending", "retired pages pending")):
        raised = s.shift(name, lambda b, v: b < 0.5 <= v)
        if raised:
            memory.append(f"{what}: no → yes")
    for name, what in (("ecc_uncorrected_volatile", "uncorrected ECC errors"), ("remapped_rows", "rows remapped")):
        grew = s.shift(name, lambda b, v: v > b)
        if grew:
            memory.append(f"{what} {grew[0]:,.0f} → {grew[1]:,.0f}")
    if memory:
        out.append(Finding("memory_errors", ", ".join(memory), float(len(memory))))
    gen = s.shift("pcie_generation", lambda b, v: v < b)
    width = s.shift("pcie_width", lambda b, v: v < b)
    if gen or width:
        (gen_b, gen_a), (width_b, width_a) = s.numbers("pcie_generation"), s.numbers("pcie_width")

        def link(g: list[float], w: list[float]) -> str:
            return (f"Gen{_median(g):.0f}" if g else "Gen?") + (f" x{_median(w):.0f}" if w else "")

        out.append(Finding("pcie_link", f"PCIe {link(gen_b, width_b)} → {link(gen_a, width_a)}",
                           (gen[0] / gen[1] if gen else 1.0) * (width[0] / width[1] if width else 1.0)))
    slow = _share_rise(s, _both("hw_slowdown_ratio", "hw_power_brake_slowdown_ratio"))
    if slow:
        out.append(Finding("hw_slowdown", f"HW slowdown {_pct(slow[1])} of the span ({_pct(slow[0])} before)"
                           + _clock_note(s), (slow[1] - slow[0]) / SHARE_RISE))
    return out


def _both(*names: str) -> tuple[str, ...]:
    """Clock-event shares over the timed span and over the power phase: the speed figures come from the
    first, power and work per joule from the second, where the power cap engages most."""
    return names + tuple(f"power_phase_{n}" for n in names)


def _share_rise(s: _Sides, names: tuple[str, ...]) -> tuple[float, float] | None:
    """The largest rise among several clock events' shares."""
    best = None
    for name in names:
        rise = s.shift(name, lambda b, v: v - b >= SHARE_RISE)
        if rise and (best is None or rise[1] - rise[0] > best[1] - best[0]):
            best = rise
    return best


def _clock_note(s: _Sides) -> str:
    fell = s.shift("sm_clock_hertz", lambda b, v: v <= b * (1 - CLOCK_DROP))
    return f", SM clock {_mhz(fell[0])} → {_mhz(fell[1])}" if fell else ""


def _throttling(s: _Sides, named: set[str]) -> list[Finding]:
    out = []
    hot = _share_rise(s, _both("hw_thermal_slowdown_ratio", "sw_thermal_slowdown_ratio"))
    if hot:
        temperature = s.shift("temperature_celsius", lambda b, v: v - b >= 5)
        note = f", GPU {temperature[0]:.0f} → {temperature[1]:.0f} °C" if temperature else ""
        out.append(Finding("thermal", f"thermal slowdown {_pct(hot[1])} of the span ({_pct(hot[0])} before)"
                           + note + _clock_note(s), (hot[1] - hot[0]) / SHARE_RISE))
    capped = _share_rise(s, _both("sw_power_cap_ratio"))
    if capped and "power_limit" not in named:
        out.append(Finding("power_cap", f"power capped {_pct(capped[1])} of the span ({_pct(capped[0])} before)"
                           + _clock_note(s), (capped[1] - capped[0]) / SHARE_RISE))
    if not out and not named & {"hw_slowdown", "clock_setting", "power_limit"}:
        fell = s.shift("sm_clock_hertz", lambda b, v: v <= b * (1 - CLOCK_DROP))
        if fell:
            out.append(Finding("sm_clock", f"SM clock {_mhz(fell[0])} → {_mhz(fell[1])}",
                               (1 - fell[1] / fell[0]) / CLOCK_DROP))
    return out


def _contention(s: _Sides) -> list[Finding]:
    out = []
    runs = [_number(c, "gpu_other_processes") for c in s.after]
    with_others = sum(1 for v in runs if v is not None and v > 0)
    before = [v for v in (_number(c, "gpu_other_processes") for c in s.before) if v is not None]
    if (with_others >= MIN_AFTER and with_others >= CONSISTENT * len([v for v in runs if v is not None])
            and before and _median(before) == 0):
        out.append(Finding("gpu_processes", f"another process on the GPU in {with_others} of the last {len(runs)} "
                                            "runs", with_others / len(runs)))
    other = s.shift("other_cpu_ratio", lambda b, v: v - b >= OTHER_CPU_RISE)
    load = s.shift("load_per_cpu", lambda b, v: v - b >= LOAD_RISE)
    stall = s.shift("cgroup_cpu_pressure_ratio", lambda b, v: v - b >= CPU_PRESSURE_RISE)
    host_stall = s.shift("cpu_pressure_ratio", lambda b, v: v - b >= CPU_PRESSURE_RISE)
    if other or load or stall or host_stall:
        parts = []
        if stall:
            parts.append(f"the worker waited for a CPU {_pct(stall[0])} → {_pct(stall[1])} of the span")
        if host_stall:
            parts.append(f"tasks waited for a CPU {_pct(host_stall[0])} → {_pct(host_stall[1])} of the span")
        if other:
            parts.append(f"other processes' share of the host's CPU {_pct(other[0])} → {_pct(other[1])}")
        if load:
            parts.append(f"host load {load[0]:.1f} → {load[1]:.1f} per CPU")
        strength = max((other[1] - other[0]) / OTHER_CPU_RISE if other else 0.0,
                       (load[1] - load[0]) / LOAD_RISE if load else 0.0,
                       *((rise[1] - rise[0]) / CPU_PRESSURE_RISE for rise in (stall, host_stall) if rise))
        out.append(Finding("host_load", ", ".join(parts), strength))
    b_quota = [_number(c, "cpu_quota_cpus") for c in s.before]
    a_quota = [_number(c, "cpu_quota_cpus") for c in s.after]
    b_known = [math.inf if v is None else v for v in b_quota]
    a_known = [math.inf if v is None else v for v in a_quota]
    if len(b_known) >= MIN_BEFORE and len(a_known) >= MIN_AFTER:
        base = _median(b_known)
        hits = [v for v in a_known if math.isfinite(v) and v <= base * (1 - QUOTA_DROP)]
        if len(hits) >= MIN_AFTER and len(hits) >= CONSISTENT * len(a_known):
            now = _median(hits)
            was = "no limit" if math.isinf(base) else f"{base:g} CPUs"
            out.append(Finding("cpu_quota", f"CPU quota {was} → {now:g} CPUs",
                               (1 - now / base) / QUOTA_DROP if not math.isinf(base) else 10.0))
    governor = s.texts("cpu_governor")
    frequency = s.shift("cpu_frequency_hertz", lambda b, v: v <= b * (1 - CPU_FREQUENCY_DROP))
    if governor or frequency:
        parts = []
        if governor:
            parts.append(f"CPU governor {governor[0]} → {governor[1]}")
        if frequency:
            parts.append(f"CPU frequency {_mhz(frequency[0])} → {_mhz(frequency[1])}")
        out.append(Finding("cpu_frequency", ", ".join(parts),
                           (1 - frequency[1] / frequency[0]) / CPU_FREQUENCY_DROP if frequency else 1.0))
    for name, whose in (("cgroup_memory_pressure_ratio", "the worker's "), ("memory_pressure_ratio", "")):
        pressure = s.shift(name, lambda b, v: v - b >= PRESSURE_RISE)
        if pressure:
            out.append(Finding("memory_pressure", f"{whose}memory pressure {_pct(pressure[0])} → {_pct(pressure[1])}"
                                                  " of the span", (pressure[1] - pressure[0]) / PRESSURE_RISE))
            break
    return out


def diagnose(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]],
             versions_changed: Mapping[str, tuple[str, str]] | None = None) -> list[Finding]:
    """The likely causes of a change between the runs ``before`` it and the runs ``after`` (each a
    run's ``conditions``), ranked, most likely first; ``[NONE]`` when no recorded condition changed
    enough, consistently.  ``versions_changed`` (key -> (from, to)) names a version change between
    them, the last resort of the ranking."""
    sides = _Sides(before, after)
    found = _settings(sides) + _faults(sides)
    found += _throttling(sides, {f.cause for f in found})
    found += _contention(sides)
    if versions_changed:
        found.append(Finding("version", ", ".join(f"{k} {a or '?'} → {b or '?'}"
                                                  for k, (a, b) in versions_changed.items()), 1.0))
    if not found:
        return [NONE]
    return sorted(found, key=lambda f: (f.tier, -f.strength))


def describe(findings: Sequence[Finding], limit: int = 3) -> str:
    """The findings as one line: "power limit lowered (power limit 700 W → 500 W); ..."."""
    return "; ".join(f"{CAUSE_BY_NAME[f.cause].title} ({f.evidence})" if f.cause != "none" else f.evidence
                     for f in findings[:limit])


_NAMES: tuple[str, ...] = tuple(c.name for c in CONDITIONS)
_TEXT: frozenset[str] = frozenset(c.name for c in CONDITIONS if c.unit == "text")
_TEXTS: list[str] = []
"""Every text condition value seen (a few governor names), so a packed run holds its index."""
_TEXT_INDEX: dict[str, int] = {}
Packed: TypeAlias = "array[float]"  # a string: array is subscriptable at run time only from Python 3.12


def _code(text: str) -> float:
    index = _TEXT_INDEX.get(text)
    if index is None:
        index = _TEXT_INDEX.setdefault(text, len(_TEXTS))
        if index == len(_TEXTS):
            _TEXTS.append(text)
    return float(index)


def pack(conditions: Mapping[str, Any]) -> Packed:
    """A run's conditions in about 360 bytes (one double each, NaN where absent, a text as its index in
    a table of the texts seen): the daemon keeps the last runs' conditions of every series for the
    diagnosis, and a dict per run would cost five times as much."""
    return array("d", (_code(v) if n in _TEXT and isinstance(v := conditions.get(n), str)
                       else (math.nan if (x := _number(conditions, n)) is None or n in _TEXT else x) for n in _NAMES))


def unpack(packed: Packed) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in zip(_NAMES, packed, strict=True):
        if not math.isnan(value):
            out[name] = _TEXTS[int(value)] if name in _TEXT else value
    return out
