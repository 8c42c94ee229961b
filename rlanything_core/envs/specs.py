"""Task specs of every environment, and the `env` name each is stored under in task Parquet."""

from __future__ import annotations

from typing import Literal

from rlanything_core.envs.alfworld_env import AlfworldEpisode, AlfworldSpec, parse_alfworld_spec
from rlanything_core.envs.coding import CodingSpec, parse_coding_spec
from rlanything_core.envs.common import SpecError
from rlanything_core.envs.gui.tasks import GuiSpec, parse_gui_spec
from rlanything_core.envs.household import HouseholdEpisode, HouseholdSpec, parse_spec
from rlanything_core.envs.textworld_env import (
    GameEpisode,
    TextWorldEpisode,
    TextWorldSpec,
    parse_textworld_spec,
)

EnvName = Literal["household", "coding", "gui", "textworld", "alfworld"]
TaskSpec = HouseholdSpec | CodingSpec | GuiSpec | TextWorldSpec | AlfworldSpec


TextSpec = HouseholdSpec | TextWorldSpec | AlfworldSpec
"""Tasks played by choosing among numbered admissible commands."""


def text_episode(spec: TextSpec) -> HouseholdEpisode | GameEpisode:
    """A fresh episode of a household, TextWorld or ALFWorld task."""
    if isinstance(spec, TextWorldSpec):
        return TextWorldEpisode(spec)
    if isinstance(spec, AlfworldSpec):
        return AlfworldEpisode(spec)
    return HouseholdEpisode(spec)


def env_name(spec: TaskSpec) -> EnvName:
    if isinstance(spec, CodingSpec):
        return "coding"
    if isinstance(spec, TextWorldSpec):
        return "textworld"
    if isinstance(spec, AlfworldSpec):
        return "alfworld"
    return "gui" if isinstance(spec, GuiSpec) else "household"


def parse_task_spec(env: str, spec: str | dict[str, object]) -> TaskSpec:
    """Validate a spec of environment `env` (a tasks row's `env` and `spec`)."""
    if env == "household":
        return parse_spec(spec)
    if env == "coding":
        return parse_coding_spec(spec)
    if env == "gui":
        return parse_gui_spec(spec)
    if env == "textworld":
        return parse_textworld_spec(spec)
    if env == "alfworld":
        return parse_alfworld_spec(spec)
    raise SpecError(
        f"unknown environment {env!r} in a task row; use 'household', 'coding', 'gui', "
        "'textworld' or 'alfworld'."
    )
