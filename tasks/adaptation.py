"""Stages 6 and 7: the environment model rewrites tasks out of the band; the acceptance check
plays the valid candidates and writes the next pool (METHOD.md §3)."""

from __future__ import annotations

import pandas as pd

from rlanything_core.base import failpoints
from rlanything_core.base.generation import Messages
from rlanything_core.base.schemas import read_dataset
from rlanything_core.base.seeding import derive_seed
from rlanything_core.envs.interface import TaskRef
from rlanything_core.method.adaptation import accept_candidate, adaptation_direction
from rlanything_core.method.signals import task_accuracies
from rlanything_core.models.engines import open_engine
from rlanything_core.run.config import RunConfig
from rlanything_core.run.pool import next_pool, task_refs
from rlanything_core.run.rundir import RunDir
from tasks.common import stage_task
from tasks.playing import (
    Metrics,
    Outputs,
    play_policy,
    write_rows,
)
from tasks.scoring import round_tasks


@stage_task("task-rewriting")
def task_rewriting(config: RunConfig, run: RunDir, r: int) -> tuple[Outputs, Metrics]:
    """The environment model proposes a harder or easier version of every task out of band."""
    rows: list[dict[str, object]] = []
    triggered: list[tuple[TaskRef, float, str]] = []
    if config.adapts_tasks:
        ad = config.adaptation
        pool = round_tasks(config, run, r)
        rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
        acc = task_accuracies(rollouts)
        for ref in pool:
            a = float(acc[(ref.task_id, ref.task_version)])
            direction = adaptation_direction(a, ad.alpha_low, ad.alpha_high)
            if direction is not None:
                triggered.append((ref, a, direction))
        triggered = triggered[: ad.max_rewrites]
    if triggered:
        rows = _propose(config, run, r, triggered)
    metrics = {
        "env/candidates": float(len(rows)),
        "env/invalid_candidates": float(sum(not row["valid"] for row in rows)),
        "env/triggered_harder": float(sum(d == "harder" for *_, d in triggered)),
        "env/triggered_easier": float(sum(d == "easier" for *_, d in triggered)),
    }
    return {"candidates": write_rows(rows, run, r, "candidates")}, metrics


def _propose(
    config: RunConfig, run: RunDir, r: int, triggered: list[tuple[TaskRef, float, str]]
) -> list[dict[str, object]]:
    em = config.env_model
    judgments = read_dataset(run.dataset(r, "judgments"), "judgments")
    rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
    source = run.model_before("env_model", r, em.model.source)
    engine = open_engine(em.model, source, "env_model", em.lora_rank)

    def ask(prompts: list[Messages], purpose: str, max_new_tokens: int) -> list[str]:
        seeds = [
            derive_seed(config.seed, purpose, r, ref.task_id, ref.task_version)
            for ref, *_ in triggered
        ]
        outs = engine.generate(
            prompts,
            seeds,
            max_new_tokens=max_new_tokens,
            temperature=em.model.temperature,
            batch_size=em.model.batch_size,
        )
        return [o.text for o in outs]

    def of_task(frame: pd.DataFrame, ref: TaskRef) -> pd.DataFrame:
        return frame[(frame.task_id == ref.task_id) & (frame.task_version == ref.task_version)]

    env = config.environment.env
    critiques = ask(
        [
            env.critique_messages(
                ref.spec,
                a,
                of_task(judgments, ref),
                of_task(rollouts, ref),
                em.critique_source,
                em.critique_examples,
            )
            for ref, a, _ in triggered
        ],
        "critique",
        em.critique_max_new_tokens,
    )
    answers = ask(
        [
            env.rewrite_messages(ref.spec, d, a, c)
            for (ref, a, d), c in zip(triggered, critiques, strict=True)
        ],
        "rewrite",
        em.model.max_new_tokens,
    )
    rows = []
    for (ref, a, d), critique, answer in zip(triggered, critiques, answers, strict=True):
        spec, error = env.parse_proposal(answer, ref.spec)
        rows.append(
            {
                "round": r,
                "candidate_id": f"{ref.task_id}.v{ref.task_version + 1}.r{r:03d}",
                "parent_task_id": ref.task_id,
                "parent_task_version": ref.task_version,
                "direction": d,
                "acc_parent": a,
                "critique": critique,
                "response": answer,
                "spec": spec.to_json() if spec is not None else None,
                "valid": spec is not None,
                "error": error,
                "seed": derive_seed(config.seed, "rewrite", r, ref.task_id, ref.task_version),
                "checkpoint": run.label(source),
            }
        )
    return rows


@stage_task("acceptance-check")
def acceptance_check(config: RunConfig, run: RunDir, r: int) -> tuple[Outputs, Metrics]:
    """Roll out every valid candidate (and its parent, on the same checkpoint), accept or reject,
    and write the next round's task pool."""
    pool = read_dataset(run.dataset(r, "tasks"), "tasks")
    candidates = read_dataset(run.dataset(r, "candidates"), "candidates")
    valid = candidates[candidates["valid"]]
    rows: list[dict[str, object]] = []
    if len(valid):
        rows = _accept(config, run, r, pool, valid)
    outputs = {"acceptance": write_rows(rows, run, r, "acceptance")}
    acceptance = read_dataset(outputs["acceptance"], "acceptance")
    nxt = next_pool(pool, candidates, acceptance, r + 1)
    with failpoints.part("next-pool"):  # the fault suite stops here, the next pool in place
        outputs["next_tasks"] = write_rows(nxt, run, r + 1, "tasks")
    metrics = {
        "env/accepted_tasks": float(acceptance["accepted"].sum()),
        "env/pool_size": float(len(nxt)),
    }
    return outputs, metrics


def _accept(
    config: RunConfig, run: RunDir, r: int, pool: pd.DataFrame, valid: pd.DataFrame
) -> list[dict[str, object]]:
    ad = config.adaptation
    env = config.environment.env
    refs = task_refs(pool, env)
    parents = {(t.task_id, t.task_version): t for t in refs}
    candidates = [
        TaskRef(row.candidate_id, int(row.parent_task_version) + 1, env.parse_spec(row.spec))
        for row in valid.itertuples()
    ]
    to_play = list(candidates)
    if ad.compare == "same_checkpoint":
        to_play += [
            parents[(p, int(v))]
            for p, v in valid[["parent_task_id", "parent_task_version"]].itertuples(index=False)
        ]
    source = str(run.checkpoint("policy", r))
    played = play_policy(config, run, r, source, to_play, "acceptance")
    acc = task_accuracies(pd.DataFrame(played))
    rows = []
    for row, cand in zip(valid.itertuples(), candidates, strict=True):
        parent_key = (row.parent_task_id, int(row.parent_task_version))
        acc_parent = (
            float(acc[parent_key]) if ad.compare == "same_checkpoint" else float(row.acc_parent)
        )
        acc_cand = float(acc[(cand.task_id, cand.task_version)])
        rows.append(
            {
                "round": r,
                "candidate_id": row.candidate_id,
                "parent_task_id": row.parent_task_id,
                "parent_task_version": int(row.parent_task_version),
                "direction": row.direction,
                "acc_parent": acc_parent,
                "acc_candidate": acc_cand,
                "accepted": accept_candidate(
                    row.direction, acc_parent, acc_cand, ad.alpha_low, ad.alpha_high, ad.bounds
                ),
                "bounds": ad.bounds,
                "seed": derive_seed(config.seed, "acceptance", r),
                "checkpoint": run.label(source),
            }
        )
    return rows
