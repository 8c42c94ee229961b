"""Signals stop a run promptly and cleanly: SIGTERM or SIGINT to `rlanything train`'s whole
process group (what a terminal's Ctrl-C, systemd, Docker or a worker's cancel sends; the group
includes Prefect's temporary server) ends it within 30 s with a last line that names the signal
and the command that resumes, the MLflow run KILLED; `rlanything resume` then finishes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

ROOT = Path(__file__).resolve().parents[1]
RLANYTHING = str(Path(sys.executable).parent / "rlanything")

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_process_group_stops_the_run_and_resume_finishes_it(
    tmp_path: Path, signum: int
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))} | {
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "OMP_NUM_THREADS": "1",
    }
    run = tmp_path / "run"
    train = [RLANYTHING, "train", "--config", str(ROOT / "configs" / "tiny.yaml")]
    log = tmp_path / "train.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*train, "--rounds", "2", "--run-dir", str(run)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group, as a terminal's job
        )
    try:
        marker = run / "round_000" / "_stages" / "rollout.json"
        deadline = time.monotonic() + 300
        while not marker.is_file():  # mid-round: the rollout done, the scoring under way
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        sent = time.monotonic()
        os.killpg(proc.pid, signum)
        code = proc.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = log.read_text()
    name = signal.Signals(signum).name
    assert took < 30, (took, output[-3000:])
    assert code == 128 + signum, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert last.startswith(f"error: stopped by {name}; `rlanything resume --run-dir {run}`"), last
    state = json.loads((run / "state.json").read_text())
    client = mlflow.MlflowClient(state["mlflow_tracking_uri"])
    assert client.get_run(state["mlflow_run_id"]).info.status == "KILLED"

    resumed = subprocess.run(
        [RLANYTHING, "resume", "--run-dir", str(run)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert [r["round"] for r in summary["rounds"]] == [0, 1]
    assert client.get_run(state["mlflow_run_id"]).info.status == "FINISHED"
