"""Advantage computation of one round, over the round's tables (the stage between scoring and the
updates). The math lives in `feedback.py`; this module joins rows by key, never by position, so
that every advantage stays with the step or vote it belongs to (the reference code shifts them
when rows are filtered, a bug this module avoids).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from rlanything_core.base.schemas import PROVENANCE, SCHEMAS, STEP_KEY
from rlanything_core.method.feedback import (
    consistency_advantages,
    consistency_rewards,
    in_accuracy_band,
    integrated_reward,
    state_advantages,
    step_advantages,
    task_level_advantages,
    unit_test_rewards,
)
from rlanything_core.method.stats import (
    Estimate,
    accuracy,
    as_metrics,
    balanced_accuracy,
    balanced_accuracy_difference,
    majority_baseline,
)

# `judge_metrics` that each round logs as reward_model/<name> (its intervals are for evaluation).
ROUND_JUDGE_METRICS = (
    "process_accuracy",
    "outcome_accuracy",
    "process_balanced_accuracy",
    "outcome_balanced_accuracy",
    "progress_label_rate",
)


def cut_episodes(rollouts: pd.DataFrame) -> int:
    """Episodes of `rollouts` that the loop's step limit ended (`environment.max_episode_steps`):
    their last step is not `done`."""
    if rollouts.empty:
        return 0
    last = rollouts.groupby(["task_id", "task_version", "rollout_idx"], sort=False)["done"].last()
    return int((~last.astype(bool)).sum())


def task_accuracies(rollouts: pd.DataFrame) -> pd.Series:
    """acc(q) per (task_id, task_version): the fraction of rollouts with outcome +1."""
    episodes = rollouts.drop_duplicates(["task_id", "task_version", "rollout_idx"])
    return (episodes["outcome"] > 0).groupby([episodes.task_id, episodes.task_version]).mean()


def verdict_matrix(rollouts: pd.DataFrame, judgments: pd.DataFrame, votes: int) -> np.ndarray:
    """(N, m) verdicts aligned with the rows of `rollouts`; NaN for unparsed or missing votes."""
    wide = judgments.pivot_table(
        index=STEP_KEY, columns="vote_idx", values="verdict", aggfunc="first", dropna=False
    ).reindex(columns=range(votes))
    keys = pd.MultiIndex.from_frame(rollouts[STEP_KEY])
    return wide.reindex(keys).to_numpy(dtype=np.float64)  # (N, m)


def policy_samples(
    rollouts: pd.DataFrame,
    verdicts: np.ndarray | None,
    *,
    lam: float,
    estimator: Literal["step", "task"],
    singleton: Literal["raw", "zero"],
    eps: float,
    band: tuple[float, float],
    drop_zero_advantage: bool,
    invalid_action_penalty: float = 0.0,
    grouping: Literal["step_index", "state"] = "step_index",
    outcome_weight: float = 1.0,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Integrated rewards and advantages of every step (the policy_samples schema).

    `verdicts`: the (N, m) `verdict_matrix` of `rollouts`. With None (outcome-only mode) R is the
    outcome; else R = w·O + λ·mean(S) with w = `outcome_weight`. A step whose answer named no
    admissible action has `invalid_action_penalty` subtracted from its R. With estimator "step",
    `grouping` "state" groups a task's steps by the prompt they were taken from
    (`state_advantages`) instead of by step index. Rows of tasks outside the accuracy `band`, and
    rows with advantage exactly 0 when `drop_zero_advantage`, stay in the
    table with kept=False and advantage 0.
    """
    df = rollouts[[*PROVENANCE, "outcome"]].reset_index(drop=True)
    if verdicts is None:
        df["mean_verdict"] = None
        df["reward"] = df["outcome"].astype(np.float64)
    else:
        s = verdicts  # (N, m)
        df["mean_verdict"] = np.nan_to_num(s, nan=0.0).mean(axis=1)
        df["reward"] = integrated_reward(df["outcome"], s, lam=lam, outcome_weight=outcome_weight)
    invalid = ~rollouts["action_valid"].to_numpy(dtype=bool)
    df["reward"] -= invalid_action_penalty * invalid
    tasks = task_key(df)
    if estimator == "step" and grouping == "state":
        states = rollouts["prompt"].to_numpy()
        adv = state_advantages(df["reward"], tasks, states, eps=eps, singleton=singleton)
    elif estimator == "step":
        adv = step_advantages(df["reward"], tasks, df["step_idx"], eps=eps, singleton=singleton)
    else:
        adv = task_level_advantages(df["reward"], tasks, eps=eps)
    acc = task_accuracies(rollouts)
    df["task_accuracy"] = acc.reindex(
        pd.MultiIndex.from_frame(df[["task_id", "task_version"]])
    ).to_numpy()
    kept = in_accuracy_band(df["task_accuracy"], *band)
    if drop_zero_advantage:
        kept &= adv != 0.0
    df["kept"] = kept
    df["advantage"] = np.where(kept, adv, 0.0)
    episodes = rollouts.drop_duplicates(["task_id", "task_version", "rollout_idx"])
    metrics = {
        "policy/accuracy": float((episodes["outcome"] > 0).mean()),
        "policy/mean_reward": float(df["reward"].mean()),
        "policy/kept_samples": float(kept.sum()),
        "policy/tasks_in_band": float(in_accuracy_band(acc.to_numpy(), *band).sum()),
        "policy/invalid_actions": float(invalid.mean()),
        "policy/mean_episode_steps": float(episodes["num_steps"].mean()),
        "policy/cut_episodes": float(cut_episodes(rollouts)),
    }
    return df, metrics


def rm_samples(
    rollouts: pd.DataFrame,
    judgments: pd.DataFrame,
    verdicts: np.ndarray,
    policy: pd.DataFrame,
    *,
    parse_failure_penalty: float,
    eps: float,
    band: tuple[float, float],
    outcome_weight: float = 1.0,
    balance: Literal["verdict", "direction"] | None = None,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Consistency rewards R·S and their advantages over the m votes of each step (rm_samples).

    R is the policy's reward with the whole outcome in it: where the policy's R weighs the
    outcome by `outcome_weight` w < 1, (1 − w)·O is added back, so that the step-only policy
    signal does not make the RM's reward its own verdicts. Votes of tasks outside the accuracy
    `band`, and votes with advantage 0, stay with kept=False. `verdicts`: the (N, m)
    `verdict_matrix` of `rollouts` (whose rows `policy` keeps, in their order). With `balance`
    the kept votes' advantages are weighed by `verdict_weights` ("verdict") or by
    `direction_weights` ("direction").
    """
    steps = policy[[*STEP_KEY, "reward", "task_accuracy"]].reset_index(drop=True)
    outcome = policy["outcome"].to_numpy(dtype=np.float64)
    steps["reward"] = steps["reward"].to_numpy() + (1.0 - outcome_weight) * outcome
    rewards = consistency_rewards(steps["reward"], verdicts, parse_failure_penalty)  # (N, m)
    advantages = consistency_advantages(rewards, eps=eps)  # (N, m)
    wide = steps.assign(_row=np.arange(len(steps)))
    votes_df = judgments[[*PROVENANCE, "vote_idx", "verdict"]].merge(
        wide, on=STEP_KEY, how="left", validate="many_to_one"
    )
    row, col = votes_df["_row"].to_numpy(), votes_df["vote_idx"].to_numpy()
    votes_df["step_reward"] = votes_df.pop("reward")
    votes_df["reward"] = rewards[row, col]
    adv = advantages[row, col]
    kept = in_accuracy_band(votes_df["task_accuracy"], *band) & (adv != 0.0)
    votes_df["kept"] = kept
    votes_df["advantage"] = np.where(kept, adv, 0.0)
    pushes = push_directions(votes_df["verdict"], votes_df["advantage"])
    push_share = progress_push_share(pushes, votes_df["advantage"])  # before any weighing
    if balance == "verdict":
        votes_df["advantage"] *= verdict_weights(votes_df["verdict"], kept)
    elif balance == "direction":
        votes_df["advantage"] *= direction_weights(pushes, votes_df["advantage"])
    votes_df = votes_df.drop(columns="_row")

    parsed = votes_df["verdict"].notna()
    agree = np.sign(votes_df.loc[parsed, "verdict"]) == np.sign(votes_df.loc[parsed, "step_reward"])
    metrics = {
        "reward_model/parse_failures": float((~parsed).sum()),
        "reward_model/parse_failure_rate": float((~parsed).mean()) if len(parsed) else 0.0,
        "reward_model/vote_agreement": float(agree.mean()) if len(agree) else 0.0,
        "reward_model/kept_samples": float(kept.sum()),
        "reward_model/tasks_in_band": float(
            in_accuracy_band(
                steps.drop_duplicates(["task_id", "task_version"])["task_accuracy"], *band
            ).sum()
        ),
        "reward_model/kept_progress_verdicts": float((votes_df.loc[kept, "verdict"] > 0).mean())
        if kept.any()
        else 0.0,
        "reward_model/progress_push_share": push_share,
    }
    judged = judge_metrics(rollouts, verdicts)
    for name in ROUND_JUDGE_METRICS:
        metrics[f"reward_model/{name}"] = judged[name]
    return votes_df, metrics


def verdict_weights(verdict: pd.Series, kept: np.ndarray | pd.Series) -> np.ndarray:
    """Weights that give the kept votes of each verdict the same total: a kept vote of verdict
    v weighs K / (2·K_v), K kept parsed votes of which K_v say v, so each verdict's votes weigh
    K/2 together. 1 for the rest: unparsed or unkept votes, and every vote where the kept ones
    all say the same (nothing to balance)."""
    weights = np.ones(len(verdict))
    values = verdict.to_numpy(dtype=np.float64, na_value=np.nan)
    parsed = np.asarray(kept, dtype=bool) & ~np.isnan(values)
    says = [parsed & (values == v) for v in (1, -1)]
    if all(mask.any() for mask in says):
        for mask in says:
            weights[mask] = parsed.sum() / (2 * mask.sum())
    return weights


def push_directions(verdict: pd.Series, advantage: pd.Series) -> np.ndarray:
    """The verdict each vote's update makes more likely: sign(A)·v for a parsed vote of verdict
    v ∈ {+1, −1} and advantage A (raising v where A > 0, lowering it, so raising −v, where
    A < 0); 0 for unparsed votes and votes with A = 0. On a step whose votes are all parsed
    every vote pushes toward sign(R_τ), the verdict its consistency reward R_τ·S favours."""
    values = verdict.to_numpy(dtype=np.float64, na_value=np.nan)
    return np.nan_to_num(np.sign(advantage.to_numpy(dtype=np.float64)) * values, nan=0.0)


def push_masses(pushes: np.ndarray, advantage: pd.Series) -> tuple[float, float]:
    """Σ|A| of the votes that push toward "progress" and of those that push toward "no progress"
    (`push_directions` > 0 and < 0)."""
    magnitude = np.abs(advantage.to_numpy(dtype=np.float64))
    return float(magnitude[pushes > 0].sum()), float(magnitude[pushes < 0].sum())


def direction_weights(pushes: np.ndarray, advantage: pd.Series) -> np.ndarray:
    """Weights that give the update's pushes toward "progress" and toward "no progress" the same
    total: with M = Σ|A| over the votes that push (`push_directions` ≠ 0) and M_d over those
    that push toward d, a vote pushing toward d weighs M / (2·M_d), so each direction's
    |A|·weight sums to M/2. 1 for votes that push toward neither, and for every vote when all
    pushes go one way (nothing to balance).

    The update then fits the judge to both classes equally, as balanced process accuracy scores
    it, where the plain update fits the share of steps R_τ calls progress: where most episodes
    fail that is a minority, and the judge drifts to "no progress" (`verdict_weights` cannot
    stop that: a "no progress" vote with A < 0 pushes toward "progress", so weighing by the
    verdict given mixes the two directions)."""
    up, down = push_masses(pushes, advantage)
    weights = np.ones(len(pushes))
    if up > 0 and down > 0:
        weights[pushes > 0] = (up + down) / (2 * up)
        weights[pushes < 0] = (up + down) / (2 * down)
    return weights


def progress_push_share(pushes: np.ndarray, advantage: pd.Series) -> float:
    """The share of the update's push (Σ|A| over votes with a direction) toward "progress";
    0 when nothing pushes."""
    up, down = push_masses(pushes, advantage)
    return up / (up + down) if up + down > 0 else 0.0


def task_key(frame: pd.DataFrame) -> pd.Series:
    """The task of every row as "task_id@task_version": the cluster of the eval's intervals."""
    return frame["task_id"] + "@" + frame["task_version"].astype(str)


def step_verdicts(rollouts: pd.DataFrame, s: np.ndarray) -> pd.DataFrame:
    """One row per step: `task` (its key), `positive` (the planner's progress label) and `correct`
    (the majority verdict of the m votes matches the label). Paper Table 1, "RM process".

    `s` is the (N, m) `verdict_matrix` of `rollouts`. Ties and steps without a parsed vote count
    as wrong.
    """
    progress = rollouts["progress"].to_numpy(dtype=bool)
    majority = np.sign(np.nan_to_num(s, nan=0.0).sum(axis=1))  # (N,) in {−1, 0, +1}
    return pd.DataFrame(
        {
            "task": task_key(rollouts).to_numpy(),
            "positive": progress,
            "correct": majority == np.where(progress, 1.0, -1.0),
        }
    )


def episode_verdicts(rollouts: pd.DataFrame, s: np.ndarray) -> pd.DataFrame:
    """One row per trajectory: `task` (its key), `positive` (it succeeded) and `correct` (its step
    verdicts predict that). Paper Table 1, "RM outcome".

    `s` is the (N, m) `verdict_matrix` of `rollouts`. A trajectory is predicted to succeed when
    Σ_i mean_j S_{τ_i,j} > 0 (unparsed votes count 0), else to fail.
    """
    steps = rollouts[["task_id", "task_version", "rollout_idx", "outcome"]].assign(
        score=np.nan_to_num(s, nan=0.0).mean(axis=1)
    )
    per = (
        steps.groupby(["task_id", "task_version", "rollout_idx"])
        .agg(score=("score", "sum"), outcome=("outcome", "first"))
        .reset_index()
    )
    success = per["outcome"].to_numpy() > 0
    return pd.DataFrame(
        {
            "task": task_key(per).to_numpy(),
            "positive": success,
            "correct": (per["score"].to_numpy() > 0) == success,
        }
    )


def judge_metrics(rollouts: pd.DataFrame, verdicts: np.ndarray) -> dict[str, float]:
    """The reward model's verdicts (the (N, m) `verdict_matrix` of `rollouts`) against the ground
    truth; every accuracy comes with its 95 %
    interval clustered by task (`<name>_ci_low`, `<name>_ci_high`; see `stats`).

    - process_accuracy: steps whose majority verdict matches the progress label (`step_verdicts`);
    - process_balanced_accuracy: the mean of its recalls on progress and on non-progress steps
      (nan when the steps have one label only);
    - progress_label_rate: steps labelled progress; process_majority_baseline: the accuracy of a
      constant verdict for the more frequent label;
    - outcome_accuracy, outcome_balanced_accuracy, outcome_majority_baseline: the same for
      trajectories and their outcome (`episode_verdicts`);
    - steps: the steps judged.
    """
    steps = step_verdicts(rollouts, verdicts)
    played = episode_verdicts(rollouts, verdicts)
    metrics: dict[str, float] = {}
    for name, frame in (("process", steps), ("outcome", played)):
        metrics |= as_metrics(f"{name}_accuracy", accuracy(frame["correct"], frame["task"]))
        metrics |= as_metrics(
            f"{name}_balanced_accuracy",
            balanced_accuracy(frame["correct"], frame["positive"], frame["task"]),
        )
        metrics[f"{name}_majority_baseline"] = majority_baseline(frame["positive"])
    metrics["progress_label_rate"] = float(steps["positive"].mean())
    metrics["steps"] = float(len(steps))
    return metrics


def outcome_verdicts(rollouts: pd.DataFrame, votes: int) -> np.ndarray:
    """(N, m) verdicts of the judge that consistency feedback rewards: each of the m votes on a
    step is its trajectory's outcome, +1 on every step of a won episode, −1 on every step of a
    lost one. A vote is rewarded for agreeing in sign with R = O + λ·mean(S) (consistency
    feedback, R_S = R·S), and R has O's sign unless the votes cancel it exactly, so training on
    consistency alone pulls a reward model toward this judge. Its process accuracy
    (`judge_metrics`) is the reference that tells whether a trained RM has learned more than its
    outcomes teach."""
    outcome = np.sign(rollouts["outcome"].to_numpy(dtype=np.float64))  # (N,)
    return np.repeat(outcome[:, None], votes, axis=1)


def judge_gain(
    rollouts: pd.DataFrame, trained: pd.DataFrame, started: pd.DataFrame, votes: int
) -> Estimate:
    """How much better one judge is than another on the same steps: the balanced process
    accuracy of the `trained` judgments minus that of the `started` ones, both of `rollouts`'
    steps (`step_verdicts`), with the paired 95 % interval clustered by task
    (`stats.balanced_accuracy_difference`). Judging each row's own held-out steps mixes the
    judge's change with the steps' (a trained policy plays other steps); this holds the steps."""
    after = step_verdicts(rollouts, verdict_matrix(rollouts, trained, votes))
    before = step_verdicts(rollouts, verdict_matrix(rollouts, started, votes))
    return balanced_accuracy_difference(
        after["correct"], before["correct"], after["positive"], after["task"]
    )


def test_samples(
    rollouts: pd.DataFrame,
    unit_tests: pd.DataFrame,
    judgments: pd.DataFrame,
    *,
    invalid_penalty: float,
    eps: float,
    band: tuple[float, float],
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Rewards and advantages of the tests the RM wrote (unit-test mode; the test_samples schema).

    Per task: the execution matrix of its programs (one per rollout) on its generated tests, the
    rewards of `unit_test_rewards`, standardized over the task's tests. Tests of tasks without a
    correct program, or outside the accuracy `band`, stay with kept=False and advantage 0.

    Metrics (paper Table 1, coding; the reference code's definitions):
    - ut_accuracy: generated tests that every correct program passes, over all generated tests
      of tasks with at least one correct program (invalid tests count as wrong);
    - detect: generated tests that every correct program passes AND every incorrect program
      fails, over the generated tests of tasks with both kinds of program.
    """
    acc = task_accuracies(rollouts)
    rows: list[dict[str, object]] = []
    judged = correct_total = perfect = detect_total = 0
    for (task_id, version), tests in unit_tests.groupby(["task_id", "task_version"], sort=True):
        tests = tests.sort_values("test_idx")
        programs = rollouts[
            (rollouts.task_id == task_id) & (rollouts.task_version == version)
        ].sort_values("rollout_idx")
        votes = judgments[(judgments.task_id == task_id) & (judgments.task_version == version)]
        passes = (
            votes.pivot_table(index="rollout_idx", columns="vote_idx", values="verdict")
            .reindex(index=programs["rollout_idx"], columns=tests["test_idx"])
            .to_numpy(dtype=np.float64)
            > 0
        )  # (P, T); NaN (invalid test) → False
        good = programs["outcome"].to_numpy() > 0  # (P,)
        valid = tests["valid"].to_numpy(dtype=bool)  # (T,)
        result = unit_test_rewards(passes, good, valid, invalid_penalty)
        task_acc = float(acc[(task_id, version)])
        if result is None:
            rewards = np.zeros(len(tests))
            correct: list[bool | None] = [None] * len(tests)
            advantages = np.zeros(len(tests))
            kept = np.zeros(len(tests), dtype=bool)
        else:
            rewards, is_correct = result
            correct = [bool(v) if ok else None for v, ok in zip(is_correct, valid, strict=True)]
            advantages = consistency_advantages(rewards[None, :], eps=eps)[0]  # (T,)
            kept = in_accuracy_band(np.full(len(tests), task_acc), *band) & (advantages != 0.0)
            judged += len(tests)
            correct_total += int(is_correct.sum())
            if (~good).any():
                wrong_fail = ~passes[~good].any(axis=0)  # (T,) fails every incorrect program
                perfect += int((is_correct & wrong_fail).sum())
                detect_total += len(tests)
        wrong = passes[~good]  # (|W|, T)
        for k, t in enumerate(tests.itertuples()):
            rows.append(
                {
                    "round": int(t.round),
                    "task_id": task_id,
                    "task_version": int(version),
                    "test_idx": int(t.test_idx),
                    "seed": int(t.seed),
                    "checkpoint": t.checkpoint,
                    "valid": bool(t.valid),
                    "correct": correct[k],
                    "incorrect_failed": int((~wrong[:, k]).sum()) if t.valid else 0,
                    "incorrect_passed": int(wrong[:, k].sum()) if t.valid else 0,
                    "reward": float(rewards[k]),
                    "advantage": float(advantages[k]) if kept[k] else 0.0,
                    "task_accuracy": task_acc,
                    "kept": bool(kept[k]),
                }
            )
    frame = pd.DataFrame(rows, columns=SCHEMAS["test_samples"].names)
    valid_all = unit_tests["valid"].to_numpy(dtype=bool)
    metrics = {
        "reward_model/ut_accuracy": correct_total / judged if judged else 0.0,
        "reward_model/detect": perfect / detect_total if detect_total else 0.0,
        "reward_model/invalid_tests": float((~valid_all).sum()),
        "reward_model/parse_failure_rate": float((~valid_all).mean()) if len(valid_all) else 0.0,
        "reward_model/judged_tests": float(judged),
        "reward_model/kept_samples": float(frame["kept"].sum()),
    }
    return frame, metrics
