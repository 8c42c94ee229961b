"""The command line: bad input ends with a clear message and exit code 2, before any model loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main


def test_bad_config_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollouts_per_task: 1\npolicy: {model: {temprature: 0.5}}\n")
    assert main(["train", "--config", str(bad), "--run-dir", str(tmp_path / "run")]) == 2
    out = capsys.readouterr().out
    assert "rollouts_per_task" in out or "temprature" in out
    assert not (tmp_path / "run").exists()


def test_resume_needs_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resume", "--run-dir", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().out


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().out
