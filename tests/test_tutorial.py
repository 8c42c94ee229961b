"""The own-environment tutorial (docs/own-environment.md) runs as written: its code blocks are
examples/guess/guess.py's code, `rlanything check-env` passes on it, and its config trains the
whole loop with the game's warm starts for all three roles."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from rlanything_flows.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "own-environment.md"
GUESS = ROOT / "examples" / "guess"


def test_every_python_block_of_the_tutorial_is_the_example_s_code() -> None:
    source = (GUESS / "guess.py").read_text()
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) >= 5
    for block in blocks:
        assert textwrap.dedent(block) in textwrap.dedent(source) or block in source, block[:200]


def test_check_env_passes_on_the_tutorial_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["check-env", "examples/guess/config.yaml"]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "9 passed, 0 failed" in out, out
    for role in ("policy", "reward_model", "env_model"):
        assert f"pass  {role} warm-start answers fit max_new_tokens" in out


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_the_tutorial_environment_trains_through_the_whole_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlanything_core.base.schemas import read_dataset
    from rlanything_core.run.config import load_config
    from rlanything_core.run.rundir import RunDir
    from rlanything_flows.train import rlanything_train

    monkeypatch.chdir(ROOT)
    config = load_config(GUESS / "config.yaml").model_copy(update={"rounds": 1})
    assert config.environment.name == f"{GUESS / 'guess.py'}:GuessEnvironment"
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))
    rollouts = read_dataset(run.dataset(0, "rollouts"), "rollouts")
    assert rollouts["goal"].str.startswith("find the secret number between").all()
    assert rollouts["action_valid"].mean() > 0.5  # the warm start taught the answer format
    judged = read_dataset(run.dataset(0, "judgments"), "judgments")
    assert judged["verdict"].notna().mean() > 0.5  # and the reward model's
    candidates = read_dataset(run.dataset(0, "candidates"), "candidates")
    assert len(candidates) > 0 and candidates["valid"].any()  # and the environment model's
    assert summary["rounds"][0]["policy/cut_episodes"] == 0
