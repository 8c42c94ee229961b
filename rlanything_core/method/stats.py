"""95 % intervals for the evaluation's accuracies, clustered by task, and the baselines they are
read against.

Why clustered. The episodes of one held-out task are not independent draws: they share the
task's layout and difficulty, so a policy that can (or cannot) solve a task tends to succeed (or
fail) in all of its episodes, and the steps of one task tend to be judged alike. The task set is
what is sampled (from `evaluation.seed`); episodes and steps are repeated measurements within a
task. An interval that treats the n episodes as independent is too narrow, most of all when
outcomes are constant within a task, where the information is that of G tasks, not of n
episodes. So every interval here treats tasks as clusters.

How. Every accuracy is a ratio R = Σ_i a_i / Σ_i b_i over observations i (episodes or steps),
0 ≤ a_i ≤ b_i: a plain accuracy has a_i = 1 when observation i is right and b_i = 1; the recall
on one class has b_i = 1 for the observations of that class only. Its variance is estimated by
linearization (the delta method, as for ratio estimators in survey sampling) with the
cluster-robust sandwich and the CR1 small-sample factor (Cameron & Miller, "A Practitioner's
Guide to Cluster-Robust Inference", J. Human Resources 50(2), 2015):

    V = G/(G − 1) · Σ_g (A_g − R·B_g)² / (Σ_i b_i)²,

with A_g, B_g the sums of a and b over cluster g and G the number of clusters with any
observation (a cluster with B_g = 0 adds A_g² = 0). The interval is R ± z·√V, z = 1.96 (the
97.5 % quantile of the standard normal: 95 % two-sided), clipped to [0, 1].

Balanced accuracy ½(R₁ + R₀), R₁ and R₀ the recalls on the positive and the negative class, is
linearized the same way: z_g = ½[(A1_g − R₁·B1_g)/Σ B1 + (A0_g − R₀·B0_g)/Σ B0] and
V = G/(G − 1) · Σ_g z_g².

Two judges on the same steps are compared by the difference of their balanced accuracies, whose
cluster residual is the difference of theirs, z^a_g − z^b_g (`balanced_accuracy_difference`).

Two rows on the same held-out tasks are compared by the paired difference D = (1/G) Σ_t
(a_t − b_t), a_t and b_t each row's accuracy on task t (all its episodes of t, every seed's):
the tasks are the units, so what both rows share through a task's difficulty cancels, and
V = G/(G − 1) · Σ_t ((d_t − D)/G)² = s_d²/G, the paired test's variance (`paired_difference`).
A difference lies in [−1, 1] and is not clipped.

Limits, said plainly:
- With one cluster the variance cannot be estimated: the interval is (nan, nan), printed "n/a".
- When every cluster has the same accuracy (e.g. every episode fails) V = 0 and the interval
  collapses to the point: it then says nothing about the uncertainty.
- It is a normal approximation; with few tasks (G below ~20) it tends to be too narrow, and the
  CR1 factor corrects only part of that.
- Balanced accuracy is nan when one class is absent (no recall to average).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

Z = 1.96
"""Two-sided 95 % normal quantile."""
CI_SUFFIXES = ("_ci_low", "_ci_high")
"""The suffixes of an interval's bounds beside its metric (`as_metrics`)."""


class Estimate(NamedTuple):
    """A point estimate and its 95 % interval; nan where undefined."""

    value: float
    low: float
    high: float


def ratio(a: npt.ArrayLike, b: npt.ArrayLike, clusters: npt.ArrayLike) -> Estimate:
    """R = Σ a / Σ b with its clustered 95 % interval (module docstring); 0 ≤ a_i ≤ b_i.

    All nan when Σ b = 0; the interval is nan with fewer than two clusters."""
    a_i, b_i = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    codes, g = _codes(clusters)
    total = b_i.sum()
    if total == 0:
        return Estimate(math.nan, math.nan, math.nan)
    value = float(a_i.sum() / total)
    residuals = (_sums(a_i, codes, g) - value * _sums(b_i, codes, g)) / total  # (G,)
    return _interval(value, residuals, g)


def accuracy(correct: npt.ArrayLike, clusters: npt.ArrayLike) -> Estimate:
    """The share of right observations (b_i = 1) with its clustered 95 % interval."""
    right = np.asarray(correct, dtype=np.float64)
    return ratio(right, np.ones_like(right), clusters)


def balanced_accuracy(
    correct: npt.ArrayLike, positive: npt.ArrayLike, clusters: npt.ArrayLike
) -> Estimate:
    """½ (recall on the positive observations + recall on the negative ones), with its clustered
    95 % interval. All nan when one class is absent."""
    codes, g = _codes(clusters)
    parts = _balanced(correct, positive, codes, g)
    if parts is None:
        return Estimate(math.nan, math.nan, math.nan)
    return _interval(*parts, g)


def balanced_accuracy_difference(
    correct_a: npt.ArrayLike,
    correct_b: npt.ArrayLike,
    positive: npt.ArrayLike,
    clusters: npt.ArrayLike,
) -> Estimate:
    """BA_a − BA_b: two judges' balanced accuracies on the same observations (the same labels
    and clusters), with the paired 95 % interval. The linearization is linear in the verdicts,
    so the difference's cluster residual is z^a_g − z^b_g (module docstring's z_g), and what the
    two judges share through a task cancels. Not clipped; all nan when one class is absent."""
    codes, g = _codes(clusters)
    a = _balanced(correct_a, positive, codes, g)
    b = _balanced(correct_b, positive, codes, g)
    if a is None or b is None:
        return Estimate(math.nan, math.nan, math.nan)
    value = a[0] - b[0]
    if g < 2:
        return Estimate(value, math.nan, math.nan)
    half = _half_width(a[1] - b[1], g)
    return Estimate(value, value - half, value + half)


def _balanced(
    correct: npt.ArrayLike, positive: npt.ArrayLike, codes: npt.NDArray[np.intp], g: int
) -> tuple[float, npt.NDArray[np.float64]] | None:
    """Balanced accuracy and its (G,) cluster residuals z_g; None when one class is absent."""
    right = np.asarray(correct, dtype=bool)
    pos = np.asarray(positive, dtype=bool)
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return None
    parts = []
    for members, n in ((pos, n_pos), (~pos, n_neg)):
        recall = (right & members).sum() / n
        a_g = _sums((right & members).astype(np.float64), codes, g)
        b_g = _sums(members.astype(np.float64), codes, g)
        parts.append((recall, (a_g - recall * b_g) / n))
    return float((parts[0][0] + parts[1][0]) / 2), (parts[0][1] + parts[1][1]) / 2


def majority_baseline(positive: npt.ArrayLike) -> float:
    """Accuracy of always predicting the more frequent class: max(p, 1 − p), p the positive
    share; nan without observations."""
    pos = np.asarray(positive, dtype=np.float64)
    if not len(pos):
        return math.nan
    p = float(pos.mean())
    return max(p, 1.0 - p)


def as_metrics(name: str, estimate: Estimate) -> dict[str, float]:
    """`name`, `name_ci_low` and `name_ci_high`."""
    low, high = (f"{name}{suffix}" for suffix in CI_SUFFIXES)
    return {name: estimate.value, low: estimate.low, high: estimate.high}


def paired_difference(a: npt.ArrayLike, b: npt.ArrayLike) -> Estimate:
    """D = mean over tasks of a_t − b_t (two rows' per-task accuracies on the same G tasks, in
    the same order) with its 95 % interval D ± z·√(G/(G − 1) · Σ_t ((d_t − D)/G)²), tasks as
    units (module docstring); nan without tasks, the interval nan with fewer than two."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    g = len(d)
    if g == 0:
        return Estimate(math.nan, math.nan, math.nan)
    value = float(d.mean())
    if g < 2:
        return Estimate(value, math.nan, math.nan)
    half = _half_width((d - value) / g, g)
    return Estimate(value, value - half, value + half)


def _codes(clusters: npt.ArrayLike) -> tuple[npt.NDArray[np.intp], int]:
    """Cluster index 0 … G − 1 of each observation, and G."""
    codes, uniques = pd.factorize(pd.Series(clusters))
    return codes, len(uniques)


def _sums(values: npt.NDArray[np.float64], codes: npt.NDArray[np.intp], g: int) -> np.ndarray:
    return np.bincount(codes, weights=values, minlength=g)  # (G,)


def _interval(value: float, residuals: npt.NDArray[np.float64], g: int) -> Estimate:
    """value ± z·√V, V = G/(G − 1) · Σ residuals², clipped to [0, 1]; nan for G < 2."""
    if g < 2:
        return Estimate(value, math.nan, math.nan)
    half = _half_width(residuals, g)
    return Estimate(value, max(0.0, value - half), min(1.0, value + half))


def _half_width(residuals: npt.NDArray[np.float64], g: int) -> float:
    """z·√V, V = G/(G − 1) · Σ residuals² (CR1), for G ≥ 2 clusters."""
    return Z * math.sqrt(g / (g - 1) * float(np.sum(residuals**2)))
