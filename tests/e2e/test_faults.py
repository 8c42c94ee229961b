"""Fault injection: what survives a SIGKILL in each stage, corrupted files, a full disk, and two
runs side by side.

The training runs here are real `rlanything` processes on tests/data/faults.yaml (configs/tiny.yaml,
two rounds, with a warm start of each model), talking
to the session's Prefect server and an MLflow SQLite store of this module's own. A fail point
(rlanything_core/base/failpoints.py) holds the process in the middle of a stage, right after the
stage's first output file is in place, or while a round is logged to MLflow; the suite then kills
its whole process group with SIGKILL.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file
from suite import prefect_server, reference_run, session_root

import rlanything_tasks.stages
from rlanything_core.base.schemas import read_dataset
from rlanything_core.models.checkpoints import OPTIMIZER_STATE, save_checkpoint
from rlanything_core.models.loading import load_model, resolve_source
from rlanything_core.run.config import load_config
from rlanything_core.run.rundir import RunDir, RunDirError

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "faults.yaml"  # configs/tiny.yaml with three warm starts
STAGES = [t.name for t in rlanything_tasks.stages.STAGES]
MLFLOW_POINTS = ["mlflow-metrics", "mlflow-dataset", "mlflow-checkpoint", "mlflow-artifact"]
# Where the chain kills, in the order a run gets there: each warm start once its checkpoint is
# written, every stage of both rounds once its first output is, and round 0's MLflow logging
# after its metrics, its first dataset input, its first checkpoint upload and its first plot.
KILL_POINTS = [
    *(f"-1/warm-start/{role}" for role in ("policy", "reward_model", "env_model")),
    *(f"0/{stage}" for stage in STAGES),
    *(f"0/{point}" for point in MLFLOW_POINTS),
    *(f"1/{stage}" for stage in STAGES),
]


@pytest.fixture(scope="module")
def services() -> dict[str, str]:
    """The environment of this module's training processes: the session's Prefect server and an
    MLflow SQLite store of these tests' own, both shared by the test workers (suite.py); the
    tiny models built here first, so that concurrent runs find them in the cache."""
    config = load_config(CONFIG)
    for model in (config.policy.model, config.reward_model.model, config.env_model.model):
        resolve_source(model.source)
    home = session_root() / "faults"
    home.mkdir(exist_ok=True)
    return {
        **os.environ,
        "PREFECT_API_URL": prefect_server(),
        "MLFLOW_TRACKING_URI": f"sqlite:///{home / 'mlflow.db'}",
        # One torch thread per process: two runs side by side with a thread per core each spend
        # their time waiting on each other's threads (a tiny.yaml run: 200 s instead of 46 s).
        # Every process here uses the same count, so the results stay comparable bit for bit.
        "OMP_NUM_THREADS": "1",
    }


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlanything_flows.cli", *args]


def _launch(
    env: dict[str, str], args: list[str], log: Path, failpoint: str | None = None
) -> subprocess.Popen[bytes]:
    extra = {}
    if failpoint:
        extra = {
            "RLANYTHING_FAILPOINT": failpoint,
            "RLANYTHING_FAILPOINT_READY": str(log.with_suffix(".ready")),
        }
    with log.open("ab") as out:
        return subprocess.Popen(
            _command(*args),
            cwd=ROOT,
            env={**env, **extra},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _finish(process: subprocess.Popen[bytes], log: Path, timeout: float = 600) -> None:
    rc = process.wait(timeout=timeout)
    assert rc == 0, f"exit {rc}; log {log}:\n{log.read_text()[-4000:]}"


def _held_at(
    env: dict[str, str], args: list[str], log: Path, failpoint: str
) -> tuple[subprocess.Popen[bytes], str]:
    """Run until the fail point holds the process mid-stage: (the process, the file the stage
    had just written)."""
    ready = log.with_suffix(".ready")
    ready.unlink(missing_ok=True)
    process = _launch(env, args, log, failpoint)
    deadline = time.monotonic() + 600
    while not ready.is_file() or not ready.read_text().endswith("\n"):
        assert process.poll() is None, f"exited {process.returncode} before {failpoint}: {log}"
        assert time.monotonic() < deadline, f"never reached {failpoint}; log {log}"
        time.sleep(0.2)
    pid, written = ready.read_text().split(maxsplit=1)
    assert int(pid) == process.pid
    return process, written.strip()


def _kill_in(env: dict[str, str], args: list[str], log: Path, failpoint: str) -> str:
    """Run until the fail point holds the process mid-stage, then SIGKILL its process group;
    returns the file the stage had just written."""
    process, written = _held_at(env, args, log, failpoint)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL
    return written


@pytest.fixture(scope="module")
def reference(services: dict[str, str]) -> RunDir:
    """An uninterrupted run, trained beside a second identical one in another run directory,
    once for the session (whichever test worker needs it first trains it)."""

    def train_two(base: Path) -> None:
        base.mkdir(parents=True)
        runs = [base / "a", base / "b"]
        procs = [
            _launch(
                services, ["train", "--config", str(CONFIG), "--run-dir", str(r)], base / f"{i}.log"
            )
            for i, r in enumerate(runs)
        ]
        for i, p in enumerate(procs):
            _finish(p, base / f"{i}.log")

    return RunDir(reference_run("faults", train_two) / "a")


def _files(run: RunDir, pattern: str) -> dict[str, bytes]:
    return {str(p.relative_to(run.root)): p.read_bytes() for p in sorted(run.root.rglob(pattern))}


def _checkpoints(run: RunDir) -> dict[str, dict[str, torch.Tensor]]:
    """Every checkpoint's weights and, for those that carry one, its AdamW state (moments and
    step counts), keyed by the checkpoint's path in the run directory."""
    found = {
        str(p.parent.relative_to(run.root)): load_file(str(p))
        for p in sorted((run.root / "checkpoints").rglob("model.safetensors"))
    }
    for p in sorted((run.root / "checkpoints").rglob(OPTIMIZER_STATE)):
        state = torch.load(p, weights_only=True)["state"]
        found[f"{p.parent.relative_to(run.root)}/{OPTIMIZER_STATE}"] = {
            f"{param}.{name}": torch.as_tensor(value)
            for param, entries in state.items()
            for name, value in entries.items()
        }
    return found


def _same_weights(a: dict[str, dict[str, torch.Tensor]], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        a[c].keys() == b[c].keys() and all(torch.equal(a[c][k], b[c][k]) for k in a[c]) for c in a
    )


def _mlflow_view(env: dict[str, str], run: RunDir) -> dict[str, Any]:
    """The run's MLflow parent: every metric's (step, value) points; its round runs."""
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    parent = json.loads(run.state_path.read_text())["mlflow_run_id"]
    keys = client.get_run(parent).data.metrics.keys()
    points = {
        k: sorted((m.step, m.value) for m in client.get_metric_history(parent, k)) for k in keys
    }
    experiment = client.get_run(parent).info.experiment_id
    children = client.search_runs(
        [experiment], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'"
    )
    versions = [
        (v.tags["rlanything.role"], v.tags["rlanything.round"], v.run_id)
        for model in client.search_registered_models()
        for v in client.search_model_versions(f"name = '{model.name}'")
        if v.tags.get("rlanything.parent_run_id") == parent
    ]
    finished = {c.info.run_id for c in children if c.info.status == "FINISHED"}
    return {
        "points": points,
        "status": client.get_run(parent).info.status,
        "rounds": sorted(
            (c.data.tags["rlanything.round"], c.info.status)
            for c in children
            if c.info.run_id in finished
        ),
        "killed_unmarked": [
            c.info.run_id
            for c in children
            if c.info.run_id not in finished
            and (c.info.status != "KILLED" or "rlanything.superseded_by" not in c.data.tags)
        ],
        "killed": sum(c.info.status == "KILLED" for c in children),
        # (role, round) of every registered checkpoint version, each from a finished round run
        "versions": sorted((role, r) for role, r, _ in versions),
        "versions_from_unfinished_runs": [v for v in versions if v[2] not in finished],
        "plots": {
            a.path: Path(client.download_artifacts(parent, a.path)).read_bytes()
            for a in client.list_artifacts(parent, "plots")
        },
    }


def _deterministic(points: dict[str, list[tuple[int, float]]]) -> dict[str, Any]:
    """Every metric but the timings, with nan (an undefined balanced accuracy) as a string, since
    nan != nan."""
    return {
        k: [(step, "nan" if math.isnan(v) else v) for step, v in values]
        for k, values in points.items()
        if not k.startswith("timing/")
    }


def test_two_runs_in_different_directories_do_not_interfere(
    reference: RunDir, services: dict[str, str]
) -> None:
    """Two identical runs trained at the same time, sharing the Prefect server, the MLflow store
    and the model cache, each wrote its own files, byte for byte the same, and its own runs."""
    other = RunDir(reference.root.parent / "b")
    assert _files(reference, "*.parquet") == _files(other, "*.parquet")
    assert len(_files(reference, "*.parquet")) == 22  # 19 of two rounds, 3 of the warm starts
    assert _same_weights(_checkpoints(reference), _checkpoints(other))
    a, b = _mlflow_view(services, reference), _mlflow_view(services, other)
    assert a["rounds"] == b["rounds"] == [("0", "FINISHED"), ("1", "FINISHED")]
    assert _deterministic(a["points"]) == _deterministic(b["points"])
    ids = {json.loads(r.state_path.read_text())["mlflow_run_id"] for r in (reference, other)}
    assert len(ids) == 2


def test_sigkill_at_every_kill_point_then_resume_matches_the_uninterrupted_run(
    reference: RunDir, services: dict[str, str], tmp_path: Path
) -> None:
    """Kill the training process at each point of KILL_POINTS in turn (each `rlanything resume`
    is killed at the next one): in each warm start, in each of the seven stages of rounds 0 and
    1, and while round 0 is logged to MLflow. Then resume to the end: every Parquet file is
    byte-identical to the uninterrupted run's, as are the checkpoints' weights and AdamW states,
    the accepted counts, the MLflow metrics (none logged twice or missing), the registered
    checkpoint versions (one per role and round) and the plots; every round has one finished
    MLflow run, and the attempts the kills interrupted are marked KILLED."""
    run = RunDir(tmp_path / "run")
    log = tmp_path / "train.log"
    report = []
    for i, point in enumerate(KILL_POINTS):
        args = (
            ["train", "--config", str(CONFIG), "--run-dir", str(run.root)]
            if i == 0
            else ["resume", "--run-dir", str(run.root)]
        )
        start = time.monotonic()
        written = _kill_in(services, args, log, point)
        round_idx, stage = point.split("/")[:2]
        if not stage.startswith("mlflow-"):
            assert run.finished(int(round_idx), stage) is None  # killed before its marker
        for before in KILL_POINTS[:i]:  # what earlier kills interrupted was redone
            r, earlier = before.split("/")[:2]
            if not earlier.startswith("mlflow-") and (r, earlier) != (round_idx, stage):
                assert run.finished(int(r), earlier) is not None, (point, before)
        report.append(
            {
                "point": point,
                "killed_after": run.label(written) if "/" in written else written,
                "seconds": round(time.monotonic() - start, 1),
            }
        )
    _finish(_launch(services, ["resume", "--run-dir", str(run.root)], log), log)

    assert _files(run, "*.parquet") == _files(reference, "*.parquet")
    checkpoints = _checkpoints(run)
    assert sum(c.endswith(OPTIMIZER_STATE) for c in checkpoints) == 4  # 2 roles × 2 rounds
    assert _same_weights(checkpoints, _checkpoints(reference))  # weights and AdamW states
    for role in ("policy", "reward_model"):
        load_model(str(run.checkpoint(role, 1)), device="cpu")
    summary, expected = (json.loads(r.summary_path.read_text()) for r in (run, reference))
    assert [r["env/accepted_tasks"] for r in summary["rounds"]] == [
        r["env/accepted_tasks"] for r in expected["rounds"]
    ]
    assert summary["accepted_tasks_total"] == expected["accepted_tasks_total"]
    # summary.json is written when a round ends: the killed flow runs never got to add theirs.
    assert summary["prefect_flow_run_ids"][-1] != summary["prefect_flow_run_ids"][0]
    mine, theirs = _mlflow_view(services, run), _mlflow_view(services, reference)
    assert mine["status"] == theirs["status"] == "FINISHED"
    assert mine["rounds"] == [("0", "FINISHED"), ("1", "FINISHED")]
    # Killed while logging its metrics, a dataset or a checkpoint, round 0's run was left
    # RUNNING and is marked KILLED; killed at its plots, it was already finished.
    assert mine["killed"] == len(MLFLOW_POINTS) - 1 and not mine["killed_unmarked"]
    for key, points in mine["points"].items():
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), f"{key} logged twice: {points}"
    assert _deterministic(mine["points"]) == _deterministic(theirs["points"])
    assert (
        mine["versions"]
        == theirs["versions"]
        == [(role, r) for role in ("policy", "reward_model") for r in ("0", "1")]
    )
    assert not mine["versions_from_unfinished_runs"]
    # every killed flow run, however early it was killed, was marked Crashed by a resume
    assert not _running_flow_runs(services, run), _running_flow_runs(services, run)
    assert mine["plots"].keys() == {"plots/accepted_tasks.png", "plots/accuracy.png"}
    for path, data in mine["plots"].items():  # the last round's plots, not an earlier round's
        assert data == (run.root / path).read_bytes() == theirs["plots"][path], path
    assert not [p for p in run.root.rglob(".*") if ".tmp-" in p.name or ".old-" in p.name]
    print("\nSIGKILL at each kill point, then resume:")
    for row in report:
        point, what, seconds = row["point"], row["killed_after"], row["seconds"]
        print(f"  {point:<28} killed after {what:<48} {seconds} s")
    print("  every Parquet file byte-identical; checkpoints equal and loadable; metrics once each")


# The fault matrix's places: the warm start, once its policy checkpoint is written (or fails to
# be), and each of round 0's seven stages, once its first output is.
MATRIX_POINTS = ["-1/warm-start/policy", *(f"0/{stage}" for stage in STAGES)]


def _step(
    env: dict[str, str],
    args: list[str],
    log: Path,
    failpoint: str | None = None,
    fault: str | None = None,
) -> tuple[int, str]:
    """Run one `rlanything` process to its end: (exit status, its last line)."""
    extra = {"RLANYTHING_FAILPOINT_FAULT": fault} if fault else {}
    process = _launch({**env, **extra}, args, log, failpoint)
    rc = process.wait(timeout=600)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    return rc, lines[-1] if lines else ""


def _sigterm_group_in(
    env: dict[str, str], args: list[str], log: Path, point: str
) -> tuple[int, float, str, str]:
    """Run until the fail point holds the process after the stage's first write, then SIGTERM
    its process group: (exit status, seconds to exit, last line, the file written)."""
    process, written = _held_at(env, args, log, point)
    start = time.monotonic()
    os.killpg(process.pid, signal.SIGTERM)
    rc = process.wait(timeout=60)
    seconds = time.monotonic() - start
    last = [line for line in log.read_text().splitlines() if line.strip()][-1]
    return rc, seconds, last, written


def _running_flow_runs(env: dict[str, str], run: RunDir) -> list[str]:
    """The flow runs (trains and their rounds) of `run` that the Prefect server has as Running
    or Pending."""
    import httpx

    body = {"flow_runs": {"state": {"type": {"any_": ["RUNNING", "PENDING"]}}}}
    found = httpx.post(f"{env['PREFECT_API_URL']}/flow_runs/filter", json=body, timeout=30)
    mine = [r for r in found.json() if r["parameters"].get("run_dir") == str(run.root)]
    return [f"{r['name']} ({r['id']})" for r in mine]


def test_fault_matrix_each_place_each_fault_then_resume_matches_the_uninterrupted_run(
    reference: RunDir, services: dict[str, str], tmp_path: Path
) -> None:
    """The warm start and each of round 0's seven stages (MATRIX_POINTS), each meeting in turn:
    its first write failing with ENOSPC (exit 2, one line naming the file and the space);
    SIGTERM to the process group while it is held after that write (exit 143 within 30 s, the
    last line naming the signal and the resume command, no Prefect flow run left Running, no
    MLflow run left RUNNING); and, once it has finished, that file truncated (resume exits 2
    naming the file and its `--redo-from` command, which then redoes it). SIGKILL at every place
    is the chain above. Resumed to the end, every Parquet file, checkpoint and accepted count
    matches the uninterrupted run's."""
    run = RunDir(tmp_path / "run")
    client = MlflowClient(services["MLFLOW_TRACKING_URI"])
    table: list[tuple[str, str, str]] = []
    written: dict[str, str] = {}
    redo: list[str] = []  # the command the last truncation's error named, for the next step
    first = ["train", "--config", str(CONFIG), "--run-dir", str(run.root)]
    resume = ["resume", "--run-dir", str(run.root)]

    def truncate_and_resume(point: str, i: int) -> None:
        """Truncate the file the finished stage at `point` wrote first; resume names it."""
        round_idx, stage = point.split("/")[:2]
        assert run.finished(int(round_idx), stage) is not None, point
        path = Path(written[point])
        victim = path / "model.safetensors" if path.is_dir() else path
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
        rc, last = _step(services, resume, tmp_path / f"{i}-truncated.log")
        command = re.search(r"`(rlanything resume [^`]*--redo-from \S+)`", last)
        assert rc == 2 and str(victim) in last and "truncated" in last and command, last
        redo[:] = command.group(1).split()[1:]
        table.append((point, "file truncated after the stage", f"exit 2, names {command.group(1)}"))

    for i, point in enumerate(MATRIX_POINTS):
        args = first if i == 0 else resume
        rc, last = _step(services, args, tmp_path / f"{i}-enospc.log", point, fault="enospc")
        assert rc == 2 and "No space left on device" in last and str(run.root) in last, last
        assert "bytes" in last and "free" in last, last
        round_idx, stage = point.split("/")[:2]
        assert run.finished(int(round_idx), stage) is None
        table.append((point, "ENOSPC on its first write", "exit 2, one line naming the file"))
        if i > 0:  # the stage before has finished now: truncate its file, follow the remedy
            truncate_and_resume(MATRIX_POINTS[i - 1], i)
        log = tmp_path / f"{i}-sigterm.log"
        rc, seconds, last, written[point] = _sigterm_group_in(services, redo or resume, log, point)
        redo.clear()
        assert rc == 128 + signal.SIGTERM and seconds < 30, (rc, seconds, log.read_text()[-3000:])
        assert "stopped by SIGTERM" in last and f"rlanything resume --run-dir {run.root}" in last
        assert not _running_flow_runs(services, run), _running_flow_runs(services, run)
        parent = json.loads(run.state_path.read_text())["mlflow_run_id"]
        statuses = {r.info.status for r in client.search_runs(
            [client.get_run(parent).info.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{parent}'",
        )} | {client.get_run(parent).info.status}  # fmt: skip
        assert "RUNNING" not in statuses, statuses
        table.append((point, "SIGTERM to the process group", f"exit 143 in {seconds:.1f} s"))
    _finish(_launch(services, resume, tmp_path / "last.log"), tmp_path / "last.log")
    truncate_and_resume(MATRIX_POINTS[-1], len(MATRIX_POINTS))
    log = tmp_path / "redo.log"
    _finish(_launch(services, redo, log), log)

    assert _files(run, "*.parquet") == _files(reference, "*.parquet")
    assert _same_weights(_checkpoints(run), _checkpoints(reference))
    summary, expected = (json.loads(r.summary_path.read_text()) for r in (run, reference))
    assert [r["env/accepted_tasks"] for r in summary["rounds"]] == [
        r["env/accepted_tasks"] for r in expected["rounds"]
    ]
    mine = _mlflow_view(services, run)
    assert mine["status"] == "FINISHED" and mine["rounds"] == [("0", "FINISHED"), ("1", "FINISHED")]
    assert not _running_flow_runs(services, run)
    print("\nfault matrix (each resumed; the finished run's files identical to the reference):")
    for point, fault, outcome in table:
        print(f"  {point:<28} {fault:<32} {outcome}")


CORRIDOR = ROOT / "examples" / "corridor" / "config.yaml"
# Around accepted rewrites: round 0 once its next pool (with an accepted rewrite) is written,
# then round 1's task rewriting, its acceptance check once the decisions are written, and once
# the next pool is.
REWRITE_KILL_POINTS = [
    "0/acceptance-check/next-pool",
    "1/task-rewriting",
    "1/acceptance-check",
    "1/acceptance-check/next-pool",
]


def test_sigkill_around_accepted_rewrites_then_resume_matches_the_uninterrupted_run(
    services: dict[str, str], tmp_path: Path
) -> None:
    """The corridor example accepts rewrites in both directions: its tiny environment model is
    warm-started on valid rewrites and its tiny policy solves some tasks, so acc(q') > 0. Kill its
    run at each of REWRITE_KILL_POINTS in turn, resume to the end, and compare with an
    uninterrupted run trained at the same time: the task pools, the acceptance decisions, every
    other Parquet file, the checkpoints and the accepted-task counts (summary and MLflow) are
    identical."""
    config = load_config(CORRIDOR)
    for model in (config.policy.model, config.reward_model.model, config.env_model.model):
        resolve_source(model.source)  # built once, before two processes want them
    reference, run = RunDir(tmp_path / "reference"), RunDir(tmp_path / "run")
    uninterrupted = _launch(
        services,
        ["train", "--config", str(CORRIDOR), "--run-dir", str(reference.root)],
        tmp_path / "reference.log",
    )
    log = tmp_path / "train.log"
    for i, point in enumerate(REWRITE_KILL_POINTS):
        args = (
            ["train", "--config", str(CORRIDOR), "--run-dir", str(run.root)]
            if i == 0
            else ["resume", "--run-dir", str(run.root)]
        )
        _kill_in(services, args, log, point)
        round_idx, stage = point.split("/")[:2]
        assert run.finished(int(round_idx), stage) is None
    _finish(uninterrupted, tmp_path / "reference.log")
    _finish(_launch(services, ["resume", "--run-dir", str(run.root)], log), log)

    decisions = pd.concat(
        read_dataset(reference.dataset(r, "acceptance"), "acceptance") for r in (0, 1)
    )
    accepted = decisions[decisions["accepted"]]
    assert set(accepted["direction"]) == {"harder", "easier"}, decisions
    assert (accepted["acc_candidate"] > 0).all()
    assert _files(run, "*.parquet") == _files(reference, "*.parquet")  # pools and decisions too
    final = read_dataset(run.dataset(2, "tasks"), "tasks")  # both rewrites replaced parents
    rewritten = final[final["origin"] == "rewritten"]
    assert sorted(rewritten["direction"]) == ["easier", "harder"]
    assert set(rewritten["task_id"]) == set(accepted["parent_task_id"])
    assert _same_weights(_checkpoints(run), _checkpoints(reference))
    summary, expected = (json.loads(x.summary_path.read_text()) for x in (run, reference))
    assert summary["accepted_tasks_total"] == expected["accepted_tasks_total"] == len(accepted)
    mine, theirs = _mlflow_view(services, run), _mlflow_view(services, reference)
    total = "env/accepted_tasks_total"
    assert mine["points"][total] == theirs["points"][total] == [(0, 1.0), (1, 2.0)]
    assert mine["rounds"] == [("0", "FINISHED"), ("1", "FINISHED")]


def _corrupt_copy(reference: RunDir, target: Path) -> RunDir:
    shutil.copytree(reference.root, target)
    return RunDir(target)


def test_truncated_parquet_is_named_on_resume(
    reference: RunDir, services: dict[str, str], tmp_path: Path
) -> None:
    run = _corrupt_copy(reference, tmp_path / "run")
    victim = run.dataset(1, "judgments")
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    log = tmp_path / "resume.log"
    rc = _launch(services, ["resume", "--run-dir", str(run.root)], log).wait(timeout=300)
    text = log.read_text()
    assert rc == 2, text[-3000:]
    assert f"error: {victim} has" in text.replace("\n", "") or str(victim) in text
    assert "truncated" in text and "reward-scoring" in text


def test_corrupted_checkpoint_is_named_on_resume(
    reference: RunDir, services: dict[str, str], tmp_path: Path
) -> None:
    run = _corrupt_copy(reference, tmp_path / "run")
    weights = run.checkpoint("policy", 0) / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: same size, different content
    weights.write_bytes(bytes(data))
    log = tmp_path / "resume.log"
    rc = _launch(services, ["resume", "--run-dir", str(run.root)], log).wait(timeout=300)
    text = log.read_text().replace("\n", "")
    assert rc == 2, text[-3000:]
    assert "model.safetensors" in text and "sha256 mismatch" in text and "policy-update" in text


def test_resume_with_another_mlflow_store_names_the_store_it_was_started_with(
    reference: RunDir, services: dict[str, str], tmp_path: Path
) -> None:
    run = _corrupt_copy(reference, tmp_path / "run")
    state = run.state_path.read_bytes()
    log = tmp_path / "resume.log"
    other = {**services, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'other.db'}"}
    rc = _launch(other, ["resume", "--run-dir", str(run.root)], log).wait(timeout=300)
    text = log.read_text().replace("\n", "")
    assert rc == 2, text[-3000:]
    assert "does not have" in text and services["MLFLOW_TRACKING_URI"] in text
    assert "Traceback" not in text
    assert run.state_path.read_bytes() == state


def test_verify_and_sweep_in_process(tmp_path: Path) -> None:
    """The marker records each output file's size and digest; verify names what changed; a dead
    process's half-written files are swept, a live one's are not."""
    run = RunDir(tmp_path / "run")
    out = run.dataset(0, "rollouts")
    out.parent.mkdir(parents=True)
    out.write_bytes(b"PAR1 data PAR1")
    record = run.finish(0, "rollout", {"rollouts": str(out)}, {}, 0.1)
    assert record["files"] == {
        "round_000/rollouts.parquet": {
            "bytes": 14,
            "sha256": record["files"]["round_000/rollouts.parquet"]["sha256"],
        }
    }
    run.verify(0, "rollout", run.finished(0, "rollout") or {})
    out.unlink()
    with pytest.raises(RunDirError, match=r"rollouts.parquet is missing.*rollout stage"):
        run.verify(0, "rollout", record)
    run.marker(0, "rollout").write_text("{not json")
    with pytest.raises(RunDirError, match=r"rollout.json: the stage marker is unreadable"):
        run.finished(0, "rollout")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    stale = out.parent / f".rollouts.parquet.tmp-{dead}-0123abcd"
    stale.write_bytes(b"half")
    mine = out.parent / f".judgments.parquet.tmp-{os.getpid()}-0123abcd"
    mine.write_bytes(b"busy")
    assert run.sweep_partial() == [stale]
    assert mine.exists() and not stale.exists()


def _tiny_checkpoint(path: Path) -> tuple[Any, Any]:
    model, tokenizer = load_model(load_config(CONFIG).policy.model.source, device="cpu")
    save_checkpoint(model, tokenizer, path)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the next checkpoint differs from the saved one
    return model, tokenizer


def _previous_checkpoint_survives(path: Path, attempt: Any) -> None:
    before = load_file(str(path / "model.safetensors"))
    with pytest.raises(OSError) as caught:
        attempt()
    assert caught.value.errno in (errno.ENOSPC, errno.EFBIG), caught.value
    assert re.search(r"it needs about \d+ bytes, \d+ bytes are free there", str(caught.value))
    after = load_file(str(path / "model.safetensors"))
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    load_model(str(path), device="cpu")  # still a loadable checkpoint
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no half-written leftovers


def test_file_size_limit_mid_checkpoint_keeps_the_previous_one(tmp_path: Path) -> None:
    """The kernel refuses writes past RLIMIT_FSIZE (EFBIG) as a full disk refuses them (ENOSPC):
    the checkpoint being written is abandoned, the previous one stays whole."""
    path = tmp_path / "ckpt" / "round_000"
    model, tokenizer = _tiny_checkpoint(path)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def attempt() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
        try:
            save_checkpoint(model, tokenizer, path)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    try:
        _previous_checkpoint_survives(path, attempt)
    finally:
        signal.signal(signal.SIGXFSZ, handler)


def test_full_disk_mid_checkpoint_keeps_the_previous_one(tmp_path: Path) -> None:
    """A real full disk: a tmpfs with room for one checkpoint and a half (root only)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    first = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=720k", "tmpfs", str(mount)], capture_output=True
    )
    if first.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {first.stderr.decode().strip()}")
    try:
        path = mount / "ckpt" / "round_000"
        model, tokenizer = _tiny_checkpoint(path)
        _previous_checkpoint_survives(path, lambda: save_checkpoint(model, tokenizer, path))
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)  # tensors may still map files


def test_processes_that_open_a_new_sqlite_store_at_once_all_succeed(tmp_path: Path) -> None:
    """Three processes create the same MLflow SQLite store and experiment at the same moment
    (MLflow's schema migrations break each other without the lock in `open_experiment`)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = (
        "import sys; from rlanything_flows.tracking import open_experiment; "
        "print(open_experiment(sys.argv[1], 'side-by-side'))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, uri],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err[-3000:]
    ids = {out.strip() for out, _ in results}
    assert len(ids) == 1 and ids != {""}
    assert MlflowClient(uri).get_experiment_by_name("side-by-side").experiment_id in ids
