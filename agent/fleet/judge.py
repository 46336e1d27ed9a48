"""The verdict on each group of a fleet: are the hosts on the new version slower than those on the old one?

A group is one GPU model and one case (a summary or a shape of a workload, precision, mode and pass;
within one cluster unless clusters are pooled).  Its hosts split by the version label asked for (or by
every version label at once: ``all``).  The newest version present is the new side unless ``--new`` says,
and the version on the most other hosts the old side unless ``--old`` says; hosts on a third version are
counted and left out.

Two comparisons, both on log values so that a shift is a ratio (:mod:`sixdim.fleet.stats`):

* **cross-section**: each host's median over its GPUs, new side against old side (Mann-Whitney,
  Hodges-Lehmann ratio, Moses interval);
* **paired**: the hosts that ran both versions (they upgraded), each host's median over its GPUs of
  (value now / last value under the old version), against 1 (signed rank).  The same GPUs before and
  after: no host-to-host spread in it, so it is the stronger evidence where it has enough hosts.

The confidence of every interval is Bonferroni-corrected over all the comparisons of one answer (two per
group compared), so that the chance of any false verdict in the whole answer stays under ``alpha``.  A
comparison whose sides are too small to ever reach that confidence is ``too few``.  The group's verdict is
the paired comparison's wherever it can judge (a rollout goes rack by rack, and a rack's hosts may differ from
the rest by more than a driver does: the same hosts before and after do not), else the cross-section's; where
they disagree, the answer says so.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from sixdim.core import catalog
from sixdim.fleet import stats
from sixdim.fleet.queries import HostRow

SLOWER, FASTER, NO_CHANGE, TOO_FEW = "slower", "faster", "no change", "too few"
VERDICTS = (SLOWER, FASTER, NO_CHANGE, TOO_FEW)

SPLITS: dict[str, tuple[str, ...]] = {
    "driver": (catalog.DRIVER_VERSION,), "cuda": (catalog.CUDA_VERSION,), "cudnn": (catalog.CUDNN_VERSION,),
    "nccl": (catalog.NCCL_VERSION,), "torch": (catalog.TORCH_VERSION,), "all": catalog.VERSION_LABELS}
"""``--split``: the version labels whose values make a side."""


def version_key(text: str) -> tuple:
    """A version's sort key, its numbers compared as numbers: ``550.9`` before ``550.10``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.findall(r"\d+|[^\d]+", text))


@dataclass(frozen=True)
class Side:
    versions: dict[str, str]
    hosts: int
    gpus: int


@dataclass(frozen=True)
class Comparison:
    """One comparison's result: sizes, the ratio new / old with its interval, and its verdict."""

    hosts: int
    gpus: int
    verdict: str
    shift: stats.Shift | None = None

    def as_json(self) -> dict:
        out: dict = {"hosts": self.hosts, "gpus": self.gpus, "verdict": self.verdict}
        if self.shift is not None:
            out.update(ratio=round(self.shift.ratio, 6), ratio_low=round(self.shift.ratio_low, 6),
                       ratio_high=round(self.shift.ratio_high, 6), p_value=float(f"{self.shift.p_value:.4g}"))
        return out


@dataclass
class Group:
    """One GPU model and case, split into its old and new sides."""

    metric: catalog.MetricDef
    labels: dict[str, str]
    old: Side
    new: Side
    other_hosts: int
    old_values: np.ndarray
    new_values: np.ndarray
    new_hosts: dict[tuple[str, str], int]
    """The new side's hosts and their GPUs (the paired comparison asks for these hosts only)."""
    cross: Comparison | None = None
    paired: Comparison | None = None
    verdict: str = TOO_FEW
    beyond_threshold: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def worse(self) -> int:
        return catalog.WATCHED[self.metric.figure or ""]

    @property
    def basis(self) -> str:
        """Which comparison the verdict rests on: ``paired`` (the same hosts before and after) or
        ``cross-section`` (the hosts on the new version against those on the old: they may differ for another
        reason, a rack upgraded first)."""
        return "paired" if self.paired is not None and self.paired.verdict != TOO_FEW else "cross-section"

    def change(self) -> float | None:
        """The ratio that decided the verdict, as a signed change (``-0.03``: 3% lower)."""
        decided = self.paired if self.basis == "paired" else self.cross
        if decided is None or decided.shift is None:
            return None
        return decided.shift.ratio - 1


def _choose(sides: dict[tuple[str, ...], list[HostRow]], labels: tuple[str, ...], old: dict[str, str],
            new: dict[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The old and the new side's versions among those present, or None when there are not two."""
    def matches(versions: tuple[str, ...], wanted: dict[str, str]) -> bool:
        return all(dict(zip(labels, versions)).get(label) == value for label, value in wanted.items())
    present = list(sides)
    news = [v for v in present if matches(v, new)] if new else present
    if not news:
        return None
    newest = max(news, key=lambda v: tuple(version_key(part) for part in v))
    olds = [v for v in present if v != newest and (matches(v, old) if old else True)]
    if not olds:
        return None
    oldest = max(olds, key=lambda v: (len({r.host for r in sides[v]}), tuple(version_key(p) for p in v)))
    return oldest, newest


def split_rows(rows: Iterable[HostRow], split: tuple[str, ...]) -> dict[tuple, dict[tuple[str, ...], list[HostRow]]]:
    """Rows by group, then by the split labels' values.  A host with GPUs under two version sets that the
    split does not tell apart counts once, by its set with the most GPUs."""
    index = [catalog.VERSION_LABELS.index(label) for label in split]
    best: dict[tuple, HostRow] = {}
    for row in rows:
        side = tuple(row.versions[i] for i in index)
        key = (row.group, side, row.host)
        if key not in best or row.gpus > best[key].gpus:
            best[key] = row
    out: dict[tuple, dict[tuple[str, ...], list[HostRow]]] = defaultdict(lambda: defaultdict(list))
    for (group, side, _host), row in best.items():
        out[group][side].append(row)
    return out


def build_groups(metric: catalog.MetricDef, group_labels: tuple[str, ...], rows: Iterable[HostRow],
                 split: tuple[str, ...], old: dict[str, str], new: dict[str, str]) -> tuple[list[Group], int]:
    """The groups with two sides to compare, and how many groups had a single version (nothing to compare)."""
    groups: list[Group] = []
    single = 0
    for group, sides in split_rows(rows, split).items():
        chosen = _choose(sides, split, old, new)
        if chosen is None:
            single += 1
            continue
        old_side, new_side = chosen
        old_rows, new_rows = sides[old_side], sides[new_side]
        other = {r.host for side, rs in sides.items() if side not in chosen for r in rs}
        usable_old = [r for r in old_rows if r.median > 0]
        usable_new = [r for r in new_rows if r.median > 0]
        groups.append(Group(
            metric=metric, labels=dict(zip(group_labels, group)),
            old=Side(dict(zip(split, old_side)), len(usable_old), sum(r.gpus for r in usable_old)),
            new=Side(dict(zip(split, new_side)), len(usable_new), sum(r.gpus for r in usable_new)),
            other_hosts=len(other),
            old_values=np.log([r.median for r in usable_old]), new_values=np.log([r.median for r in usable_new]),
            new_hosts={r.host: r.gpus for r in usable_new}))
    return groups, single


def _verdict(shift: stats.Shift | None, worse: int) -> str:
    if shift is None:
        return TOO_FEW
    if shift.high < 0:
        return SLOWER if worse == catalog.DOWN else FASTER
    if shift.low > 0:
        return FASTER if worse == catalog.DOWN else SLOWER
    return NO_CHANGE


def judge(groups: list[Group], paired: dict[int, list[HostRow]], *, alpha: float, threshold: float,
          min_hosts: int) -> None:
    """Fill each group's comparisons and verdict; ``paired`` holds, by the group's index, the paired rows
    (median ratio per upgraded host).  Bonferroni over two comparisons per group."""
    per_test = alpha / max(1, 2 * len(groups))
    for index, group in enumerate(groups):
        worse = group.worse
        n_old, n_new = len(group.old_values), len(group.new_values)
        shift = None
        if min(n_old, n_new) >= min_hosts and stats.can_judge_two(n_old, n_new, per_test):
            shift = stats.two_sample_shift(group.old_values, group.new_values, per_test)
        group.cross = Comparison(n_old + n_new, group.old.gpus + group.new.gpus, _verdict(shift, worse), shift)
        pairs = [r for r in paired.get(index, []) if r.median > 0 and r.gpus > 0]
        paired_shift = None
        if len(pairs) >= min_hosts and stats.can_judge_paired(len(pairs), per_test):
            paired_shift = stats.paired_shift(np.log([r.median for r in pairs]), per_test)
        group.paired = Comparison(len(pairs), sum(r.gpus for r in pairs), _verdict(paired_shift, worse),
                                  paired_shift) if pairs else None
        group.verdict = _combine(group.cross.verdict, group.paired.verdict if group.paired else TOO_FEW, group)
        change = group.change()
        group.beyond_threshold = (group.verdict == SLOWER and change is not None
                                  and abs(change) >= threshold - 1e-12)


def _combine(cross: str, paired: str, group: Group) -> str:
    """The paired comparison where it can judge: the same GPUs before and after, so hosts that were slower (or
    faster) before they upgraded, as a rack upgraded first may be, do not pass for a change of version.  The
    cross-section only where no paired comparison can judge.  A disagreement is noted."""
    if paired == TOO_FEW:
        return cross
    if cross in (SLOWER, FASTER) and cross != paired:
        group.notes.append(f"the hosts on the new version are {cross} than those on the old one, but the same "
                           f"hosts before and after they upgraded say {paired}: a difference between the hosts, "
                           "not the versions")
    return paired


def exit_worthy(groups: list[Group]) -> list[Group]:
    """The groups ``--exit-code`` fails on: slower, by at least the threshold."""
    return [g for g in groups if g.beyond_threshold]


def percent(change: float | None) -> str:
    if change is None or not math.isfinite(change):
        return "-"
    return f"{change * 100:+.1f}%"
