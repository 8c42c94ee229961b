"""Supervised data for warm starts, made by the household's expert planner or by a TextWorld
game's winning policy (nothing downloaded).

- policy demonstrations: prompts from trajectories where a fraction `noise` of the steps were
  random, answered with the expert's action (so states off the expert's path are covered), or,
  for a fraction `answer_noise` of them, with an admissible action drawn uniformly (a partly
  competent demonstrator);
- judge demonstrations: steps of such trajectories labelled by the planner's progress label, with
  a fraction `label_noise` of the labels flipped so the reward model starts imperfect;
- critique and rewrite demonstrations: for each spec, a direction, the accuracy behind it and a
  few reviewer verdicts on its steps; the critique prompt (as a round builds it from the reward
  model's judgments) answered with a plain summary of what it shows (`demo_critique`), then the
  rewrite prompt carrying that critique, answered with the JSON fields that change.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd

from rlanything_core.base.generation import Messages
from rlanything_core.envs.common import SpecError
from rlanything_core.method.prompts import (
    POLICY_INTRO,
    ActionFormat,
    judge_messages,
    policy_messages,
)

Knobs = dict[str, tuple[tuple[int, int], int]]
"""Difficulty knobs of rewrite demonstrations: spec field -> (step range, sign towards harder)."""


class GameStep(Protocol):
    """What one step of a text game did."""

    @property
    def observation(self) -> str: ...
    @property
    def valid(self) -> bool: ...
    @property
    def progress(self) -> bool: ...
    @property
    def done(self) -> bool: ...


class TextGame(Protocol):
    """A text game stepped by the index of an admissible action, with an expert."""

    @property
    def goal_text(self) -> str: ...
    @property
    def observation(self) -> str: ...
    @property
    def actions(self) -> list[str]: ...
    @property
    def steps_taken(self) -> int: ...
    @property
    def done(self) -> bool: ...
    @property
    def success(self) -> bool: ...

    def step(self, action_index: int | None) -> GameStep: ...

    def expert_action(self) -> str: ...


@dataclass(frozen=True)
class Demo:
    """One supervised pair: the prompt and the answer to train on, with where it came from."""

    task_id: str  # "demo-<index of the spec>"
    step_idx: int
    prompt: Messages
    answer: str


@dataclass(frozen=True)
class _Step:
    task_id: str
    step_idx: int
    goal: str
    history: list[tuple[str, str]]
    observation: str
    actions: list[str]
    expert: int  # index of the expert's action
    taken: int  # index of the action taken
    progress: bool
    next_observation: str


def _trajectories(
    specs: Sequence[Any],
    game: Callable[[Any], TextGame],
    noise: float,
    history_steps: int,
    rng: random.Random,
) -> list[_Step]:
    """Every step of one noisy-expert episode per spec (`game` makes a spec's game)."""
    steps: list[_Step] = []
    for n, spec in enumerate(specs):
        episode = game(spec)
        history: list[tuple[str, str]] = []
        while not episode.done:
            actions = episode.actions
            expert = actions.index(episode.expert_action())
            taken = rng.randrange(len(actions)) if rng.random() < noise else expert
            observation, step_idx = episode.observation, episode.steps_taken
            result = episode.step(taken)
            steps.append(
                _Step(
                    task_id=f"demo-{n:03d}",
                    step_idx=step_idx,
                    goal=episode.goal_text,
                    history=history[-history_steps:] if history_steps else [],
                    observation=observation,
                    actions=actions,
                    expert=expert,
                    taken=taken,
                    progress=result.progress,
                    next_observation=result.observation,
                )
            )
            history.append((actions[taken], result.observation))
    return steps


def policy_demonstrations(
    specs: Sequence[Any],
    game: Callable[[Any], TextGame],
    *,
    noise: float,
    history_steps: int,
    seed: int,
    explain: bool = True,
    action_format: ActionFormat = "number",
    answer_noise: float = 0.0,
    intro: str = POLICY_INTRO,
) -> list[Demo]:
    """Prompts answered by the expert: the action (its number, or its text: `action_format`)
    in a box, after naming the action when `explain`. A fraction `answer_noise` of the prompts
    is answered with an admissible action drawn uniformly instead (it may be the expert's); the
    trajectories, and so the prompts, are the same at any `answer_noise`. `intro`: the policy's
    system prompt's first sentence (`TextEnvironment.policy_intro`)."""
    out = []
    answers = random.Random(f"{seed}-answer-noise")
    for s in _trajectories(specs, game, noise, history_steps, random.Random(seed)):
        prompt = policy_messages(s.goal, s.history, s.observation, s.actions, action_format, intro)
        noisy = answers.random() < answer_noise
        label = answers.randrange(len(s.actions)) if noisy else s.expert
        answer = policy_answer(s.actions, label, explain, action_format)
        out.append(Demo(s.task_id, s.step_idx, prompt, answer))
    return out


def policy_answer(
    actions: Sequence[str], index: int, explain: bool, action_format: ActionFormat = "number"
) -> str:
    """The policy's answer choosing `actions[index]`, in the format its warm start teaches: the
    action's number (or, with `action_format` "text", the action) in a box, after naming the
    action when `explain`."""
    chosen = actions[index] if action_format == "text" else str(index + 1)
    answer = f"\\boxed{{{chosen}}}"
    return f"I will {actions[index]}. {answer}" if explain else answer


def judge_demonstrations(
    specs: Sequence[Any],
    game: Callable[[Any], TextGame],
    *,
    noise: float,
    label_noise: float,
    history_steps: int,
    seed: int,
    explain: bool = True,
    action_format: ActionFormat = "number",
) -> list[Demo]:
    """Judge prompts answered with the planner's progress label, a fraction `label_noise` flipped.

    The judged response is the one the policy gives at run time for the action taken
    (`policy_answer` with the policy's `explain` and `action_format`), so the reward model is
    warm-started on the prompts it will judge."""
    rng = random.Random(seed)
    out = []
    for s in _trajectories(specs, game, noise, history_steps, rng):
        action = s.actions[s.taken]
        good = s.progress != (rng.random() < label_noise)
        response = policy_answer(s.actions, s.taken, explain, action_format)
        prompt = judge_messages(
            s.goal, s.history, s.observation, response, action, s.next_observation
        )
        out.append(Demo(s.task_id, s.step_idx, prompt, PROGRESS if good else NO_PROGRESS))
    return out


PROGRESS, NO_PROGRESS = "Progress. \\boxed{1}", "No progress. \\boxed{-1}"
"""The judge demonstrations' verdicts (`reward_model.verdicts`' defaults)."""
CRITIQUE_QUOTES = 6
"""At most this many reviewer verdicts in a critique demonstration's prompt
(`env_model.critique_examples`' default)."""


def demo_critique(accuracy: float, verdicts: Sequence[int]) -> str:
    """What a critique demonstration answers and its rewrite demonstration carries: the outcome
    the critique prompt reports, then whether any reviewer verdict it quotes rejects a step
    (nothing more without quotes). Plain words with no digits or braces: a critique that reads
    like JSON is copied into the rewrite's answer
    (benchmarks/results/rewrite-validity/README.md)."""
    outcome = (
        "The agent solves this task easily." if accuracy >= 0.5 else "The agent fails this task."
    )
    if not verdicts:
        return outcome
    steps = (
        "The reviewer flags steps that make no progress."
        if any(v < 0 for v in verdicts)
        else "The reviewer approves its steps."
    )
    return f"{outcome} {steps}"


def demo_judgments(rng: random.Random, accuracy: float) -> pd.DataFrame:
    """0 … `CRITIQUE_QUOTES` reviewer votes on a task's steps, in the columns a round's judgments
    have, with the warm-started reward model's verdicts as reasoning: mostly approving for a task
    the agent solves, mostly rejecting for one it fails."""
    quotes = rng.randint(0, CRITIQUE_QUOTES)
    approve = rng.uniform(0.5, 1.0) if accuracy >= 0.5 else rng.uniform(0.0, 0.5)
    verdicts = [1 if rng.random() < approve else -1 for _ in range(quotes)]
    return pd.DataFrame(
        {
            "rollout_idx": list(range(quotes)),
            "step_idx": [0] * quotes,
            "vote_idx": [0] * quotes,
            "verdict": verdicts,
            "reasoning": [PROGRESS if v > 0 else NO_PROGRESS for v in verdicts],
        }
    )


def rewrite_demonstrations(
    specs: Sequence[Any],
    knobs: Knobs,
    *,
    critique: Callable[[Any, float, pd.DataFrame], Messages],
    rewrite: Callable[[Any, str, float, str], Messages],
    parse: Callable[[dict[str, object]], Any],
    adjust: Callable[[Any, dict[str, int]], dict[str, int]],
    seed: int,
) -> list[Demo]:
    """Per spec, two demonstrations, as a round asks for them: the critique prompt (`critique`,
    given the spec, the accuracy and reviewer votes from `demo_judgments`) answered with
    `demo_critique`, then the rewrite prompt (`rewrite`) carrying that critique, answered with
    the JSON of the changed fields: one knob moved towards the direction, completed by
    `adjust`, kept (both demonstrations) when `parse` accepts the result."""
    rng = random.Random(seed)
    out = []
    for n, spec in enumerate(specs):
        direction = rng.choice(["harder", "easier"])
        knob = rng.choice(list(knobs))
        sizes = {k: rng.randint(*r) if r[0] < r[1] else r[0] for k, (r, _) in knobs.items()}
        step = sizes[knob] * knobs[knob][1] * (1 if direction == "harder" else -1)
        change = {knob: getattr(spec, knob) + step}
        try:
            change = adjust(spec, change)
            parse({**spec.model_dump(), **change})
        except (SpecError, ValueError):
            continue
        accuracy = rng.uniform(0.8, 1.0) if direction == "harder" else rng.uniform(0.0, 0.2)
        judged = demo_judgments(rng, accuracy)
        said = demo_critique(accuracy, judged["verdict"].tolist())
        out.append(Demo(f"demo-{n:03d}", 0, critique(spec, accuracy, judged), said))
        out.append(
            Demo(f"demo-{n:03d}", 1, rewrite(spec, direction, accuracy, said), json.dumps(change))
        )
    return out
