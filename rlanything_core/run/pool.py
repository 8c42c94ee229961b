"""The environment-task pool: the initial pool from the task generator, and the next pool after
the acceptance check (`rlanything_core.method.adaptation`).

An accepted rewrite q' replaces its parent q under the same task_id with task_version + 1; the
row keeps the history: parent_task_id, direction, the parent's accuracy and the candidate's
accuracy at acceptance, and the round it was created in. Earlier versions stay readable in the
earlier rounds' tasks.parquet.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlanything_core.base.schemas import SchemaError, read_dataset
from rlanything_core.base.seeding import derive_seed
from rlanything_core.envs.interface import Environment, TaskRef, TaskSpec
from rlanything_core.run.config import EnvironmentConfig


def tasks_frame(task_ids: list[str], specs: list[TaskSpec], env: str) -> pd.DataFrame:
    """Round-0 pool rows (tasks schema) for these tasks of environment `env` (its configured
    name), all version 1, origin "seed"."""
    return pd.DataFrame(
        {
            "round": 0,
            "task_id": task_ids,
            "task_version": 1,
            "parent_task_id": None,
            "origin": "seed",
            "direction": None,
            "created_round": 0,
            "acc_parent": None,
            "acc_candidate": None,
            "env": env,
            "spec": [s.to_json() for s in specs],
        }
    )


def initial_pool(env: EnvironmentConfig) -> pd.DataFrame:
    """Round-0 pool: the first `env.num_tasks` tasks of `env.tasks_file`, or as many from the
    generator of `env.split`."""
    if env.tasks_file is not None:
        frame = read_dataset(env.tasks_file, "tasks")
        if len(frame) < env.num_tasks:
            raise SchemaError(
                f"{env.tasks_file} holds {len(frame)} tasks; environment.num_tasks asks for "
                f"{env.num_tasks}. Lower num_tasks or add tasks to the file."
            )
        others = sorted(set(frame["env"]) - {env.name})
        if others:
            raise SchemaError(
                f"{env.tasks_file} holds tasks of environment {others}, but environment.name is "
                f"{env.name!r}; set environment.name to match the file."
            )
        frame = frame.head(env.num_tasks)
        refs = task_refs(frame, env.env)  # validates every spec
        return tasks_frame([r.task_id for r in refs], [r.spec for r in refs], env.name)
    specs = env.generate(env.split, env.num_tasks, env.seed)
    ids = [f"{env.split}-{env.seed}-{i:03d}" for i in range(env.num_tasks)]
    return tasks_frame(ids, specs, env.name)


def task_refs(pool: pd.DataFrame, env: Environment) -> list[TaskRef]:
    """The pool's tasks with specs validated by `env` (a pool file edited by hand is checked
    here too)."""
    return [
        TaskRef(row.task_id, int(row.task_version), env.parse_spec(row.spec))
        for row in pool.itertuples()
    ]


def batch_positions(size: int, per_round: int | None, seed: int, round_idx: int) -> list[int]:
    """Positions in a pool of `size` tasks that round `round_idx` plays, in pool order.

    The rounds walk through passes over the pool, each a permutation seeded by (seed, pass) and
    cut into size // per_round batches; the remainder of a pass is left out of it (it comes
    first in another pass's order), so no round plays a task twice. None plays the whole pool."""
    if per_round is None or per_round >= size:
        return list(range(size))
    per_pass = size // per_round
    epoch, batch = divmod(round_idx, per_pass)
    order = np.random.default_rng(derive_seed(seed, "task-batch", epoch)).permutation(size)
    return sorted(int(i) for i in order[batch * per_round : (batch + 1) * per_round])


def round_batch(
    pool: pd.DataFrame,
    env: EnvironmentConfig,
    seed: int,
    round_idx: int,
    replay_accepted: bool = False,
) -> list[TaskRef]:
    """The tasks of the pool that round `round_idx` plays (`environment.tasks_per_round`).

    With `replay_accepted` (`adaptation.replay_accepted`), the rewrites accepted in the round
    before (rows with origin "rewritten" created in round `round_idx` − 1) are played first, up to
    `tasks_per_round` in pool order, and the round's own batch (`batch_positions`) fills the rest
    of its places in pool order; the tasks of it that do not fit wait for a later pass. The batch
    keeps its size, so every row plays as many episodes a round."""
    positions = batch_positions(len(pool), env.tasks_per_round, seed, round_idx)
    if replay_accepted and env.tasks_per_round is not None and round_idx > 0:
        fresh = (pool["origin"] == "rewritten") & (pool["created_round"] == round_idx - 1)
        accepted = [int(i) for i in np.flatnonzero(fresh.to_numpy())][: env.tasks_per_round]
        taken = set(accepted)
        rest = [i for i in positions if i not in taken]
        positions = sorted(accepted + rest[: env.tasks_per_round - len(accepted)])
    return task_refs(pool.iloc[positions], env.env)


def next_pool(
    pool: pd.DataFrame, candidates: pd.DataFrame, acceptance: pd.DataFrame, next_round: int
) -> pd.DataFrame:
    """The pool of `next_round`: accepted candidates replace their parents, the rest carry over."""
    accepted = acceptance[acceptance["accepted"]].merge(
        candidates[["candidate_id", "spec"]], on="candidate_id", how="left", validate="one_to_one"
    )
    by_parent = {(r.parent_task_id, int(r.parent_task_version)): r for r in accepted.itertuples()}
    rows = []
    for row in pool.to_dict("records"):
        hit = by_parent.get((row["task_id"], int(row["task_version"])))
        if hit is not None:
            row.update(
                task_version=int(row["task_version"]) + 1,
                parent_task_id=row["task_id"],
                origin="rewritten",
                direction=hit.direction,
                created_round=next_round - 1,
                acc_parent=float(hit.acc_parent),
                acc_candidate=float(hit.acc_candidate),
                spec=hit.spec,
            )
        row["round"] = next_round
        rows.append(row)
    return pd.DataFrame(rows, columns=pool.columns)
