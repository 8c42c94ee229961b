"""The command line: bad input ends with a clear message and exit code 2, before any model loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main, prefect_ui_hint


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


def test_a_failing_run_prints_one_error_line_and_keeps_the_traceback_in_a_log(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in a stage: the terminal gets one `error:` line naming the exception and the log
    file, exit code 2; the tracebacks (Prefect's included) are in that file, not on screen."""
    import re

    import tasks.updates

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom: a bug in the update")

    monkeypatch.setattr(tasks.updates, "rl_update", broken)
    root = Path(__file__).resolve().parents[1]
    args = ["train", "--config", str(root / "configs" / "tiny.yaml"), "--rounds", "1"]
    assert main([*args, "--run-dir", str(tmp_path / "run")]) == 2
    out = capfd.readouterr()
    screen = out.out + out.err
    assert "Traceback (most recent call last)" not in screen
    errors = [line for line in screen.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "RuntimeError: boom: a bug in the update" in errors[0]
    found = re.search(r"traceback: (\S+\.log);", errors[0])
    assert found is not None
    log = Path(found.group(1)).read_text()
    assert log.count("Traceback (most recent call last)") >= 2 and "boom" in log


def test_the_prefect_ui_hint_names_the_server_the_user_will_open() -> None:
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_SERVER_API_HOST,
        PREFECT_SERVER_API_PORT,
        temporary_settings,
    )

    local = {PREFECT_SERVER_API_HOST: "0.0.0.0", PREFECT_SERVER_API_PORT: 4321}
    with temporary_settings(updates=local, restore_defaults={PREFECT_API_URL}):
        assert (
            prefect_ui_hint("abc")
            == "prefect server start  → http://0.0.0.0:4321/runs/flow-run/abc"
        )
    with temporary_settings(updates={PREFECT_API_URL: "http://10.0.0.5:4300/api"}):
        assert prefect_ui_hint("abc") == "http://10.0.0.5:4300/runs/flow-run/abc"
