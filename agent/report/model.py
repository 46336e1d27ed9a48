"""The model of the HTML report's page: what each section shows, computed from the history's data
(the six dimensions, trends, version comparison, verdicts and change points), before any HTML."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, cast

from sixdim.core.catalog import RESTATING, SPEED_FIGURES
from sixdim.core.results import SeriesKey
from sixdim.report.data import Data, Latest, record_of
from sixdim.report.format import (
    BUCKETS,
    DASHES,
    MARK_CLUSTER_SECONDS,
    MAX_MARKS,
    MAX_POINTS,
    MIN_MULTI_SHAPE_BUCKET,
    MIN_SIDE_RUNS,
    PALETTE,
    SUITE_RUN,
    SUITE_RUN_GAP,
    change_label,
    gpu_order,
)

# ---------------------------------------------------------------------------- the model of the page

class Report:
    """Everything the page shows, computed from :class:`Data`."""

    def __init__(self, data: Data, *, since: float | None = None, settings: Any = None, now: float | None = None,
                 note: str = "") -> None:
        import numpy as np

        from sixdim.verdicts import detector as rg

        self.np = np
        self.rg = rg
        self.data = data
        self.settings = settings or rg.Settings()
        self.now = time.time() if now is None else now
        self.since = since
        self.cutoff = self.now - since if since is not None else -math.inf
        self.note = note
        self.column = {name: 3 + j for j, name in enumerate(data.figures)}
        self.full: dict[tuple[str, ...], Any] = {}
        """Per series: its ok runs in time order, a row each (started, ended, version set, figures)."""
        self.arrays: dict[tuple[str, ...], Any] = {}
        """The same, in the shown time."""
        for key, s in data.series.items():
            a = np.array(s.cp.rows, dtype=float).reshape(-1, 3 + len(data.figures))
            a = a[np.lexsort((a[:, 1], a[:, 0]))] if len(a) else a
            self.full[key] = a
            self.arrays[key] = a[a[:, 0] >= self.cutoff] if since is not None else a
        self.devices = sorted({s.device for s in data.series.values()}, key=gpu_order)
        self.models = {s.device: s.model_name for s in data.series.values()}
        self.hosts = sorted({d[0] for d in self.devices})
        self.colour = {d: PALETTE[i % len(PALETTE)] for i, d in enumerate(self.devices)}
        self.dash = {d: DASHES[(i // len(PALETTE)) % len(DASHES)] for i, d in enumerate(self.devices)}
        self.labels = self._device_labels()
        self.speed = {key: self._speed_figure(key) for key in data.series}
        self.groups: dict[tuple[str, str, str, str], list[SeriesKey]] = {}
        for key in sorted(data.series, key=lambda k: (k.workload, k.precision, k.mode, k.kernel_pass,
                                                      gpu_order(k.device), k.shape)):
            self.groups.setdefault(data.series[key].group, []).append(key)
        self.group_labels = self._group_labels()
        self.events = self._version_events()
        self.conditions: dict[int, dict[str, Any]] = {}
        """The conditions read so far (run id -> conditions): only of runs whose regression the page explains."""
        self._asked: set[int] = set()

    # -- labels

    def _device_labels(self) -> dict[tuple[str, str, str, str], str]:
        many_hosts = len(self.hosts) > 1
        labels = {}
        for host, kind, gpu, uuid in self.devices:
            name = "CPU" if kind == "cpu" else f"GPU {gpu}" if gpu else "all GPUs"
            labels[(host, kind, gpu, uuid)] = f"{host} {name}" if many_hosts else name
        seen = Counter(labels.values())
        for device, label in list(labels.items()):
            if seen[label] > 1 and device[3]:  # a GPU index reused by another board: tell them apart
                labels[device] = f"{label} ({device[3][:12]})"
        return labels

    def _group_labels(self) -> dict[tuple[str, str, str, str], str]:
        """``bf16 gemm``, with mode and pass only where the workload has several."""
        variants: dict[str, set[tuple[str, str]]] = {}
        for workload, _, mode, kernel_pass in self.groups:
            variants.setdefault(workload, set()).add((mode, kernel_pass))
        out = {}
        for group in self.groups:
            workload, precision, mode, kernel_pass = group
            label = " ".join(p for p in (precision, workload) if p)
            if len(variants[workload]) > 1:
                label += " (" + ", ".join(p for p in (mode, kernel_pass) if p) + ")"
            out[group] = label
        return out

    def _speed_figure(self, key: tuple[str, ...]) -> str | None:
        a = self.arrays[key]
        for figure in SPEED_FIGURES:
            if len(a) and self.np.isfinite(a[:, self.column[figure]]).any():
                return figure
        return None

    def group_speed(self, group: tuple[str, str, str, str]) -> str | None:
        """The speed figure of most of a group's series."""
        found = Counter(self.speed[k] for k in self.groups[group] if self.speed[k])
        return found.most_common(1)[0][0] if found else None

    def has_rate(self, key: Sequence[str]) -> bool:
        """Whether a series reports a rate (FLOP/s, samples/s, bytes/s): then its time restates it."""
        a = self.full.get(tuple(key))
        return a is not None and len(a) > 0 and any(
            self.np.isfinite(a[:, self.column[f]]).any() for f in self.rg.RATES)

    def series_label(self, key: SeriesKey) -> str:
        return " ".join(p for p in (key.precision, key.workload, key.shape) if p)

    # -- version changes per device

    def _version_events(self) -> dict[tuple[str, str, str, str], list[tuple[float, str, dict, dict]]]:
        """Per device: (time, label, before, after) of each version change, the earliest run under
        the new versions over all the device's series."""
        versions = self.data.versions
        found: dict[tuple[str, str, str, str], dict[tuple[int, int], float]] = {}
        for s in self.data.series.values():
            changes = found.setdefault(s.device, {})
            points = sorted(s.version_runs)
            for (_, old), (at, new) in zip(points, points[1:]):
                if old != new and (changes.get((old, new)) is None or at < changes[(old, new)]):
                    changes[(old, new)] = at
        out = {}
        for device, changes in found.items():
            events = []
            for (old, new), at in changes.items():
                label = change_label(versions[old], versions[new])
                if label:
                    events.append((at, label, versions[old], versions[new]))
            out[device] = sorted(events)
        return out

    def marks(self, devices: Iterable[tuple[str, str, str, str]]) -> list[dict[str, Any]]:
        """The version changes of these devices in the shown time, one mark per change (its
        devices within :data:`MARK_CLUSTER_SECONDS` of each other)."""
        devices = list(devices)
        clusters: list[dict[str, Any]] = []
        for device in devices:
            for at, label, old, new in self.events.get(device, ()):
                if at < self.cutoff:
                    continue
                for c in clusters:
                    if c["label"] == label and abs(at - c["at"]) <= MARK_CLUSTER_SECONDS:
                        c["at"] = min(c["at"], at)
                        c["devices"].append(device)
                        break
                else:
                    clusters.append({"at": at, "label": label, "short": change_label(old, new, most=2),
                                     "devices": [device]})
        if len(clusters) > MAX_MARKS:
            clusters = sorted(clusters, key=lambda c: (len(c["devices"]), c["at"]))[-MAX_MARKS:]
        chart_hosts = {d[0] for d in devices}
        for c in clusters:
            hosts = sorted({d[0] for d in c["devices"]})
            where = ""
            if len(chart_hosts) > 1 and len(hosts) < len(chart_hosts):
                where = " (" + ", ".join(hosts) + ")"
            c["text"] = c["short"] + where
            c["hover"] = c["label"] + "<br>" + ", ".join(self.labels[d] for d in c["devices"])
        return sorted(clusters, key=lambda c: c["at"])

    # -- trend series

    def trend(self, group: tuple[str, str, str, str], figure: str, width: float | str | None = None
              ) -> tuple[list[dict[str, Any]], float | str | None, int]:
        """Per device of a group: its points of one figure (x in ms, y), the grouping used and the number
        of shapes.  The grouping (``width``; chosen here when not given, as :meth:`_grouping` says):

        - None: a point per run (one shape, at most :data:`MAX_POINTS` runs);
        - :data:`SUITE_RUN`: a point per suite run (several shapes, at most :data:`MAX_POINTS` suite
          runs, found by :meth:`_suite_runs`): the geometric mean over the shapes it measured of each
          run divided by its shape's median, times the shapes' geometric mean (so a suite run that
          missed a shape does not jump); ``counts`` are its runs (shapes);
        - seconds: a point per time bucket of that width, the median of its runs (for several shapes,
          of those ratios); ``counts`` are its runs.

        A point's x is the median start of its runs, never a bucket's centre: every point lies within
        its runs' times, so none is drawn before the first run or after the last."""
        np = self.np
        j = self.column[figure]
        keys = self.groups[group]
        per_device: dict[tuple[str, str, str, str], list[tuple[Any, Any, int]]] = {}
        shapes: dict[str, int] = {}
        for key in keys:
            a = self.arrays[key]
            if not len(a):
                continue
            v = a[:, j]
            ok = np.isfinite(v) & (v > 0)
            if not ok.any():
                continue
            shape = shapes.setdefault(key.shape, len(shapes))
            per_device.setdefault(key.device, []).append((a[ok, 0], v[ok], shape))
        if not per_device:
            return [], None, 0
        v_all = np.concatenate([v for parts in per_device.values() for _, v, _ in parts])
        s_all = np.concatenate([np.full(len(t), s) for parts in per_device.values() for t, _, s in parts])
        if len(shapes) > 1:  # each run relative to its shape's median: the buckets' geometric mean
            medians = np.array([np.median(v_all[s_all == s]) for s in range(len(shapes))])
            scale = math.exp(float(np.mean(np.log(medians))))
        else:
            medians, scale = None, 1.0
        runs = {}
        for device, parts in per_device.items():
            t = np.concatenate([p[0] for p in parts])
            v = np.concatenate([p[1] for p in parts])
            s = np.concatenate([np.full(len(p[0]), p[2]) for p in parts])
            order = np.lexsort((s, t))
            runs[device] = (t[order], v[order], s[order])
        if width is None:
            width = self._grouping(runs, len(shapes))
        lines = []
        for device in sorted(runs, key=gpu_order):
            t, v, s = runs[device]
            if medians is not None:
                v = np.log(v / medians[s])
            counts = None
            if width is not None:
                if width == SUITE_RUN:
                    starts = self._suite_runs(t, s, len(shapes))
                    middle = np.mean  # the geometric mean over the suite run's shapes
                else:
                    bucket = np.floor(t / float(width))
                    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
                    middle = np.median
                ends = np.r_[starts[1:], len(t)]
                counts = (ends - starts).tolist()
                t = np.array([np.median(t[a:b]) for a, b in zip(starts, ends)])
                v = np.array([middle(v[a:b]) for a, b in zip(starts, ends)])
            if medians is not None:
                v = scale * np.exp(v)
            lines.append({"device": device, "x": [int(round(x * 1000)) for x in t], "y": [rounded(y) for y in v],
                          "counts": counts})
        return lines, width, len(shapes)

    def _grouping(self, runs: dict[Any, tuple[Any, Any, Any]], shapes: int) -> float | str | None:
        """How a chart draws its runs (``runs``: per device, start times, values and shapes, in time order):
        while they fit in :data:`MAX_POINTS` points, each run (one shape) or each suite run (several
        shapes: :data:`SUITE_RUN`); beyond, the smallest time bucket that fits (:meth:`_bucket`)."""
        total = sum(len(t) for t, _, _ in runs.values())
        if shapes <= 1:
            return None if total <= MAX_POINTS else self._bucket([t for t, _, _ in runs.values()], False)
        # a suite run measures each shape at most once: at least total / shapes of them, more than MAX_POINTS
        # whenever that is; otherwise count them
        if total <= MAX_POINTS * shapes and \
                sum(len(self._suite_runs(t, s, shapes)) for t, _, s in runs.values()) <= MAX_POINTS:
            return SUITE_RUN
        return self._bucket([t for t, _, _ in runs.values()], True)

    def _suite_runs(self, t: Any, s: Any, shapes: int) -> Any:
        """Where each suite run begins among one device's runs of a workload (``t`` start times in order,
        ``s`` their shapes): a new one where more than :data:`SUITE_RUN_GAP` passed since the previous
        run, or where a shape repeats (a suite run measures each shape once).  The history records no
        suite-run id: a suite run's cases of one workload follow each other, minutes at most apart."""
        np = self.np
        starts = np.flatnonzero(np.r_[True, np.diff(t) > SUITE_RUN_GAP])
        ends = np.r_[starts[1:], len(t)]
        cluster = np.repeat(np.arange(len(starts)), ends - starts)
        if len(np.unique(cluster * shapes + s)) == len(t):  # no shape twice in a cluster: the usual case
            return starts
        out = []
        for a, b in zip(starts.tolist(), ends.tolist()):
            seen: set[int] = set()
            out.append(a)
            for i in range(a, b):
                if int(s[i]) in seen:
                    out.append(i)
                    seen = set()
                seen.add(int(s[i]))
        return np.array(out, dtype=int)

    def _bucket(self, times: list[Any], multi_shape: bool) -> float:
        """The smallest bucket width that keeps the chart within :data:`MAX_POINTS` (``times``: each
        device's run starts), at least :data:`MIN_MULTI_SHAPE_BUCKET` for several shapes."""
        np = self.np
        for width in BUCKETS:
            if multi_shape and width < MIN_MULTI_SHAPE_BUCKET:
                continue
            if sum(len(np.unique(np.floor(t / width))) for t in times) <= MAX_POINTS:
                return width
        return BUCKETS[-1]

    # -- six dimensions

    def dimensions(self) -> list[dict[str, Any]]:
        """One row per device, workload, precision, mode, pass and suite: the latest ok value of each
        series (shape), summarised over the shapes measured under the newest versions."""
        from sixdim.verdicts.summary import geometric_mean

        groups: dict[tuple, list[Latest]] = {}
        for s in self.data.series.values():
            for suite, run in s.latest.items():
                if run.ended_at < self.cutoff:
                    continue
                groups.setdefault((s.device, s.group, suite), []).append(run)
        suites = {suite for _, _, suite in groups}
        rows = []
        for (device, group, suite), members in groups.items():
            newest = max(members, key=lambda m: m.ended_at)
            current = self.data.versions[newest.versions]
            # the members of the newest versions only, as agent/verdicts/summary.py groups
            members = [m for m in members if self.data.versions[m.versions] == current]
            speed = self.group_speed(group) or next((f for f in SPEED_FIGURES if f in newest.figures), None)
            values: dict[str, float | None] = {}

            def of(figure: str, members: list[Latest] = members) -> list[float]:
                return [float(m.figures[figure]) for m in members if isinstance(m.figures.get(figure), (int, float))
                        and not isinstance(m.figures.get(figure), bool)]

            for figure, how in ((speed, "geo"), ("peak_ratio", "geo"), ("power_watts", "mean"),
                                ("memory_bytes", "max"), ("accuracy", "min"), ("linearity_ratio", "min"),
                                ("stability_ratio", "min")):
                found = of(figure) if figure else []
                shown = figure or "speed"  # (no speed figure: nothing found)
                if not found or (how == "geo" and len(found) != len(members)):
                    values[shown] = None  # a mean over some of the shapes would pass for all
                elif how == "geo":
                    values[shown] = geometric_mean(found)
                elif how == "mean":
                    values[shown] = sum(found) / len(found)
                else:
                    values[shown] = max(found) if how == "max" else min(found)
            counts = of("linearity_count")
            rows.append({"device": device, "group": group, "suite": suite if len(suites) > 1 else "",
                         "shapes": len(members), "speed_figure": speed, "values": values,
                         "linearity_count": int(counts[0]) if len(set(counts)) == 1 else None,
                         "ended": newest.ended_at, "versions": current})
        rows.sort(key=lambda r: (self.group_labels[r["group"]], r["suite"], gpu_order(r["device"])))
        return rows

    # -- version comparison

    def comparison(self) -> list[dict[str, Any]]:
        """Every version change in the shown time, oldest first: per group, the speed figure over the
        runs just under the old versions against those under the new ones, per series (the runs of
        each side's whole segment: between the version changes either side), summarised over the
        series that have at least :data:`MIN_SIDE_RUNS` runs each side.  Components that changed at
        the same moment are one change: nothing tells their effects apart."""
        np = self.np
        versions = self.data.versions
        unknown = np.array(sorted(self.data.unknown), dtype=int)
        found: dict[str, dict[str, Any]] = {}
        for group, keys in self.groups.items():
            figure = self.group_speed(group)
            if figure is None:
                continue
            j = self.column[figure]
            for key in keys:
                a = self.arrays[key]
                if len(a) < 2:
                    continue
                v = a[:, j]
                ok = np.isfinite(v) & (v > 0) & ~np.isin(a[:, 2].astype(int), unknown)
                a, v = a[ok], v[ok]
                vids = a[:, 2].astype(int)
                bounds = [0, *(np.flatnonzero(vids[1:] != vids[:-1]) + 1).tolist(), len(vids)]
                for i in range(1, len(bounds) - 1):
                    lo, at, hi = bounds[i - 1], bounds[i], bounds[i + 1]
                    old, new = versions[vids[lo]], versions[vids[at]]
                    label = change_label(old, new)
                    if not label:
                        continue
                    t = found.setdefault(label, {"label": label, "short": change_label(old, new, most=2),
                                                 "at": math.inf, "groups": {}})
                    t["at"] = min(t["at"], float(a[at, 0]))
                    if at - lo < MIN_SIDE_RUNS or hi - at < MIN_SIDE_RUNS:
                        continue
                    t["groups"].setdefault(group, []).append(
                        (key, float(np.median(v[lo:at])), float(np.median(v[at:hi])), at - lo, hi - at))
        out = []
        for t in sorted(found.values(), key=lambda t: t["at"]):
            cells = {}
            for group, parts in t["groups"].items():
                cells[group] = {
                    "figure": self.group_speed(group), "series": len(parts),
                    "devices": len({p[0][:4] for p in parts}),
                    "before": _geomean([p[1] for p in parts]), "after": _geomean([p[2] for p in parts]),
                    "ratio": _geomean([p[2] / p[1] for p in parts]),
                    "runs_before": sum(p[3] for p in parts), "runs_after": sum(p[4] for p in parts)}
            if cells:
                out.append({**t, "cells": cells})
        return out

    # -- regressions

    def verdicts(self) -> list[Any]:
        """The live verdicts, as the agent restores them: each series' last runs, in recording order,
        with their likely causes (``SeriesVerdicts.causes``, what the agent exports as
        ``sixdim_regression_cause``).

        The runs are fed without their conditions first; then the series with something to explain (a
        figure in regression or suspicious, a version change that regressed a figure) are fed again,
        alone, with the conditions of their last runs, read by id: the same verdicts (a series' verdicts
        depend on its own runs only), now with their causes, and the conditions of no other run read."""
        from sixdim.verdicts.live import Verdicts

        rg = self.rg
        live = Verdicts(self.settings)
        rows = sorted((row for s in self.data.series.values() for row in s.recent), key=lambda r: r.id)
        for row in rows:
            live.add(record_of(row))
        snapshot = live.snapshot()
        explain = {sv.record.key() for sv in snapshot
                   if any(v.state in (rg.REGRESSION, rg.SUSPICIOUS) for v in sv.verdicts.values())
                   or any(c.state == rg.REGRESSION for c in sv.changes.values())}
        self._read_conditions(row.id for key in explain for row in self.data.series[key].recent)
        if not self.conditions:
            return snapshot
        again = Verdicts(self.settings)
        for row in rows:
            if row.key in explain:
                again.add(record_of(row, self.conditions.get(row.id)))
        redone = {tuple(sv.record.key()): sv for sv in again.snapshot()}
        return [redone.get(tuple(sv.record.key()), sv) for sv in snapshot]

    def _read_conditions(self, ids: Iterable[int]) -> None:
        """Read the conditions of these runs (those not read yet) into :attr:`conditions`."""
        from sixdim.store import reader

        wanted = set(ids) - self._asked
        if wanted:
            self._asked |= wanted
            with reader.reading(self.data.path) as db:
                self.conditions.update(reader.conditions(db, wanted))

    def change_causes(self, key: Sequence[str], change: Any) -> list[Any]:
        """The likely causes (:class:`sixdim.verdicts.causes.Finding`) of a version change that regressed a
        figure (a ``VersionVerdict``): the conditions of the series' last ok runs before it against its
        first ok runs from it (as many as ``report regressions`` compares), the version change named as the
        last resort; [] for an improvement, or where either side recorded no conditions."""
        from sixdim.report.regressions import CAUSE_RUNS, recorded
        from sixdim.verdicts.causes import diagnose

        if change.state != self.rg.REGRESSION or change.at is None:
            return []
        rows = [row for row in self.data.series[cast(SeriesKey, tuple(key))].recent if row.status == "ok"]
        self._read_conditions(row.id for row in rows)
        before = [c for row in rows if row.started_at < change.at and recorded(c := self.conditions.get(row.id))]
        after = [c for row in rows if row.started_at >= change.at and recorded(c := self.conditions.get(row.id))]
        before, after = before[-CAUSE_RUNS:], after[:CAUSE_RUNS]
        return diagnose(before, after, dict(change.changes) or None) if before and after else []

    def add_shift_causes(self, shifts: list[dict[str, Any]]) -> None:
        """Give these change points their ``"causes"``, as ``report regressions`` does
        (:func:`sixdim.report.regressions.add_causes`), reading the conditions of their runs only."""
        from sixdim.report.regressions import add_causes

        add_causes(shifts, {key: s.cp for key, s in self.data.series.items()}, self.data.path)

    def change_points(self) -> list[dict[str, Any]]:
        """The change points of the whole history (``report regressions``), less the figures that
        restate a shift of the series' speed, at or after the cutoff, newest first."""
        from sixdim.report.regressions import OkRuns, analyse
        from sixdim.verdicts.detector import WATCHED

        with_rate: dict[tuple[str, ...], Any] = {}
        without: dict[tuple[str, ...], Any] = {}
        for key, s in self.data.series.items():
            if s.cp.rows:  # a series with no ok run has nothing to analyse
                (with_rate if self.has_rate(key) else without)[key] = s.cp
        found = []
        for chosen, figures in ((with_rate, [f for f in WATCHED if f not in RESTATING]), (without, list(WATCHED))):
            if chosen:
                history = OkRuns(chosen, self.data.versions, self.data.figures, 0, frozenset(self.data.unknown))
                found += analyse(history, settings=self.settings, figures=figures)
        found = [f for f in found if f["at"] >= self.cutoff]
        found.sort(key=lambda f: (-f["at"], f["hostname"], f["gpu"], f["workload"], f["shape"], f["figure"]))
        return found


def rounded(value: float) -> float:
    """5 significant digits: enough for a chart, and a smaller page."""
    if not math.isfinite(value) or value == 0:
        return value
    return round(value, 4 - int(math.floor(math.log10(abs(value)))))


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
