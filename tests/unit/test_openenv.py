"""The OpenEnv adapter against a real OpenEnv server (examples/openenv/guess_server.py, built
with openenv-core from the `openenv` extra) served on loopback: its options, its episodes, its
errors and `rlanything check-env` on it (tests/flows/test_user_environments.py trains on it)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from example_envs import OPENENV_EXAMPLE, OPENENV_SERVER

from rlanything_core.envs.interface import make_environment
from rlanything_core.envs.openenv.client import LocalServer, OpenEnvError
from rlanything_core.envs.openenv.environment import OpenEnvEnvironment, OpenEnvTask
from rlanything_core.run.config import ConfigError, parse_config
from rlanything_core.run.envcheck import contract_checks
from rlanything_flows.cli import main

ROOT = Path(__file__).resolve().parents[2]
PARAMS = {"high": {"min": 4, "max": 16}}


def _env(**options: Any) -> OpenEnvEnvironment:
    env, _ = make_environment("openenv", options, "id")
    assert isinstance(env, OpenEnvEnvironment)
    return env


def test_options_name_the_mistake() -> None:
    cases = {
        "give exactly one of url": {},
        "command must contain {port}": {"command": "python server.py"},
        "must start with http": {"url": "localhost:8000"},
        "may not be named seed": {"url": "http://x", "task_params": {"seed": PARAMS["high"]}},
        "either both min and max": {"url": "http://x", "task_params": {"high": {"min": 3}}},
        "min 9 is above max 2": {"url": "http://x", "task_params": {"high": {"min": 9, "max": 2}}},
    }
    for message, options in cases.items():
        with pytest.raises(ConfigError, match=r"environment\.options") as err:
            parse_config({"environment": {"name": "openenv", "options": options}})
        assert message in str(err.value), str(err.value)


def test_tasks_are_the_reset_parameters_drawn_from_their_ranges() -> None:
    env = _env(
        url="http://127.0.0.1:1",
        task_params={**PARAMS, "mode": {"choices": ["a", "b"]}},
        ood_task_params={"high": {"min": 30, "max": 40}, "mode": {"choices": ["c"]}},
        goal="find the number up to {high}",
    )
    specs = env.generate("id", 20, seed=3)
    assert specs == env.generate("id", 20, seed=3)
    assert all(4 <= s.params()["high"] <= 16 and s.params()["mode"] in "ab" for s in specs)
    assert all(env.parse_spec(s.to_json()) == s for s in specs)
    far = env.generate("ood", 5, seed=3)
    assert all(s.params() == {"high": s.params()["high"], "mode": "c"} for s in far)
    assert specs[0].goal_text == f"find the number up to {specs[0].params()['high']}"
    # a valid task holds either split's values
    with pytest.raises(ValueError, match="high: Input should be less than or equal to 40"):
        env.parse_spec({"seed": 1, "max_steps": 3, "high": 41, "mode": "a"})
    with pytest.raises(ValueError, match="mode: Input should be 'a', 'b' or 'c'"):
        env.parse_spec({"seed": 1, "max_steps": 3, "high": 20, "mode": "d"})
    assert env.rewriting_skipped is None
    assert "high: from 4 to 40" in env.rewrite_fields(specs[0])
    assert "no task parameters" in str(_env(url="http://127.0.0.1:1").rewriting_skipped)


def test_episodes_play_over_sessions_and_malformed_answers_are_invalid_moves(
    openenv_server: LocalServer,
) -> None:
    env = _env(url=openenv_server.url, task_params=PARAMS, max_steps=4)
    spec = env.parse_spec({"seed": 7, "max_steps": 4, "high": 4})
    with env.session():
        assert env.server_name == "GuessEnvironment"
        assert "the action's guess (a whole number, your guess)" in env.instructions
        episode = env.new_episode(spec, None, None)
        assert episode.observation == "The number is between 1 and 4."
        assert episode.messages()[1]["content"].startswith("Task: finish the episode")
        for junk in ("no box", "\\boxed{seven}", "\\boxed{}"):
            move = episode.act(junk)
            assert (move.action, move.valid, move.done) == (None, False, False)
        assert episode.steps_taken == 3 and episode.observation.startswith("The number is")
        move = episode.act("\\boxed{9}")  # the last step: the step limit ends the episode
        assert (move.action, move.valid, move.done) == ("9", True, True)
        assert not episode.success and not move.progress  # 9 is outside [1, 4]
        # every guess in turn finds it: success, and the finding step is progress
        found = env.new_episode(spec, None, None)
        while not found.done:
            move = found.act(f"thinking... \\boxed{{{found.steps_taken + 1}}}")
        assert found.success and move.progress and move.observation.endswith("is right.")
    assert env.tracking_tags() == {
        "openenv.name": "GuessEnvironment",
        "openenv.url": openenv_server.url,
    }


def test_server_mistakes_are_one_clear_error(openenv_server: LocalServer, tmp_path: Path) -> None:
    wrong_field = _env(url=openenv_server.url, action_field="move")
    with pytest.raises(OpenEnvError, match=r"action_field 'move' is not a field.*guess"):
        wrong_field.session().__enter__()
    with pytest.raises(OpenEnvError, match=r"127\.0\.0\.1:9/schema: ConnectError"):
        _env(url="http://127.0.0.1:9").session().__enter__()
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nprint('no such model'); sys.exit(3)\n")
    crashing = _env(command=f"{sys.executable} {crash} {{port}}")
    with pytest.raises(OpenEnvError, match=r"exited with status 3 before answering.*no such"):
        crashing.session().__enter__()
    small = LocalServer(OPENENV_SERVER + " --max-sessions 1", start_timeout=60)
    try:
        env = _env(url=small.url)
        spec = OpenEnvTask(seed=1, max_steps=3)
        with env.session():
            env.new_episode(spec, None, None)
            with pytest.raises(OpenEnvError, match=r"allows 1 sessions.*max_concurrent_envs"):
                env.new_episode(spec, None, None)
    finally:
        small.stop()


def test_check_env_passes_on_the_example(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["check-env", str(OPENENV_EXAMPLE / "config.yaml")]) == 0
    out = capsys.readouterr().out
    assert "pass  task parameters reach the server's reset: 1 parameter" in out, out
    assert "FAIL" not in out and "7 passed, 0 failed" in out, out


def test_check_env_names_a_task_parameter_the_server_ignores(
    openenv_server: LocalServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The example server's reset takes `high` and ignores any other keyword (as OpenEnv's
    resets do), so a misspelt parameter would make every task the same game."""
    misspelt = {"hihg": PARAMS["high"], "high": {"min": 8, "max": 8}}
    data = yaml.safe_load((OPENENV_EXAMPLE / "config.yaml").read_text())
    data["environment"]["options"] = {"url": openenv_server.url, "task_params": misspelt}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(data))
    assert main(["check-env", str(config)]) == 2
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1, out
    assert failed[0].startswith("FAIL  task parameters reach the server's reset: episodes of seed ")
    assert "with hihg (4 and 16) began alike" in failed[0], failed[0]
    # `train` reports it and goes on: the loop does not rely on it
    checks = contract_checks(
        _env(url=openenv_server.url, task_params=misspelt), num_tasks=4, seed=0, max_steps=20
    )
    assert [c.absorbed for c in checks if not c.passed] == [True]
