"""The built-in household environment (ALFWorld-style, planner-labelled) behind the interface."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import ClassVar, cast

from pydantic import BaseModel, field_validator

from rlanything_core.envs.demos import Knobs, TextGame
from rlanything_core.envs.household import world as household
from rlanything_core.envs.household.world import (
    GOAL_TYPES,
    MAX_COUNT,
    MAX_DISTRACTORS,
    MAX_ROOMS,
    MAX_STEPS,
    OBJECT_AFFORDANCES,
    RECEPTACLE_KINDS,
    GoalType,
    HouseholdEpisode,
    HouseholdSpec,
)
from rlanything_core.envs.interface import Split, TaskSpec
from rlanything_core.envs.rewriting import Messages, rewrite_prompt
from rlanything_core.envs.text import TextEnvironment, TextOptions


class HouseholdOptions(TextOptions):
    """`environment.options` of the household environment."""

    goals: list[GoalType] | None = None
    """Goal types of the tasks generated for `environment.split` (the initial pool, warm starts
    and eval's set of that split); None = the split's own (id: put, clean_put, heat_put; ood:
    cool_put, find_two)."""
    num_rooms: tuple[int, int] | None = None
    """Room-count range [low, high]; None = the split's own (id 1–2, ood 3–4)."""
    num_distractors: tuple[int, int] | None = None
    """Distractor-count range; None = the split's own (id 0–4, ood 2–6)."""
    count: tuple[int, int] | None = None
    """Range of how many objects each goal but find_two asks for, within [1, 3]: every object adds
    a fetch, a process and a delivery, so two make long tasks. None = one."""
    targets: list[str] | None = None
    """Receptacle kinds the tasks' objects go to; None = the split's own (id: countertop,
    cabinet, diningtable, shelf, drawer, sidetable, desk; ood: coffeetable, dresser, sofa, bed,
    armchair, garbagecan). An out-of-domain set of in-domain targets in other layouts
    (`evaluation.ood_options`) is one that a small policy, which cannot act on words it never
    saw, can still be measured on."""

    @field_validator("targets")
    @classmethod
    def _known_targets(cls, targets: list[str] | None) -> list[str] | None:
        unknown = sorted(set(targets or ()) - set(RECEPTACLE_KINDS))
        if unknown or targets == []:
            raise ValueError(
                f"unknown target receptacles {unknown or '(none given)'}; choose among "
                f"{list(RECEPTACLE_KINDS)}"
            )
        return targets


HOUSE_INTRO = "You are an agent in a house."
"""The household policy's system prompt's first sentence (`TextEnvironment.policy_intro`)."""


class HouseholdEnvironment(TextEnvironment[HouseholdOptions]):
    """Rooms, receptacles and objects; put/clean/heat/cool/find goals; an expert planner labels
    every step's progress."""

    Options: ClassVar[type[BaseModel]] = HouseholdOptions
    policy_intro: ClassVar[str] = HOUSE_INTRO
    designer_system = (
        "You design tasks for a household agent. A task is a JSON object with the fields "
        "goal_type, object, target, num_rooms, num_distractors, max_steps and layout_seed."
    )
    rewrite_knobs: ClassVar[Knobs] = {
        "num_distractors": ((1, 4), 1),
        "num_rooms": ((1, 1), 1),
        "max_steps": ((1, 3), -1),
    }

    def parse_spec(self, data: str | dict[str, object]) -> HouseholdSpec:
        return household.parse_spec(data)

    def generate(self, split: Split, n: int, seed: int) -> Sequence[HouseholdSpec]:
        """The split's tasks; `environment.split`'s are narrowed by `goals`, `num_rooms`,
        `num_distractors`, `count` and `targets`."""
        o = self.options
        if split != self.pool_split:
            return household.generate_specs(split, n, seed=seed, step_slack=o.step_slack)
        return household.generate_specs(
            split,
            n,
            seed=seed,
            step_slack=o.step_slack,
            goals=o.goals,
            num_rooms=o.num_rooms,
            num_distractors=o.num_distractors,
            count=o.count,
            targets=o.targets,
        )

    def game(self, spec: TaskSpec) -> TextGame:
        return HouseholdEpisode(cast(HouseholdSpec, spec))

    def rewrite_fields(self, spec: TaskSpec) -> str:
        # count is named only where the pool uses it, so single-object runs keep their prompts.
        count = (
            f"; count (objects to deliver, not for find_two): 1-{MAX_COUNT}"
            if self.options.count is not None
            else ""
        )
        return (
            f"goal_type: one of {list(GOAL_TYPES)}; object: one of {sorted(OBJECT_AFFORDANCES)}; "
            f"target: one of {list(RECEPTACLE_KINDS)}; num_rooms: 1-{MAX_ROOMS}; num_distractors: "
            f"0-{MAX_DISTRACTORS}; max_steps: 1-{MAX_STEPS}; layout_seed: any integer >= 0{count}. "
            "More rooms and distractors and fewer steps make a task harder."
        )

    def rewrite_example(self, spec: TaskSpec) -> str:
        return '{"num_distractors": 3}'

    def rewrite_messages(
        self, spec: TaskSpec, direction: str, accuracy: float, critique: str
    ) -> Messages:
        """The rewrite prompt, its example pointing the asked way: more steps for an easier
        task, more distractors for a harder one. With one example for both ways, SmolLM2-135M
        warm-started on 8 rewrites answered with more distractors (2-15) to 13 of 15 requests
        for an easier task, 7 times the example's own 3; a model that copies the example now at
        least moves the task the asked way (benchmarks/results/demo-loop/README.md)."""
        task = cast(household.HouseholdSpec, spec)
        example = (
            {"max_steps": min(task.max_steps + 8, MAX_STEPS)}
            if direction == "easier"
            else {"num_distractors": min(task.num_distractors + 2, MAX_DISTRACTORS)}
        )
        return rewrite_prompt(
            self.designer_system,
            self.rewrite_current(spec),
            self.rewrite_fields(spec),
            json.dumps(example),
            direction,
            accuracy,
            critique,
        )


ENVIRONMENT = HouseholdEnvironment
"""The class `environment.name: household` loads."""
