"""`rlanything-round`: one RLAnything iteration as a Prefect flow of seven stage tasks."""

from __future__ import annotations

import json
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from rlanything_core.base.schemas import read_dataset
from rlanything_core.run.config import RunConfig
from rlanything_core.run.rundir import RunDir
from rlanything_flows.tracking import artifact_slug
from rlanything_tasks.adaptation import acceptance_check, task_rewriting
from rlanything_tasks.advantages import advantage_computation
from rlanything_tasks.common import StageChain
from rlanything_tasks.scoring import reward_scoring, rollout
from rlanything_tasks.updates import policy_update, rm_update

SUMMARY_METRICS = (
    "policy/accuracy",
    "policy/mean_reward",
    "policy/loss",
    "reward_model/process_accuracy",
    "reward_model/parse_failures",
    "env/candidates",
    "env/accepted_tasks",
)


@flow(name="rlanything-round", flow_run_name="round-{round_idx}")
def rlanything_round(config: RunConfig, run_dir: str, round_idx: int) -> dict[str, float]:
    """rollout → reward-scoring → advantage-computation → policy-update → rm-update →
    task-rewriting → acceptance-check, each handed the record of the stage before it (the
    graph's edges) and the datasets it reads, by path: the round's task pool and what the
    stages before it wrote. Returns the round's metrics (timing/<stage>_s included)."""
    metrics: dict[str, float] = {}
    pool = str(RunDir(run_dir).dataset(round_idx, "tasks"))
    chain = StageChain(config, run_dir, round_idx, {"tasks": pool})

    def step(stage: Any) -> None:
        record = chain(stage)
        metrics.update(record["metrics"])
        metrics[f"timing/{record['stage'].replace('-', '_')}_s"] = float(record["seconds"])

    step(rollout)  # the policy plays the round's tasks G times: rollouts
    step(reward_scoring)  # the RM votes m times on every step: judgments (or unit tests)
    step(advantage_computation)  # integrated and consistency feedback: policy/rm samples
    step(policy_update)  # PPO-clip on the policy samples: the policy's checkpoint
    step(rm_update)  # PPO-clip on the RM samples: the RM's checkpoint
    step(task_rewriting)  # the env model rewrites tasks out of the band: candidates
    step(acceptance_check)  # the valid candidates are played: acceptance and the next pool
    _publish(RunDir(run_dir), round_idx, metrics)
    return metrics


def _publish(run: RunDir, round_idx: int, metrics: dict[str, float]) -> None:
    """Prefect artifacts: the round's rewrites as a table and a markdown summary."""
    candidates = read_dataset(run.dataset(round_idx, "candidates"), "candidates")
    acceptance = read_dataset(run.dataset(round_idx, "acceptance"), "acceptance")
    pool = read_dataset(run.dataset(round_idx, "tasks"), "tasks").set_index(
        ["task_id", "task_version"]
    )
    decided = acceptance.set_index("candidate_id")
    table = []
    for row in candidates.itertuples():
        verdict = decided.loc[row.candidate_id] if row.candidate_id in decided.index else None
        original = pool.loc[(row.parent_task_id, row.parent_task_version), "spec"]
        rewritten = row.spec if isinstance(row.spec, str) and row.spec else None  # NaN: invalid
        table.append(  # the decision first; the whole specs, wide, last
            {
                "direction": row.direction,
                "accepted": bool(verdict is not None and verdict["accepted"]),
                "acc_before": round(float(row.acc_parent), 3),
                "acc_after": None if verdict is None else round(float(verdict["acc_candidate"]), 3),
                "changes": f"invalid: {row.error}"
                if rewritten is None
                else spec_changes(original, rewritten),
                "candidate": row.candidate_id,
                "original": original,
                "rewritten": rewritten or "",
            }
        )
    slug = artifact_slug(run.root.name)
    create_table_artifact(
        key=f"rlanything-rewrites-{slug}-round-{round_idx}",
        table=table or [{"candidate": "(no task was rewritten this round)"}],
        description=f"Task rewrites of round {round_idx} in {run.root}",
    )
    lines = [
        f"# Round {round_idx}",
        f"Run directory: `{run.root}`",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    lines += [f"| {k} | {metrics[k]:.4g} |" for k in SUMMARY_METRICS if k in metrics]
    timings = [
        f"{k.removeprefix('timing/')} {v:.1f}"
        for k, v in metrics.items()
        if k.startswith("timing/")
    ]
    lines += ["", "Stage times (s): " + ", ".join(timings)]
    create_markdown_artifact(
        key=f"rlanything-summary-{slug}-round-{round_idx}",
        markdown="\n".join(lines),
        description=f"Summary of round {round_idx} in {run.root}",
    )


def spec_changes(original: str, rewritten: str) -> str:
    """The fields a rewrite changed, `field: old → new`, comma-separated (both specs JSON)."""
    try:
        before, after = json.loads(original), json.loads(rewritten)
    except json.JSONDecodeError:
        return "(not JSON)"
    if not isinstance(before, dict) or not isinstance(after, dict):
        return "(not JSON objects)"
    changed = [
        f"{k}: {before.get(k, '–')} → {after.get(k, '–')}"
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k)
    ]
    return ", ".join(changed) or "(no change)"
