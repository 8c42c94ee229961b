"""What every environment shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

SpecT = TypeVar("SpecT", bound=BaseModel)


class SpecError(ValueError):
    """A task spec is invalid; the message names the field and how to fix it."""


def validate_spec(model: type[SpecT], data: str | dict[str, object], env: str) -> SpecT:
    """`data` (JSON text or a dict) as a `model`; SpecError names every bad field."""
    try:
        if isinstance(data, str):
            return model.model_validate_json(data)
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()
        )
        raise SpecError(f"invalid {env} spec: {problems}") from exc


def check_step_limit(max_steps: int, needed: int, plan: str) -> None:
    """SpecError unless the step limit covers a plan of `needed` steps (`plan` names it)."""
    if needed > max_steps:
        raise SpecError(
            f"max_steps {max_steps} is below the {needed} steps of {plan}; raise max_steps to at "
            f"least {needed}."
        )


@dataclass(frozen=True)
class Move:
    """What the environment did with one policy answer (one row of the rollouts dataset)."""

    action: str | None
    """The action taken (household: the admissible action; coding: the program); None when the
    answer held none (an invalid answer, counted, never an error)."""
    valid: bool
    observation: str
    """What the policy observes next (coding: the test report)."""
    progress: bool
    """Ground truth for the reward model's process accuracy: did this step move toward the goal
    (household: the expert's distance fell; coding: every test passed)."""
    done: bool
    pass_fraction: float | None = None
    """Coding only: the fraction of the task's tests the program passed."""


class Episode(Protocol):
    """One episode an agent plays. Every member here is read by the loop; nothing else is.

    The rollout stage steps all episodes in lockstep: while an episode is not `done` (and has
    taken fewer steps than its step limit, see below), it records `observation`, samples the
    policy's answer to `messages()`, calls `act(answer)` and stores the returned `Move` as one
    rollouts row. Then `success` gives the episode's outcome.

    An episode must end by itself: set `done` when the goal is reached or the task's step
    limit is spent. The loop also stops an episode at the smaller of its spec's `max_steps`
    (where the spec has that field) and `environment.max_episode_steps`; one stopped there
    counts as failed (`policy/cut_episodes`), and `rlanything check-env` reports it.
    """

    goal_text: str
    """The goal in words: the rollouts' `goal` column and the reward model's prompt."""
    observation: str
    """What the policy sees before the next step (the rollouts' `observation` column)."""
    steps_taken: int
    """Steps taken so far: the next step's index (`step_idx`), part of its sample seed."""
    done: bool
    """The episode has ended (won, lost or out of steps); the loop stops stepping it."""
    success: bool
    """Read once the episode is done: the outcome is +1 when true, else -1."""
    screenshot: str | None
    """The path of the screenshot of `observation` (gui); None in text environments."""

    def messages(self) -> list[dict[str, str]]:
        """The policy's chat prompt for the next step: dicts with `role` and `content`."""
        ...

    def act(self, answer: str) -> Move:
        """Apply the policy's whole answer and return what happened. A malformed answer is an
        invalid move (`Move(None, False, ...)`), never an exception: model outputs are data."""
        ...


@runtime_checkable
class ListsAnswers(Protocol):
    """An episode that can list every admissible answer as the policy would write it, so that
    the policy may choose among them (`policy.answers: choose`) instead of writing one."""

    def answers(self) -> list[str]:
        """The admissible answers of the current step, each exactly as `act` accepts it."""
        ...


@dataclass(frozen=True)
class Check:
    """One environment check's outcome (`rlanything check-env`; `Environment.extra_checks`):
    `problem` is None when it passed, else what to change."""

    name: str
    problem: str | None
    detail: str = ""
    """What a passing check covered."""
    absorbed: bool = False
    """The loop copes with this failure (it cuts the episode, counts the proposal invalid):
    `train` reports it and goes on; `check-env` fails on it."""

    @property
    def passed(self) -> bool:
        return self.problem is None

    def line(self) -> str:
        """The check's one line: `pass` and what it covered, or `FAIL` and what to change."""
        if self.problem is None:
            return f"pass  {self.name}" + (f": {self.detail}" if self.detail else "")
        return f"FAIL  {self.name}: {self.problem}"
