"""Environment adaptation: critiques, rewrite proposals and their validation (METHOD.md §3).

For a task q whose accuracy left (α_low, α_high):
1. critique: the environment model summarizes the reward model's reasoning on q's steps (paper);
   or, with critique_source="failed_rollouts", q's failed rollouts with the steps all m votes
   rejected marked "high-risk" (reference code).
2. rewrite: the environment model gets q's spec, the direction, the accuracy and the critique, and
   answers with JSON: either a whole new spec or only the fields to change (merged onto q's spec,
   which small models manage far more often).
3. validation: the proposal must parse, pass the environment's spec validation (solvable within
   its step limit) and differ from q. Anything else is an *invalid candidate*: counted, with the
   reason recorded, never an error.
"""

from __future__ import annotations

import json
import re
from typing import Literal

import pandas as pd

from rlanything_core.envs.household import (
    GOAL_TYPES,
    MAX_DISTRACTORS,
    MAX_ROOMS,
    MAX_STEPS,
    OBJECT_AFFORDANCES,
    RECEPTACLE_KINDS,
    HouseholdSpec,
    SpecError,
    parse_spec,
)
from rlanything_core.prompts import Messages

CritiqueSource = Literal["reward_model", "failed_rollouts"]
_SNIPPET = 240

ENV_SYSTEM = (
    "You design tasks for a household agent. A task is a JSON object with the fields goal_type, "
    "object, target, num_rooms, num_distractors, max_steps and layout_seed."
)

_FIELDS = (
    f"goal_type: one of {list(GOAL_TYPES)}; object: one of {sorted(OBJECT_AFFORDANCES)}; "
    f"target: one of {list(RECEPTACLE_KINDS)}; num_rooms: 1-{MAX_ROOMS}; num_distractors: "
    f"0-{MAX_DISTRACTORS}; max_steps: 1-{MAX_STEPS}; layout_seed: any integer >= 0. More rooms "
    "and distractors and fewer steps make a task harder."
)


def critique_messages(
    spec: HouseholdSpec,
    accuracy: float,
    judgments: pd.DataFrame,
    rollouts: pd.DataFrame,
    source: CritiqueSource,
    examples: int,
) -> Messages:
    """The environment model's prompt to summarize what went right or wrong on one task.

    Args:
        judgments: the RM votes on this task's steps this round.
        rollouts: this task's rollout rows this round.
    """
    lines = [f"Task: {spec.goal_text}. The agent succeeded in {accuracy:.0%} of its attempts."]
    if source == "reward_model":
        # Rejections first: they say most about what is hard.
        ranked = judgments.assign(_neg=judgments["verdict"].fillna(0) >= 0).sort_values(
            ["_neg", "rollout_idx", "step_idx", "vote_idx"]
        )
        quotes = [r[:_SNIPPET] for r in ranked["reasoning"].head(examples)]
        lines.append("A reviewer judged the agent's steps:")
        lines += [f"- {q}" for q in quotes]
    else:
        rejected = (
            judgments.assign(_rej=judgments["verdict"] == -1)
            .groupby(["rollout_idx", "step_idx"])["_rej"]
            .all()
        )
        failed = rollouts[rollouts["outcome"] < 0].sort_values(["rollout_idx", "step_idx"])
        lines.append("Steps of failed attempts (HIGH-RISK marks steps every reviewer rejected):")
        for row in failed.head(examples).itertuples():
            risk = " HIGH-RISK" if rejected.get((row.rollout_idx, row.step_idx), False) else ""
            lines.append(f"- step {row.step_idx}: {row.action or '(invalid)'}{risk}")
    lines.append("Summarize in two sentences what makes this task hard or easy for the agent.")
    return [
        {"role": "system", "content": ENV_SYSTEM},
        {"role": "user", "content": "\n".join(lines)},
    ]


def rewrite_messages(
    spec: HouseholdSpec, direction: str, accuracy: float, critique: str
) -> Messages:
    """The environment model's prompt to propose a harder or easier version of a task."""
    user = "\n".join(
        [
            f"Current task: {spec.to_json()}",
            f"The agent solves it {accuracy:.0%} of the time. Make it {direction}.",
            f"Critique: {critique.strip()[:600]}",
            f"Fields: {_FIELDS}",
            "Answer with a JSON object: the whole new task, or only the fields to change, "
            'for example {"num_distractors": 3}.',
        ]
    )
    return [{"role": "system", "content": ENV_SYSTEM}, {"role": "user", "content": user}]


_JSON_OBJECT = re.compile(r"\{[^{}]*\}")


def parse_rewrite(text: str, parent: HouseholdSpec) -> tuple[HouseholdSpec | None, str | None]:
    """The proposed spec, or None and the reason the proposal is invalid.

    The last flat JSON object in `text` counts; its fields are merged onto the parent's spec.
    """
    found = _JSON_OBJECT.findall(text)
    if not found:
        return None, "no JSON object in the answer"
    try:
        fields = json.loads(found[-1])
    except json.JSONDecodeError as exc:
        return None, f"malformed JSON: {exc.msg}"
    if not isinstance(fields, dict) or not fields:
        return None, "the JSON object is empty"
    merged = {**parent.model_dump(), **fields}
    try:
        spec = parse_spec(merged)
    except SpecError as exc:
        return None, str(exc)
    if spec == parent:
        return None, "the proposal is identical to the current task"
    return spec, None
