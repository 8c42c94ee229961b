"""`rlanything check-env`: the environment contract checked without a model, on every built-in
and the corridor example, and failing with a named line on each silent trap a user's
environment can set (an episode that never ends, a parse_spec that raises something other than
SpecError, a spec that does not round-trip, a demonstration longer than max_new_tokens)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from example_envs import CORRIDOR_FILE, corridor_config

from rlanything_core.envs.interface import make_environment
from rlanything_core.run.config import ConfigError, parse_config
from rlanything_core.run.envcheck import Check, contract_checks
from rlanything_flows.cli import main

ROOT = Path(__file__).resolve().parents[2]


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
    """Every config in configs/ and the examples but OpenEnv's (tests/unit/test_openenv.py starts
    its server); the GUI's need Chromium and play the expert in it."""
    paths = sorted(ROOT.glob("configs/*.yaml")) + [
        ROOT / "examples" / name / "config.yaml" for name in ("corridor", "guess")
    ]
    return [
        pytest.param(
            p,
            id=str(p.relative_to(ROOT)),
            marks=[needs_chromium] * ("gui" in p.name),
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
    tmp_path: Path, broken_envs: Path, cls: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-env", str(corridor_config(tmp_path, f"{broken_envs}:{cls}"))]) == 2
    out = capsys.readouterr().out
    assert any(re.search(expected, line) for line in out.splitlines()), out


def test_check_env_names_a_demonstration_longer_than_max_new_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The corridor's policy answers are `\\boxed{right}`: more than 2 tokens."""
    config = corridor_config(tmp_path, f"{CORRIDOR_FILE}:CorridorEnvironment")
    data = yaml.safe_load(config.read_text())
    data["policy"]["model"]["max_new_tokens"] = 2
    config.write_text(yaml.safe_dump(data))
    assert main(["check-env", str(config)]) == 2
    out = capsys.readouterr().out
    assert "FAIL  policy warm-start answers fit max_new_tokens: " in out, out
    assert "policy.model.max_new_tokens allows" in out


def test_train_refuses_a_broken_contract_before_any_model(
    tmp_path: Path, broken_envs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A spec that does not round-trip would break the acceptance check: train stops at once."""
    config = corridor_config(tmp_path, f"{broken_envs}:DropsAField")
    run_dir = tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run_dir)]) == 2
    out = capsys.readouterr().out
    assert "environment check FAIL  specs round-trip" in out
    assert not run_dir.exists()


def test_a_class_missing_a_method_or_failing_to_start_is_one_line(broken_envs: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"Missing does not implement generate, judge_messages, new_episode"
    ):
        parse_config({"environment": {"name": f"{broken_envs}:Missing"}})


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
