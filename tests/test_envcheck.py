"""`rlanything check-env`: the environment contract checked without a model, on every built-in
and the corridor example, and failing with a named line on each silent trap a user's
environment can set (an episode that never ends, a parse_spec that raises something other than
SpecError, a spec that does not round-trip, a demonstration longer than max_new_tokens)."""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from rlanything_core.envs.interface import make_environment
from rlanything_core.run.config import ConfigError, parse_config
from rlanything_core.run.envcheck import Check, contract_checks
from rlanything_flows.cli import main

ROOT = Path(__file__).resolve().parents[1]
CORRIDOR_FILE = ROOT / "examples" / "corridor" / "corridor.py"

BROKEN = f'''
"""Corridors that break the environment contract, one way each."""
import dataclasses
import json
import sys

from rlanything_core.envs.interface import Environment, environment_class

Corridor = environment_class("{CORRIDOR_FILE}:CorridorEnvironment")
corridor = sys.modules[Corridor.__module__]


class EndlessEpisode(corridor.CorridorEpisode):
    def act(self, answer):
        move = super().act(answer)
        self.done = self.success = False  # never ends, never wins
        return dataclasses.replace(move, done=False)


class NeverEnds(Corridor):
    def new_episode(self, spec, shots, root):
        return EndlessEpisode(spec)


class RaisesValueError(Corridor):
    def parse_spec(self, data):
        if isinstance(data, dict):  # what a rewrite proposal is merged into
            raise ValueError("dicts are not specs here")
        return super().parse_spec(data)


class Lossy(corridor.CorridorSpec):
    def to_json(self):
        return json.dumps({{**self.model_dump(), "max_steps": 80}})


class DropsAField(Corridor):
    def generate(self, split, n, seed):
        return [Lossy(**s.model_dump()) for s in super().generate(split, n, seed)]

    def parse_spec(self, data):
        return Lossy(**super().parse_spec(data).model_dump())


class Missing(Environment):
    def parse_spec(self, data):
        raise NotImplementedError
'''


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("envs") / "broken.py"
    path.write_text(textwrap.dedent(BROKEN))
    return path


def _checks(name: str, **options: object) -> list[Check]:
    env = make_environment(name, dict(options), "id")[0]
    return contract_checks(env, num_tasks=4, seed=0, max_steps=200)


def _failed(checks: list[Check]) -> list[str]:
    return [c.line() for c in checks if not c.passed]


needs_chromium = pytest.mark.skipif(
    shutil.which("chromium") is None and not list(Path.home().glob(".cache/ms-playwright/*")),
    reason="no Chromium for the GUI environment",
)


@pytest.mark.parametrize("name", ["household", "textworld", "coding"])
def test_every_builtin_keeps_the_contract(name: str) -> None:
    checks = _checks(name)
    assert len(checks) == 6 and _failed(checks) == [], _failed(checks)


@needs_chromium
def test_the_gui_keeps_the_contract() -> None:
    checks = _checks("gui")
    assert _failed(checks) == [], _failed(checks)


def test_check_env_passes_on_the_corridor_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-env", str(ROOT / "examples" / "corridor" / "config.yaml")]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "8 passed, 0 failed" in out, out
    assert "pass  policy warm-start answers fit max_new_tokens" in out


def _shipped_configs() -> list[object]:
    """Every config in configs/ and the examples but OpenEnv's (tests/test_openenv.py starts its
    server); the GUI's need Chromium and play the expert in it, so they sit in the slow tier."""
    paths = sorted(ROOT.glob("configs/*.yaml")) + [
        ROOT / "examples" / name / "config.yaml" for name in ("corridor", "guess")
    ]
    return [
        pytest.param(
            p,
            id=str(p.relative_to(ROOT)),
            marks=[pytest.mark.slow, needs_chromium] * ("gui" in p.name),
        )
        for p in paths
    ]


@pytest.mark.parametrize("path", _shipped_configs())
def test_every_shipped_config_passes_check_env(
    path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config we ship must not teach answers its own max_new_tokens cuts off."""
    monkeypatch.chdir(ROOT)  # the examples name their environment files relative to the root
    code = main(["check-env", str(path)])
    out = capsys.readouterr().out
    assert code == 0 and ", 0 failed" in out, out


def _config(tmp_path: Path, env: str, rounds: int | None = None) -> Path:
    """The corridor example's config with environment `env`."""
    data = yaml.safe_load((ROOT / "examples" / "corridor" / "config.yaml").read_text())
    data["environment"]["name"] = env
    if rounds is not None:
        data["rounds"] = rounds
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        ("NeverEnds", r"FAIL  episodes end within the step limit \(random answers\): the episode "
         r"of task 0 did not end within \d+ steps"),
        ("RaisesValueError", r"FAIL  bad specs raise SpecError: parse_spec\(.*\) raised "
         r"ValueError, not SpecError"),
        ("DropsAField", r"FAIL  specs round-trip \(to_json, then parse_spec\): task 0 comes back "
         r"different \(fields max_steps\)"),
    ],
)  # fmt: skip
def test_check_env_names_each_broken_contract(
    tmp_path: Path, broken: Path, cls: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-env", str(_config(tmp_path, f"{broken}:{cls}"))]) == 2
    out = capsys.readouterr().out
    assert any(re.search(expected, line) for line in out.splitlines()), out


def test_check_env_names_a_demonstration_longer_than_max_new_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The corridor's policy answers are `\\boxed{right}`: more than 2 tokens."""
    config = _config(tmp_path, f"{CORRIDOR_FILE}:CorridorEnvironment")
    data = yaml.safe_load(config.read_text())
    data["policy"]["model"]["max_new_tokens"] = 2
    config.write_text(yaml.safe_dump(data))
    assert main(["check-env", str(config)]) == 2
    out = capsys.readouterr().out
    assert "FAIL  policy warm-start answers fit max_new_tokens: " in out, out
    assert "policy.model.max_new_tokens allows" in out


def test_train_refuses_a_broken_contract_before_any_model(
    tmp_path: Path, broken: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A spec that does not round-trip would break the acceptance check: train stops at once."""
    config = _config(tmp_path, f"{broken}:DropsAField")
    run_dir = tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run_dir)]) == 2
    out = capsys.readouterr().out
    assert "environment check FAIL  specs round-trip" in out
    assert not run_dir.exists()


def test_a_class_missing_a_method_or_failing_to_start_is_one_line(broken: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"Missing does not implement generate, judge_messages, new_episode"
    ):
        parse_config({"environment": {"name": f"{broken}:Missing"}})


def test_options_that_make_every_task_invalid_are_named() -> None:
    with pytest.raises(
        ConfigError, match=r"environment\.options \{num_rooms: \[9, 9\]\}: .*\. Change those"
    ):
        parse_config({"environment": {"name": "household", "options": {"num_rooms": [9, 9]}}})


def test_a_relative_environment_file_is_stored_absolute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    config = parse_config(
        {"environment": {"name": "examples/corridor/corridor.py:CorridorEnvironment"}}
    )
    assert config.environment.name == f"{CORRIDOR_FILE}:CorridorEnvironment"


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_a_run_whose_episodes_never_end_finishes_with_them_cut_and_counted(
    tmp_path: Path, broken: Path
) -> None:
    from rlanything_core.base.schemas import read_dataset
    from rlanything_core.method.signals import cut_episodes
    from rlanything_core.run.config import load_config
    from rlanything_core.run.rundir import RunDir
    from rlanything_flows.train import rlanything_train

    path = _config(tmp_path, f"{broken}:NeverEnds", rounds=1)
    data = yaml.safe_load(path.read_text())
    data["environment"]["max_episode_steps"] = 3  # below every corridor task's own max_steps
    data["evaluation"]["every"] = 1
    path.write_text(yaml.safe_dump(data))
    config = load_config(path)
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))
    rollouts = read_dataset(run.dataset(0, "rollouts"), "rollouts")
    episodes = 8 * 4  # the corridor config's tasks x rollouts
    assert cut_episodes(rollouts) == episodes and (rollouts["outcome"] == -1).all()
    lengths = rollouts.groupby(["task_id", "rollout_idx"])["step_idx"].max() + 1
    assert (lengths == 3).all()
    assert summary["rounds"][0]["policy/cut_episodes"] == episodes
    assert summary["eval"][-1]["eval/id/cut_episodes"] == 8 * 2


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_proposals_whose_parse_spec_raises_value_error_are_counted_invalid(
    tmp_path: Path, broken: Path
) -> None:
    from rlanything_core.base.schemas import read_dataset
    from rlanything_core.run.config import load_config
    from rlanything_core.run.rundir import RunDir
    from rlanything_flows.train import rlanything_train

    config = load_config(_config(tmp_path, f"{broken}:RaisesValueError"))
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))
    assert [r["round"] for r in summary["rounds"]] == [0, 1]
    candidates = [read_dataset(run.dataset(r, "candidates"), "candidates") for r in (0, 1)]
    raised = sum(
        c["error"].str.contains("ValueError from parse_spec", na=False).sum() for c in candidates
    )
    assert raised > 0 and not any(c["valid"].any() for c in candidates)
