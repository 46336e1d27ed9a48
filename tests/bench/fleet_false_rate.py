#!/usr/bin/env python3
"""How often ``sixdim fleet`` calls a group ``slower`` when the new version changed nothing, and how often it
finds a real 3% slowdown: the numbers the default ``--threshold`` is chosen from.

Usage (from the repository root):

    python -m tests.bench.fleet_false_rate [--rollouts 1000] [--seed 43] [--out FILE]

Each simulated rollout is one answer of ``sixdim fleet``: its groups (GPU models x cases) judged together by
the real code (:func:`sixdim.fleet.judge.build_groups` and :func:`sixdim.fleet.judge.judge`, with their
Bonferroni share of ``alpha``), on host rows made as Prometheus would answer them: each host's median over its
8 GPUs, each GPU's value with 1% run noise (log sd), one host in ten with a GPU 25% slow, and per upgraded host
the median over its GPUs of the ratio now / before.  Scenarios, each without and with a true effect:

- ``ideal``: hosts spread by 0.5%, the upgraded half drawn at random, nothing else changes between before
  and after;
- ``racks``: what a real rollout is like: hosts in racks of 8 whose levels differ by 1% (sd) on top of the
  hosts' own 0.5%, upgraded rack by rack (so the two sides differ by chance by more than hosts do), and
  between before and after every GPU moves by its own 0.3% (sd) and the whole fleet by 0.2% (room temperature,
  a background job), which only the paired comparison sees.

For each scenario and fleet size it prints the share of no-effect rollouts with any group ``slower``, and with
any group slower by at least each candidate threshold (Wilson 95% upper bound beside it), and the share of
rollouts where a 3% slowdown of one group is found ``slower`` beyond the threshold.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np

from sixdim.core import catalog
from sixdim.fleet import judge
from sixdim.fleet.queries import HostRow, Layout

THRESHOLDS = (0.0, 0.005, 0.01, 0.015, 0.02, 0.03)
GPUS = 8
NOISE = 0.01
BAD_SHARE, BAD_FACTOR = 0.1, 0.75
LAYOUT = Layout(cluster="cluster", host=catalog.HOSTNAME, model=catalog.MODEL_NAME)
METRIC = catalog.SUMMARY_FLOPS
LABELS = LAYOUT.group_labels(METRIC)
OLD, NEW = ("550.54.15", "12.4", "", "", "2.5.1"), ("560.35.03", "12.4", "", "", "2.5.1")


@dataclass(frozen=True)
class Scenario:
    name: str
    rack_spread: float
    host_spread: float
    by_rack: bool
    gpu_drift: float
    fleet_drift: float


SCENARIOS = (Scenario("ideal", 0.0, 0.005, False, 0.0, 0.0), Scenario("racks", 0.01, 0.005, True, 0.003, 0.002))


def wilson_upper(k: int, n: int, z: float = 1.96) -> float:
    if n == 0:
        return 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return min(1.0, centre + half)


def rollout(rng: np.random.Generator, scenario: Scenario, hosts: int, cases: int, effect: float,
            upgraded_share: float = 0.5) -> list[judge.Group]:
    """One answer: ``cases`` groups of ``hosts`` hosts each (one model), the first group slowed by ``effect``."""
    racks = np.repeat(rng.normal(0, scenario.rack_spread, hosts // 8 + 1), 8)[:hosts]
    level = racks + rng.normal(0, scenario.host_spread, hosts)
    order = np.arange(hosts) if scenario.by_rack else rng.permutation(hosts)
    upgraded = np.zeros(hosts, bool)
    upgraded[order[: round(upgraded_share * hosts)]] = True
    bad = np.where(rng.random(hosts) < BAD_SHARE, rng.integers(0, GPUS, hosts), -1)
    fleet_drift = rng.normal(0, scenario.fleet_drift)
    rows: list[HostRow] = []
    paired: dict[int, list[HostRow]] = {}
    for case in range(cases):
        group = ("eu-1", "H100", "cuda", "quick", f"case{case}", "bf16", "training", "forward")
        slowed = math.log(1 - effect) if case == 0 else 0.0
        gpu_bad = np.where(np.arange(GPUS)[None, :] == bad[:, None], math.log(BAD_FACTOR), 0.0)
        before = level[:, None] + gpu_bad + rng.normal(0, NOISE, (hosts, GPUS))
        after = (level[:, None] + gpu_bad + rng.normal(0, NOISE, (hosts, GPUS))
                 + rng.normal(0, scenario.gpu_drift, (hosts, GPUS)) + fleet_drift + upgraded[:, None] * slowed)
        now = np.where(upgraded[:, None], after, before)
        medians = np.exp(np.median(now, axis=1))
        ratios = np.exp(np.median(after - before, axis=1))
        for h in range(hosts):
            rows.append(HostRow(group, ("eu-1", f"h{h}"), NEW if upgraded[h] else OLD, float(medians[h]), GPUS))
        paired[case] = [HostRow(group, ("eu-1", f"h{h}"), (), float(ratios[h]), GPUS) for h in np.flatnonzero(upgraded)]
    groups, _ = judge.build_groups(METRIC, LABELS, rows, judge.SPLITS["all"], {}, {})
    by_case = {g.labels[catalog.WORKLOAD]: i for i, g in enumerate(groups)}
    judge.judge(groups, {by_case[f"case{c}"]: paired[c] for c in range(cases)}, alpha=0.05, threshold=0.0,
                min_hosts=3)
    return sorted(groups, key=lambda g: int(g.labels[catalog.WORKLOAD][4:]))


def slower_by(group: judge.Group) -> float:
    """How much slower the group was found (0 where not ``slower``)."""
    change = group.change()
    return -change if group.verdict == judge.SLOWER and change is not None else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=43)
    parser.add_argument("--sizes", default="10:14,40:14,40:14:0.1,200:100:0.1,200:100",
                        help="fleet sizes: hosts per model:groups per answer[:share upgraded, default 0.5], comma "
                             "separated")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    lines = [f"# sixdim fleet: false verdicts and detection, {args.rollouts} simulated rollouts per row, seed "
             f"{args.seed}, alpha 0.05 per answer, 8 GPUs a host, 1% run noise, 10% of hosts with a 25%-slow GPU, "
             "the racks scenario upgraded rack by rack", ""]
    header = ("| scenario | hosts | groups | upgraded | any slower, no effect | " +
              " | ".join(f"slower by >= {t:.1%}, no effect" for t in THRESHOLDS[1:]) +
              " | 3% found slower | 3% beyond 2% | median ratio found |")
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for scenario in SCENARIOS:
        for size in args.sizes.split(","):
            hosts_text, cases_text, *share_text = size.split(":")
            hosts, cases = int(hosts_text), int(cases_text)
            share = float(share_text[0]) if share_text else 0.5
            rng = np.random.default_rng(args.seed)
            started = time.perf_counter()
            worst = []
            for _ in range(args.rollouts):
                worst.append(max(slower_by(g) for g in rollout(rng, scenario, hosts, cases, 0.0, share)))
            found, beyond, ratios = 0, 0, []
            for _ in range(args.rollouts):
                first = rollout(rng, scenario, hosts, cases, 0.03, share)[0]
                found += first.verdict == judge.SLOWER
                beyond += slower_by(first) >= 0.02
                if first.change() is not None:
                    ratios.append(1 + first.change())
            n = args.rollouts
            cells = [f"{sum(w > 0 for w in worst) / n:.1%} (<= {wilson_upper(sum(w > 0 for w in worst), n):.1%})"]
            cells += [f"{sum(w >= t - 1e-12 for w in worst) / n:.1%} (<= "
                      f"{wilson_upper(sum(w >= t - 1e-12 for w in worst), n):.1%})" for t in THRESHOLDS[1:]]
            lines.append(f"| {scenario.name} | {hosts} | {cases} | {share:.0%} | " + " | ".join(cells) +
                         f" | {found / n:.1%} | {beyond / n:.1%} | {np.median(ratios):.4f} |")
            print(lines[-1], f"({time.perf_counter() - started:.0f} s)", flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text)


if __name__ == "__main__":
    main()
