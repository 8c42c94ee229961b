"""Reward scoring: the generative reward model judges every step of every rollout m times.

Each vote is a full answer (reasoning, then a verdict in \\boxed{}); the verdict is parsed to
+1 / −1, or None when the answer holds no parsable verdict (counted, never an error). With
`verdicts` (`reward_model.answers: choose`) each vote is drawn among those complete answers by the
RM's probability of writing each, renormalized over them: the m votes on a step share one scoring
of its prompt.
Vote seeds: derive_seed(base_seed, "judge", round, task_id, task_version, rollout_idx, step_idx,
vote_idx).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from rlanything_core.base.generation import Chooser, Engine, Messages
from rlanything_core.base.schemas import STEP_KEY
from rlanything_core.base.seeding import derive_seed
from rlanything_core.envs.interface import Environment, StepView
from rlanything_core.method.parsing import parse_verdict


def judge_prompts(rollouts: pd.DataFrame, env: Environment) -> list[Messages]:
    """One judge prompt per rollout row (same order), made by the environment from the step and
    the rollout's earlier steps."""
    previous: dict[tuple[object, ...], list[StepView]] = {}
    ordered = rollouts.sort_values(STEP_KEY)
    by_row: dict[int, Messages] = {}
    for idx, row in ordered.iterrows():
        earlier = previous.setdefault((row.task_id, row.task_version, row.rollout_idx), [])
        step = StepView(
            goal=str(row.goal),
            observation=str(row.observation),
            response=str(row.response),
            action=row.action if isinstance(row.action, str) else None,
            next_observation=str(row.next_observation),
        )
        by_row[int(idx)] = env.judge_messages(step, earlier)  # type: ignore[arg-type]
        earlier.append(step)
    return [by_row[int(i)] for i in rollouts.index]  # type: ignore[arg-type]


def judge(
    engine: Engine,
    rollouts: pd.DataFrame,
    *,
    votes: int,
    round_idx: int,
    base_seed: int,
    checkpoint: str,
    temperature: float,
    max_new_tokens: int,
    batch_size: int,
    env: Environment,
    on_batch: Callable[[int], None] | None = None,
    verdicts: Sequence[str] | None = None,
) -> list[dict[str, object]]:
    """m votes per rollout step; one row per vote (the judgments schema). With `verdicts`, each
    vote is chosen among them (`Chooser.choose`, the vote's seed drawing it) instead of written."""
    prompts = judge_prompts(rollouts, env)
    jobs = []
    for (_, row), prompt in zip(rollouts.iterrows(), prompts, strict=True):
        for j in range(votes):
            seed = derive_seed(
                base_seed,
                "judge",
                round_idx,
                row.task_id,
                int(row.task_version),
                int(row.rollout_idx),
                int(row.step_idx),
                j,
            )
            jobs.append((row, j, seed, prompt))
    if verdicts is None:
        outs = engine.generate(
            [p for *_, p in jobs],
            [s for _, _, s, _ in jobs],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            batch_size=batch_size,
            on_batch=on_batch,
        )
    else:
        if not isinstance(engine, Chooser):
            raise ValueError(
                f"reward_model.answers: choose needs an engine that scores answers; "
                f"{type(engine).__name__} does not. Use reward_model.model.engine.kind: hf, or "
                "reward_model.answers: generate."
            )
        outs = engine.choose(
            [p for *_, p in jobs],
            [list(verdicts)] * len(jobs),
            [s for _, _, s, _ in jobs],
            temperature=temperature,
            batch_size=batch_size,
        )
        if on_batch is not None:
            on_batch(len(jobs))
    return [
        {
            "round": round_idx,
            "task_id": row.task_id,
            "task_version": int(row.task_version),
            "rollout_idx": int(row.rollout_idx),
            "step_idx": int(row.step_idx),
            "seed": seed,
            "checkpoint": checkpoint,
            "vote_idx": j,
            "prompt": engine.decode(out.prompt_token_ids),
            "reasoning": out.text,
            "verdict": parse_verdict(out.text),
            "finish_reason": out.finish_reason,
            "prompt_token_ids": out.prompt_token_ids,
            "response_token_ids": out.token_ids,
        }
        for (row, j, seed, _), out in zip(jobs, outs, strict=True)
    ]
