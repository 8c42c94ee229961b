"""TextWorld games (generated locally by Microsoft's TextWorld, cached) behind the interface."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, cast

from rlanything_core.envs.common import check_step_limit, validate_spec
from rlanything_core.envs.demos import Knobs, TextGame
from rlanything_core.envs.interface import Split, TaskSpec
from rlanything_core.envs.text import TextEnvironment, TextOptions
from rlanything_core.envs.textworld.game import (
    MAX_OBJECTS,
    MAX_QUEST_LENGTH,
    MAX_STEPS,
    MAX_WORLD_SIZE,
    TextWorldEpisode,
    TextWorldSpec,
    game_of,
    generate_textworld_specs,
    parse_textworld_spec,
)


class TextWorldEnvironment(TextEnvironment[TextOptions]):
    """Text adventures whose quests TextWorld generates; the walkthrough is the expert."""

    serial = True  # game engines are not made for threads
    policy_intro: ClassVar[str] = "You are an agent in a house."  # the games' rooms are a house's
    designer_system = (
        "You design text adventure games for an agent; TextWorld generates each game from a JSON "
        "object with the fields world_size, nb_objects, quest_length, max_steps and seed."
    )
    rewrite_knobs: ClassVar[Knobs] = {
        "nb_objects": ((1, 4), 1),
        "world_size": ((1, 2), 1),
        "quest_length": ((1, 1), 1),
    }

    def parse_spec(self, data: str | dict[str, object]) -> TextWorldSpec:
        return parse_textworld_spec(data)

    def generate(self, split: Split, n: int, seed: int) -> Sequence[TextWorldSpec]:
        return generate_textworld_specs(split, n, seed, self.options.step_slack)

    def check_pool(self, n: int, seed: int) -> None:
        """Nothing at config time: games are generated (minutes) when the run needs them."""

    def game(self, spec: TaskSpec) -> TextGame:
        return TextWorldEpisode(cast(TextWorldSpec, spec))

    def adjust_rewrite(self, spec: TaskSpec, change: dict[str, int]) -> dict[str, int]:
        """Another game: keep the step slack over its walkthrough, taking the new quest_length as
        the new walkthrough's length, an upper bound (TextWorld's walkthrough is the quest's
        command chain: of 4340 cached games none was longer, 59 were shorter), so that a
        demonstration costs no game generation (about a second each)."""
        tw = cast(TextWorldSpec, spec)
        slack = tw.max_steps - len(game_of(tw).walkthrough)
        length = change.get("quest_length", tw.quest_length)
        return {**change, "max_steps": min(length + slack, MAX_STEPS)}

    def demo_spec(self, data: dict[str, object]) -> TaskSpec:
        """A rewrite demonstration's spec: its fields, and its step limit against the quest's
        length (the walkthrough's bound), without generating its game; the rounds' rewrites are
        still checked in full (`parse_spec` generates and plays them)."""
        spec = validate_spec(TextWorldSpec, data, "textworld")
        check_step_limit(spec.max_steps, spec.quest_length, f"a quest of {spec.quest_length}")
        return spec

    def rewrite_fields(self, spec: TaskSpec) -> str:
        return (
            f"world_size: rooms, 1-{MAX_WORLD_SIZE}; nb_objects: 1-{MAX_OBJECTS}; quest_length: "
            f"commands in the winning chain, 1-{MAX_QUEST_LENGTH}; max_steps: 1-{MAX_STEPS}, at "
            "least the quest's walkthrough; seed: any integer >= 0 (another game of the same "
            "size). More rooms, objects and a longer quest make a game harder, fewer steps too."
        )

    def rewrite_example(self, spec: TaskSpec) -> str:
        return '{"nb_objects": 6}'


ENVIRONMENT = TextWorldEnvironment
"""The class `environment.name: textworld` loads."""
