"""Core math of METHOD.md §1–2: integrated and consistency feedback, standardization, filters."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rlanything_core.method.feedback import (
    EPS,
    consistency_advantages,
    consistency_rewards,
    in_accuracy_band,
    integrated_reward,
    standardize_groups,
    state_advantages,
    step_advantages,
    task_accuracy,
    task_level_advantages,
)

NAN = float("nan")


def test_integrated_reward_by_hand() -> None:
    # O = +1, S = (+1, +1, −1): mean 1/3 → R = 1 + 1/3 = 4/3
    # O = −1, S = (unparsed, −1, −1): unparsed counts 0 → mean −2/3 → R = −1 − 2/3 = −5/3
    r = integrated_reward([1, -1], [[1, 1, -1], [NAN, -1, -1]], lam=1.0)
    np.testing.assert_allclose(r, [4 / 3, -5 / 3])
    # λ = 0.5: R = 1 + 0.5·1/3 = 7/6
    np.testing.assert_allclose(integrated_reward([1], [[1, 1, -1]], lam=0.5), [7 / 6])


def test_integrated_reward_rejects_bad_shape() -> None:
    with pytest.raises(ValueError, match=r"shape \(N, m\)"):
        integrated_reward([1, 1], [1, 1])


def test_standardize_by_hand() -> None:
    # group 0: (1, 2, 3): mean 2, population std √(2/3) = 0.81650 → (−1.22474, 0, 1.22474)
    # group 1: (5, 5): std 0 → 0, 0
    # group 2: (7,): one member → 0 ("zero") or 7 ("raw")
    x = [1.0, 2.0, 3.0, 5.0, 5.0, 7.0]
    g = [0, 0, 0, 1, 1, 2]
    s = math.sqrt(2 / 3) + EPS
    np.testing.assert_allclose(
        standardize_groups(x, g, singleton="zero"), [-1 / s, 0, 1 / s, 0, 0, 0], atol=1e-12
    )
    np.testing.assert_allclose(
        standardize_groups(x, g, singleton="raw"), [-1 / s, 0, 1 / s, 0, 0, 7.0], atol=1e-12
    )


def test_step_advantages_group_by_task_and_step() -> None:
    # Two tasks with identical rewards must not share a baseline: task "a" step 0 = (1, 3),
    # task "b" step 0 = (10, 30). Each standardizes to (−1, +1) (std 1 resp. 10, ε negligible).
    adv = step_advantages([1.0, 3.0, 10.0, 30.0], ["a", "a", "b", "b"], [0, 0, 0, 0])
    np.testing.assert_allclose(adv, [-1, 1, -1, 1], atol=1e-5)


def test_golden_integrated_feedback(golden: dict) -> None:
    case = golden["integrated_feedback"]
    steps = case["steps"]
    verdicts = [[NAN if v is None else v for v in s["verdicts"]] for s in steps]
    r = integrated_reward([s["outcome"] for s in steps], verdicts, lam=case["lam"])
    np.testing.assert_allclose(r, [s["R"] for s in steps], atol=1e-4)
    task = ["q"] * len(steps)
    idx = [s["step_idx"] for s in steps]
    np.testing.assert_allclose(
        step_advantages(r, task, idx, singleton="raw"), [s["A"] for s in steps], atol=1e-4
    )
    zero = [s.get("A_singleton_zero", s["A"]) for s in steps]
    np.testing.assert_allclose(step_advantages(r, task, idx, singleton="zero"), zero, atol=1e-4)
    np.testing.assert_allclose(
        task_level_advantages(r, task), [s["A_task_level"] for s in steps], atol=1e-4
    )


def test_consistency_by_hand() -> None:
    # Step R = 4/3 with votes (+1, −1, unparsed): rewards (4/3, −4/3, −2).
    # mean = (4/3 − 4/3 − 2)/3 = −2/3; deviations (2, −2/3, −4/3);
    # variance = (4 + 4/9 + 16/9)/3 = 56/27 → std 1.44016
    rewards = consistency_rewards([4 / 3], [[1, -1, NAN]], parse_failure_penalty=-2.0)
    np.testing.assert_allclose(rewards, [[4 / 3, -4 / 3, -2.0]])
    std = math.sqrt(56 / 27) + EPS
    np.testing.assert_allclose(
        consistency_advantages(rewards), [[2 / std, -2 / 3 / std, -4 / 3 / std]], atol=1e-12
    )
    # all votes agree → zero variance → no gradient
    np.testing.assert_allclose(consistency_advantages([[2.0, 2.0, 2.0]]), [[0.0, 0.0, 0.0]])


def test_golden_consistency_feedback(golden: dict) -> None:
    case = golden["consistency_feedback"]
    steps = {
        (s["rollout_idx"], s["step_idx"]): s["R"] for s in golden["integrated_feedback"]["steps"]
    }
    votes = case["votes"]
    keys = sorted({(v["rollout_idx"], v["step_idx"]) for v in votes})
    by_key = {
        k: sorted(
            (v for v in votes if (v["rollout_idx"], v["step_idx"]) == k),
            key=lambda v: v["vote_idx"],
        )
        for k in keys
    }
    verdicts = [[NAN if v["verdict"] is None else v["verdict"] for v in by_key[k]] for k in keys]
    rewards = consistency_rewards(
        [steps[k] for k in keys], verdicts, parse_failure_penalty=case["parse_failure_penalty"]
    )
    expected_r = [[v["reward"] for v in by_key[k]] for k in keys]
    np.testing.assert_allclose(rewards, expected_r, atol=1e-4)
    expected_a = [[v["advantage"] for v in by_key[k]] for k in keys]
    np.testing.assert_allclose(consistency_advantages(rewards), expected_a, atol=1e-4)


def test_accuracy_and_bands() -> None:
    # task a: 1 of 8 successes = 0.125 → inside the policy band [1/8, 7/8]; task b: 0 of 8.
    acc = task_accuracy(["a"] * 8 + ["b"] * 8, [1] + [-1] * 7 + [-1] * 8)
    assert acc == {"a": 0.125, "b": 0.0}
    assert in_accuracy_band([1 / 8, 0.0, 7 / 8, 1.0], 1 / 8, 7 / 8).tolist() == [
        True,
        False,
        True,
        False,
    ]
    assert in_accuracy_band([0.2, 0.19, 0.8, 0.81], 0.2, 0.8).tolist() == [True, False, True, False]


# --- loop reference vs vectorized -------------------------------------------------------------


def _loop_step_advantages(r, tasks, steps, singleton):
    out = []
    for i in range(len(r)):
        members = [r[j] for j in range(len(r)) if tasks[j] == tasks[i] and steps[j] == steps[i]]
        mean = sum(members) / len(members)
        std = math.sqrt(sum((x - mean) ** 2 for x in members) / len(members))
        if len(members) == 1 and singleton == "raw":
            out.append(r[i])
        elif std <= 1e-8:
            out.append(0.0)
        else:
            out.append((r[i] - mean) / (std + EPS))
    return out


def _loop_consistency(r, verdicts, penalty):
    rewards, advantages = [], []
    for step_r, votes in zip(r, verdicts, strict=True):
        row = [penalty if math.isnan(v) else step_r * v for v in votes]
        mean = sum(row) / len(row)
        std = math.sqrt(sum((x - mean) ** 2 for x in row) / len(row))
        rewards.append(row)
        advantages.append([0.0 if std <= 1e-8 else (x - mean) / (std + EPS) for x in row])
    return rewards, advantages


@pytest.mark.parametrize("seed", range(5))
def test_loop_and_vectorized_agree(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tasks, steps, outcomes, verdicts = [], [], [], []
    for task in range(4):
        for _rollout in range(int(rng.integers(1, 9))):
            outcome = int(rng.choice([-1, 1]))
            for step in range(int(rng.integers(1, 6))):
                tasks.append(f"t{task}")
                steps.append(step)
                outcomes.append(outcome)
                verdicts.append(
                    [float(rng.choice([-1.0, 1.0, NAN], p=[0.45, 0.45, 0.1])) for _ in range(3)]
                )
    r = integrated_reward(outcomes, verdicts)
    loop_r = [
        o + sum(0.0 if math.isnan(v) else v for v in vs) / 3
        for o, vs in zip(outcomes, verdicts, strict=True)
    ]
    np.testing.assert_allclose(r, loop_r, atol=1e-12)
    for singleton in ("raw", "zero"):
        np.testing.assert_allclose(
            step_advantages(r, tasks, steps, singleton=singleton),
            _loop_step_advantages(list(r), tasks, steps, singleton),
            atol=1e-10,
        )
    vote_r = consistency_rewards(r, verdicts)
    loop_vote_r, loop_vote_a = _loop_consistency(list(r), verdicts, -2.0)
    np.testing.assert_allclose(vote_r, loop_vote_r, atol=1e-12)
    np.testing.assert_allclose(consistency_advantages(vote_r), loop_vote_a, atol=1e-10)


def test_invalid_action_penalty_lowers_the_reward_of_invalid_steps_only() -> None:
    """R = O − c·[invalid]: with c = 0.5 the invalid step of the won episode gets R = 0.5 and an
    advantage below its valid siblings'; with c = 0 (the paper's R) it gets theirs."""
    from rlanything_core.method.signals import policy_samples

    steps = [(0, 0, True), (0, 1, False), (0, 2, True), (1, 0, True), (1, 1, True)]
    rollouts = _one_task(
        [(g, i) for g, i, _ in steps],
        outcome=[1, 1, 1, -1, -1],
        action_valid=[v for _, _, v in steps],
        num_steps=[3, 3, 3, 2, 2],
    )

    def advantages(c: float) -> tuple[list[float], list[float]]:
        df, metrics = policy_samples(
            rollouts,
            None,
            lam=1.0,
            estimator="task",
            singleton="zero",
            eps=1e-6,
            band=(0.0, 1.0),
            drop_zero_advantage=False,
            invalid_action_penalty=c,
        )
        assert metrics["policy/invalid_actions"] == pytest.approx(0.2)
        return df["reward"].tolist(), df["advantage"].tolist()

    rewards, adv = advantages(0.0)
    assert rewards == [1, 1, 1, -1, -1]
    assert adv[0] == adv[1] == adv[2] > 0 > adv[3] == adv[4]
    rewards, adv = advantages(0.5)
    assert rewards == [1, 0.5, 1, -1, -1]
    mean = sum(rewards) / 5
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / 5)
    assert adv == pytest.approx([(r - mean) / (std + 1e-6) for r in rewards])
    assert adv[0] == adv[2] > adv[1] > 0 > adv[3]


def test_state_advantages_group_the_steps_of_one_state_by_hand() -> None:
    # Task t: rollout 0 goes A -> B and wins (R = 1, 1); rollout 1 stays in A once (a "look")
    # and reaches B a step later, and loses (R = -1, -1, -1). Task u also has a state "A".
    rewards = [1.0, 1.0, -1.0, -1.0, -1.0, 5.0, 7.0]
    tasks = ["t", "t", "t", "t", "t", "u", "u"]
    states = ["A", "B", "A", "A", "B", "A", "A"]
    steps = [0, 1, 0, 1, 2, 0, 1]
    # State A of t: {1, -1, -1}, mean -1/3, population std sqrt(8/9); state B: {1, -1}, std 1;
    # state A of u: {5, 7}, mean 6, std 1 (task u's A is not task t's A).
    std_a = math.sqrt(8 / 9)
    by_state = [(1 + 1 / 3) / std_a, 1.0, -(2 / 3) / std_a, -(2 / 3) / std_a, -1.0, -1.0, 1.0]
    np.testing.assert_allclose(state_advantages(rewards, tasks, states), by_state, atol=1e-5)
    # By step index, t's step 1 compares B (won) with A (lost); t's step 2 and u's steps are
    # singletons, which keep their raw R (singleton="raw").
    by_index = [1.0, 1.0, -1.0, -1.0, -1.0, 5.0, 7.0]
    np.testing.assert_allclose(step_advantages(rewards, tasks, steps), by_index, atol=1e-5)


def test_policy_samples_state_grouping_and_outcome_weight() -> None:
    from rlanything_core.method.signals import policy_samples, rm_samples, verdict_matrix

    steps = [(0, 0, "A"), (0, 1, "B"), (1, 0, "A"), (1, 1, "A"), (1, 2, "B")]
    rollouts = _one_task(
        [(g, i) for g, i, _ in steps],
        prompt=[state for _, _, state in steps],
        outcome=[1, 1, -1, -1, -1],
        action_valid=True,
        progress=[True, True, False, False, True],
        num_steps=[2, 2, 3, 3, 3],
    )
    verdicts = [1, -1, 1, -1, -1]  # one vote per step
    judgments = rollouts[["round", "task_id", "task_version", "rollout_idx", "step_idx", "seed",
                          "checkpoint"]].assign(vote_idx=0, verdict=verdicts)  # fmt: skip

    def samples(grouping: str, w: float, judged: bool = True) -> pd.DataFrame:
        df, _ = policy_samples(
            rollouts,
            verdict_matrix(rollouts, judgments, 1) if judged else None,
            lam=1.0,
            estimator="step",
            singleton="raw",
            eps=EPS,
            band=(0.0, 1.0),
            drop_zero_advantage=False,
            grouping=grouping,  # type: ignore[arg-type]
            outcome_weight=w,
        )
        return df

    outcome = samples("state", 1.0, judged=False)
    std_a = math.sqrt(8 / 9)
    expected = [(4 / 3) / std_a, 1.0, -(2 / 3) / std_a, -(2 / 3) / std_a, -1.0]
    np.testing.assert_allclose(outcome["advantage"], expected, atol=1e-5)
    # Step-only: R = mean(S) = the verdict; the RM's consistency reward keeps the outcome in R.
    step_only = samples("step_index", 0.0)
    assert step_only["reward"].tolist() == [1, -1, 1, -1, -1]
    full = samples("step_index", 1.0)
    assert full["reward"].tolist() == [2, 0, 0, -2, -2]
    kwargs = {"parse_failure_penalty": -2.0, "eps": EPS, "band": (0.0, 1.0)}
    s = verdict_matrix(rollouts, judgments, 1)
    rm_w0, _ = rm_samples(rollouts, judgments, s, step_only, outcome_weight=0.0, **kwargs)
    rm_w1, _ = rm_samples(rollouts, judgments, s, full, **kwargs)
    assert rm_w0["step_reward"].tolist() == rm_w1["step_reward"].tolist() == [2, 0, 0, -2, -2]
    assert rm_w0["reward"].tolist() == [2, 0, 0, 2, 2]  # R·S


def test_grouping_and_outcome_weight_are_checked_against_the_config() -> None:
    from rlanything_core.run.config import RunConfig

    with pytest.raises(ValueError, match=r"needs advantage\.estimator"):
        RunConfig.model_validate({"advantage": {"grouping": "state", "estimator": "task"}})
    with pytest.raises(ValueError, match="outcome_only mode does not use"):
        RunConfig.model_validate({"mode": "outcome_only", "advantage": {"outcome_weight": 0.0}})
    assert RunConfig.model_validate({"advantage": {"outcome_weight": 0.0}}).advantage.grouping == (
        "step_index"
    )


def _one_task(steps: list[tuple[int, int]], **columns: object) -> pd.DataFrame:
    """Rollout rows of task "t" (version 1, round 0): (rollout, step index) each, plus `columns`;
    each rollout's last step is `done`."""
    last = {g: max(i for h, i in steps if h == g) for g, _ in steps}
    return pd.DataFrame(
        {
            "round": 0,
            "task_id": "t",
            "task_version": 1,
            "rollout_idx": [g for g, _ in steps],
            "step_idx": [i for _, i in steps],
            "seed": 0,
            "checkpoint": "c",
            "done": [i == last[g] for g, i in steps],
            **columns,
        }
    )


def test_verdict_weights_give_both_verdicts_the_same_total() -> None:
    """Worked by hand: 4 kept parsed votes, one "progress" and three "no progress": K = 4, so
    the one weighs 4/(2·1) = 2 and the three 4/(2·3) = 2/3 each (2 and 2 in all); an unparsed
    vote and an unkept one keep 1. Kept votes that all agree are left alone."""
    from rlanything_core.method.signals import verdict_weights
    from rlanything_core.run.config import ConfigError, parse_config

    verdict = pd.Series([1, -1, -1, -1, None, 1], dtype="Int8")
    kept = pd.Series([True, True, True, True, True, False])
    np.testing.assert_allclose(verdict_weights(verdict, kept), [2.0, 2 / 3, 2 / 3, 2 / 3, 1.0, 1.0])
    same = pd.Series([-1, -1, 1], dtype="Int8")
    np.testing.assert_allclose(verdict_weights(same, pd.Series([True, True, False])), [1, 1, 1])
    with pytest.raises(ConfigError, match="balance_verdicts weighs judge verdicts"):
        parse_config(
            {
                "environment": {"name": "coding"},
                "reward_model": {"mode": "unit_tests", "balance_verdicts": True},
            }
        )


RM_KWARGS = {"parse_failure_penalty": -2.0, "eps": EPS, "band": (0.0, 1.0)}


def _judged_steps(
    outcomes: list[int], votes: list[list[int]]
) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray, pd.DataFrame]:
    """One-step rollouts of task "t" with these outcomes, each step judged by its 3 `votes`:
    the rollouts, judgments, verdict matrix and the policy's samples (step estimator, every
    task in band), as `rm_samples` takes them."""
    from rlanything_core.method.signals import policy_samples, verdict_matrix

    n = len(outcomes)
    rollouts = _one_task(
        [(i, 0) for i in range(n)], outcome=outcomes, action_valid=True,
        progress=[True] * n, num_steps=[1] * n, prompt=["A"] * n,
    )  # fmt: skip
    columns = ["round", "task_id", "task_version", "rollout_idx", "step_idx", "seed", "checkpoint"]
    judgments = (
        pd.concat([rollouts] * 3)
        .sort_index(kind="stable")
        .reset_index(drop=True)[columns]
        .assign(vote_idx=[0, 1, 2] * n, verdict=[v for step in votes for v in step])
    )
    s = verdict_matrix(rollouts, judgments, 3)
    policy, _ = policy_samples(
        rollouts, s, lam=1.0, estimator="step", singleton="raw", eps=EPS, band=(0.0, 1.0),
        drop_zero_advantage=False,
    )  # fmt: skip
    return rollouts, judgments, s, policy


def test_rm_samples_balance_weighs_the_kept_votes() -> None:
    """One won step judged 1, 1, −1: R = 1 + 1/3, rewards R·S standardized over the 3 votes;
    with `balance` the two "progress" votes weigh 3/(2·2) and the "no progress" one 3/(2·1)."""
    from rlanything_core.method.signals import rm_samples

    rollouts, judgments, s, policy = _judged_steps([1], [[1, 1, -1]])
    plain, metrics = rm_samples(rollouts, judgments, s, policy, **RM_KWARGS)
    balanced, _ = rm_samples(rollouts, judgments, s, policy, balance="verdict", **RM_KWARGS)
    assert plain["kept"].all() and metrics["reward_model/kept_progress_verdicts"] == 2 / 3
    assert metrics["reward_model/tasks_in_band"] == 1.0
    # The paper's RM band [0.2, 0.8]: a task won in every episode (accuracy 1) teaches nothing.
    in_band = RM_KWARGS | {"band": (0.2, 0.8)}
    outside, metrics = rm_samples(rollouts, judgments, s, policy, **in_band)
    assert not outside["kept"].any() and (outside["advantage"] == 0).all()
    assert metrics["reward_model/tasks_in_band"] == 0.0
    assert metrics["reward_model/kept_samples"] == 0.0
    np.testing.assert_allclose(
        balanced["advantage"], plain["advantage"].to_numpy() * [0.75, 0.75, 1.5]
    )


def test_direction_weights_give_both_pushes_the_same_total_by_hand() -> None:
    """Worked by hand. A vote pushes toward sign(A)·v: "progress" with A > 0 and "no progress"
    with A < 0 both push toward "progress"; an unparsed vote and A = 0 push nowhere. Pushes
    +1, +1, −1 with |A| 1, 2, 1: M = 4, M₊ = 3, M₋ = 1, so the "progress" pushes weigh
    4/(2·3) = 2/3 and the other 4/(2·1) = 2 (|A|·w: 2 and 2); the vote pushing nowhere keeps
    1. A weight by vote count (3/4 and 3/2) would not balance the masses."""
    from rlanything_core.method.signals import (
        direction_weights,
        progress_push_share,
        push_directions,
    )
    from rlanything_core.run.config import ConfigError, parse_config

    verdict = pd.Series([1, -1, 1, -1, None, 1], dtype="Int8")
    advantage = pd.Series([0.5, 0.5, -0.3, -0.2, 1.0, 0.0])
    np.testing.assert_array_equal(push_directions(verdict, advantage), [1, -1, -1, 1, 0, 0])
    pushes = np.array([1.0, 1.0, -1.0, 0.0])
    a = pd.Series([1.0, -2.0, 1.0, 5.0])
    w = direction_weights(pushes, a)
    np.testing.assert_allclose(w, [2 / 3, 2 / 3, 2.0, 1.0])
    np.testing.assert_allclose(
        [(a.abs() * w)[pushes > 0].sum(), (a.abs() * w)[pushes < 0].sum()], [2, 2]
    )
    assert progress_push_share(pushes, a) == 0.75
    one_way = np.array([1.0, 1.0, 0.0])
    np.testing.assert_allclose(direction_weights(one_way, pd.Series([1.0, 2.0, 3.0])), [1, 1, 1])
    with pytest.raises(ConfigError, match="balance_directions weighs judge verdicts"):
        parse_config(
            {
                "environment": {"name": "coding"},
                "reward_model": {"mode": "unit_tests", "balance_directions": True},
            }
        )
    with pytest.raises(ConfigError, match="two ways to weigh the same votes"):
        parse_config(
            {
                "environment": {"name": "household"},
                "reward_model": {"balance_verdicts": True, "balance_directions": True},
            }
        )


def test_rm_samples_balances_directions_across_steps() -> None:
    """A won step judged 1, 1, −1 and a lost one judged 1, −1, −1: the first step's votes all
    push toward "progress" (its R > 0), the second's toward "no progress". Alone, the won step
    has nothing to balance; together each direction's |A| is 2·√2, so the weights are 1 and the
    push share ½. Add a second lost step: "no progress" now has 4·√2, so its votes weigh ¾ and
    the won step's 3/2, and the push share is ⅓."""
    from rlanything_core.method.signals import rm_samples

    def run(outcomes: list[int], votes: list[list[int]]) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
        rollouts, judgments, s, policy = _judged_steps(outcomes, votes)
        plain, metrics = rm_samples(rollouts, judgments, s, policy, **RM_KWARGS)
        balanced, _ = rm_samples(rollouts, judgments, s, policy, balance="direction", **RM_KWARGS)
        return plain, balanced, metrics

    plain, balanced, metrics = run([1], [[1, 1, -1]])
    np.testing.assert_allclose(balanced["advantage"], plain["advantage"])
    assert metrics["reward_model/progress_push_share"] == 1.0
    plain, balanced, metrics = run([1, -1], [[1, 1, -1], [1, -1, -1]])
    np.testing.assert_allclose(balanced["advantage"], plain["advantage"])
    np.testing.assert_allclose(metrics["reward_model/progress_push_share"], 0.5)
    plain, balanced, metrics = run([1, -1, -1], [[1, 1, -1], [1, -1, -1], [1, -1, -1]])
    np.testing.assert_allclose(metrics["reward_model/progress_push_share"], 1 / 3)
    ratio = balanced["advantage"].to_numpy() / plain["advantage"].to_numpy()
    np.testing.assert_allclose(ratio, [1.5] * 3 + [0.75] * 6)


def test_outcome_verdicts_judge_every_step_by_its_episode_by_hand() -> None:
    """Consistency feedback's target judge: every step of the won episode 0 is called progress,
    every step of the lost episode 1 not. Against the planner's labels it is right on 3 of 5
    steps: 2 of the 3 progress steps and 1 of the 2 others, balanced (2/3 + 1/2) / 2 = 7/12;
    its step verdicts always predict the outcome."""
    from rlanything_core.method.signals import judge_metrics, outcome_verdicts

    rollouts = _one_task(
        [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)],
        outcome=[1, 1, 1, -1, -1],
        progress=[True, False, True, True, False],
    )
    verdicts = outcome_verdicts(rollouts, votes=3)
    assert verdicts.tolist() == [[1.0] * 3] * 3 + [[-1.0] * 3] * 2
    metrics = judge_metrics(rollouts, verdicts)
    assert metrics["process_accuracy"] == pytest.approx(3 / 5)
    assert metrics["process_balanced_accuracy"] == pytest.approx(7 / 12)
    assert metrics["outcome_accuracy"] == pytest.approx(1.0)
