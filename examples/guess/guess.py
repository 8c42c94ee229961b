"""A user's own environment, built step by step in docs/own-environment.md: guess a number.

The agent is told the range a secret number lies in and answers a guess in \\boxed{}; the
environment says whether it was too low or too high and narrows the range, until the agent names
the number or runs out of guesses. Wider ranges and fewer spare guesses are harder. Check it and
train it from the repository root:

    rlanything check-env examples/guess/config.yaml
    rlanything train --config examples/guess/config.yaml --run-dir runs/guess
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlanything_core.envs.common import validate_spec
from rlanything_core.envs.interface import Demo, Environment, Move, SpecError, StepView, WarmStart

SYSTEM = "You guess a secret number. Answer with one number in \\boxed{}, for example \\boxed{7}."
JUDGE = (
    "You judge one guess of an agent looking for a secret number: \\boxed{1} if the guess was "
    "inside the range the number could still be in, else \\boxed{-1}."
)


class GuessSpec(BaseModel):
    """One task: the range, the secret number in it, and how many guesses the agent has."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    low: int = Field(ge=0, le=1000)
    high: int = Field(ge=1, le=1000)
    secret: int = Field(ge=0, le=1000)
    max_steps: int = Field(ge=1, le=20)

    @property
    def goal_text(self) -> str:
        return f"find the secret number between {self.low} and {self.high}"

    def to_json(self) -> str:
        return self.model_dump_json()


def search_steps(low: int, high: int) -> int:
    """The guesses a binary search needs in the worst case on [low, high]."""
    return math.ceil(math.log2(high - low + 2))


class GuessOptions(BaseModel):
    """`environment.options`: the guesses a generated task allows beyond a binary search."""

    model_config = ConfigDict(extra="forbid")
    slack: int = Field(1, ge=0, le=10)


class GuessEpisode:
    """One game. The loop reads exactly these members (rlanything_core.envs.common.Episode)."""

    screenshot = None  # a text environment shows no screenshot

    def __init__(self, spec: GuessSpec) -> None:
        self.spec = spec
        self.goal_text = spec.goal_text
        self.low, self.high = spec.low, spec.high  # where the secret can still be
        self.feedback = "No guess yet."
        self.steps_taken, self.done, self.success = 0, False, False

    @property
    def observation(self) -> str:
        left = self.spec.max_steps - self.steps_taken
        where = f"The number is between {self.low} and {self.high}"
        return f"{self.feedback} {where}; {left} guesses left."

    def messages(self) -> list[dict[str, str]]:
        user = f"Task: {self.goal_text}.\n{self.observation}"
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]

    def act(self, answer: str) -> Move:
        numbers = re.findall(r"\\boxed\{\s*(-?\d{1,6})\s*\}", answer)
        guess = int(numbers[-1]) if numbers else None
        self.steps_taken += 1
        progress = guess is not None and self.low <= guess <= self.high
        if guess is None:
            self.feedback = "That was no guess."
        elif guess == self.spec.secret:
            self.feedback, self.success = f"{guess} is right.", True
        elif guess < self.spec.secret:
            self.feedback, self.low = f"{guess} is too low.", max(self.low, guess + 1)
        else:
            self.feedback, self.high = f"{guess} is too high.", min(self.high, guess - 1)
        # The episode ends itself: when the number is found, or when the guesses are spent.
        self.done = self.success or self.steps_taken >= self.spec.max_steps
        action = None if guess is None else str(guess)
        return Move(action, guess is not None, self.observation, progress, self.done)


class GuessEnvironment(Environment[GuessOptions]):
    Options = GuessOptions
    warm_starts = frozenset({"policy", "reward_model", "env_model"})
    designer_system = "You design number-guessing games: JSON with low, high, secret, max_steps."

    def parse_spec(self, data: str | dict[str, object]) -> GuessSpec:
        spec = validate_spec(GuessSpec, data, "guess")  # SpecError naming every bad field
        if not spec.low <= spec.secret <= spec.high or spec.low >= spec.high:
            raise SpecError("guess spec: need low <= secret <= high and low < high; move them.")
        needed = search_steps(spec.low, spec.high)
        if spec.max_steps < needed:
            raise SpecError(f"guess spec: max_steps must be at least {needed} for this range.")
        return spec

    def generate(self, split: str, n: int, seed: int) -> Sequence[GuessSpec]:
        """In-domain ranges of 4-16 numbers; out-of-domain ones of 32-64."""
        rng = random.Random(f"guess-{split}-{seed}")
        sizes = (4, 16) if split == "id" else (32, 64)
        specs = []
        for _ in range(n):
            low = rng.randint(0, 50)
            high = low + rng.randint(*sizes) - 1
            steps = search_steps(low, high) + self.options.slack
            secret = rng.randint(low, high)
            specs.append(GuessSpec(low=low, high=high, secret=secret, max_steps=steps))
        return specs

    def new_episode(self, spec: GuessSpec, shots: Path | None, root: Path | None) -> GuessEpisode:
        return GuessEpisode(spec)

    def judge_messages(self, step: StepView, earlier: Sequence[StepView]) -> list[dict[str, str]]:
        user = (
            f"Task: {step.goal}.\nBefore: {step.observation}\nGuess: {step.response}\n"
            f"After: {step.next_observation}"
        )
        return [{"role": "system", "content": JUDGE}, {"role": "user", "content": user}]

    def rewrite_fields(self, spec: object) -> str:
        return (
            "low, high: the range, wider is harder; secret: inside it; max_steps: the guesses, "
            "fewer is harder (at least a binary search's)."
        )

    def rewrite_example(self, spec: GuessSpec) -> str:  # type: ignore[override]
        return json.dumps({"max_steps": spec.max_steps + 1})

    def demonstrations(self, request: WarmStart) -> list[Demo]:
        """Policy: the binary search's guess at every step. Reward model: the true label of each
        step of searches with a share `noise` of random guesses. Environment model: a wider range
        (harder) or one more guess (easier)."""
        rng, out = random.Random(request.seed), []
        for n, spec in enumerate(self.warm_start_specs(request)):
            task_id = f"demo-{n:03d}"
            if request.role == "env_model":
                wider = spec.high + 4
                harder = rng.random() < 0.5 and search_steps(spec.low, wider) <= spec.max_steps
                change = {"high": wider} if harder else {"max_steps": spec.max_steps + 1}
                prompt = self.rewrite_messages(spec, "harder" if harder else "easier", 0.5, "")
                out.append(Demo(task_id, 0, prompt, json.dumps(change)))
                continue
            episode = GuessEpisode(spec)
            while not episode.done:
                step_idx, prompt = episode.steps_taken, episode.messages()
                before = episode.observation
                expert = f"\\boxed{{{(episode.low + episode.high) // 2}}}"  # binary search
                taken = expert
                if rng.random() < request.noise:  # a random guess: states off the expert's path
                    taken = f"\\boxed{{{rng.randint(spec.low, spec.high)}}}"
                move = episode.act(taken)
                if request.role == "policy":
                    out.append(Demo(task_id, step_idx, prompt, expert))
                    continue
                label = move.progress != (rng.random() < request.label_noise)
                step = StepView(spec.goal_text, before, taken, move.action, move.observation)
                verdict = "\\boxed{1}" if label else "\\boxed{-1}"
                out.append(Demo(task_id, step_idx, self.judge_messages(step, []), verdict))
        return out
