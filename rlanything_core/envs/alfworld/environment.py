"""ALFWorld's games (from the data the user downloaded into $ALFWORLD_DATA) behind the interface."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, cast

from rlanything_core.envs.alfworld.game import (
    MAX_STEPS,
    AlfworldEpisode,
    AlfworldSpec,
    generate_alfworld_specs,
    parse_alfworld_spec,
)
from rlanything_core.envs.demos import Knobs, TextGame
from rlanything_core.envs.interface import Split, TaskSpec
from rlanything_core.envs.text import TextEnvironment, TextOptions


class AlfworldEnvironment(TextEnvironment[TextOptions]):
    """ALFWorld's household games, played through its TextWorld engine; its PDDL plan is the
    expert."""

    serial = True  # game engines are not made for threads
    policy_intro: ClassVar[str] = "You are an agent in a house."  # ALFWorld's scenes are rooms
    designer_system = (
        "You choose tasks for a household agent from ALFWorld's games. A task is a JSON object "
        "with the fields game (a game file of the ALFWorld data) and max_steps."
    )
    rewrite_knobs: ClassVar[Knobs] = {"max_steps": ((1, 3), -1)}

    def parse_spec(self, data: str | dict[str, object]) -> AlfworldSpec:
        return parse_alfworld_spec(data)

    def generate(self, split: Split, n: int, seed: int) -> Sequence[AlfworldSpec]:
        return generate_alfworld_specs(split, n, seed, self.options.step_slack)

    def check_pool(self, n: int, seed: int) -> None:
        """Nothing at config time: games are found in the data when the run needs them."""

    def game(self, spec: TaskSpec) -> TextGame:
        return AlfworldEpisode(cast(AlfworldSpec, spec))

    def rewrite_fields(self, spec: TaskSpec) -> str:
        return (
            f"max_steps: 1-{MAX_STEPS}, at least the game's plan; fewer steps make a game harder. "
            "game: another game file of the same data (a different task)."
        )

    def rewrite_example(self, spec: TaskSpec) -> str:
        return '{"max_steps": 12}'


ENVIRONMENT = AlfworldEnvironment
"""The class `environment.name: alfworld` loads."""
