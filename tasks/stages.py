"""The seven stages of one RLAnything round (arXiv 2602.02488), as Prefect tasks, in order:

1. rollout: the policy plays every active task G times → trajectories with outcomes;
2. reward scoring: the reward model judges every step m times → verdicts with reasoning;
3. advantage computation: integrated feedback and advantages for the policy, consistency rewards
   and advantages for the reward model, task accuracies;
4. policy update → a new policy checkpoint;
5. reward-model update → a new reward-model checkpoint;
6. task rewriting: the environment model proposes q' for tasks out of the accuracy band;
7. acceptance check: roll out q' (and q, same checkpoint), accept or reject, write the next pool.

Each is thin: read the round's Parquet files, call `rlanything_core`, write Parquet (atomically,
schema-checked), return paths and metrics. Stages switched off by the config's `mode` still run
and write their (empty) datasets, so every round has the same files.
"""

from __future__ import annotations

from rlanything_tasks.adaptation import acceptance_check, task_rewriting
from rlanything_tasks.advantages import advantage_computation
from rlanything_tasks.scoring import reward_scoring, rollout
from rlanything_tasks.updates import policy_update, rm_update
from rlanything_tasks.warm_start import warm_start

STAGES = (
    rollout,
    reward_scoring,
    advantage_computation,
    policy_update,
    rm_update,
    task_rewriting,
    acceptance_check,
)
"""The seven stages of a round, in order (flows/round.py runs them by name in this order)."""

__all__ = ["STAGES", "warm_start"]
