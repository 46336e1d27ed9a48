"""The noise models the regression benchmarks judge the detectors on: one definition for all of them.

Each model gives multiplicative factors around a level of 1.0 for a figure where larger is worse
(``seconds``): a run's value is ``level * factor``.  They stand for what an operator's fleet shows:

- ``gauss_0.25`` … ``gauss_5``: Gaussian noise with a coefficient of variation of 0.25%, 0.5%, 1%,
  2% and 5% (large GEMMs on a quiet GPU sit at the low end; small kernels, models and shared hosts
  at the high end);
- ``t3``: Student's t with 3 degrees of freedom, scaled to a standard deviation of 1% (heavy tails:
  the occasional run far out with no cause one could name);
- ``spiky``: Gaussian 1%, and 3% of runs slowed by 10–40% (uniform), each on its own (preemption, a
  neighbour's burst, a thermal event);
- ``bursts``: Gaussian 1%, and bursts of 2–5 consecutive slow runs (each length equally likely),
  starting at 0.5% of runs, all runs of a burst slowed by one factor drawn from 10–40% (a
  neighbour's job that shares the GPU or the host for a while).

``drift`` adds a slow trend to any model (``drift(x, per_run)``): a GPU degrading by ``per_run``
per run, compounded.
"""

from __future__ import annotations

import numpy as np

GAUSS_CVS = (0.0025, 0.005, 0.01, 0.02, 0.05)
MODELS: tuple[str, ...] = tuple(f"gauss_{100 * cv:g}" for cv in GAUSS_CVS) + ("t3", "spiky", "bursts")
"""Every noise model, in the order the tables list them."""

SPIKE_SHARE = 0.03
SPIKE_RANGE = (0.10, 0.40)
BURST_START = 0.005
BURST_LENGTHS = (2, 3, 4, 5)
BURST_RANGE = (0.10, 0.40)
BASE_CV = 0.01
"""The Gaussian noise under t3's tails, spikes and bursts."""


def cv_of(model: str) -> float:
    """The model's Gaussian coefficient of variation (its spread without spikes or bursts)."""
    return float(model.split("_", 1)[1]) / 100.0 if model.startswith("gauss_") else BASE_CV


def noise(rng: np.random.Generator, model: str, shape: tuple[int, int]) -> np.ndarray:
    """Factors of one model for ``shape = (series, runs)``; runs are in time order along axis 1."""
    if model.startswith("gauss_"):
        return 1.0 + cv_of(model) * rng.standard_normal(shape)
    if model == "t3":
        return 1.0 + BASE_CV / np.sqrt(3.0) * rng.standard_t(3, shape)
    base = 1.0 + BASE_CV * rng.standard_normal(shape)
    if model == "spiky":
        hit = rng.random(shape) < SPIKE_SHARE
        return base * np.where(hit, 1.0 + rng.uniform(*SPIKE_RANGE, shape), 1.0)
    if model == "bursts":
        return base * _burst_factors(rng, shape)
    raise ValueError(f"unknown noise model {model!r}; expected one of {', '.join(MODELS)}")


def _burst_factors(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """1.0 outside bursts; inside a burst its one slowdown factor for every run of it."""
    n, length = shape
    out = np.ones(shape)
    starts = np.argwhere(rng.random(shape) < BURST_START)
    lengths = rng.choice(BURST_LENGTHS, len(starts))
    slow = 1.0 + rng.uniform(*BURST_RANGE, len(starts))
    for (row, col), span, factor in zip(starts, lengths, slow, strict=True):
        segment = out[row, col:col + span]
        segment[segment == 1.0] = factor  # a burst that starts inside another does not reset it
    return out


def drift(x: np.ndarray, per_run: float, start: int = 0) -> np.ndarray:
    """``x`` with a compounded trend of ``per_run`` per run from run ``start`` on (0.0005: +0.05% a run)."""
    steps = np.clip(np.arange(x.shape[-1]) - start + 1, 0, None)
    return x * (1.0 + per_run) ** steps


def series(seed: int, model: str, n: int, length: int, step: float = 0.0, at: int = 0) -> np.ndarray:
    """``n`` series of ``length`` runs of one model, reproducible from ``seed``, with a relative
    ``step`` (0.05: 5% slower) from run ``at`` on."""
    rng = np.random.default_rng(seed)
    x = noise(rng, model, (n, length))
    if step:
        x[:, at:] *= 1.0 + step
    return x
