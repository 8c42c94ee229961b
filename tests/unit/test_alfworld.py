"""The ALFWorld adapter. ALFWorld's data is downloaded by the user, so the games are played only
when ALFWORLD_DATA points at it (and the `alfworld` package is installed); the rest is skipped.
Without it, an ALFWorld spec is rejected with the setup steps."""

from __future__ import annotations

import importlib.util
import os

import pytest

from rlanything_core.envs.alfworld import game as alf
from rlanything_core.envs.common import SpecError
from rlanything_core.envs.interface import make_environment
from rlanything_core.envs.text import TextAgentEpisode

ENV = make_environment("alfworld", {}, "id")[0]
parse_task_spec = ENV.parse_spec

HAVE_DATA = bool(os.environ.get(alf.DATA_ENV)) and importlib.util.find_spec("alfworld") is not None
needs_data = pytest.mark.skipif(
    not HAVE_DATA, reason="ALFWORLD_DATA is not set (pip install alfworld; alfworld-download)"
)


def test_without_data_a_spec_names_the_setup_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(alf.DATA_ENV, raising=False)
    with pytest.raises(SpecError, match=r"ALFWORLD_DATA is not set.*alfworld-download"):
        parse_task_spec({"game": "json_2.1.1/train/x/game.tw-pddl", "max_steps": 30})


def test_a_bad_spec_names_the_field(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv(alf.DATA_ENV, str(tmp_path))
    with pytest.raises(SpecError, match="max_steps"):
        parse_task_spec({"game": "g/game.tw-pddl", "max_steps": 0})
    with pytest.raises(SpecError, match="is not a file under"):
        parse_task_spec({"game": "missing/game.tw-pddl", "max_steps": 30})


@needs_data
@pytest.mark.parametrize("split", ["id", "ood"])
def test_the_planner_wins_every_drawn_game_with_every_step_progress(split: str) -> None:
    for spec in alf.generate_alfworld_specs(split, 3, seed=0, step_slack=4):  # type: ignore[arg-type]
        assert parse_task_spec(spec.model_dump()) == spec
        episode = alf.AlfworldEpisode(spec)
        assert episode.goal_text and episode.actions
        labels = []
        while not episode.done:
            labels.append(episode.step(episode.actions.index(episode.expert_action())).progress)
        assert episode.success and all(labels), spec


@needs_data
def test_invalid_answers_are_counted_and_the_episode_goes_on() -> None:
    spec = alf.generate_alfworld_specs("id", 1, seed=1)[0]
    agent = TextAgentEpisode(ENV.game(spec), history_steps=1)
    move = agent.act("no idea")
    assert not move.valid and not move.progress and not agent.done and agent.steps_taken == 1
    too_short = {**spec.model_dump(), "max_steps": 1}
    with pytest.raises(SpecError, match="raise max_steps"):
        parse_task_spec(too_short)
