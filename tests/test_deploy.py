"""The Prefect guide's deploy sequence (docs/guides/prefect.md), run as written on a copy of
the clone: a real Prefect server, the deployment from deployments/prefect.yaml, a process worker,
and two runs of the training deployment with a config file. Both train a run directory of their
own, and the nightly schedule creates flow runs."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterName,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.settings import PREFECT_API_URL, temporary_settings

from rlanything_core.models.services import free_port

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- deploy-sequence -->", "<!-- /deploy-sequence -->"

# A real Prefect server, worker and deployment runs: in `make test`, not in `make test-fast`.
pytestmark = pytest.mark.slow


GUIDE = ROOT / "docs" / "guides" / "prefect.md"


def guide_sequence() -> str:
    """The bash lines between the Prefect guide's deploy-sequence markers."""
    text = GUIDE.read_text()
    block = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    (code,) = re.findall(r"```bash\n(.*?)```", block, flags=re.S)
    return code


def clone_copy(dest: Path) -> Path:
    """The tracked files of this checkout (with its uncommitted edits) in `dest`, and `.venv`
    pointing at the environment running the tests, as `make setup` would leave a clone."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source = ROOT / name.decode()
        if source.is_file():
            target = dest / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest


def test_guide_deploy_sequence_trains_twice_and_schedules(tmp_path: Path) -> None:
    clone = clone_copy(tmp_path / "clone")
    port = free_port()
    script = guide_sequence().replace("4200", str(port))
    assert "RLANYTHING_REPO" not in script and "--all" not in script
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))} | {
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "2",  # the worker polls every 2 s, not 10
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "OMP_NUM_THREADS": "1",
    }
    shell = subprocess.Popen(
        ["bash", "-e", "-c", script],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = shell.communicate(timeout=900)
        worker_log = clone / "worker.log"
        log = worker_log.read_text() if worker_log.is_file() else "(no worker.log)"
        assert shell.returncode == 0, f"{output[-6000:]}\n--- worker.log ---\n{log[-6000:]}"

        # two flow runs, two run directories, each trained both rounds of configs/tiny.yaml
        runs = sorted((clone / "runs" / "nightly-tiny").iterdir())
        assert len(runs) == 2, runs
        tiny = yaml.safe_load((clone / "configs" / "tiny.yaml").read_text())
        for run in runs:
            summary = json.loads((run / "summary.json").read_text())
            assert [r["round"] for r in summary["rounds"]] == list(range(tiny["rounds"]))
            assert (run / "checkpoints" / "policy" / f"round_{tiny['rounds'] - 1:03d}").is_dir()
        tracking = mlflow.MlflowClient(env["MLFLOW_TRACKING_URI"])
        experiment = tracking.get_experiment_by_name(tiny["tracking"]["experiment"])
        assert experiment is not None
        parents = tracking.search_runs(
            [experiment.experiment_id], filter_string="tags.`rlanything.mode` = 'env'"
        )
        assert sorted(p.data.tags["rlanything.run_dir"] for p in parents) == [str(r) for r in runs]

        url = f"http://127.0.0.1:{port}/api"
        deployment = DeploymentFilter(name=DeploymentFilterName(any_=["nightly-tiny"]))

        def in_state(state: StateType) -> FlowRunFilter:
            types = FlowRunFilterStateType(any_=[state])
            return FlowRunFilter(state=FlowRunFilterState(type=types))

        with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
            done = client.read_flow_runs(
                deployment_filter=deployment, flow_run_filter=in_state(StateType.COMPLETED)
            )
            scheduled = client.read_flow_runs(
                deployment_filter=deployment, flow_run_filter=in_state(StateType.SCHEDULED)
            )
        # both trained (a run that finds its work done ends "AlreadyFinished")
        assert sorted(r.state_name for r in done) == ["Completed", "Completed"]
        assert {f"{r.name}" for r in done} == {run.name.split("-", 3)[3] for run in runs}
        assert all(r.parameters["config_file"] == "configs/tiny.yaml" for r in done)
        # the nightly cron has flow runs waiting (SQLAlchemy 2.1 broke this: pyproject.toml)
        assert scheduled and all(r.expected_start_time.hour == 2 for r in scheduled)
    finally:
        subprocess.run(
            [str(clone / ".venv" / "bin" / "prefect"), "server", "stop"],
            cwd=clone,
            env=env,
            capture_output=True,
            timeout=60,
        )
        with contextlib.suppress(ProcessLookupError):  # the worker, in the script's group
            os.killpg(shell.pid, signal.SIGTERM)
        _wait_for_group_or_kill(shell.pid, seconds=15)


def _wait_for_group_or_kill(group: int, seconds: float) -> None:
    """Wait for every process of `group` to exit, then SIGKILL what is left: a worker whose
    server was stopped first can outlive SIGTERM and would poll on after the test."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
