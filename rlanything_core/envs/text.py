"""What the text environments share (household, TextWorld, ALFWorld): the policy picks one of the
admissible commands each step, named by its number or its text in \\boxed{}; the judge sees the
last `history_steps` (action, observation) pairs; warm starts come from expert episodes."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar, Literal, TypeVar

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from rlanything_core.base.generation import Messages
from rlanything_core.envs.common import Move
from rlanything_core.envs.demos import (
    Demo,
    Knobs,
    TextGame,
    judge_demonstrations,
    policy_answer,
    policy_demonstrations,
    rewrite_demonstrations,
)
from rlanything_core.envs.interface import Environment, Role, StepView, TaskSpec, WarmStart
from rlanything_core.method.parsing import parse_action
from rlanything_core.method.prompts import (
    INVALID_ACTION,
    POLICY_INTRO,
    ActionFormat,
    judge_messages,
    policy_messages,
)


class TextOptions(BaseModel):
    """`environment.options` of a text environment."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    step_slack: int = Field(6, ge=0)
    """Each generated task allows the expert's plan (textworld: the walkthrough) length plus this
    many steps (≥ 0; the step limit): room to recover from a wrong step."""
    history_steps: int = Field(2, ge=0)
    """Previous (action, observation) pairs shown in the policy's and the RM's prompts (≥ 0;
    0 = none, the shortest prompts)."""
    action_format: Literal["number", "text"] = "number"
    """How the policy names its action in \\boxed{}. "number": the action's number in the
    prompt's numbered list (\\boxed{3}). "text": the action itself, copied from an unnumbered
    list (\\boxed{go to shelf 1}), as verl-agent's ALFWorld prompts ask. A small model learns to
    copy a name from its prompt far more easily than to find the name's line and give its
    number (benchmarks/results/learning/README.md). Give text answers room in
    `policy.model.max_new_tokens`."""


class TextAgentEpisode:
    """A text game as the policy plays it: the admissible actions in the prompt, the last
    `history_steps` (action, observation) pairs shown, the chosen action in \\boxed{} (its
    number, or its text: `action_format`)."""

    screenshot: str | None = None

    def __init__(
        self,
        game: TextGame,
        history_steps: int,
        action_format: ActionFormat = "number",
        intro: str = POLICY_INTRO,
    ) -> None:
        self.episode = game
        self.history_steps = history_steps
        self.action_format = action_format
        self.intro = intro
        self.history: list[tuple[str, str]] = []
        self.goal_text = game.goal_text
        self.observation = game.observation
        self.steps_taken = 0
        self.done = False
        self.success = False

    def messages(self) -> list[dict[str, str]]:
        recent = self.history[-self.history_steps :] if self.history_steps else []
        return policy_messages(
            self.goal_text,
            recent,
            self.observation,
            self.episode.actions,
            self.action_format,
            self.intro,
        )

    def answers(self) -> list[str]:
        """Every admissible action in \\boxed{}, as a warm start without `explain` writes it."""
        actions = self.episode.actions
        return [policy_answer(actions, i, False, self.action_format) for i in range(len(actions))]

    def act(self, answer: str) -> Move:
        actions = self.episode.actions
        index = parse_action(answer, actions, self.action_format)
        result = self.episode.step(index)
        action = actions[index] if index is not None else None
        self.history.append((action or INVALID_ACTION, result.observation))
        self.observation = result.observation
        self.steps_taken, self.done = self.episode.steps_taken, self.episode.done
        self.success = self.episode.success
        return Move(action, result.valid, result.observation, result.progress, result.done)


TextOptionsT = TypeVar("TextOptionsT", bound=TextOptions)


class TextEnvironment(Environment[TextOptionsT]):
    """A text game environment: subclasses make the game of a spec and say how to rewrite it."""

    Options: ClassVar[type[BaseModel]] = TextOptions
    warm_starts: ClassVar[frozenset[Role]] = frozenset({"policy", "reward_model", "env_model"})
    rewrite_knobs: ClassVar[Knobs] = {}
    """The rewrite demonstrations' difficulty knobs: field -> (step range, sign towards harder)."""
    policy_intro: ClassVar[str] = POLICY_INTRO
    """The policy's system prompt's first sentence, naming the agent's world."""

    @abstractmethod
    def game(self, spec: TaskSpec) -> TextGame:
        """A fresh game of `spec`, stepped by the index of an admissible action."""

    def new_episode(
        self, spec: TaskSpec, shots: Path | None, root: Path | None
    ) -> TextAgentEpisode:
        return TextAgentEpisode(
            self.game(spec),
            self.options.history_steps,
            self.options.action_format,
            self.policy_intro,
        )

    def judge_messages(self, step: StepView, earlier: Sequence[StepView]) -> Messages:
        h = self.options.history_steps
        shown = (
            [(s.action or INVALID_ACTION, s.next_observation) for s in earlier[-h:]] if h else []
        )
        return judge_messages(
            step.goal, shown, step.observation, step.response, step.action, step.next_observation
        )

    def adjust_rewrite(self, spec: TaskSpec, change: dict[str, int]) -> dict[str, int]:
        """A rewrite demonstration's change, completed where the knob alone is not enough."""
        return change

    def demo_spec(self, data: dict[str, object]) -> TaskSpec:
        """Check a rewrite demonstration's spec before it is taught: the full `parse_spec` by
        default (SpecError or ValueError drops the demonstration)."""
        return self.parse_spec(data)

    def demonstrations(self, request: WarmStart) -> list[Demo]:
        specs = self.warm_start_specs(request)
        game: Callable[[TaskSpec], TextGame] = self.game
        if request.role == "policy":
            return policy_demonstrations(
                specs,
                game,
                noise=request.noise,
                history_steps=self.options.history_steps,
                seed=request.seed,
                explain=request.explain,
                action_format=self.options.action_format,
                answer_noise=request.answer_noise,
                intro=self.policy_intro,
            )
        if (
            request.role == "reward_model"
        ):  # judging the policy's answers in its warm-started format
            return judge_demonstrations(
                specs,
                game,
                noise=request.noise,
                label_noise=request.label_noise,
                history_steps=self.options.history_steps,
                seed=request.seed,
                explain=request.explain,
                action_format=self.options.action_format,
            )
        return rewrite_demonstrations(
            specs,
            self.rewrite_knobs,
            critique=lambda spec, accuracy, judged: self.critique_messages(
                spec, accuracy, judged, pd.DataFrame(), "reward_model", len(judged)
            ),
            rewrite=self.rewrite_messages,
            parse=self.demo_spec,
            adjust=self.adjust_rewrite,
            seed=request.seed,
        )
