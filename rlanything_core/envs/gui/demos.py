"""Supervised data for gui warm starts, made by the scripted expert in the browser.

- policy demonstrations: the pages of episodes where a fraction `noise` of the steps were random
  clicks, answered with the expert's action (its hint sentence, then the action in a box);
- judge demonstrations: steps of such episodes labelled by the expert's progress label, a
  fraction `label_noise` of the labels flipped so the reward model starts imperfect;
- rewrite demonstrations: easier = one more of the expert's hints, harder = one hint fewer.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from rlanything_core.base.generation import Messages
from rlanything_core.envs.common import SpecError
from rlanything_core.envs.demos import Demo
from rlanything_core.envs.gui.browser import Browser, BrowserOptions, GuiAction, GuiEpisode
from rlanything_core.envs.gui.tasks import GuiSpec, expert_hints, parse_gui_spec
from rlanything_core.method.prompts import judge_messages


@dataclass(frozen=True)
class _Step:
    task_id: str
    step_idx: int
    prompt: Messages
    expert: str  # the expert's answer
    taken: str  # the answer played
    goal: str
    history: list[tuple[str, str]]
    observation: str
    action: str | None
    progress: bool
    next_observation: str


def _answer(action: GuiAction, sentence: str) -> str:
    return f"{sentence} \\boxed{{{action}}}"


def gui_trajectories(
    specs: list[GuiSpec],
    noise: float,
    history_steps: int,
    seed: int,
    options: BrowserOptions,
    browser: Browser | None = None,
) -> list[_Step]:
    """Every step of one noisy-expert episode per spec, played in headless Chromium: in
    `browser`, or in one started (with `options`) and stopped here."""
    rng = random.Random(seed)
    steps: list[_Step] = []
    with contextlib.ExitStack() as stack:
        if browser is None:
            browser = stack.enter_context(Browser(options))
        for n, spec in enumerate(specs):
            episode = GuiEpisode(spec, browser, history_steps, None, None)
            while not episode.done:
                step = episode.expert()
                if step is None:  # a random click lost the goal: the rest teaches nothing
                    episode.close()
                    break
                action, sentence = step
                expert = _answer(action, sentence)
                taken = expert
                if rng.random() < noise and episode.keys:
                    element = rng.choice(sorted(episode.keys))
                    taken = _answer(GuiAction("click", element), "I will try this.")
                prompt, observation = episode.messages(), episode.observation
                history = [(a, "") for a, _ in episode.history[-history_steps:]]
                step_idx = episode.steps_taken
                move = episode.act(taken)
                steps.append(
                    _Step(
                        f"demo-{n:03d}",
                        step_idx,
                        prompt,
                        expert,
                        taken,
                        spec.goal_text,
                        history if history_steps else [],
                        observation,
                        move.action,
                        move.progress,
                        move.observation,
                    )
                )
    return steps


def gui_policy_demonstrations(steps: list[_Step], *, explain: bool = True) -> list[Demo]:
    """The expert's answer to every page of the trajectories: its hint sentence and the action
    in a box, or the box alone without `explain`."""
    return [Demo(s.task_id, s.step_idx, s.prompt, _format(s.expert, explain)) for s in steps]


def _format(answer: str, explain: bool) -> str:
    """`answer` as the policy gives it: whole with `explain`, else from its box on."""
    return answer if explain else answer[answer.index("\\boxed") :]


def gui_judge_demonstrations(
    steps: list[_Step], *, label_noise: float, seed: int, explain: bool = True
) -> list[Demo]:
    """Judge prompts on the steps played, answered with the progress label (some flipped); the
    judged response is in the policy's format (`explain` as its warm start)."""
    rng = random.Random(seed)
    out = []
    for s in steps:
        good = s.progress != (rng.random() < label_noise)
        response = _format(s.taken, explain)
        prompt = judge_messages(
            s.goal, s.history, s.observation, response, s.action, s.next_observation
        )
        verdict = "Progress. \\boxed{1}" if good else "No progress. \\boxed{-1}"
        out.append(Demo(s.task_id, s.step_idx, prompt, verdict))
    return out


def gui_rewrite_demonstrations(
    specs: list[GuiSpec], rewrite: Callable[[GuiSpec, str, float, str], Messages], *, seed: int
) -> list[Demo]:
    """Rewrite prompts answered with the changed hints: one expert hint more (easier) or one
    fewer (harder); valid proposals only."""
    rng = random.Random(seed)
    out = []
    for n, spec in enumerate(specs):
        full = expert_hints(spec)
        direction = rng.choice(["harder", "easier"])
        k = len(spec.hints) + (1 if direction == "easier" else -1)
        if not 0 <= k <= len(full):
            continue
        change = {"hints": full[:k]}
        try:
            parse_gui_spec({**spec.model_dump(), **change})
        except SpecError:
            continue
        accuracy = rng.uniform(0.8, 1.0) if direction == "harder" else rng.uniform(0.0, 0.2)
        prompt = rewrite(spec, direction, accuracy, "The agent clicks before it reads.")
        out.append(Demo(f"demo-{n:03d}", 0, prompt, json.dumps(change)))
    return out
