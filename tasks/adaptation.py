"""Stages 6 and 7: the environment model rewrites tasks out of the band; the acceptance check
plays the valid candidates and writes the next pool (`rlanything_core.method.adaptation`)."""

from __future__ import annotations

import pandas as pd

from rlanything_core.base import failpoints
from rlanything_core.method.adaptation import adaptation_direction
from rlanything_core.method.signals import task_accuracies
from rlanything_core.models.engines import open_engine
from rlanything_core.run.adapting import (
    Triggered,
    acceptance_rows,
    candidate_refs,
    propose_rewrites,
)
from rlanything_core.run.config import RunConfig
from rlanything_core.run.pool import next_pool, task_refs
from rlanything_core.run.rundir import Inputs, RunDir
from rlanything_tasks.common import stage_task
from rlanything_tasks.playing import Metrics, Outputs, play_policy
from rlanything_tasks.scoring import round_tasks


@stage_task("task-rewriting")
def task_rewriting(
    config: RunConfig, run: RunDir, r: int, inputs: Inputs
) -> tuple[Outputs, Metrics]:
    """The environment model proposes a harder or easier version of every task out of band."""
    rows: list[dict[str, object]] = []
    triggered: list[Triggered] = []
    skipped = config.environment.env.rewriting_skipped if config.adapts_tasks else None
    if skipped:
        print(f"round {r} task rewriting: skipped, {skipped}", flush=True)
    elif config.adapts_tasks:
        ad = config.adaptation
        pool = round_tasks(config, inputs.read("tasks"), r)
        # acc(q) as the advantage stage computed it, one row per task
        acc = (
            inputs.read("policy_samples")
            .drop_duplicates(["task_id", "task_version"])
            .set_index(["task_id", "task_version"])["task_accuracy"]
        )
        for ref in pool:
            a = float(acc[(ref.task_id, ref.task_version)])
            direction = adaptation_direction(a, ad.alpha_low, ad.alpha_high)
            if direction is not None:
                triggered.append((ref, a, direction))
        triggered = triggered[: ad.max_rewrites]
    if triggered:
        rows = _propose(config, run, r, triggered, inputs)
    metrics = {
        "env/candidates": float(len(rows)),
        "env/invalid_candidates": float(sum(not row["valid"] for row in rows)),
        "env/triggered_harder": float(sum(d == "harder" for *_, d in triggered)),
        "env/triggered_easier": float(sum(d == "easier" for *_, d in triggered)),
    }
    return {"candidates": run.write(rows, r, "candidates")}, metrics


def _propose(
    config: RunConfig, run: RunDir, r: int, triggered: list[Triggered], inputs: Inputs
) -> list[dict[str, object]]:
    em = config.env_model
    source = run.model_before("env_model", r, em.model.source)
    return propose_rewrites(
        config.environment.env,
        open_engine(em.model, source, "env_model", em.lora_rank),
        triggered,
        inputs.read("judgments"),
        inputs.read("rollouts"),
        em=em,
        round_idx=r,
        base_seed=config.seed,
        checkpoint=run.label(source),
    )


@stage_task("acceptance-check")
def acceptance_check(
    config: RunConfig, run: RunDir, r: int, inputs: Inputs
) -> tuple[Outputs, Metrics]:
    """Roll out every valid candidate (and its parent, on the same checkpoint), accept or reject,
    and write the next round's task pool."""
    pool = inputs.read("tasks")
    candidates = inputs.read("candidates")
    valid = candidates[candidates["valid"]]
    rows: list[dict[str, object]] = []
    if len(valid):
        rows = _accept(config, run, r, pool, valid)
    outputs = {"acceptance": run.write(rows, r, "acceptance")}
    acceptance = run.read(r, "acceptance")
    nxt = next_pool(pool, candidates, acceptance, r + 1)
    with failpoints.part("next-pool"):  # the fault suite stops here, the next pool in place
        outputs["next_tasks"] = run.write(nxt, r + 1, "tasks")
    metrics = {
        "env/accepted_tasks": float(acceptance["accepted"].sum()),
        "env/pool_size": float(len(nxt)),
    }
    return outputs, metrics


def _accept(
    config: RunConfig, run: RunDir, r: int, pool: pd.DataFrame, valid: pd.DataFrame
) -> list[dict[str, object]]:
    env = config.environment.env
    to_play = candidate_refs(valid, env)
    if config.adaptation.compare == "same_checkpoint":
        parents = {(t.task_id, t.task_version): t for t in task_refs(pool, env)}
        to_play += [
            parents[(p, int(v))]
            for p, v in valid[["parent_task_id", "parent_task_version"]].itertuples(index=False)
        ]
    source = str(run.checkpoint("policy", r))
    played = play_policy(config, run, r, source, to_play, "acceptance")
    return acceptance_rows(
        valid,
        task_accuracies(pd.DataFrame(played)),
        adaptation=config.adaptation,
        round_idx=r,
        base_seed=config.seed,
        checkpoint=run.label(source),
    )
