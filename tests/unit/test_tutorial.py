"""The own-environment tutorial (docs/own-environment.md) runs as written: its code blocks are
examples/guess/guess.py's code and `rlanything check-env` passes on it (its config's training
block runs in tests/e2e/test_docs_runnable.py, which checks the run as the tutorial tells it)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from rlanything_flows.cli import main

ROOT = Path(__file__).resolve().parents[2]
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
