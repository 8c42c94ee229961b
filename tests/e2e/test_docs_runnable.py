"""Every code block of the README and the docs marked runnable runs as written (doc_pages.py).

The marked blocks run one after another, in the order a reader meets them, in one scratch
directory that sees the repository's configs/, examples/ and benchmarks/: a later block may read
what an earlier one wrote (runs/tiny), and nothing lands in the checkout. Bash blocks run with
`bash -eu` and the virtualenv's `rlanything` first on PATH; Python blocks in a fresh
interpreter. Runnable blocks stay at tiny scale.

The own-environment tutorial's training block trains examples/guess's config; its run is then
checked as the tutorial describes it: the game's warm starts taught all three roles their
answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_pages import ROOT, runnable_blocks
from suite import prefect_server

from rlanything_core.base.schemas import read_dataset
from rlanything_core.run.rundir import RunDir


def test_runnable_blocks_run_in_reading_order(tmp_path: Path) -> None:
    for name in ("configs", "examples", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    env = os.environ | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        # the session's server, not a temporary one started by each command
        "PREFECT_API_URL": prefect_server(),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
    }
    for where, language, code in runnable_blocks():
        if language == "bash":
            command = ["bash", "-euc", code]
        elif language == "python":
            command = [sys.executable, "-c", code]
        else:
            pytest.fail(f"{where}: a runnable block must be bash or python, not {language}")
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
        )
        output = (done.stdout + done.stderr)[-3000:]
        assert done.returncode == 0, f"{where} failed ({done.returncode}):\n{output}"
    _the_tutorial_run_trained_the_whole_loop(RunDir(tmp_path / "runs" / "guess"))


def _the_tutorial_run_trained_the_whole_loop(run: RunDir) -> None:
    """docs/own-environment.md's `rlanything train --config examples/guess/config.yaml`."""
    summary = json.loads(run.summary_path.read_text())
    rollouts = read_dataset(run.dataset(0, "rollouts"), "rollouts")
    assert rollouts["goal"].str.startswith("find the secret number between").all()
    assert rollouts["action_valid"].mean() > 0.5  # the warm start taught the answer format
    judged = read_dataset(run.dataset(0, "judgments"), "judgments")
    assert judged["verdict"].notna().mean() > 0.5  # and the reward model's
    candidates = read_dataset(run.dataset(0, "candidates"), "candidates")
    assert len(candidates) > 0 and candidates["valid"].any()  # and the environment model's
    assert summary["rounds"][0]["policy/cut_episodes"] == 0
