"""Environment adaptation: critiques, rewrite proposals and their validation (METHOD.md §3).

For a task q whose accuracy left (α_low, α_high):
1. critique: the environment model summarizes the reward model's reasoning on q's steps (paper);
   or, with critique_source="failed_rollouts", q's failed rollouts with the steps all m votes
   rejected marked "high-risk" (reference code).
2. rewrite: the environment model gets q's spec, the direction, the accuracy and the critique, and
   answers with JSON: either a whole new spec or only the fields to change (merged onto q's spec,
   which small models manage far more often). A coding task is rewritten as its problem statement
   together with its tests.
3. validation: the proposal must parse, pass the environment's spec validation (household:
   solvable within its step limit; coding: tests of the task's style; gui: the template is a
   verifier of the task's app, its params fit the app, every hint names a real element, and the
   step limit covers the expert's plan; textworld: the game generates and its walkthrough wins
   within the step limit; alfworld: the game is a solvable file of the data whose plan fits) and
   differ from q.
   Anything else is an *invalid candidate*: counted, with the reason recorded, never an error.
   Whether a rewritten coding task is solvable is left to the acceptance check: it is accepted
   only if some policy program passes all its tests.
"""

from __future__ import annotations

import json
from typing import Literal

import pandas as pd

from rlanything_core.envs.alfworld_env import MAX_STEPS as ALF_MAX_STEPS
from rlanything_core.envs.alfworld_env import AlfworldSpec
from rlanything_core.envs.coding import CodingSpec
from rlanything_core.envs.common import SpecError
from rlanything_core.envs.gui.apps import TEMPLATES
from rlanything_core.envs.gui.tasks import EXAMPLE_HINT, GuiSpec
from rlanything_core.envs.gui.tasks import MAX_STEPS as GUI_MAX_STEPS
from rlanything_core.envs.household import (
    GOAL_TYPES,
    MAX_DISTRACTORS,
    MAX_ROOMS,
    MAX_STEPS,
    OBJECT_AFFORDANCES,
    RECEPTACLE_KINDS,
)
from rlanything_core.envs.specs import TaskSpec, env_name, parse_task_spec
from rlanything_core.envs.textworld_env import MAX_OBJECTS as TW_MAX_OBJECTS
from rlanything_core.envs.textworld_env import MAX_QUEST_LENGTH as TW_MAX_QUEST_LENGTH
from rlanything_core.envs.textworld_env import MAX_STEPS as TW_MAX_STEPS
from rlanything_core.envs.textworld_env import MAX_WORLD_SIZE as TW_MAX_WORLD_SIZE
from rlanything_core.envs.textworld_env import TextWorldSpec
from rlanything_core.prompts import Messages

CritiqueSource = Literal["reward_model", "failed_rollouts"]
_SNIPPET = 240

ENV_SYSTEM = (
    "You design tasks for a household agent. A task is a JSON object with the fields goal_type, "
    "object, target, num_rooms, num_distractors, max_steps and layout_seed."
)

CODING_ENV_SYSTEM = (
    "You design programming tasks. A task is a JSON object with the fields problem (the "
    "statement) and tests (a list of test objects)."
)

_FIELDS = (
    f"goal_type: one of {list(GOAL_TYPES)}; object: one of {sorted(OBJECT_AFFORDANCES)}; "
    f"target: one of {list(RECEPTACLE_KINDS)}; num_rooms: 1-{MAX_ROOMS}; num_distractors: "
    f"0-{MAX_DISTRACTORS}; max_steps: 1-{MAX_STEPS}; layout_seed: any integer >= 0. More rooms "
    "and distractors and fewer steps make a task harder."
)


GUI_ENV_SYSTEM = (
    "You design tasks for an agent that operates web apps. A task is a JSON object with the "
    "fields app, template, params, hints, max_steps and seed; the agent reads the template's "
    "instruction followed by the hints."
)


TEXTWORLD_ENV_SYSTEM = (
    "You design text adventure games for an agent; TextWorld generates each game from a JSON "
    "object with the fields world_size, nb_objects, quest_length, max_steps and seed."
)

_TEXTWORLD_FIELDS = (
    f"world_size: rooms, 1-{TW_MAX_WORLD_SIZE}; nb_objects: 1-{TW_MAX_OBJECTS}; quest_length: "
    f"commands in the winning chain, 1-{TW_MAX_QUEST_LENGTH}; max_steps: 1-{TW_MAX_STEPS}, at "
    "least the quest's walkthrough; seed: any integer >= 0 (another game of the same size). "
    "More rooms, objects and a longer quest make a game harder, fewer steps too."
)


ALFWORLD_ENV_SYSTEM = (
    "You choose tasks for a household agent from ALFWorld's games. A task is a JSON object with "
    "the fields game (a game file of the ALFWorld data) and max_steps."
)

_ALFWORLD_FIELDS = (
    f"max_steps: 1-{ALF_MAX_STEPS}, at least the game's plan; fewer steps make a game harder. "
    "game: another game file of the same data (a different task)."
)


def _system(spec: TaskSpec) -> str:
    if isinstance(spec, CodingSpec):
        return CODING_ENV_SYSTEM
    if isinstance(spec, TextWorldSpec):
        return TEXTWORLD_ENV_SYSTEM
    if isinstance(spec, AlfworldSpec):
        return ALFWORLD_ENV_SYSTEM
    return GUI_ENV_SYSTEM if isinstance(spec, GuiSpec) else ENV_SYSTEM


def _gui_fields(spec: GuiSpec) -> str:
    own = sorted(t for t, v in TEMPLATES.items() if v.app == spec.app)
    return (
        "hints: a list of sentences, each naming an element of the app in single quotes, like "
        f'"{EXAMPLE_HINT[spec.app]}"; more and more precise hints make the task easier, fewer '
        "make it harder. template: one of "
        f"{own} (a different goal in the same app; params must then fit it). max_steps: "
        f"1-{GUI_MAX_STEPS}, fewer is harder."
    )


def critique_messages(
    spec: TaskSpec,
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
    task = spec.goal_text[: _SNIPPET * 2]
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
        {"role": "system", "content": _system(spec)},
        {"role": "user", "content": "\n".join(lines)},
    ]


def _coding_fields(spec: CodingSpec) -> str:
    if spec.style == "stdio":
        test = '{"stdin": "1 2\\n", "expected": "3\\n"}'
        kind = "a program that reads standard input and prints the answer"
    else:
        test = '{"args": [1, 2], "expected": 3}'
        kind = f"a function {spec.entry_point}"
    return (
        f"problem: the statement (it asks for {kind}); tests: a list of objects like {test}. "
        "A harder task asks for more or covers more cases; an easier one asks for less."
    )


def rewrite_messages(spec: TaskSpec, direction: str, accuracy: float, critique: str) -> Messages:
    """The environment model's prompt to propose a harder or easier version of a task."""
    if isinstance(spec, CodingSpec):
        current = json.dumps({"problem": spec.problem, "tests": spec.model_dump()["tests"]})
        fields, example = _coding_fields(spec), '{"problem": "...", "tests": [...]}'
    elif isinstance(spec, GuiSpec):
        current, fields = spec.to_json(), _gui_fields(spec)
        example = json.dumps({"hints": [EXAMPLE_HINT[spec.app]]})
    elif isinstance(spec, TextWorldSpec):
        current, fields, example = spec.to_json(), _TEXTWORLD_FIELDS, '{"nb_objects": 6}'
    elif isinstance(spec, AlfworldSpec):
        current, fields, example = spec.to_json(), _ALFWORLD_FIELDS, '{"max_steps": 12}'
    else:
        current, fields, example = spec.to_json(), _FIELDS, '{"num_distractors": 3}'
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
    return [{"role": "system", "content": _system(spec)}, {"role": "user", "content": user}]


def last_json_object(text: str) -> tuple[dict[str, object] | None, str | None]:
    """The last top-level JSON object in `text` (nested objects allowed), or None and why."""
    decoder = json.JSONDecoder()
    found: dict[str, object] | None = None
    error: str | None = None
    pos = text.find("{")
    while pos != -1:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            error = f"malformed JSON: {exc.msg}"
            pos = text.find("{", pos + 1)
            continue
        if isinstance(value, dict):
            found, error = value, None
        pos = text.find("{", end)
    if found is None:
        return None, error or "no JSON object in the answer"
    return found, None


def parse_rewrite(text: str, parent: TaskSpec) -> tuple[TaskSpec | None, str | None]:
    """The proposed spec, or None and the reason the proposal is invalid.

    The last JSON object in `text` counts; its fields are merged onto the parent's spec.
    """
    fields, error = last_json_object(text)
    if fields is None:
        return None, error
    if not fields:
        return None, "the JSON object is empty"
    merged = {**parent.model_dump(), **fields}
    try:
        spec = parse_task_spec(env_name(parent), merged)
    except SpecError as exc:
        return None, str(exc)
    if spec == parent:
        return None, "the proposal is identical to the current task"
    return spec, None
