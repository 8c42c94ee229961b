"""End-to-end: the round flow and the training flow under Prefect's test harness, with tiny local
models, MLflow on a temporary SQLite store."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from flow_helpers import (
    STAGES,
    _task_runs,
    _two_rounds_finished,
    _weights,
    tiny,
)
from mlflow.exceptions import MlflowException
from prefect import flow
from prefect.client.orchestration import get_client
from safetensors.torch import load_file

import rlanything_tasks.playing
import rlanything_tasks.stages
import rlanything_tasks.updates
from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.signals import judge_gain, judge_metrics, outcome_verdicts
from rlanything_core.models.loading import resolve_source
from rlanything_core.run.config import RunConfig, load_config
from rlanything_core.run.rundir import RunDir
from rlanything_flows.ablate import (
    ROWS,
    _current,
    _row_config,
    rlanything_ablate,
    share_start,
    warm_started,
)
from rlanything_flows.evaluate import SPLITS, held_out_digest, rlanything_eval
from rlanything_flows.tracking import registered_model_name
from rlanything_flows.train import rlanything_train

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _subflows_named_and_progress_logged(flow_run_id: str) -> None:
    """The train flow run's subflows are `round-N` and `eval-step-N`, and its logs (those of
    its task runs included) hold each stage's progress line, as the UI's log view shows them."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterParentFlowRunId,
        LogFilter,
        LogFilterFlowRunId,
    )

    with get_client(sync_client=True) as client:
        subflows = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[UUID(flow_run_id)])
            )
        )
        names = sorted(r.name for r in subflows)
        assert names == ["eval-step-0", "eval-step-2", "round-0", "round-1"], names
        owners = [UUID(flow_run_id), *(r.id for r in subflows)]
        deadline = time.monotonic() + 30  # logs reach the API in batches
        while True:
            logs = client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=owners))
            )
            lines = [entry.message for entry in logs]
            if any(re.fullmatch(r"round 1 rollout: (\d+)/\1 in \d+ s", m) for m in lines):
                break
            assert time.monotonic() < deadline, lines
            time.sleep(1)
    assert any(re.fullmatch(r"eval id rollout: (\d+)/\1 in \d+ s", m) for m in lines), lines


def _artifact_keys(flow_run_id: Any) -> set[str]:
    from prefect.client.schemas.filters import FlowRunFilter

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            flow_run_filter=FlowRunFilter(id={"any_": [flow_run_id]})  # type: ignore[arg-type]
        )
    return {a.key for a in artifacts if a.key}


def test_two_rounds_end_to_end(tmp_path: Path) -> None:
    # held-out evaluation of the start and of the end, which moves the `best` aliases
    data = tiny(rounds=2).model_dump()
    data["evaluation"] = {"num_tasks": 2, "rollouts_per_task": 1, "every": 2}
    # registered models of this test's own: the session's store holds other tests' `best`
    data["tracking"]["experiment"] = "rlanything-two-rounds"
    config = RunConfig.model_validate(data)
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))

    # every stage of both rounds finished, and every file matches its schema
    _two_rounds_finished(run, summary)
    pool = read_dataset(run.dataset(2, "tasks"), "tasks")
    assert len(pool) == config.environment.num_tasks
    rollouts = read_dataset(run.dataset(1, "rollouts"), "rollouts")
    assert len(rollouts) > 0 and set(rollouts["round"]) == {1}
    assert rollouts["checkpoint"].iloc[0] == "checkpoints/policy/round_000"

    # Prefect ran the seven task runs of each round, all completed
    flow_run_id = summary["prefect_flow_run_ids"][-1]
    task_runs = _task_runs(flow_run_id)
    names = sorted(t.name for t in task_runs)
    assert names == sorted(f"{s}-round-{r}" for s in STAGES for r in range(2))
    assert all(t.state.is_completed() for t in task_runs)
    # each stage was handed the previous stage's record and waited for its task run: the edges
    # of the round's graph in the Prefect UI
    for round_run in {t.flow_run_id for t in task_runs}:
        with get_client(sync_client=True) as client:
            graph = client._client.get(f"/flow_runs/{round_run}/graph-v2").json()
        nodes = {node_id: node for node_id, node in graph["nodes"]}
        edges = {
            (nodes[parent["id"]]["label"].rsplit("-round-", 1)[0], node["label"])
            for node in nodes.values()
            for parent in node["parents"]
        }
        r = nodes[next(iter(nodes))]["label"].rsplit("-round-", 1)[1]
        # every link of the chain is drawn. Prefect may add a link of its own from a stage further
        # back (it matches handed objects to earlier results by id(); tasks/common.py::run_stage),
        # never one that points backwards
        chain = {(a, f"{b}-round-{r}") for a, b in itertools.pairwise(STAGES)}
        assert chain <= edges
        order = {name: i for i, name in enumerate(STAGES)}
        assert all(order[a] < order[b.rsplit("-round-", 1)[0]] for a, b in edges), edges
    # one table of rewrites and one summary per round and run, the decision columns first
    slug = run.root.name.lower().replace("_", "-")
    keys = set().union(*(_artifact_keys(i) for i in {t.flow_run_id for t in task_runs}))
    assert keys == {
        *(f"rlanything-rewrites-{slug}-round-{r}" for r in range(2)),
        *(f"rlanything-summary-{slug}-round-{r}" for r in range(2)),
    }
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterKey,
        FlowRunFilter,
        FlowRunFilterId,
    )

    rounds = FlowRunFilterId(any_=list({t.flow_run_id for t in task_runs}))
    with get_client(sync_client=True) as client:
        (table,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[f"rlanything-rewrites-{slug}-round-0"])
            ),
            flow_run_filter=FlowRunFilter(id=rounds),  # other tests' runs are named "run" too
        )
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert list(rows[0])[:5] == ["direction", "accepted", "acc_before", "acc_after", "changes"]

    # the subflows say what they are, and the stages' progress lines are in the flow run's logs
    _subflows_named_and_progress_logged(flow_run_id)

    # MLflow: one parent run tagged with the flow run, one nested run per round; the flow run
    # links it with an artifact, and it links the flow run back
    client = mlflow.tracking.MlflowClient()
    parent = client.get_run(summary["mlflow_run_id"])
    assert parent.data.tags["prefect.flow_run_id"] == flow_run_id
    assert parent.data.tags["prefect.flow_run_url"].endswith(f"/runs/flow-run/{flow_run_id}")
    with get_client(sync_client=True) as prefect:
        (link,) = prefect.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[f"rlanything-mlflow-{slug}"])
            ),
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(flow_run_id)])),
        )
    assert f"runs/{parent.info.run_id}?workflowType=machine_learning" in str(link.data)
    assert parent.data.params["mode"] == "env"
    experiment = client.get_experiment(parent.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # training view
    for key in ("policy/accuracy", "policy/loss", "reward_model/loss", "env/accepted_tasks_total"):
        history = client.get_metric_history(parent.info.run_id, key)
        assert [m.step for m in history] == [0, 1], key
    children = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
    )
    evaluations = [c for c in children if c.data.tags.get("rlanything.kind") == "eval"]
    children = [c for c in children if c not in evaluations]
    assert len(evaluations) == 2  # steps 0 and 2 of the learning curve
    assert sorted(c.data.tags["rlanything.round"] for c in children) == ["0", "1"]
    for child in children:
        r = int(child.data.tags["rlanything.round"])
        # lineage: every dataset of the round, its role, the stage that wrote it, its sha256
        logged = {d.dataset.name: d for d in child.inputs.dataset_inputs}
        # not the unit-test datasets, which a judging reward model leaves empty
        written = ["rollouts", "judgments", "policy_samples", "rm_samples", "candidates"]
        names = [f"{n}_round_{r:03d}" for n in [*written, "acceptance"]]
        assert set(logged) == {f"tasks_round_{r:03d}", f"tasks_round_{r + 1:03d}", *names}
        for name, d in logged.items():
            tags = {t.key: t.value for t in d.tags}
            source = Path(json.loads(d.dataset.source)["uri"])
            sha = hashlib.sha256(source.read_bytes()).hexdigest()
            assert tags["sha256"] == sha and d.dataset.digest == sha[:16], name
            role = "input" if name == f"tasks_round_{r:03d}" else "output"
            assert tags["mlflow.data.context"] == role, name
        assert {t.key: t.value for t in logged[f"rollouts_round_{r:03d}"].tags}["stage"] == (
            "rollout"
        )
        assert "timing/rollout_s" in child.data.metrics
        # the round's run spans its seven stages and carries the config and the round as params
        stages = sum(v for k, v in child.data.metrics.items() if k.startswith("timing/"))
        assert child.info.end_time - child.info.start_time >= 1000 * stages
        assert child.data.params["round"] == str(r) and child.data.params["mode"] == "env"
        # both checkpoints: Logged Models of the round's run, registered as versions, whose
        # files are the checkpoint's
        for role in ("policy", "reward_model"):
            name = registered_model_name(config.tracking.experiment, role)
            found = client.search_model_versions(f"name = '{name}'")
            (version,) = [v for v in found if v.run_id == child.info.run_id]
            assert version.tags["rlanything.round"] == str(r)
            assert version.source.startswith("models:/m-")  # a Logged Model, the run's output
            outputs = {o.model_id for o in child.outputs.model_outputs}
            assert version.source.removeprefix("models:/") in outputs
            local = Path(mlflow.artifacts.download_artifacts(f"models:/{name}/{version.version}"))
            assert _weights(local).keys() == _weights(run.checkpoint(role, r)).keys()
            ckpt = run.checkpoint(role, r) / "model.safetensors"
            assert (local / "model.safetensors").read_bytes() == ckpt.read_bytes(), role
    # `best`: the round-1 checkpoints, the only evaluated versions of this run (step 2)
    for role, key in (
        ("policy", "eval/id/policy_accuracy"),
        ("reward_model", "eval/id/rm_process_balanced_accuracy"),
    ):
        name = registered_model_name(config.tracking.experiment, role)
        score = summary["eval"][-1][key]
        if math.isnan(score):  # undefined (one class among the held-out steps): ranks nothing
            with pytest.raises(MlflowException, match="best"):
                client.get_model_version_by_alias(name, "best")
            continue
        best = client.get_model_version_by_alias(name, "best")
        assert best.tags["rlanything.parent_run_id"] == parent.info.run_id
        assert best.tags["rlanything.round"] == "1" and best.tags["heldout.metric"] == key
        assert float(best.tags["heldout.score"]) == score
        one_line = mlflow.artifacts.download_artifacts(f"models:/{name}@best")
        assert (Path(one_line) / "model.safetensors").is_file()
    assert (run.root / "plots" / "accuracy.png").is_file()

    # the parameters changed: policy and reward model differ from where they started
    for role, source in (
        ("policy", config.policy.model.source),
        ("reward_model", config.reward_model.model.source),
    ):
        start = _weights(Path(resolve_source(source)))
        end = _weights(run.checkpoint(role, 1))
        assert any(not torch.equal(start[k], end[k]) for k in start), role
    stored = json.loads(run.summary_path.read_text())
    assert stored["rounds"][1]["env/accepted_tasks_total"] >= 0


def test_transient_failure_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = rlanything_tasks.playing.judge
    calls = {"n": 0}

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("reward model endpoint went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(rlanything_tasks.playing, "judge", flaky)
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=tiny(rounds=1), run_dir=str(run.root))
    assert calls["n"] == 2
    assert len(summary["rounds"]) == 1
    assert run.finished(0, "acceptance-check") is not None


def test_each_flow_run_trains_its_own_run_dir_and_a_finished_one_says_so(tmp_path: Path) -> None:
    """run_dir placeholders give every flow run (a scheduled night) a directory of its own; the
    same directory started again trains nothing and ends in the state AlreadyFinished."""
    from datetime import UTC, datetime, timedelta

    config = tiny(rounds=1, mode="outcome_only")
    template = str(tmp_path / "nightly" / "{date}" / "{flow_run_id}")
    first = rlanything_train(config=config, run_dir=template, return_state=True)
    second = rlanything_train(config=config, run_dir=template, return_state=True)
    dirs = []
    for state in (first, second):
        assert state.is_completed() and state.name == "Completed"
        root = Path(state.result()["run_dir"])
        assert root.name == str(state.state_details.flow_run_id)
        today = datetime.now(UTC).date()
        assert root.parent.name in {str(today), str(today - timedelta(days=1))}
        assert len(state.result()["rounds"]) == 1
        dirs.append(root)
    assert dirs[0] != dirs[1]  # two nights, two runs: the second trained too

    client = mlflow.tracking.MlflowClient()
    parent = client.get_run(first.result()["mlflow_run_id"]).info
    time.sleep(1.1)
    again = rlanything_train(config=config, run_dir=str(dirs[0]), return_state=True)
    assert again.is_completed() and again.name == "AlreadyFinished"
    assert "nothing was trained" in (again.message or "")
    assert again.result()["run_dir"] == str(dirs[0]) and len(again.result()["rounds"]) == 1
    # MLflow: the idle attempt leaves the run as it was, its duration does not grow
    after = client.get_run(parent.run_id).info
    assert (after.status, after.end_time) == ("FINISHED", parent.end_time)
    (active,) = client.get_metric_history(parent.run_id, "timing/active_s")
    assert 0 < active.value <= (parent.end_time - parent.start_time) / 1000 + 0.5

    with pytest.raises(ValueError, match=r"placeholder other than \{date\}"):
        rlanything_train(config=config, run_dir=str(tmp_path / "{night}"))


def test_deterministic_failure_is_not_retried_and_resume_redoes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = rlanything_tasks.updates.rl_update
    calls = {"n": 0}

    def broken(source: str, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if "round_000" in source:  # the policy update of round 1 starts from round 0's checkpoint
            raise ValueError("a bug in user code")
        return real(source, *args, **kwargs)

    monkeypatch.setattr(rlanything_tasks.updates, "rl_update", broken)
    run = RunDir(tmp_path / "run")
    config = tiny(rounds=2)
    with pytest.raises(ValueError, match="a bug in user code"):
        rlanything_train(config=config, run_dir=str(run.root))
    failed_calls = calls["n"]
    assert failed_calls == 3  # round 0: policy + RM; round 1: policy fails once, no retry
    assert run.finished(1, "advantage-computation") is not None
    assert run.finished(1, "policy-update") is None
    done = {
        (r, s): run.marker(r, s).read_text()
        for r in range(2)
        for s in STAGES
        if run.finished(r, s) is not None
    }
    rollouts = run.dataset(1, "rollouts").stat().st_mtime_ns

    monkeypatch.setattr(rlanything_tasks.updates, "rl_update", real)
    summary = rlanything_train(config=config, run_dir=str(run.root))
    assert [r["round"] for r in summary["rounds"]] == [0, 1]
    for (r, s), text in done.items():
        assert run.marker(r, s).read_text() == text, (r, s)  # not redone
    assert run.dataset(1, "rollouts").stat().st_mtime_ns == rollouts
    assert run.finished(1, "acceptance-check") is not None
    assert len(summary["prefect_flow_run_ids"]) == 2
    # In Prefect, the stages that resume skipped say so; the ones that ran are plain Completed
    states = {t.name: t.state for t in _task_runs(summary["prefect_flow_run_ids"][1])}
    for stage in ("rollout", "reward-scoring", "advantage-computation"):
        state = states[f"{stage}-round-1"]
        assert state.is_completed() and state.name == "Skipped", stage
        digest = hashlib.sha256(run.marker(1, stage).read_bytes()).hexdigest()
        assert f"sha256 {digest}" in (state.message or "")
    assert states["policy-update-round-1"].name == "Completed"


def test_warm_start_fine_tunes_each_enabled_model(tmp_path: Path) -> None:
    ws = {"enabled": True, "episodes": 2, "epochs": 1, "lr": 1e-3, "micro_batch_size": 8}
    data = tiny(rounds=1).model_dump()
    data["policy"]["model"]["source"] = "tiny:0"
    data["policy"]["warm_start"] = ws
    data["env_model"] |= {"warm_start": ws, "lora_rank": 4}
    config = RunConfig.model_validate(data)
    run = RunDir(tmp_path / "run")
    record = rlanything_tasks.stages.warm_start.fn(config, str(run.root), -1)

    assert set(record["outputs"]) == {
        "policy_sft", "policy_checkpoint", "env_model_sft", "env_model_checkpoint",
    }  # fmt: skip
    pairs = read_dataset(record["outputs"]["policy_sft"], "sft_samples")
    assert len(pairs) == record["metrics"]["policy/warm_start_pairs"] > 0
    assert pairs["response"].str.match(r"I will .+\. \\boxed\{\d+\}").all()
    start = _weights(Path(resolve_source("tiny:0")))
    end = _weights(run.warm_start_checkpoint("policy"))
    assert any(not torch.equal(start[k], end[k]) for k in start)
    assert (run.warm_start_checkpoint("env_model") / "adapter_config.json").is_file()
    # round 0 starts from the warm start; the reward model had none
    assert run.model_before("policy", 0, "tiny:0") == str(run.warm_start_checkpoint("policy"))
    assert run.model_before("reward_model", 0, "tiny-judge:0") == "tiny-judge:0"
    assert run.finished(-1, "warm-start") is not None
    # a retried stage keeps the roles it finished: the policy's, its checkpoint untouched; the
    # records name their files relative to the run directory, as stage markers do
    record_of = json.loads((run.root / "warm_start" / "policy.json").read_text())
    assert record_of["outputs"]["policy_checkpoint"] == "checkpoints/policy/warm_start"
    (run.root / "warm_start" / "env_model.json").unlink()
    run.marker(-1, "warm-start").unlink()  # the stage stopped before its end
    mtime = run.warm_start_checkpoint("policy").stat().st_mtime_ns
    again = rlanything_tasks.stages.warm_start.fn(config, str(run.root), -1)
    assert again["metrics"] == record["metrics"]
    assert run.warm_start_checkpoint("policy").stat().st_mtime_ns == mtime
    assert (run.root / "warm_start" / "env_model.json").is_file()


def test_eval_on_held_out_tasks(tmp_path: Path) -> None:
    data = tiny(rounds=1).model_dump()
    data["evaluation"] = {"num_tasks": 2, "rollouts_per_task": 2, "seed": 7}
    config = RunConfig.model_validate(data)
    out = tmp_path / "eval"
    metrics = rlanything_eval(
        config=config, policy="tiny-policy:0", reward_model="tiny-judge:0", out_dir=str(out)
    )
    accuracies = (
        "policy_accuracy",
        "invalid_actions",
        "pass_at_1",
        "pass_at_2",
        "rm_process_accuracy",
        "rm_process_balanced_accuracy",
        "rm_outcome_accuracy",
        "rm_outcome_balanced_accuracy",
        "outcome_judge_process_balanced_accuracy",
    )
    rates = (
        "rm_parse_failure_rate",
        "rm_progress_label_rate",
        "rm_process_majority_baseline",
        "rm_outcome_majority_baseline",
    )
    names = {*rates, "episodes", "tasks", "steps", "rm_steps", "cut_episodes"}
    names |= {f"{a}{suffix}" for a in accuracies for suffix in ("", "_ci_low", "_ci_high")}
    assert set(metrics) == {f"eval/{split}/{name}" for split in ("id", "ood") for name in names}
    for split in ("id", "ood"):
        m = {name: metrics[f"eval/{split}/{name}"] for name in names}
        assert (m["episodes"], m["tasks"]) == (4.0, 2.0)
        assert m["rm_steps"] == float(
            len(read_dataset(out / f"{split}_rollouts.parquet", "rollouts"))
        )
        assert all(0.0 <= m[name] <= 1.0 for name in rates)
        assert m["rm_process_majority_baseline"] >= 0.5
        for name in accuracies:
            # a balanced accuracy is nan when one class is absent (tiny policies rarely succeed)
            if not math.isnan(m[name]):
                assert 0.0 <= m[f"{name}_ci_low"] <= m[name] <= m[f"{name}_ci_high"] <= 1.0
        assert m["cut_episodes"] == 0  # every household episode ends by itself
        accuracy = m["policy_accuracy"]
        assert m["pass_at_1"] == pytest.approx(accuracy)
        assert m["pass_at_2"] >= accuracy
        # the judged episodes are the policy's: a constant verdict scores max(acc, 1 − acc)
        assert m["rm_outcome_majority_baseline"] == pytest.approx(max(accuracy, 1 - accuracy))
    for split in ("id", "ood"):
        rollouts = read_dataset(out / f"{split}_rollouts.parquet", "rollouts")
        assert rollouts["task_id"].nunique() == 2
        assert rollouts.drop_duplicates(["task_id", "rollout_idx"]).shape[0] == 4
        judgments = read_dataset(out / f"{split}_judgments.parquet", "judgments")
        assert len(judgments) == 3 * len(rollouts)
    ood_goals = set(read_dataset(out / "ood_rollouts.parquet", "rollouts")["goal"])
    assert all("cool" in g or "two" in g for g in ood_goals)
    stored = json.loads((out / "eval.json").read_text())
    assert stored["eval/id/policy_accuracy"] == metrics["eval/id/policy_accuracy"]
    runs = mlflow.search_runs(
        experiment_names=[config.tracking.experiment],
        filter_string=(
            f"tags.`rlanything.kind` = 'eval' and tags.`rlanything.out_dir` = '{out.resolve()}'"
        ),
        output_format="list",
    )
    assert (
        runs
        and runs[0].data.metrics["eval/ood/policy_accuracy"] == metrics["eval/ood/policy_accuracy"]
    )


def test_learning_curve_evaluates_every_round_once(tmp_path: Path) -> None:
    data = tiny(rounds=2, mode="policy", rollouts_per_task=2).model_dump()  # RM fixed, judging
    data["evaluation"] = {"num_tasks": 2, "rollouts_per_task": 2, "seed": 7, "every": 1}
    data["environment"] |= {"num_tasks": 2}
    data["reward_model"]["votes"] = 1
    data["tracking"]["checkpoints"] = "reference"
    data["tracking"]["experiment"] = "rlanything-curve"  # its own `best` (the store is shared)
    config = RunConfig.model_validate(data)
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))

    assert [point["step"] for point in summary["eval"]] == [0, 1, 2]
    for step, point in enumerate(summary["eval"]):
        stored = json.loads((run.root / "eval" / f"step_{step:03d}" / "eval.json").read_text())
        # step 0: the starting models; step s: the checkpoints after s rounds
        policy = "tiny-policy:0" if step == 0 else str(run.checkpoint("policy", step - 1))
        assert (stored["policy"], stored["reward_model"]) == (policy, "tiny-judge:0")
        assert point["eval/id/policy_accuracy"] == stored["eval/id/policy_accuracy"]
        assert "eval/ood/policy_accuracy_ci_high" in point
    assert (run.root / "plots" / "learning_curve.png").is_file()
    client = mlflow.tracking.MlflowClient()
    for key in ("eval/id/policy_accuracy", "eval/ood/rm_process_balanced_accuracy"):
        history = client.get_metric_history(summary["mlflow_run_id"], key)
        assert sorted(m.step for m in history) == [0, 1, 2], key
    nested = client.search_runs(
        [client.get_run(summary["mlflow_run_id"]).info.experiment_id],
        filter_string=(
            f"tags.mlflow.parentRunId = '{summary['mlflow_run_id']}' "
            "and tags.`rlanything.kind` = 'eval'"
        ),
    )
    assert len(nested) == 3

    # resume as after a crash between logging step 2 and writing summary.json: its eval.json
    # is read back, not redone, and no point is logged twice
    stamp = (run.root / "eval" / "step_002" / "eval.json").stat().st_mtime_ns
    stored = json.loads(run.summary_path.read_text())
    stored["eval"].pop()
    run.summary_path.write_text(json.dumps(stored))
    summary = rlanything_train(config=config, run_dir=str(run.root))
    assert [point["step"] for point in summary["eval"]] == [0, 1, 2]
    assert (run.root / "eval" / "step_002" / "eval.json").stat().st_mtime_ns == stamp
    history = client.get_metric_history(summary["mlflow_run_id"], "eval/id/policy_accuracy")
    assert sorted(m.step for m in history) == [0, 1, 2]
    # the policy's versions (external models: checkpoints: reference) carry their held-out
    # scores, once each, and `best` names the better one; the fixed reward model has none
    versions = [
        v
        for v in client.search_model_versions("name = 'rlanything-curve-policy'")
        if v.tags.get("rlanything.parent_run_id") == summary["mlflow_run_id"]
    ]
    scores = {int(v.tags["rlanything.round"]): float(v.tags["heldout.score"]) for v in versions}
    assert scores == {s - 1: summary["eval"][s]["eval/id/policy_accuracy"] for s in (1, 2)}
    best = client.get_model_version_by_alias("rlanything-curve-policy", "best")
    assert best.tags["rlanything.parent_run_id"] == summary["mlflow_run_id"]
    assert float(best.tags["heldout.score"]) == max(scores.values())
    best_round = int(best.tags["rlanything.round"])
    assert best.tags["checkpoint"] == str(run.checkpoint("policy", best_round))


SLUG_NAMES = {"outcome-only": "Outcome-only", "policy": "Policy"}


def test_an_ablation_row_has_one_colour_in_every_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The RM plots leave Outcome-only out; Policy keeps the colour it has where Outcome-only is
    drawn (the held-out and per-round plots)."""
    import matplotlib.pyplot as plt

    from rlanything_flows import tracking

    drawn: dict[str, dict[str, str]] = {}

    def capture(fig: Any, ax: Any, xlabel: str, title: str, path: Path) -> Path:
        drawn[path.name] = {line.get_label(): line.get_color() for line in ax.get_lines()}
        plt.close(fig)
        return path

    monkeypatch.setattr(tracking, "_save_rows_figure", capture)
    accuracy = {"eval/id/policy_accuracy": [0.2, 0.1, 0.3]}
    judged = accuracy | {"eval/id/rm_process_balanced_accuracy": [0.7, 0.6, 0.8]}
    rows = {"Outcome-only": accuracy, "Policy": judged, "+Reward": judged}
    tracking.plot_heldout(
        {n: [{"step": 0} | p, {"step": 2} | p] for n, p in rows.items()}, tmp_path
    )
    round_0 = {"round": 0, "policy/accuracy": 0.1, "env/accepted_tasks_total": 0.0}
    tracking.plot_rows({name: [[round_0]] for name in rows}, tmp_path)
    assert set(drawn) == {
        "ablation_heldout.png", "ablation_rm_process.png", "ablation_accuracy.png",
        "ablation_accepted.png",
    }  # fmt: skip
    assert list(drawn["ablation_rm_process.png"]) == ["Policy", "+Reward"]
    for name in rows:
        assert len({plot[name] for plot in drawn.values() if name in plot}) == 1, (name, drawn)
    assert len({drawn["ablation_heldout.png"][name] for name in rows}) == 3


def test_before_plays_the_episodes_the_trained_rows_pool(tmp_path: Path) -> None:
    """Before's evaluation plays seeds × the configured episodes per task; a stored one of
    fewer is not current, and the trained runs' copies of it (their curves' first point) are
    replaced, while a run's own step-0 evaluation is left alone."""
    data = tiny(rounds=1).model_dump()
    data["evaluation"] = {"num_tasks": 3, "rollouts_per_task": 2, "curve_splits": ["id"]}
    config = RunConfig.model_validate(data)
    before_row, policy_row = ROWS[0], ROWS[2]
    assert _row_config(config, before_row, 0, 3).evaluation.rollouts_per_task == 6
    assert _row_config(config, policy_row, 1, 3).evaluation.rollouts_per_task == 2
    before = tmp_path / "before" / "eval"
    before.mkdir(parents=True)

    def evaluated(episodes: int, marker: str) -> None:
        metrics = {f"eval/{s}/episodes": float(episodes) for s in ("id", "ood")}
        (before / "eval.json").write_text(json.dumps(metrics | {"eval/id/tasks": 3.0}))
        (before / "id_rollouts.parquet").write_text(marker)

    evaluated(6, "older")
    assert all(_current(before, config, split) for split in SPLITS)  # 3 tasks × 2
    assert not _current(before, _row_config(config, before_row, 0, 3), "id")
    # stored before evaluations had digests: each split as the environment defines it
    shifted = config.evaluation.model_copy(update={"ood_options": {"num_rooms": [2, 2]}})
    redefined = config.model_copy(update={"evaluation": shifted})
    assert _current(before, redefined, "id") and not _current(before, redefined, "ood")
    run, own = RunDir(tmp_path / "run"), RunDir(tmp_path / "own")
    (own.root / "eval" / "step_000").mkdir(parents=True)
    (own.root / "eval" / "step_000" / "eval.json").write_text('{"eval/id/episodes": 6.0}')
    for target in (run, own):
        share_start(before, target, config)
    start = run.root / "eval" / "step_000"
    assert (start / "id_rollouts.parquet").read_text() == "older"
    evaluated(18, "newer")
    for target in (run, own):
        share_start(before, target, config)
    copied = json.loads((start / "eval.json").read_text())
    assert copied["eval/id/episodes"] == 18.0 and copied["shared_from"] == str(before)
    assert (start / "id_rollouts.parquet").read_text() == "newer"
    assert sorted(p.name for p in start.parent.iterdir()) == ["step_000"]
    assert (own.root / "eval" / "step_000" / "eval.json").read_text() == '{"eval/id/episodes": 6.0}'


def test_ablate_one_seed_one_round(tmp_path: Path) -> None:
    data = tiny(rounds=1, rollouts_per_task=2).model_dump()
    data["evaluation"] = {"num_tasks": 1, "rollouts_per_task": 2, "seed": 7, "every": 1}
    data["environment"] |= {"num_tasks": 2, "step_slack": 2}
    data["reward_model"]["votes"] = 2
    data["tracking"]["checkpoints"] = "reference"
    data["policy"]["warm_start"] = {"enabled": True, "episodes": 1, "epochs": 1}
    config = RunConfig.model_validate(data)
    out = tmp_path / "ablation"
    summary = rlanything_ablate(config=config, seeds=1, out_dir=str(out))
    # held-out curves: every trained row at rounds done 0 and 1, pooled over seeds, plotted
    curves = json.loads((out / "ablation.json").read_text())["curves"]
    assert sorted(curves) == sorted(set(summary) - {"Before"})
    assert [p["step"] for p in curves["Policy"]] == [0, 1]
    policy_at_1 = json.loads(
        (out / "policy" / "seed_0" / "run" / "eval" / "step_001" / "eval.json").read_text()
    )
    assert curves["Policy"][1]["eval/id/policy_accuracy"][0] == pytest.approx(
        policy_at_1["eval/id/policy_accuracy"]
    )
    assert "eval/id/rm_process_balanced_accuracy" in curves["+Reward"][1]
    assert not any(key.startswith("eval/id/rm_") for key in curves["Outcome-only"][1])
    # Each row's curve starts from Before's evaluation (same models, same evaluation seeds),
    # copied, not rerun; its last point (both splits) is the row's evaluation
    before_eval = json.loads((out / "before" / "seed_0" / "eval" / "eval.json").read_text())
    for slug, rm in (("outcome-only", False), ("reward", True)):
        start = out / slug / "seed_0" / "run" / "eval" / "step_000"
        shared = json.loads((start / "eval.json").read_text())
        assert shared["shared_from"] == str(out / "before" / "seed_0" / "eval")
        assert shared["eval/id/policy_accuracy"] == before_eval["eval/id/policy_accuracy"]
        assert (start / "id_judgments.parquet").is_file() == rm
        assert any(key.startswith("eval/ood/rm_") for key in shared) == rm
    assert not (out / "policy" / "seed_0" / "eval").exists()
    assert summary["Policy"]["eval/ood/policy_accuracy"][0] == pytest.approx(
        policy_at_1["eval/ood/policy_accuracy"]
    )
    assert (out / "ablation_heldout.png").is_file() and (out / "ablation_rm_process.png").is_file()

    assert list(summary) == [
        "Before", "Outcome-only", "Policy", "+Reward", "+Reward+Env", "Step-only", "Anchor-state"
    ]  # fmt: skip
    assert "eval/id/rm_process_accuracy" not in summary["Outcome-only"]
    assert "eval/id/rm_outcome_balanced_accuracy" in summary["+Reward"]
    assert summary["+Reward+Env"]["accepted_tasks"][1] == 0.0  # std over one seed
    table = (out / "ablation.md").read_text()
    assert (
        "| Row | Policy ID | Policy OOD | RM process (balanced) | RM gain, same steps (balanced) "
        "| Outcome as judge (balanced) | RM outcome (balanced) | RM outcome majority baseline "
        "| Accepted tasks |"
    ) in table
    assert "| Row | ID pass@1 | ID pass@2 | OOD pass@1 | OOD pass@2 |" in table
    # two tables of a header and seven rows, then the paired comparisons: a header and eleven
    assert table.count("\n| ") == 16 + 12
    assert "| Comparison | ID (tasks) | OOD (tasks) |" in table
    assert (
        json.loads((out / "ablation.json").read_text())["paired"]["+Reward − Policy"][
            "eval/id/tasks"
        ]
        == 1
    )
    stored = json.loads((out / "ablation.json").read_text())
    assert stored["per_seed"]["Policy"][0]["eval/id/policy_accuracy"] == pytest.approx(
        summary["Policy"]["eval/id/policy_accuracy"][0]
    )
    # one seed, one held-out task per split: the pooled estimate is the seed's, and one cluster
    # leaves its interval undefined: "value [n/a]", no "±"
    pooled = stored["pooled"]["Policy"]["eval/id/policy_accuracy"]
    assert pooled[0] == pytest.approx(summary["Policy"]["eval/id/policy_accuracy"][0])
    assert math.isnan(pooled[1]) and math.isnan(pooled[2])
    assert "eval/id/rm_process_balanced_accuracy" in stored["pooled"]["+Reward"]
    assert "eval/id/rm_process_accuracy" not in stored["pooled"]["Outcome-only"]
    # The rows that train their RM also judge their final in-domain steps with the RM they
    # started from (the warm start): the gain pairs the two judges on the same steps
    gain = "eval/id/rm_process_balanced_gain"
    for slug, trains in (("policy", False), ("reward", True), ("step-only", True)):
        final = out / slug / "seed_0" / "run" / "eval" / "step_001"
        assert (final / "id_start_judgments.parquet").is_file() == trains
        assert (
            gain
            in stored["pooled"][{"reward": "+Reward", "step-only": "Step-only"}.get(slug, "Policy")]
        ) == trains
    final = out / "reward" / "seed_0" / "run" / "eval" / "step_001"
    start = read_dataset(final / "id_start_judgments.parquet", "judgments")
    assert set(start["checkpoint"]) == {before_eval["reward_model"]}  # Before's judge
    expected = judge_gain(
        read_dataset(final / "id_rollouts.parquet", "rollouts"),
        read_dataset(final / "id_judgments.parquet", "judgments"),
        start,
        votes=2,
    )
    assert stored["per_seed"]["+Reward"][0][gain] == pytest.approx(expected.value, nan_ok=True)
    assert stored["pooled"]["+Reward"][gain][0] == pytest.approx(expected.value, nan_ok=True)
    # Beside it, on the same steps, the judge that consistency feedback pulls the RM toward
    outcome_judge = "eval/id/outcome_judge_process_balanced_accuracy"
    played = read_dataset(final / "id_rollouts.parquet", "rollouts")
    by_outcome = judge_metrics(played, outcome_verdicts(played, 2))["process_balanced_accuracy"]
    assert stored["per_seed"]["+Reward"][0][outcome_judge] == pytest.approx(by_outcome, nan_ok=True)
    assert outcome_judge not in stored["per_seed"]["Outcome-only"][0]
    policy_row = next(line for line in table.splitlines() if line.startswith("| Policy |"))
    assert f"| {pooled[0] * 100:.1f} [n/a] |" in policy_row and "±" not in policy_row
    assert (out / "ablation_accuracy.png").is_file() and (out / "ablation_accepted.png").is_file()
    # The warm start ran once; every row starts from its checkpoint, and "Before" evaluates it
    warm = str(RunDir(out / "warm_start").warm_start_checkpoint("policy"))
    before = json.loads((out / "before" / "seed_0" / "eval" / "eval.json").read_text())
    assert before["policy"] == warm
    for slug in ("outcome-only", "policy", "reward", "reward-env", "step-only", "anchor-state"):
        run = RunDir(out / slug / "seed_0" / "run")
        started = load_config(run.config_path)
        assert started.policy.model.source == warm and not started.policy.warm_start.enabled
        assert run.checkpoint("policy", 0).is_dir()
        advantage = started.advantage
        assert (advantage.outcome_weight, advantage.grouping) == {
            "step-only": (0.0, "step_index"), "anchor-state": (1.0, "state")
        }.get(slug, (1.0, "step_index"))  # fmt: skip
    samples = read_dataset(
        RunDir(out / "step-only" / "seed_0" / "run").dataset(0, "policy_samples"), "policy_samples"
    )
    assert (samples["reward"] == samples["mean_verdict"]).all()  # R = mean(S), no outcome
    assert not (out / "before" / "seed_0" / "run").exists()

    # resumable: a second call trains and evaluates nothing again
    evaluated = out / "reward-env" / "seed_0" / "run" / "eval" / "step_001" / "eval.json"
    stamp = evaluated.stat().st_mtime_ns
    assert stored["invocation"]["runs_trained"] == 6
    assert stored["invocation"]["machine"]["cpu_count"] == os.cpu_count()
    assert "This command: " in table and "6 runs trained" in table
    judged_again = final / "id_start_judgments.parquet"
    judged_stamp = judged_again.stat().st_mtime_ns
    rlanything_ablate(config=config, seeds=1, out_dir=str(out))
    assert evaluated.stat().st_mtime_ns == stamp
    assert judged_again.stat().st_mtime_ns == judged_stamp
    assert json.loads((out / "ablation.json").read_text())["invocation"]["runs_trained"] == 0
    with pytest.raises(ValueError, match="unknown ablation rows"):
        rlanything_ablate(config=config, seeds=1, out_dir=str(out), rows=["policy", "nope"])

    # Two worker processes train the same rows to the same data (paths aside)
    side = tmp_path / "side-by-side"
    parallel = rlanything_ablate(
        config=config, seeds=1, out_dir=str(side), rows=["before", "outcome-only", "policy"],
        workers=2,
    )  # fmt: skip
    assert list(parallel) == ["Before", "Outcome-only", "Policy"]
    for slug in ("outcome-only", "policy"):
        for name in ("rollouts", "policy_samples"):
            alone, beside = (
                read_dataset(RunDir(root / slug / "seed_0" / "run").dataset(0, name), name)
                for root in (out, side)
            )
            # the sampler's log-probs round differently with another number of torch threads
            floats = [c for c in ("sampler_logprobs",) if c in alone]
            pd.testing.assert_frame_equal(
                alone.drop(columns=["checkpoint", *floats]),
                beside.drop(columns=["checkpoint", *floats]),
            )
            for column in floats:
                np.testing.assert_allclose(
                    np.concatenate(alone[column].to_list()),
                    np.concatenate(beside[column].to_list()),
                    atol=1e-4,
                )
        same = json.dumps(parallel[SLUG_NAMES[slug]]) == json.dumps(summary[SLUG_NAMES[slug]])
        assert same  # NaN cells included

    # A curve of the in-domain split alone: the final evaluation plays only out-of-domain
    # tasks and takes the in-domain split from the curve's last point, to the same table
    data["evaluation"]["curve_splits"] = ["id"]
    narrow = tmp_path / "id-curve"
    rows = rlanything_ablate(
        config=RunConfig.model_validate(data), seeds=1, out_dir=str(narrow),
        rows=["before", "policy"],
    )  # fmt: skip
    final, last = narrow / "policy" / "seed_0" / "eval", narrow / "policy" / "seed_0" / "run"
    last = last / "eval" / "step_001"
    assert sorted(p.name for p in last.glob("*.parquet")) == [
        "id_judgments.parquet", "id_rollouts.parquet"
    ]  # fmt: skip
    for name in ("id_rollouts.parquet", "id_judgments.parquet"):
        assert (final / name).read_bytes() == (last / name).read_bytes()
    stored = json.loads((final / "eval.json").read_text())
    assert stored["adopted_from"] == str(last) and stored["eval/ood/episodes"] == 2.0
    assert stored["eval/id/episodes"] == 2.0 and (final / "ood_rollouts.parquet").is_file()
    assert json.dumps(rows["Policy"]) == json.dumps(summary["Policy"])
    assert all(_current(final, RunConfig.model_validate(data), split) for split in SPLITS)

    # Other out-of-domain tasks (evaluation.ood_options): the same directory trains nothing
    # again, and every evaluation plays only the ood split again; the in-domain split and the
    # curve are kept, the older evaluation moved to eval.stale
    id_before = (final / "id_rollouts.parquet").read_bytes()
    data["evaluation"]["ood_options"] = {"num_rooms": [2, 2], "num_distractors": [0, 1]}
    shifted = RunConfig.model_validate(data)
    rlanything_ablate(config=shifted, seeds=1, out_dir=str(narrow), rows=["before", "policy"])
    for cell in ("before", "policy"):
        evaluation = narrow / cell / "seed_0" / "eval"
        stored = json.loads((evaluation / "eval.json").read_text())
        assert stored["held_out"]["ood"] == held_out_digest(shifted, "ood"), cell
        assert all(_current(evaluation, shifted, split) for split in SPLITS), cell
        assert (evaluation.with_name("eval.stale") / "eval.json").is_file(), cell
        ood = read_dataset(evaluation / "ood_rollouts.parquet", "rollouts")
        assert set(ood["task_id"]) == {"eval-ood-000"} and len(ood) > 0, cell
    assert (final / "id_rollouts.parquet").read_bytes() == id_before
    assert json.loads((narrow / "ablation.json").read_text())["invocation"]["runs_trained"] == 0


def test_warm_starts_side_by_side_write_the_checkpoints_of_one_after_another(
    tmp_path: Path,
) -> None:
    """`warm_started` with two workers trains the roles in two processes (the environment
    model's, the most episodes × epochs, first) and the stage keeps them: the same checkpoints,
    to rounding, and the same records as one process training them in turn."""
    data = tiny(rounds=1).model_dump()
    data["policy"]["warm_start"] = {"enabled": True, "episodes": 2, "epochs": 1}
    data["reward_model"]["warm_start"] = {"enabled": True, "episodes": 2, "epochs": 1}
    data["env_model"]["warm_start"] = {"enabled": True, "episodes": 3, "epochs": 1}
    config = RunConfig.model_validate(data)
    alone, beside = (RunDir(tmp_path / name) for name in ("alone", "beside"))

    @flow
    def warm_start_in_a_flow(run: RunDir, workers: int) -> RunConfig:
        # as `ablate` and `rloop` call it: the process pool's task runs log to their flow run
        return warm_started(config, run, workers)

    started = {
        run: warm_start_in_a_flow(run, workers)
        for run, workers in ((alone, 1), (beside, 2))
    }  # fmt: skip
    for role in ("policy", "reward_model", "env_model"):
        # the environment model's checkpoint is a LoRA adapter (adapter_model.safetensors)
        a, b = (
            load_file(str(next(run.warm_start_checkpoint(role).glob("*.safetensors"))))
            for run in (alone, beside)
        )
        assert a.keys() == b.keys()
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-5)
        records = [
            json.loads((run.root / "warm_start" / f"{role}.json").read_text())
            for run in (alone, beside)
        ]
        assert records[0]["outputs"] == records[1]["outputs"]
        assert records[0]["metrics"] == pytest.approx(records[1]["metrics"], abs=1e-4)
        for run in (alone, beside):
            settings = getattr(started[run], role)
            assert settings.model.source == str(run.warm_start_checkpoint(role))
            assert not settings.warm_start.enabled
    stage = json.loads((beside.root / "warm_start" / "_stages" / "warm-start.json").read_text())
    assert {"policy_checkpoint", "reward_model_checkpoint", "env_model_checkpoint"} <= set(
        stage["outputs"]
    )
