"""Reward scoring: the generative reward model judges every step of every rollout m times.

Each vote is a full answer (reasoning, then a verdict in \\boxed{}); the verdict is parsed to
+1 / −1, or None when the answer holds no parsable verdict (counted, never an error).
Vote seeds: derive_seed(base_seed, "judge", round, task_id, task_version, rollout_idx, step_idx,
vote_idx).
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from rlanything_core.engines import Engine
from rlanything_core.envs.coding import judge_messages as coding_judge_messages
from rlanything_core.parsing import parse_verdict
from rlanything_core.prompts import Messages, judge_messages
from rlanything_core.rollout import INVALID_ACTION
from rlanything_core.seeding import derive_seed

STEP_KEY = ["task_id", "task_version", "rollout_idx", "step_idx"]


def judge_prompts(
    rollouts: pd.DataFrame, history_steps: int, env: str = "household"
) -> list[Messages]:
    """One judge prompt per rollout row (same order), with the rollout's recent history; coding
    rows get the coding judge prompt (problem, answer, program); gui rows show the earlier
    actions only, not their pages (one page before and one after the step is long enough)."""
    if env == "coding":
        return [
            coding_judge_messages(row.goal, row.response, row.action)
            for row in rollouts.itertuples()
        ]
    previous: dict[tuple[object, ...], list[tuple[str, str]]] = {}
    ordered = rollouts.sort_values(STEP_KEY)
    by_row: dict[int, Messages] = {}
    for idx, row in ordered.iterrows():
        key = (row.task_id, row.task_version, row.rollout_idx)
        past = previous.setdefault(key, [])
        shown = past[-history_steps:] if history_steps else []
        by_row[int(idx)] = judge_messages(  # type: ignore[arg-type]
            row.goal, shown, row.observation, row.response, row.action, row.next_observation
        )
        action = row.action if row.action is not None else INVALID_ACTION
        past.append((action, "" if env == "gui" else row.next_observation))
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
    history_steps: int,
    env: str = "household",
    on_batch: Callable[[int], None] | None = None,
) -> list[dict[str, object]]:
    """m votes per rollout step; one row per vote (the judgments schema)."""
    prompts = judge_prompts(rollouts, history_steps, env)
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
    outs = engine.generate(
        [p for *_, p in jobs],
        [s for _, _, s, _ in jobs],
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        batch_size=batch_size,
        on_batch=on_batch,
    )
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
