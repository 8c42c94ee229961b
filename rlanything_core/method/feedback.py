"""Rewards and advantages of RLAnything (arXiv 2602.02488): integrated feedback for the policy,
consistency feedback for the reward model.

The policy's *integrated feedback* mixes the episode outcome O_τ ∈ {+1, −1} with the reward model's
m step verdicts S_{τ_i,j} ∈ {+1, −1}:

    R_{τ_i} = O_τ + λ · (1/m) Σ_j S_{τ_i,j}            (λ = 1 by default)

and its advantage standardizes R over the rollouts of the same task at the same step index i
(GRPO style, no critic; population std, ε = 1e-6; a group whose std is ≤ 1e-8 gets 0):

    A_{τ_i} = (R_{τ_i} − mean) / (std + ε)   over { R_{τ'_i} : τ' ~ π(·|q), τ' has a step i }

The reward model's *consistency feedback* rewards each vote that agrees in sign with that signal,

    R_{S_{τ_i,j}} = R_{τ_i} · S_{τ_i,j}

standardized over the m votes of the same (task, rollout, step).

Departures from the paper, each a setting (paper text is silent on them):
1. A verdict that could not be parsed counts as S = 0 in the policy's mean over the m votes (the
   reference code's behaviour), and gets a fixed penalty as a reward-model sample (reference: −2).
2. A step-index group with one member keeps its raw R (`singleton="raw"`, the reference code) or
   gets 0 (`singleton="zero"`).
3. Besides the paper's per-(task, step index) baseline, a task-level baseline over all steps of
   all rollouts of a task: the per-step one depends on when each rollout stopped
   (verl RFC #7244).
4. Anchor-state groups (`state_advantages`): the step-index group is replaced by the steps taken
   from the same environment state, the step-level grouping of GiGPO (arXiv 2505.10978).
5. An outcome weight in R (`integrated_reward(..., outcome_weight=0)` is the "Step-only" row: the
   reward model's step signal alone).

Arrays are numpy; N is the number of steps (rows), m the number of votes per step.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

Singleton = Literal["raw", "zero"]

EPS = 1e-6
"""ε added to the population std when standardizing: A = (R − mean) / (std + ε)."""
ZERO_STD = 1e-8
"""A group whose population std is at most this gets advantage 0 (no signal to learn from)."""


def integrated_reward(
    outcomes: npt.ArrayLike,
    verdicts: npt.ArrayLike,
    lam: float = 1.0,
    outcome_weight: float = 1.0,
) -> npt.NDArray[np.float64]:
    """R_{τ_i} = w·O_τ + λ · (1/m) Σ_j S_{τ_i,j}   (paper Eq. for the policy's integrated feedback,
    where w = 1).

    Args:
        outcomes: (N,) episode outcome O ∈ {+1, −1} of the trajectory each step belongs to.
        verdicts: (N, m) verdicts S ∈ {+1, −1}; NaN marks a vote that could not be parsed and
            counts as 0, so the mean is always over all m votes.
        lam: λ, weight of the step signal (reference code: 1).
        outcome_weight: w, weight of the outcome (paper: 1; 0 gives the step signal alone).

    Returns:
        (N,) integrated rewards R.
    """
    o = np.asarray(outcomes, dtype=np.float64)  # (N,)
    s = np.asarray(verdicts, dtype=np.float64)  # (N, m)
    if s.ndim != 2 or s.shape[0] != o.shape[0]:
        raise ValueError(f"verdicts must have shape (N, m) with N={o.shape[0]}, got {s.shape}")
    mean_s = np.nan_to_num(s, nan=0.0).mean(axis=1)  # (N,)
    return outcome_weight * o + lam * mean_s


def standardize_groups(
    values: npt.ArrayLike,
    group_ids: npt.ArrayLike,
    eps: float = EPS,
    singleton: Singleton = "zero",
) -> npt.NDArray[np.float64]:
    """A = (x − mean_g) / (std_g + ε) within each group g, population std.

    A group whose std ≤ 1e-8 gets 0. A group of one member has std 0, so it gets 0 with
    `singleton="zero"`; with `singleton="raw"` it keeps its raw value x (reference behaviour).

    Args:
        values: (N,) values x.
        group_ids: (N,) integer group labels (any values; only equality matters).
    """
    x = np.asarray(values, dtype=np.float64)  # (N,)
    if x.size == 0:
        return x.copy()
    _, inverse, counts = np.unique(
        np.asarray(group_ids), return_inverse=True, return_counts=True
    )  # inverse: (N,), counts: (G,)
    inverse = inverse.reshape(-1)
    mean = np.bincount(inverse, weights=x) / counts  # (G,)
    var = np.bincount(inverse, weights=(x - mean[inverse]) ** 2) / counts  # (G,)
    std = np.sqrt(var)[inverse]  # (N,)
    adv = np.where(std > ZERO_STD, (x - mean[inverse]) / (std + eps), 0.0)
    if singleton == "raw":
        adv = np.where(counts[inverse] == 1, x, adv)
    return adv


def step_advantages(
    rewards: npt.ArrayLike,
    task_keys: npt.ArrayLike,
    step_idx: npt.ArrayLike,
    eps: float = EPS,
    singleton: Singleton = "raw",
) -> npt.NDArray[np.float64]:
    """A_{τ_i} = (R_{τ_i} − mean) / (std + ε) over {R_{τ'_i} : τ' rollout of the same task q}.

    The paper's estimator: one group per (task, step index i), over the rollouts that reached i.

    Args:
        rewards: (N,) integrated rewards R.
        task_keys: (N,) task identity (e.g. "task_id@version" strings or ints).
        step_idx: (N,) step index i within its trajectory.
        singleton: what a one-member group gets: "raw" R (reference code) or "zero".
    """
    groups = _pair_ids(task_keys, step_idx)
    return standardize_groups(rewards, groups, eps=eps, singleton=singleton)


def state_advantages(
    rewards: npt.ArrayLike,
    task_keys: npt.ArrayLike,
    state_keys: npt.ArrayLike,
    eps: float = EPS,
    singleton: Singleton = "raw",
) -> npt.NDArray[np.float64]:
    """A_{τ_i} = (R_{τ_i} − mean) / (std + ε) over {R_{τ'_k} : τ' of task q, s_{τ'_k} = s_{τ_i}}.

    Anchor-state grouping, GiGPO's step-level groups (Feng et al., arXiv 2505.10978): a step is
    compared with every step of the task's rollouts taken from the same environment state s,
    whatever its index, instead of with the steps of the same index (`step_advantages`), which
    may stand in different states. A state revisited within one rollout counts once per visit.
    GiGPO adds this to an episode-level advantage and uses discounted returns; here it replaces
    the step-index group and R is the integrated reward, so that rows differ only in grouping.

    Args:
        rewards: (N,) integrated rewards R.
        task_keys: (N,) task identity.
        state_keys: (N,) the state each step was taken from (equal keys = the same state).
        singleton: what a state seen once gets: "raw" R or "zero".
    """
    # the step-index estimator's (task, key) groups, keyed by state instead of index
    return step_advantages(rewards, task_keys, state_keys, eps=eps, singleton=singleton)


def task_level_advantages(
    rewards: npt.ArrayLike, task_keys: npt.ArrayLike, eps: float = EPS
) -> npt.NDArray[np.float64]:
    """A_{τ_i} = (R_{τ_i} − mean_q) / (std_q + ε) over all steps of all rollouts of task q.

    Not in the paper: an alternative baseline that does not depend on when rollouts stopped
    (verl RFC #7244), for ablations against `step_advantages`.
    """
    _, groups = np.unique(np.asarray(task_keys), return_inverse=True)
    return standardize_groups(rewards, groups.reshape(-1), eps=eps, singleton="zero")


def consistency_rewards(
    step_rewards: npt.ArrayLike, verdicts: npt.ArrayLike, parse_failure_penalty: float = -2.0
) -> npt.NDArray[np.float64]:
    """R_{S_{τ_i,j}} = R_{τ_i} · S_{τ_i,j}   (the reward model's consistency feedback).

    A vote agreeing in sign with the integrated signal is rewarded. A vote that could not be parsed
    (NaN) gets `parse_failure_penalty` instead (reference: −2).

    Args:
        step_rewards: (N,) integrated rewards R of the judged steps.
        verdicts: (N, m) verdicts, NaN for a parse failure.

    Returns:
        (N, m) rewards of the votes.
    """
    r = np.asarray(step_rewards, dtype=np.float64)[:, None]  # (N, 1)
    s = np.asarray(verdicts, dtype=np.float64)  # (N, m)
    return np.where(np.isnan(s), parse_failure_penalty, r * s)


def consistency_advantages(
    vote_rewards: npt.ArrayLike, eps: float = EPS
) -> npt.NDArray[np.float64]:
    """Standardize the rewards of the m votes of each step: row-wise over (N, m).

    Zero-variance rows (all votes rewarded alike) give no gradient: advantage 0.
    """
    r = np.asarray(vote_rewards, dtype=np.float64)  # (N, m)
    mean = r.mean(axis=1, keepdims=True)  # (N, 1)
    std = r.std(axis=1, keepdims=True)  # (N, 1), population std
    return np.where(std > ZERO_STD, (r - mean) / (std + eps), 0.0)


def unit_test_rewards(
    passes: npt.ArrayLike,
    correct_programs: npt.ArrayLike,
    valid_tests: npt.ArrayLike,
    invalid_penalty: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]] | None:
    """Rewards of the T tests the reward model wrote for one task (unit-test mode: the reward model
    writes tests, as the reference code does for coding).

    With C the correct programs (they pass every ground-truth test) and W the others, test k is
    correct when every program of C passes it, and

        r_k = + |{w ∈ W : w fails k}|   if k is correct,
        r_k = − |{w ∈ W : w passes k}|  otherwise,
        r_k = ±1                         when W is empty (the sign as above),
        r_k = invalid_penalty            when k could not be parsed (a choice of this project:
                                         the penalty of an unparsable verdict; the reference
                                         code makes such a test fail every program).

    Args:
        passes: (P, T) bool, program p passes test k (ignored for invalid tests).
        correct_programs: (P,) bool.
        valid_tests: (T,) bool.
    Returns:
        (rewards (T,), correct (T,)), or None when C is empty: without a correct program no test
        can be judged, and the reference code then uses none of the task's tests.
    """
    x = np.asarray(passes, dtype=bool)  # (P, T)
    c = np.asarray(correct_programs, dtype=bool)  # (P,)
    valid = np.asarray(valid_tests, dtype=bool)  # (T,)
    if not c.any():
        return None
    correct = x[c].all(axis=0) & valid  # (T,)
    wrong = x[~c]  # (|W|, T)
    if len(wrong):
        fails = (~wrong).sum(axis=0)  # (T,)
        passed = wrong.sum(axis=0)  # (T,)
        rewards = np.where(correct, fails, -passed).astype(np.float64)
    else:
        rewards = np.where(correct, 1.0, -1.0)
    return np.where(valid, rewards, invalid_penalty), correct


def task_accuracy(task_keys: npt.ArrayLike, outcomes: npt.ArrayLike) -> dict[object, float]:
    """acc(q) = (# rollouts of q with O = +1) / (# rollouts of q); pass one entry per rollout."""
    keys = np.asarray(task_keys)
    success = np.asarray(outcomes, dtype=np.float64) > 0
    return {
        k.item() if hasattr(k, "item") else k: float(success[keys == k].mean())
        for k in np.unique(keys)
    }


def in_accuracy_band(accuracy: npt.ArrayLike, low: float, high: float) -> npt.NDArray[np.bool_]:
    """low ≤ acc(q) ≤ high, inclusive.

    Policy data: [1/8, 7/8] (all-fail and all-success groups teach nothing).
    Reward-model data: [0.2, 0.8].
    """
    acc = np.asarray(accuracy, dtype=np.float64)
    # A tolerance so that 1/8 computed as 1/8 from counts is not excluded by rounding.
    return (acc >= low - 1e-12) & (acc <= high + 1e-12)


def _pair_ids(a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """One integer label per distinct (a, b) pair."""
    _, ia = np.unique(np.asarray(a), return_inverse=True)
    _, ib = np.unique(np.asarray(b), return_inverse=True)
    ia, ib = ia.reshape(-1), ib.reshape(-1)
    return ia.astype(np.int64) * (int(ib.max(initial=0)) + 1) + ib
