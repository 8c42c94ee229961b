"""RLoop's exploitation (Zeng et al., arXiv 2511.04285): the expert set of a cycle, and pass@k.

A cycle's harvest is the rollouts of some of its exploration rounds (several intermediate
checkpoints). The expert set keeps the steps of successful episodes (outcome +1) of hard tasks,
those whose success rate over the harvest is below a threshold: rejection sampling, focused on
what the policy cannot yet do reliably. The cycle's start policy is then fine-tuned on it.

Choices:
1. A task is identified by (task_id, task_version): a rewritten task is a different task.
2. The success rate is over every harvested episode of the task, whichever checkpoint played it.
3. Tasks without any success give no expert data; they count as hard all the same.
"""

from __future__ import annotations

from math import comb

import pandas as pd

TASK = ["task_id", "task_version"]
EPISODE = ["round", "task_id", "task_version", "rollout_idx"]


def episodes(rollouts: pd.DataFrame) -> pd.DataFrame:
    """One row per episode: its task, round and outcome."""
    return rollouts.drop_duplicates(EPISODE)[[*EPISODE, "outcome"]]


def success_rates(rollouts: pd.DataFrame) -> pd.Series:
    """Per task (task_id, task_version): the fraction of its episodes that succeeded."""
    eps = episodes(rollouts)
    return (eps["outcome"] > 0).groupby([eps["task_id"], eps["task_version"]]).mean()


def expert_steps(rollouts: pd.DataFrame, hard_threshold: float) -> tuple[pd.DataFrame, int]:
    """The steps of successful episodes on hard tasks (success rate < `hard_threshold`), with
    each step's `task_success_rate`; and the number of hard tasks."""
    rates = success_rates(rollouts).rename("task_success_rate")
    hard = rates[rates < hard_threshold]
    steps = rollouts[rollouts["outcome"] > 0].merge(
        hard.reset_index(), on=TASK, how="inner", validate="many_to_one"
    )
    return steps.sort_values([*EPISODE, "step_idx"]).reset_index(drop=True), len(hard)


def pass_at_k_per_task(rollouts: pd.DataFrame) -> pd.DataFrame:
    """Unbiased pass@k of each task (rows: task_id, task_version) for k = 1 … n (columns; n =
    episodes per task, the smallest over tasks): 1 − C(n − c, k) / C(n, k), c = successful
    episodes of the task (Chen et al., 2021)."""
    if rollouts.empty:
        return pd.DataFrame()
    eps = episodes(rollouts)
    per_task = (
        (eps["outcome"] > 0).groupby([eps["task_id"], eps["task_version"]]).agg(["size", "sum"])
    )
    n_min = int(per_task["size"].min())
    return pd.DataFrame(
        {
            k: [1.0 - comb(int(n) - int(c), k) / comb(int(n), k) for n, c in per_task.to_numpy()]
            for k in range(1, n_min + 1)
        },
        index=per_task.index,
    )


def pass_at_k(rollouts: pd.DataFrame) -> dict[int, float]:
    """pass@k for k = 1 … n: the mean over tasks of `pass_at_k_per_task`. pass@1 is the mean
    accuracy."""
    return {int(k): float(v) for k, v in pass_at_k_per_task(rollouts).mean().items()}
