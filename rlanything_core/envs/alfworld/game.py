"""ALFWorld (the paper's text-agent benchmark) behind the environment interface, through the
`alfworld` package.

ALFWorld's games are PDDL games that TextWorld's engine plays; its data is downloaded by the user
(`pip install alfworld`, which brings `textworld[pddl]`, then `alfworld-download`) into
$ALFWORLD_DATA. Nothing here downloads anything: without ALFWORLD_DATA every ALFWorld spec is
rejected with those steps.

- Task pool: `AlfredTWEnv` collects the solvable games of a split (in-domain: train; out-of-domain:
  valid_unseen) the way ALFWorld's own agents do; a spec names one game file, relative to
  $ALFWORLD_DATA, and its step limit.
- Episode: `AlfredDemangler` and `AlfredInfos` wrap the game as in `AlfredTWEnv`; the policy sees
  the feedback and the numbered admissible commands; the outcome is the won flag; a step's label
  comes from the PDDL planner's plan from the current state (TextWorld's `policy_commands`).
- Adaptation: the environment model can only pick another game of the data or change the step
  limit (ALFWorld's games are fixed files, unlike TextWorld's generated ones).
"""

from __future__ import annotations

import json
import os
import random
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlanything_core.envs.common import SpecError, check_step_limit, validate_spec
from rlanything_core.envs.textworld.game import GameEpisode, start_game

MAX_STEPS = 100
DATA_ENV = "ALFWORLD_DATA"
SETUP = (
    "ALFWorld needs its package and data: `pip install alfworld`, then `alfworld-download`, "
    "then `export ALFWORLD_DATA=~/.cache/alfworld` (docs/environments/alfworld.md)."
)
# Where AlfredTWEnv looks for each split, under $ALFWORLD_DATA.
_SPLIT_DIRS = {"id": "json_2.1.1/train", "ood": "json_2.1.1/valid_unseen"}
_TASK_TYPES = [1, 2, 3, 4, 5, 6]  # all six of ALFWorld's task types


def data_root() -> Path:
    root = os.environ.get(DATA_ENV)
    if not root:
        raise SpecError(f"ALFWORLD_DATA is not set. {SETUP}")
    path = Path(root).expanduser()
    if not path.is_dir():
        raise SpecError(f"ALFWORLD_DATA={root} is not a directory. {SETUP}")
    return path


class AlfworldSpec(BaseModel):
    """An ALFWorld game. Difficulty knobs: which game, max_steps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    game: str = Field(min_length=1)
    """The game file (game.tw-pddl), relative to $ALFWORLD_DATA."""
    max_steps: int = Field(ge=1, le=MAX_STEPS)
    """Step limit of an episode; must be at least the planner's plan length."""

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), sort_keys=True)

    @property
    def path(self) -> Path:
        return data_root() / self.game

    @property
    def goal_text(self) -> str:
        return _goal(str(self.path))


@lru_cache(maxsize=4096)
def _goal(game: str) -> str:
    """The task's templated description, from the traj_data.json beside the game file."""
    from alfworld.agents.utils.misc import get_templated_task_desc

    traj = json.loads((Path(game).parent / "traj_data.json").read_text())
    return str(get_templated_task_desc(traj)).rstrip(".")


def _start(path: Path) -> tuple[Any, Any]:
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    return start_game(
        path,
        [AlfredDemangler(shuffle=False), AlfredInfos],
        admissible_commands=True,
        policy_commands=True,
        won=True,
        lost=True,
    )


@lru_cache(maxsize=4096)
def plan_length(game: str) -> int:
    """Commands in the planner's plan from the game's start."""
    env, state = _start(Path(game))
    env.close()
    return len(state.policy_commands or [])


def parse_alfworld_spec(data: str | dict[str, object]) -> AlfworldSpec:
    """Validate a spec completely: the game file exists under $ALFWORLD_DATA, ALFWorld marked it
    solvable, and the planner's plan fits in max_steps. Raises SpecError naming the problem."""
    spec = validate_spec(AlfworldSpec, data, "alfworld")
    path = spec.path
    if not path.is_file():
        raise SpecError(
            f"game {spec.game!r} is not a file under {data_root()}; name a game.tw-pddl"
        )
    try:
        solvable = json.loads(path.read_text()).get("solvable")
    except ValueError as exc:
        raise SpecError(f"{path} is not an ALFWorld game file ({exc})") from exc
    if not solvable:
        raise SpecError(f"{path} is not marked solvable by ALFWorld; choose another game")
    check_step_limit(spec.max_steps, plan_length(str(path)), f"the planner's plan for {spec.game}")
    return spec


class AlfworldEpisode(GameEpisode):
    """One episode of an ALFWorld game."""

    def __init__(self, spec: AlfworldSpec) -> None:
        self.spec = spec
        env, state = _start(spec.path)
        super().__init__(env, state, spec.goal_text, spec.max_steps)


def game_files(split: Literal["id", "ood"]) -> list[str]:
    """The solvable games of a split, as AlfredTWEnv collects them, relative to $ALFWORLD_DATA."""
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    root = data_root()
    folder = str(root / _SPLIT_DIRS[split])
    config = {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": _TASK_TYPES},
        "dataset": {
            "data_path": folder,
            "eval_id_data_path": folder,
            "eval_ood_data_path": folder,
            "num_train_games": -1,
            "num_eval_games": -1,
        },
    }
    train_eval = "train" if split == "id" else "eval_out_of_distribution"
    found = AlfredTWEnv(config, train_eval=train_eval).game_files
    if not found:
        raise SpecError(f"no solvable ALFWorld games under {folder}. {SETUP}")
    return sorted(str(Path(f).relative_to(root)) for f in found)


def generate_alfworld_specs(
    split: Literal["id", "ood"], n: int, seed: int, step_slack: int = 6
) -> list[AlfworldSpec]:
    """`n` games of the split drawn with `seed`; max_steps is the plan's length plus
    `step_slack`."""
    files = game_files(split)
    chosen = random.Random(f"alfworld-{split}-{seed}").sample(files, min(n, len(files)))
    if len(chosen) < n:
        raise SpecError(f"the {split} split has {len(files)} games, fewer than the {n} asked for")
    root = data_root()
    return [
        AlfworldSpec(game=g, max_steps=min(plan_length(str(root / g)) + step_slack, MAX_STEPS))
        for g in chosen
    ]
