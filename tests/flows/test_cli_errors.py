"""A bug in a stage of a run the command line started: the terminal gets one `error:` line, the
tracebacks go to a log file."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlanything_flows.cli import main

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_a_failing_run_prints_one_error_line_and_keeps_the_traceback_in_a_log(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in a stage: the terminal gets one `error:` line naming the exception and the log
    file, exit code 2; the tracebacks (Prefect's included) are in that file, not on screen."""
    import re

    import rlanything_tasks.updates

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom: a bug in the update")

    monkeypatch.setattr(rlanything_tasks.updates, "rl_update", broken)
    root = Path(__file__).resolve().parents[2]
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
