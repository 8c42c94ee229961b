"""The seven stages of one RLAnything round, as Prefect tasks (METHOD.md, "One round, in order").

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
