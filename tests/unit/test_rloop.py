"""RLoop's exploitation by hand: success rates, hard tasks, the expert set, pass@k."""

from __future__ import annotations

import pandas as pd
import pytest

from rlanything_core.method.rloop import expert_steps, pass_at_k, success_rates


def _rollouts(episodes: dict[tuple[str, int, int], tuple[int, int]]) -> pd.DataFrame:
    """(task, round, rollout) → (outcome, steps): one row per step."""
    rows = [
        {
            "round": r,
            "task_id": task,
            "task_version": 1,
            "rollout_idx": g,
            "step_idx": i,
            "outcome": outcome,
        }
        for (task, r, g), (outcome, steps) in episodes.items()
        for i in range(steps)
    ]
    return pd.DataFrame(rows)


# Task a: 1 of 4 episodes succeeds (over two rounds); b: 3 of 4; c: none.
EPISODES = {
    ("a", 0, 0): (1, 2),
    ("a", 0, 1): (-1, 3),
    ("a", 1, 0): (-1, 1),
    ("a", 1, 1): (-1, 1),
    ("b", 0, 0): (1, 1),
    ("b", 0, 1): (1, 1),
    ("b", 1, 0): (1, 2),
    ("b", 1, 1): (-1, 1),
    ("c", 0, 0): (-1, 1),
    ("c", 0, 1): (-1, 1),
    ("c", 1, 0): (-1, 1),
    ("c", 1, 1): (-1, 1),
}


def test_success_rates_count_episodes_not_steps() -> None:
    rates = success_rates(_rollouts(EPISODES))
    assert rates.to_dict() == {("a", 1): 0.25, ("b", 1): 0.75, ("c", 1): 0.0}


def test_expert_set_keeps_successful_episodes_of_hard_tasks() -> None:
    steps, hard = expert_steps(_rollouts(EPISODES), hard_threshold=0.5)
    assert hard == 2  # a and c; c has no success to learn from
    assert steps[["task_id", "round", "rollout_idx", "step_idx"]].values.tolist() == [
        ["a", 0, 0, 0],
        ["a", 0, 0, 1],
    ]
    assert steps["task_success_rate"].tolist() == [0.25, 0.25]
    steps, hard = expert_steps(_rollouts(EPISODES), hard_threshold=1.0)
    assert hard == 3 and sorted(set(steps["task_id"])) == ["a", "b"] and len(steps) == 6


def test_pass_at_k_by_hand() -> None:
    # n = 4 episodes per task; c = 1, 3, 0.
    # pass@1 = mean(1/4, 3/4, 0) = 1/3
    # pass@2 = mean(1 − C(3,2)/C(4,2), 1 − C(1,2)/C(4,2), 0) = mean(1/2, 1, 0) = 1/2
    # pass@3 = mean(1 − C(3,3)/C(4,3), 1, 0) = mean(3/4, 1, 0) = 7/12
    # pass@4 = mean(1, 1, 0) = 2/3
    got = pass_at_k(_rollouts(EPISODES))
    assert got == pytest.approx({1: 1 / 3, 2: 1 / 2, 3: 7 / 12, 4: 2 / 3})
    assert pass_at_k(_rollouts({})) == {}
