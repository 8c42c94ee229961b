"""Environment adaptation: critiques, rewrite proposals and their validation (RLAnything, arXiv
2602.02488, adaptation from critic feedback).

For a task q whose accuracy left (α_low, α_high):
1. critique: the environment model summarizes the reward model's reasoning on q's steps (paper);
   or, with critique_source="failed_rollouts", q's failed rollouts with the steps all m votes
   rejected marked "high-risk" (reference code).
2. rewrite: the environment model gets q's spec, the direction, the accuracy and the critique, and
   answers with JSON: either a whole new spec or only the fields to change (merged onto q's spec,
   which small models manage far more often). A coding task is rewritten as its problem statement
   together with its tests. With `env_model.constrain_keys` (not in the paper) the answer's
   top-level JSON keys are decoded among the spec's fields (models/constraints.py): a small
   model that joins halves of two field names (TextWorld's `nb_size`) cannot write them.
3. validation: the proposal must parse, pass the environment's spec validation (household:
   solvable within its step limit; coding: tests of the task's style; gui: the template is a
   verifier of the task's app, its params fit the app, every hint names a real element, and the
   step limit covers the expert's plan; textworld: the game generates and its walkthrough wins
   within the step limit; alfworld: the game is a solvable file of the data whose plan fits) and
   differ from q.
   Each environment writes its own prompts' fields and validates its own specs
   (rlanything_core/envs/interface.py); this module holds what they share.
   Anything else is an *invalid candidate*: counted, with the reason recorded, never an error.
   Whether a rewritten coding task is solvable is left to the acceptance check: it is accepted
   only if some policy program passes all its tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import pandas as pd

from rlanything_core.base.generation import Messages
from rlanything_core.envs.common import SpecError

CritiqueSource = Literal["reward_model", "failed_rollouts"]
_SNIPPET = 240
SpecT = TypeVar("SpecT")


def critique_prompt(
    system: str,
    goal_text: str,
    accuracy: float,
    judgments: pd.DataFrame,
    rollouts: pd.DataFrame,
    source: CritiqueSource,
    examples: int,
) -> Messages:
    """The environment model's prompt to summarize what went right or wrong on one task.

    Args:
        system: the environment's designer prompt.
        judgments: the RM votes on this task's steps this round.
        rollouts: this task's rollout rows this round.
    """
    task = goal_text[: _SNIPPET * 2]
    lines = [f"Task: {task}. The agent succeeded in {accuracy:.0%} of its attempts."]
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
        {"role": "system", "content": system},
        {"role": "user", "content": "\n".join(lines)},
    ]


def rewrite_prompt(
    system: str,
    current: str,
    fields: str,
    example: str,
    direction: str,
    accuracy: float,
    critique: str,
) -> Messages:
    """The environment model's prompt to propose a harder or easier version of a task: the
    current task, the direction, the accuracy, the critique, what the fields mean, an example."""
    user = "\n".join(
        [
            f"Current task: {current}",
            f"The agent solves it {accuracy:.0%} of the time. Make it {direction}.",
            f"Critique: {critique.strip()[:600]}",
            f"Fields: {fields}",
            "Answer with a JSON object: the whole new task, or only the fields to change, "
            f"for example {example}.",
        ]
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


PROPOSAL_TAIL = 65536
"""Characters at the end of an answer that are searched for its JSON object: a proposal is a
few hundred characters, and a runaway answer costs time in proportion to what is searched."""


def last_json_object(text: str) -> tuple[dict[str, object] | None, str | None]:
    """The last top-level JSON object in `text` (nested objects allowed), or None and why.

    Only the last `PROPOSAL_TAIL` characters are searched. Whatever the text holds (nesting
    deeper than Python's recursion limit, integers longer than its conversion limit), the
    answer is a value or a reason, never an exception."""
    text = text[-PROPOSAL_TAIL:]
    decoder = json.JSONDecoder()
    found: dict[str, object] | None = None
    error: str | None = None
    pos = text.find("{")
    while pos != -1:
        try:
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            error = "malformed JSON: " + (
                exc.msg
                if isinstance(exc, json.JSONDecodeError)
                else "nested too deeply"
                if isinstance(exc, RecursionError)
                else str(exc)[:180]  # e.g. an integer past int()'s digit limit
            )
            pos = text.find("{", pos + 1)
            continue
        if isinstance(value, dict):
            found, error = value, None
        pos = text.find("{", end)
    if found is None:
        return None, error or "no JSON object in the answer"
    return found, None


def merge_proposal(
    text: str, parent: Any, parse: Callable[[dict[str, object]], SpecT]
) -> tuple[SpecT | None, str | None]:
    """The proposed spec, or None and the reason the proposal is invalid.

    The last JSON object in `text` counts; its fields are merged onto the parent's spec and the
    result is validated by `parse` (the environment's own spec validation). Whatever `parse`
    raises makes the proposal invalid, with the exception as the reason; `SpecError` is the
    contract, and `rlanything check-env` flags any other exception.
    """
    fields, error = last_json_object(text)
    if fields is None:
        return None, error
    if not fields:
        return None, "the JSON object is empty"
    merged = {**parent.model_dump(), **fields}
    try:
        spec = parse(merged)
    except SpecError as exc:
        return None, str(exc)
    except Exception as exc:  # a model's proposal is data: any failure to validate it is counted
        return None, f"{type(exc).__name__} from parse_spec (expected SpecError): {exc}"
    if spec == parent:
        return None, "the proposal is identical to the current task"
    return spec, None
