"""Signals stop a run promptly and cleanly: SIGTERM or SIGINT to `rlanything train`'s whole
process group (what a terminal's Ctrl-C, systemd, Docker or a worker's cancel sends; the group
includes Prefect's temporary server) ends it within 30 s with a last line that names the signal
and the command that resumes, the MLflow run KILLED; `rlanything resume` then finishes it. A
Prefect server or an MLflow store lost mid-run ends the run within 60 s the same way."""

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

ROOT = Path(__file__).resolve().parents[2]
RLANYTHING = str(Path(sys.executable).parent / "rlanything")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This environment less its Prefect and MLflow settings, with a Prefect home and an MLflow
    store of the test's own."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))} | {
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "OMP_NUM_THREADS": "1",
        **extra,
    }


def _train_past_rollout(env: dict[str, str], run: Path, log: Path) -> subprocess.Popen[bytes]:
    """`rlanything train` of one tiny round in its own process group (as a terminal's job),
    returned mid-round: round 0's rollout done, its scoring under way."""
    train = [RLANYTHING, "train", "--config", str(ROOT / "configs" / "tiny.yaml")]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*train, "--rounds", "1", "--run-dir", str(run)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    marker = run / "round_000" / "_stages" / "rollout.json"
    deadline = time.monotonic() + 300
    while not marker.is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(log.read_text()[-3000:])
        time.sleep(0.2)
    return proc


def _resume_to_the_end(env: dict[str, str], run: Path) -> None:
    """`rlanything resume` of `run` exits 0 with its round in its summary."""
    resumed = subprocess.run(
        [RLANYTHING, "resume", "--run-dir", str(run)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert [r["round"] for r in summary["rounds"]] == [0]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_process_group_stops_the_run_and_resume_finishes_it(
    tmp_path: Path, signum: int
) -> None:
    env = _env(tmp_path)
    run = tmp_path / "run"
    log = tmp_path / "train.log"
    proc = _train_past_rollout(env, run, log)
    try:
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

    _resume_to_the_end(env, run)
    assert client.get_run(state["mlflow_run_id"]).info.status == "FINISHED"


@pytest.mark.parametrize("lost", ["prefect-server", "mlflow-store"])
def test_a_lost_prefect_server_or_mlflow_store_stops_the_run_within_a_minute(
    tmp_path: Path, lost: str
) -> None:
    """The Prefect server the run uses (PREFECT_API_URL) is stopped, or its SQLite MLflow
    store is moved away, mid-round: the run ends within 60 s, exit 2, its last line naming the
    URL or the file and the command that resumes; with the service back, `resume` finishes."""
    from rlanything_core.models.services import Service, free_port

    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    store = tmp_path / "mlflow.db"
    env = _env(tmp_path, PREFECT_API_URL=api)

    def server() -> Service:
        command = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1"]
        found = Service(
            [*command, "--port", str(port)],
            url=None,
            port=port,
            startup_timeout_s=180,
            log_path=tmp_path / "prefect-server.log",
            env=env,
        )
        found.url = api
        return found

    run = tmp_path / "run"
    log = tmp_path / "train.log"
    first = server().start()
    proc = _train_past_rollout(env, run, log)
    try:
        if lost == "prefect-server":
            first.stop()
        else:
            store.rename(tmp_path / "mlflow.away")
        cut = time.monotonic()
        code = proc.wait(timeout=120)
        took = time.monotonic() - cut
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if lost != "prefect-server":
            first.stop()
    output = log.read_text()
    assert took < 60 and code == 2, (took, code, output[-3000:])
    last = output.strip().splitlines()[-1]
    named = f"Prefect API at {api} stopped answering" if lost == "prefect-server" else str(store)
    assert last.startswith("error: ") and named in last, last
    assert f"`rlanything resume --run-dir {run}` continues the run" in last, last
    assert "Traceback" not in output

    if lost == "mlflow-store":
        store.unlink(missing_ok=True)  # what SQLite made there is not the store
        (tmp_path / "mlflow.away").rename(store)
    with server():
        _resume_to_the_end(env, run)
