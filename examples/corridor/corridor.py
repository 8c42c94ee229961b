"""A user's own environment, written outside rlanything: walk along a corridor to a door.

The agent stands on one cell of a corridor and answers \\boxed{left} or \\boxed{right} until it
reaches the door's cell or runs out of steps. Longer corridors and fewer spare steps are harder.
Train it (docs/own-environment.md):

    rlanything train --config examples/corridor/config.yaml --run-dir runs/corridor
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlanything_core.envs.interface import Demo, Environment, Move, SpecError, StepView, WarmStart

MOVES = {"left": -1, "right": 1}
SYSTEM = (
    "You walk along a corridor. Answer with one move in \\boxed{}: \\boxed{left} or \\boxed{right}."
)
JUDGE = (
    "You judge one move of an agent in a corridor: \\boxed{1} if it got closer to the door, "
    "else \\boxed{-1}."
)


class CorridorSpec(BaseModel):
    """One task: the corridor's length, the agent's start, the door's cell, the step limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    length: int = Field(ge=2, le=40)
    start: int = Field(ge=0)
    door: int = Field(ge=0)
    max_steps: int = Field(ge=1, le=80)

    @property
    def goal_text(self) -> str:
        return f"reach the door at cell {self.door}"

    def to_json(self) -> str:
        return self.model_dump_json()


class CorridorOptions(BaseModel):
    """`environment.options`: the steps a generated task allows beyond the shortest walk."""

    model_config = ConfigDict(extra="forbid")
    slack: int = Field(2, ge=0)


class CorridorEpisode:
    """One walk: the loop asks for `messages()`, samples an answer, and calls `act`."""

    screenshot = None

    def __init__(self, spec: CorridorSpec) -> None:
        self.spec, self.position = spec, spec.start
        self.goal_text = spec.goal_text
        self.steps_taken, self.done, self.success = 0, False, False

    @property
    def observation(self) -> str:
        return f"You are at cell {self.position} of 0-{self.spec.length - 1}."

    def messages(self) -> list[dict[str, str]]:
        user = f"Task: {self.goal_text}.\n{self.observation}"
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]

    def act(self, answer: str) -> Move:
        boxes = re.findall(r"\\boxed\{\s*(\w+)\s*\}", answer)
        move = boxes[-1].lower() if boxes and boxes[-1].lower() in MOVES else None
        before = abs(self.spec.door - self.position)
        if move is not None:
            self.position = min(max(self.position + MOVES[move], 0), self.spec.length - 1)
        self.steps_taken += 1
        self.success = self.position == self.spec.door
        self.done = self.success or self.steps_taken >= self.spec.max_steps
        progress = abs(self.spec.door - self.position) < before
        return Move(move, move is not None, self.observation, progress, self.done)


class CorridorEnvironment(Environment[CorridorOptions]):
    Options = CorridorOptions
    warm_starts = frozenset({"policy", "env_model"})
    designer_system = "You design corridor walks: JSON objects with length, start, door, max_steps."

    def parse_spec(self, data: str | dict[str, object]) -> CorridorSpec:
        try:
            if isinstance(data, str):
                spec = CorridorSpec.model_validate_json(data)
            else:
                spec = CorridorSpec.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise SpecError(f"invalid corridor spec: {first['loc']}: {first['msg']}") from exc
        if max(spec.start, spec.door) >= spec.length or spec.start == spec.door:
            raise SpecError("start and door must be different cells below length; move them.")
        if spec.max_steps < abs(spec.door - spec.start):
            raise SpecError(f"max_steps must be at least {abs(spec.door - spec.start)} (the walk).")
        return spec

    def generate(self, split: str, n: int, seed: int) -> Sequence[CorridorSpec]:
        """In-domain corridors of 4-8 cells; out-of-domain ones of 10-16."""
        rng = random.Random(f"corridor-{split}-{seed}")
        low, high = (4, 8) if split == "id" else (10, 16)
        specs = []
        for _ in range(n):
            length = rng.randint(low, high)
            start, door = rng.sample(range(length), 2)
            walk = abs(door - start) + self.options.slack
            specs.append(CorridorSpec(length=length, start=start, door=door, max_steps=walk))
        return specs

    def new_episode(
        self, spec: CorridorSpec, shots: Path | None, root: Path | None
    ) -> CorridorEpisode:
        return CorridorEpisode(spec)

    def judge_messages(self, step: StepView, earlier: Sequence[StepView]) -> list[dict[str, str]]:
        user = (
            f"Task: {step.goal}.\nBefore: {step.observation}\nMove: {step.response}\n"
            f"After: {step.next_observation}"
        )
        return [{"role": "system", "content": JUDGE}, {"role": "user", "content": user}]

    def rewrite_fields(self, spec: object) -> str:
        return "length: 2-40, longer is harder; max_steps: fewer is harder; start, door: cells."

    def demonstrations(self, request: WarmStart) -> list[Demo]:
        """Policy: the expert's move at every cell. Env model: a longer corridor (harder) or two
        more steps (easier)."""
        rng, out = random.Random(request.seed), []
        specs = self.warm_start_specs(request)
        for n, spec in enumerate(specs):
            if request.role == "env_model":
                harder = rng.random() < 0.5
                change = (
                    {"length": spec.length + 2} if harder else {"max_steps": spec.max_steps + 2}
                )
                prompt = self.rewrite_messages(spec, "harder" if harder else "easier", 0.5, "")
                out.append(Demo(f"demo-{n:03d}", 0, prompt, json.dumps(change)))
                continue
            episode = CorridorEpisode(spec)
            while not episode.done:
                answer = "\\boxed{right}" if spec.door > episode.position else "\\boxed{left}"
                out.append(Demo(f"demo-{n:03d}", episode.steps_taken, episode.messages(), answer))
                episode.act(answer)
        return out
