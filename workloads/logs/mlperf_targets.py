"""MLPerf Training quality targets, by benchmark and round, and the check of a run against them.

Source: MLCommons' training rules, github.com/mlcommons/training_policies, ``training_rules.adoc``: the
closed division's "models and quality targets" table as it stood for each round (read in the file's
history, commit d73e20f and before), and its "Deprecated benchmarks models and quality targets" table
(the last round of each retired benchmark).  Cross-checked against MLCommons' compliance checker,
github.com/mlcommons/logging, ``mlperf_logging/compliance_checker/training_<round>/closed_<benchmark>.yaml``
(the ``ATLEAST_ONE_CHECK`` of ``eval_accuracy``), which also gives the unit a target is logged in (GNMT's
and the Transformer's BLEU are fractions in v0.7: ``v['value'] >= 0.240``).

Rounds the rules' table did not spell out: v0.6 (the table still read v0.5's targets until 2020; the
v0.6 changes were written in by commits 424aeb7, "SSD Quality change (21.2 to 23)", and 65c9ba7,
"Update GNMT quality target (22 to 24)", and MiniGo's 50% win rate by 9234e20), confirmed by the v0.6
results' own logs (github.com/mlcommons/training_results_v0.6: SSD runs stop at 0.23 mAP, GNMT at 24.0
BLEU, MiniGo at a 0.5 win rate, ResNet logs ``eval_target: 0.759``).

Torch-free and free of the training log (training_log and mlperf import this module): the check works on
plain numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

FLOAT32_TOLERANCE = 1e-6
"""Relative: values this close to a target are the target, written in float32 (precision 6e-8)."""

ROUNDS = ("0.5", "0.6", "0.7", "1.0", "1.1", "2.0", "2.1", "3.0", "3.1", "4.0", "4.1", "5.0", "5.1", "6.0")
"""MLPerf Training rounds, in order."""


@dataclass(frozen=True)
class Target:
    """One metric's quality target, in the unit the benchmark's logs write it."""

    metric: str
    value: float
    higher_is_better: bool = True

    def met(self, value: float) -> bool:
        """In the target's direction; a value equal to it at float32's precision meets it (a float32
        21.8 BLEU is logged as 21.799999237060547 by v0.5's GNMT, whose run then stops)."""
        if math.isclose(value, self.value, rel_tol=FLOAT32_TOLERANCE):
            return True
        return value >= self.value if self.higher_is_better else value <= self.value

    def describe(self) -> str:
        return f"{self.metric} {'>=' if self.higher_is_better else '<='} {self.value:g}"


def _hi(metric: str, value: float) -> Target:
    return Target(metric, value, True)


def _lo(metric: str, value: float) -> Target:
    return Target(metric, value, False)


TARGETS: dict[str, tuple[tuple[str, str, tuple[Target, ...]], ...]] = {
    "resnet": (("0.5", "0.5", (_hi("top1_accuracy", 0.749),)), ("0.6", "4.0", (_hi("top1_accuracy", 0.759),))),
    "ssd": (("0.5", "0.5", (_hi("mAP", 0.212),)), ("0.6", "1.1", (_hi("mAP", 0.23),)),  # SSD-ResNet34
            ("2.0", "4.1", (_hi("mAP", 0.34),))),  # RetinaNet, still named "ssd" in the logs
    "retinanet": (("5.0", "5.1", (_hi("mAP", 0.34),)),),
    "maskrcnn": (("0.5", "3.1", (_hi("BBOX", 0.377), _hi("SEGM", 0.339))),),
    "gnmt": (("0.5", "0.5", (_hi("BLEU", 21.8),)), ("0.6", "0.6", (_hi("BLEU", 24.0),)),
             ("0.7", "0.7", (_hi("BLEU", 0.24),))),  # v0.7 logs BLEU as a fraction
    "transformer": (("0.5", "0.6", (_hi("BLEU", 25.0),)), ("0.7", "0.7", (_hi("BLEU", 0.25),))),
    "ncf": (("0.5", "0.5", (_hi("HR@10", 0.635),)),),
    "minigo": (("0.5", "0.5", (_hi("win_rate", 0.40),)),  # v0.5: 40% pro move prediction
               ("0.6", "2.0", (_hi("win_rate", 0.50),))),  # 50% win rate against the target checkpoint
    "bert": (("0.7", "0.7", (_hi("mlm_accuracy", 0.712),)), ("1.0", "5.0", (_hi("mlm_accuracy", 0.720),))),
    "dlrm": (("0.7", "2.1", (_hi("AUC", 0.8025),)),),
    "dlrm_dcnv2": (("3.0", "6.0", (_hi("AUC", 0.80275),)),),
    "unet3d": (("1.0", "4.0", (_hi("mean_dice", 0.908),)),),
    "rnnt": (("1.0", "3.1", (_lo("WER", 0.058),)),),
    "gpt3": (("3.0", "4.1", (_lo("log_perplexity", 2.69),)),),
    "stable_diffusion": (("3.1", "5.0", (_lo("FID", 90.0), _hi("CLIP", 0.15))),),
    "llama2_70b_lora": (("4.0", "6.0", (_lo("eval_loss", 0.925),)),),
    "gnn": (("4.0", "4.1", (_hi("accuracy", 0.72),)),),
    "rgat": (("5.0", "5.1", (_hi("accuracy", 0.72),)),),
    "llama31_405b": (("5.0", "6.0", (_lo("log_perplexity", 5.6),)),),
    "llama31_8b": (("5.1", "6.0", (_lo("log_perplexity", 3.3),)),),
    "flux1": (("5.1", "6.0", (_lo("eval_loss", 0.586),)),),
    "gpt_oss_20b": (("6.0", "6.0", (_lo("log_perplexity", 3.34),)),),
    "deepseekv3_671b": (("6.0", "6.0", (_lo("log_perplexity", 3.6),)),),
}
"""Each benchmark's targets: (first round, last round, targets), all to be met at one evaluation."""

ALIASES = {"mask": "maskrcnn"}
"""Benchmark names some submitters logged (Google's v0.6 Mask R-CNN logs say ``mask``)."""

BERT_V07_LARGE_BATCH = (8192, 0.706)
"""v0.7's compliance checker lowers BERT's target to 0.706 from a global batch size of 8192."""

FORM_ROUNDS = {"v0.5": ("0.5", "0.5"), "v0.6": ("0.6", "0.6"), "mllog": ("0.7", ROUNDS[-1])}
"""The rounds each log form was written in: ``:::MLPv0.5.0``, ``:::MLL`` and ``:::MLLOG``."""

ROUND_HINTS: dict[str, dict[str, tuple[str, str]]] = {
    "ssd": {"model_bn_span": ("0.6", "1.1"), "opt_name": ("2.0", "4.1")},
    "bert": {"opt_gradient_accumulation_steps": ("0.7", "0.7"), "gradient_accumulation_steps": ("1.0", "5.0")},
}
"""Keys that tell the rounds of a benchmark whose target changed within one log form: SSD-ResNet34's
logs (v0.7 to v1.1) have ``model_bn_span``, RetinaNet's (v2.0 on) ``opt_name``; BERT's v0.7 checker
asks for ``opt_gradient_accumulation_steps``, v1.0's on for ``gradient_accumulation_steps``."""

HINT_KEYS = frozenset(key for hints in ROUND_HINTS.values() for key in hints)


def _span(first: str, last: str) -> list[str]:
    return list(ROUNDS[ROUNDS.index(first):ROUNDS.index(last) + 1])


def describe_rounds(rounds: Sequence[str]) -> str:
    """``v0.7–v1.1`` for consecutive rounds, else each one."""
    if not rounds:
        return "no round"
    indexes = [ROUNDS.index(r) for r in rounds]
    if indexes == list(range(indexes[0], indexes[-1] + 1)):
        return f"v{rounds[0]}" if len(rounds) == 1 else f"v{rounds[0]}–v{rounds[-1]}"
    return ", ".join(f"v{r}" for r in rounds)


def candidate_rounds(benchmark: str, form: str | None, keys: Iterable[str] = ()) -> list[str]:
    """The rounds a log of this form and benchmark can be from, narrowed by :data:`ROUND_HINTS`."""
    benchmark = ALIASES.get(benchmark, benchmark)
    first, last = FORM_ROUNDS.get(form or "", (ROUNDS[0], ROUNDS[-1]))
    rounds = [r for r in _span(first, last)
              if any(r in _span(a, b) for a, b, _ in TARGETS.get(benchmark, ()))]
    for key in keys:
        hinted = ROUND_HINTS.get(benchmark, {}).get(key)
        narrowed = [r for r in rounds if hinted and r in _span(*hinted)]
        rounds = narrowed or rounds
    return rounds


def targets_by_round(benchmark: str, rounds: Sequence[str],
                     global_batch_size: float | None = None) -> list[tuple[tuple[Target, ...], list[str]]]:
    """The distinct targets over ``rounds``, each with the rounds it holds for, in round order."""
    benchmark = ALIASES.get(benchmark, benchmark)
    grouped: dict[tuple[Target, ...], list[str]] = {}
    for first, last, targets in TARGETS.get(benchmark, ()):
        for r in _span(first, last):
            if r not in rounds:
                continue
            if benchmark == "bert" and r == "0.7" and global_batch_size is not None \
                    and global_batch_size >= BERT_V07_LARGE_BATCH[0]:
                targets = (_hi("mlm_accuracy", BERT_V07_LARGE_BATCH[1]),)
            grouped.setdefault(targets, []).append(r)
    return list(grouped.items())


def first_meeting(targets: Sequence[Target], series: dict[str, list[tuple[Any, float]]]) -> int | None:
    """The index, in the first target's series, of the first evaluation at which every target is met,
    or None.  ``series``: each metric's (step, value) readings in log order; several metrics are
    paired by step (``epoch_num``, ``samples_count``) where every reading has one, else by position,
    as the compliance checker pairs Stable Diffusion's FID and CLIP."""
    if any(t.metric not in series for t in targets):
        return None
    lead = series[targets[0].metric]
    by_step = all(step is not None for t in targets for step, _ in series[t.metric])
    for index, (step, value) in enumerate(lead):
        if not targets[0].met(value):
            continue
        others = []
        for target in targets[1:]:
            readings = series[target.metric]
            if by_step:
                others.append([v for s, v in readings if s == step])
            else:
                others.append([readings[index][1]] if index < len(readings) else [])
        if all(any(t.met(v) for v in values) for t, values in zip(targets[1:], others)):
            return index
    return None
