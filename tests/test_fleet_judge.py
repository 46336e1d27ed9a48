"""The verdicts of ``sixdim fleet`` on host rows: which versions are the sides, when a group is slower,
faster, unchanged or has too few hosts, what the paired comparison adds, and what ``--exit-code`` fails on.
(The rows are what Prometheus answers; tests/test_fleet_e2e.py asks a real one.)"""

from __future__ import annotations

import math
import random

import pytest

from sixdim.core import catalog
from sixdim.fleet import judge
from sixdim.fleet.queries import HostRow, Layout

LAYOUT = Layout(cluster="cluster", host=catalog.HOSTNAME, model=catalog.MODEL_NAME)
FLOPS, SECONDS = catalog.SUMMARY_FLOPS, catalog.SUMMARY_SECONDS
GROUP = ("eu-1", "H100", "cuda", "quick", "gemm", "bf16", "training", "forward")
LABELS = LAYOUT.group_labels(FLOPS)
ALL = judge.SPLITS["all"]
DRIVER = judge.SPLITS["driver"]


def versions(driver: str, torch: str = "2.5.1") -> tuple[str, ...]:
    return (driver, "12.4", "", "", torch)


def hosts(n: int, driver: str, level: float, *, spread: float = 0.003, seed: int = 1, prefix: str = "h",
          torch: str = "2.5.1") -> list[HostRow]:
    rng = random.Random(f"{seed}{prefix}{driver}")
    return [HostRow(GROUP, ("eu-1", f"{prefix}{driver}-{i}"), versions(driver, torch),
                    level * math.exp(rng.gauss(0, spread)), 8) for i in range(n)]


def judged(rows, *, paired=None, split=ALL, old=None, new=None, metric=FLOPS, threshold=0.02, min_hosts=3,
           alpha=0.05):
    groups, single = judge.build_groups(metric, LABELS, rows, split, old or {}, new or {})
    judge.judge(groups, paired or {}, alpha=alpha, threshold=threshold, min_hosts=min_hosts)
    return groups, single


def test_the_newest_version_is_new_numbers_compared_as_numbers_and_the_most_common_other_is_old():
    rows = hosts(10, "550.9", 1.0) + hosts(12, "550.10", 1.0) + hosts(20, "535.183", 1.0)
    [group], single = judged(rows)
    assert single == 0
    assert group.new.versions[catalog.DRIVER_VERSION] == "550.10"  # 10 > 9, though "550.9" > "550.10" as text
    assert group.old.versions[catalog.DRIVER_VERSION] == "535.183"  # 20 hosts, against 10 on 550.9
    assert (group.old.hosts, group.new.hosts, group.other_hosts) == (20, 12, 10)
    assert (group.old.gpus, group.new.gpus) == (160, 96)


def test_old_and_new_can_be_named():
    rows = hosts(10, "550.9", 1.0) + hosts(12, "550.10", 1.0) + hosts(20, "535.183", 1.0)
    [group], _ = judged(rows, old={catalog.DRIVER_VERSION: "550.9"}, new={catalog.DRIVER_VERSION: "550.10"})
    assert (group.old.versions[catalog.DRIVER_VERSION], group.old.hosts, group.other_hosts) == ("550.9", 10, 20)
    groups, single = judged(rows, new={catalog.DRIVER_VERSION: "999"})
    assert groups == [] and single == 1


def test_a_group_on_one_version_has_nothing_to_compare():
    groups, single = judged(hosts(30, "550.54.15", 1.0))
    assert groups == [] and single == 1


def test_three_percent_slower_with_one_percent_noise_is_slower_with_its_ratio():
    rows = hosts(20, "550.54.15", 1.0, spread=0.01) + hosts(20, "560.35.03", 0.97, spread=0.01)
    [group], _ = judged(rows)
    assert group.verdict == judge.SLOWER and group.cross.verdict == judge.SLOWER
    assert group.cross.shift.ratio == pytest.approx(0.97, abs=0.01)
    assert group.cross.shift.ratio_low < group.cross.shift.ratio < group.cross.shift.ratio_high < 1
    assert group.beyond_threshold and judge.exit_worthy([group]) == [group]


def test_slower_is_the_worse_way_of_the_figure():
    """Seconds up is slower; FLOP/s up is faster."""
    rows = hosts(10, "550.54.15", 1.0) + hosts(10, "560.35.03", 1.05)
    [flops], _ = judged(rows, metric=FLOPS)
    seconds_rows = [HostRow(GROUP, r.host, r.versions, r.median, r.gpus) for r in rows]
    [seconds], _ = judged(seconds_rows, metric=SECONDS)
    assert flops.verdict == judge.FASTER and not flops.beyond_threshold
    assert seconds.verdict == judge.SLOWER and seconds.beyond_threshold


def test_a_real_but_small_slowdown_is_slower_but_not_beyond_the_threshold():
    rows = hosts(40, "550.54.15", 1.0, spread=0.002) + hosts(40, "560.35.03", 0.99, spread=0.002)
    [group], _ = judged(rows)
    assert group.verdict == judge.SLOWER and group.change() == pytest.approx(-0.01, abs=0.002)
    assert not group.beyond_threshold and judge.exit_worthy([group]) == []
    [strict], _ = judged(rows, threshold=0.005)
    assert strict.beyond_threshold


def test_no_change_and_too_few():
    [same], _ = judged(hosts(20, "550.54.15", 1.0) + hosts(20, "560.35.03", 1.0))
    assert same.verdict == judge.NO_CHANGE and not same.beyond_threshold
    [few], _ = judged(hosts(20, "550.54.15", 1.0) + hosts(2, "560.35.03", 0.8))
    assert few.verdict == judge.TOO_FEW and few.cross.shift is None and few.new.hosts == 2
    [some], _ = judged(hosts(20, "550.54.15", 1.0) + hosts(2, "560.35.03", 0.8), min_hosts=2)
    assert some.verdict == judge.SLOWER  # 2 against 20: 2 / C(22, 2) = 0.009 < 0.05 / 2


def test_confidence_is_shared_by_every_comparison_of_the_answer():
    """Five hosts a side reach 5% shared by one group's two tests (2 / C(10, 5) = 0.008 < 0.025), not 5% shared
    by 20 groups' 40 tests (0.00125)."""
    rows = hosts(5, "550.54.15", 1.0) + hosts(5, "560.35.03", 0.9)
    [alone], _ = judged(rows)
    assert alone.verdict == judge.SLOWER
    many = []
    for i in range(20):
        group = GROUP[:4] + (f"w{i}",) + GROUP[5:]
        many += [HostRow(group, r.host, r.versions, r.median, r.gpus) for r in rows]
    groups, _ = judged(many)
    assert len(groups) == 20 and {g.verdict for g in groups} == {judge.TOO_FEW}


def test_split_by_one_label_pools_the_others_and_counts_a_host_once():
    """Split by driver: torch differences are pooled; a host with GPUs under two torch versions of one driver
    counts once, by its larger part."""
    rows = (hosts(10, "550.54.15", 1.0, torch="2.5.1") + hosts(10, "550.54.15", 1.0, torch="2.6.0", prefix="t")
            + hosts(10, "560.35.03", 0.95))
    rows.append(HostRow(GROUP, ("eu-1", "h550.54.15-0"), versions("550.54.15", "2.6.0"), 0.5, 2))
    [group], _ = judged(rows, split=DRIVER)
    assert group.old.versions == {catalog.DRIVER_VERSION: "550.54.15"}
    assert (group.old.hosts, group.new.hosts, group.old.gpus) == (20, 10, 160)
    by_all, _ = judged(rows, split=ALL)
    assert len(by_all) == 1 and by_all[0].other_hosts == 10  # torch 2.6.0 is a third side when split by all


def test_the_paired_comparison_finds_what_host_spread_hides():
    """Hosts differ by 10% from each other: across sides a 2% slowdown is lost in the spread, but each
    upgraded host's own before/after ratio shows it."""
    levels = [0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15, 1.2]
    rows = ([HostRow(GROUP, ("eu-1", f"old-{i}"), versions("550.54.15"), level, 8) for i, level in enumerate(levels)]
            + [HostRow(GROUP, ("eu-1", f"new-{i}"), versions("560.35.03"), 0.98 * level, 8)
               for i, level in enumerate(reversed(levels))])
    rng = random.Random(5)
    pairs = [HostRow(GROUP, r.host, (), 0.98 * math.exp(rng.gauss(0, 0.002)), 8) for r in rows[8:]]
    [group], _ = judged(rows, paired={0: pairs})
    assert group.cross.verdict == judge.NO_CHANGE
    assert group.paired.verdict == judge.SLOWER and group.paired.hosts == 8 and group.paired.gpus == 64
    assert group.verdict == judge.SLOWER and group.change() == pytest.approx(-0.02, abs=0.003)
    assert group.beyond_threshold


def test_hosts_that_were_slower_before_they_upgraded_are_not_a_slower_version():
    """The first rack upgraded was 5% slower all along: across sides the new version looks 5% slower, but the
    same hosts before and after changed by nothing (or got faster): the paired comparison decides, and says
    why it differs from the cross-section."""
    rows = hosts(20, "550.54.15", 1.0, spread=0.002) + hosts(20, "560.35.03", 0.95, spread=0.002)
    same = [HostRow(GROUP, r.host, (), 1.0 + 0.0005 * (i - 10), 8) for i, r in enumerate(rows[20:])]
    [group], _ = judged(rows, paired={0: same})
    assert (group.cross.verdict, group.paired.verdict, group.verdict) == (judge.SLOWER, judge.NO_CHANGE,
                                                                          judge.NO_CHANGE)
    assert group.notes and "not the versions" in group.notes[0] and not group.beyond_threshold
    faster = [HostRow(GROUP, r.host, (), 1.05 + 0.001 * i, 8) for i, r in enumerate(rows[20:])]
    [group], _ = judged(rows, paired={0: faster})
    assert (group.cross.verdict, group.verdict) == (judge.SLOWER, judge.FASTER)
    assert group.change() == pytest.approx(0.06, abs=0.01)


def test_hosts_with_nothing_measured_are_left_out():
    rows = hosts(10, "550.54.15", 1.0) + hosts(10, "560.35.03", 1.0)
    rows[0] = HostRow(GROUP, rows[0].host, rows[0].versions, 0.0, 8)
    [group], _ = judged(rows)
    assert group.old.hosts == 9 and len(group.old_values) == 9
