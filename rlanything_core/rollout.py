"""Rollouts: the policy plays each environment task G times, all episodes stepping in lockstep so
that every step of every unfinished episode goes into one batched generation.

Each step's sample seed is derive_seed(base_seed, purpose, round, task_id, task_version,
rollout_idx, step_idx); it is stored in the row so any step can be replayed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from transformers import PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from rlanything_core.envs.household import HouseholdEpisode, HouseholdSpec
from rlanything_core.models import generate
from rlanything_core.parsing import parse_action_index
from rlanything_core.prompts import policy_messages
from rlanything_core.seeding import derive_seed

INVALID_ACTION = "(invalid)"


@dataclass(frozen=True)
class TaskRef:
    """An environment task of the pool: identity and spec."""

    task_id: str
    task_version: int
    spec: HouseholdSpec


@dataclass(frozen=True)
class Sampling:
    """How the policy samples during a rollout."""

    temperature: float
    max_new_tokens: int
    batch_size: int
    history_steps: int


def play(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    tasks: Sequence[TaskRef],
    *,
    rollouts_per_task: int,
    round_idx: int,
    base_seed: int,
    checkpoint: str,
    sampling: Sampling,
    purpose: str = "rollout",
    on_episodes: Callable[[int], None] | None = None,
) -> list[dict[str, object]]:
    """Play every task `rollouts_per_task` times; return one row per step (the rollouts schema).

    `purpose` separates the seed streams of the round's rollouts and of acceptance checks.
    `on_episodes(n)` is called after each lockstep step with the number of episodes that ended.
    """
    episodes = [
        (task, g, HouseholdEpisode(task.spec)) for task in tasks for g in range(rollouts_per_task)
    ]
    history: list[list[tuple[str, str]]] = [[] for _ in episodes]
    rows: list[list[dict[str, object]]] = [[] for _ in episodes]
    while True:
        active = [i for i, (_, _, ep) in enumerate(episodes) if not ep.done]
        if not active:
            break
        prompts, seeds, shown = [], [], []
        for i in active:
            task, g, ep = episodes[i]
            actions = ep.actions
            recent = history[i][-sampling.history_steps :] if sampling.history_steps else []
            prompts.append(policy_messages(ep.goal_text, recent, ep.observation, actions))
            seeds.append(
                derive_seed(
                    base_seed,
                    purpose,
                    round_idx,
                    task.task_id,
                    task.task_version,
                    g,
                    ep.steps_taken,
                )
            )
            shown.append((ep.observation, actions))
        outs = generate(
            model,
            tokenizer,
            prompts,
            seeds,
            max_new_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            batch_size=sampling.batch_size,
        )
        for i, seed, out, (observation, actions) in zip(active, seeds, outs, shown, strict=True):
            task, g, ep = episodes[i]
            index = parse_action_index(out.text, len(actions))
            step_idx = ep.steps_taken
            result = ep.step(index)
            action = actions[index] if index is not None else None
            history[i].append((action or INVALID_ACTION, result.observation))
            rows[i].append(
                {
                    "round": round_idx,
                    "task_id": task.task_id,
                    "task_version": task.task_version,
                    "rollout_idx": g,
                    "step_idx": step_idx,
                    "seed": seed,
                    "checkpoint": checkpoint,
                    "goal": ep.goal_text,
                    "observation": observation,
                    "prompt": tokenizer.decode(out.prompt_token_ids),
                    "response": out.text,
                    "action": action,
                    "action_valid": result.valid,
                    "next_observation": result.observation,
                    "progress": result.progress,
                    "done": result.done,
                    "prompt_token_ids": out.prompt_token_ids,
                    "response_token_ids": out.token_ids,
                    "sampler_logprobs": out.logprobs,
                    "finish_reason": out.finish_reason,
                }
            )
        if on_episodes is not None:
            on_episodes(sum(episodes[i][2].done for i in active))
    flat: list[dict[str, object]] = []
    for (_, _, ep), steps in zip(episodes, rows, strict=True):
        for row in steps:
            row["outcome"] = 1 if ep.success else -1
            row["num_steps"] = ep.steps_taken
        flat += steps
    return flat
