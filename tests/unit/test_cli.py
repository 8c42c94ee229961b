"""The command line: bad input ends with a clear message and exit code 2, before any model loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlanything_flows.cli import main, prefect_ui_hint


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


def test_an_unreachable_prefect_api_is_one_line_naming_the_ways_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A profile that still points at a stopped server: train stops at once, trains nothing."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from rlanything_core.models.services import free_port

    url = f"http://127.0.0.1:{free_port()}/api"
    config = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
    with temporary_settings(updates={PREFECT_API_URL: url}):
        code = main(["train", "--config", str(config), "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 2, out
    assert f"the Prefect API at {url} (PREFECT_API_URL) does not answer" in out
    assert "prefect server start" in out and "prefect config unset PREFECT_API_URL" in out
    assert "resume" not in out and not (tmp_path / "run").exists()


def test_a_corrupt_mlflow_store_is_one_line_naming_the_file_and_the_way_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "mlflow.db"
    store.write_bytes(b"not a database" * 400)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    config = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
    code = main(["train", "--config", str(config), "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 2, out
    assert f"the MLflow store {store} is not a readable SQLite database" in out
    assert f"mv {store} {store}.broken" in out and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "{empty}"], "is empty (or only comments); write {} in it"),
        (["--config", "{dir}"], "is a directory, not a config file"),
        (["--config", "{tiny}", "--rounds", "0"], "--rounds 0: a run trains at least 1 round"),
        (["--config", "{tiny}", "--rounds", "-1"], "--rounds -1: a run trains at least 1 round"),
        (["--config", "{model}"], "model path './no/such/model' is not a directory"),
    ],
)
def test_small_mistakes_are_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    (tmp_path / "empty.yaml").write_text("# nothing but a comment\n")
    (tmp_path / "model.yaml").write_text("policy:\n  model: {source: ./no/such/model}\n")
    paths = {
        "empty": tmp_path / "empty.yaml",
        "dir": tmp_path,
        "tiny": Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml",
        "model": tmp_path / "model.yaml",
    }
    argv = ["train", *(a.format(**paths) for a in args), "--run-dir", str(tmp_path / "run")]
    assert main(argv) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: ") and message in out, out
    assert not (tmp_path / "run").exists()


def _point(step: int, acc: float, low: float, high: float, rm: float) -> dict[str, float]:
    return {
        "step": step,
        "eval/id/policy_accuracy": acc,
        "eval/id/policy_accuracy_ci_low": low,
        "eval/id/policy_accuracy_ci_high": high,
        "eval/id/episodes": 64.0,
        "eval/id/invalid_actions": 0.5 - acc,
        "eval/id/invalid_actions_ci_low": 0.45 - acc,
        "eval/id/invalid_actions_ci_high": 0.55 - acc,
        "eval/id/steps": 200.0 + 100 * step,
        "eval/id/rm_process_balanced_accuracy": rm,
        "eval/id/rm_process_balanced_accuracy_ci_low": rm - 0.1,
        "eval/id/rm_process_balanced_accuracy_ci_high": rm + 0.1,
        "eval/id/rm_process_accuracy": 0.7,
        "eval/id/rm_process_accuracy_ci_low": 0.6,
        "eval/id/rm_process_accuracy_ci_high": 0.8,
        "eval/id/rm_process_majority_baseline": 0.75,
        "eval/id/rm_steps": 300.0,
    }


def test_a_run_with_a_learning_curve_prints_before_and_after() -> None:
    from rich.console import Console

    from rlanything_flows.cli import held_out_tables

    assert held_out_tables({"eval": [_point(0, 0.2, 0.1, 0.3, 0.5)]}) == []  # no After yet
    summary = {
        "eval": [
            _point(4, 0.45, 0.35, 0.55, 0.58),
            _point(0, 0.2, 0.1, 0.3, 0.5),
            _point(2, 0.3, 0.2, 0.4, 0.55),
        ]
    }
    screen = Console(width=200, record=True)
    for table in held_out_tables(summary):
        screen.print(table)
    text = screen.export_text()
    assert "Before (round 0) → After (round 4)" in text
    policy = next(line for line in text.splitlines() if "policy accuracy" in line)
    # 0.35 > 0.3: the intervals are apart, read from the interval keys, not the means
    assert "0.2 [0.10, 0.30]" in policy and "0.45 [0.35, 0.55]" in policy
    assert "rose (intervals apart)" in policy and "64 / 64" in policy
    balanced = next(line for line in text.splitlines() if "(balanced)" in line)
    assert "no change that the intervals can tell" in balanced and "300 / 300" in balanced
    invalid = next(line for line in text.splitlines() if "invalid answers" in line)
    # 0.5 − acc: 0.3 [0.25, 0.35] → 0.05 [0.00, 0.10]: fell, counted in steps
    assert "0.3 [0.25, 0.35]" in invalid and "0.05 [0.00, 0.10]" in invalid
    assert "fell (intervals apart)" in invalid and "200 / 600" in invalid
    raw = next(line for line in text.splitlines() if "RM process accuracy  " in line)
    assert "majority 0.75 / 0.75" in raw
    # 0.7 against a majority baseline of 0.75: no gain, whatever the intervals say
    assert "not above the majority baseline" in raw
    curve = text.split("held-out curve (id)")[1].splitlines()
    cells = [line.split("│")[1].strip() for line in curve if line.startswith("│")]
    assert cells == ["0", "2", "4"]  # the curve in round order


def test_an_rm_answering_the_majority_verdict_is_not_called_a_gain() -> None:
    """`make run` at 072f9b1 printed the RM's plain accuracy as "rose" to 0.829 against a majority
    baseline of 0.829 without the flag: 87/105 as a share of correct verdicts is one ulp above
    1 − 18/105. An RM that answers the majority verdict everywhere scores its baseline."""
    import numpy as np
    from rich.console import Console

    from rlanything_core.method.stats import accuracy, majority_baseline
    from rlanything_flows.cli import held_out_tables

    positive = np.array([True] * 18 + [False] * 87)
    task = np.arange(105) % 16

    def point(step: int, correct: np.ndarray) -> dict[str, float]:
        score = accuracy(correct, task)
        return _point(step, 0.2, 0.1, 0.3, 0.5) | {
            "eval/id/rm_process_accuracy": score.value,
            "eval/id/rm_process_accuracy_ci_low": score.low,
            "eval/id/rm_process_accuracy_ci_high": score.high,
            "eval/id/rm_process_majority_baseline": majority_baseline(positive),
        }

    def raw_line(after: np.ndarray) -> str:
        screen = Console(width=300, record=True)
        summary = {"eval": [point(0, positive.copy()), point(2, after)]}
        for table in held_out_tables(summary):
            screen.print(table)
        return next(
            line for line in screen.export_text().splitlines() if "RM process accuracy  " in line
        )

    always_no = raw_line(~positive)  # every verdict "no progress": the majority class
    assert "rose (intervals apart)" in always_no
    assert "not above the majority baseline" in always_no
    # Right on the majority plus 1 of the 18 progress steps: above the baseline, within its reach.
    some = ~positive
    some[0] = True
    near = raw_line(some)
    assert "not above" not in near and "its interval reaches the majority baseline" in near
    # Right everywhere: a gain, no note.
    assert "majority baseline" not in raw_line(np.ones(105, dtype=bool)).split("majority 0")[0]


def test_the_end_of_a_run_is_one_short_table_with_the_paired_gain() -> None:
    from rich.console import Console

    from rlanything_flows.cli import result_table

    assert result_table({"eval": [_point(0, 0.2, 0.1, 0.3, 0.5)]}) is None  # no After yet
    after = _point(2, 0.45, 0.35, 0.55, 0.58) | {
        "eval/id/policy_gain": 0.25,
        "eval/id/policy_gain_ci_low": 0.12,
        "eval/id/policy_gain_ci_high": 0.38,
        "eval/id/policy_gain_tasks": 64.0,
    }
    rounds = [
        {"round": r, "env/candidates": 8.0, "env/accepted_tasks": float(r + 1)} for r in range(3)
    ]
    summary = {"eval": [after, _point(0, 0.2, 0.1, 0.3, 0.5)], "rounds": rounds}
    screen = Console(width=100, record=True)
    table, sentence = result_table(summary)
    screen.print(table)
    text = screen.export_text()
    assert sentence == (
        "The policy got better: +25.0 points held out "
        "(95 % interval +12.0 to +38.0, paired over 64 tasks)."
    )
    assert max(len(line) for line in text.splitlines()) <= 100  # no wider than a terminal
    assert "Before (round 0) → After (round 2)" in text
    policy = next(line for line in text.splitlines() if "policy accuracy" in line)
    assert "20.0 [10.0, 30.0]" in policy and "45.0 [35.0, 55.0]" in policy
    assert "+25.0 [+12.0, +38.0]" in policy and "64 ep." in policy
    judge = next(line for line in text.splitlines() if "RM step accuracy" in line)
    assert "50.0 [40.0, 60.0]" in judge and "58.0 [48.0, 68.0]" in judge
    assert "no clear change" in judge and "300 steps" in judge
    assert "plain accuracy 70.0 % against a majority baseline of 75.0 %" in " ".join(text.split())
    # the rounds the After point was trained by (0 and 1), not round 2, which it did not see
    accepted = next(line for line in text.splitlines() if "tasks accepted" in line)
    assert re.search(r"\s0 │\s+3 │ of 16 rewrites", accepted), accepted
    # an interval that reaches 0 is no gain
    summary["eval"][0] = after | {"eval/id/policy_gain_ci_low": -0.01}
    assert result_table(summary)[1].startswith("No change in the policy that the interval can tell")
