"""MLflow bookkeeping on a real local store (flows/tracking.py): the registry's alias `best`
moves only on a strictly better held-out score (ties keep the earlier version) and each
version's tag says which score on how many episodes; an evaluation whose run was killed while
it was logged is logged again by the next attempt."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
from flow_helpers import tiny

from rlanything_core.run.rundir import RunDir
from rlanything_flows.tracking import BEST_ALIAS, Tracker, eval_signature, registered_model_name


def test_best_moves_only_on_a_strictly_better_score(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    config = tiny(rounds=3)
    run = RunDir(tmp_path / "run")
    run.init(config)
    tracker = Tracker(run, config, None)
    name = registered_model_name(config.tracking.experiment, "policy")
    tracker.client.create_registered_model(name)
    for r in range(3):  # one version a round, as log_round registers them
        tags = {"rlanything.parent_run_id": tracker.parent_id, "rlanything.round": str(r)}
        tracker.client.create_model_version(name, f"file:///ckpt/{r}", tags=tags)

    def best() -> tuple[str, str]:
        version = tracker.client.get_model_version_by_alias(name, BEST_ALIAS)
        return version.tags["rlanything.round"], version.tags["heldout"]

    def evaluate(step: int, score: float) -> None:
        metrics = {"eval/id/policy_accuracy": score, "eval/id/episodes": 16.0}
        tracker._move_best(step, metrics)

    evaluate(1, 0.25)
    assert best() == ("0", "eval/id/policy_accuracy = 0.2500 on 16 held-out episodes")
    evaluate(2, 0.25)  # a tie: the earlier version keeps it
    assert best()[0] == "0"
    evaluate(3, 0.3125)  # strictly better: it moves
    assert best() == ("2", "eval/id/policy_accuracy = 0.3125 on 16 held-out episodes")
    version = tracker.client.get_model_version_by_alias(name, BEST_ALIAS)
    assert version.tags["heldout.signature"] == eval_signature(config)
    mlflow.end_run()


def test_a_retry_logs_again_an_evaluation_whose_run_was_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed while an evaluation was logged leaves its eval.json and a KILLED run:
    the next attempt's learning curve finds the evaluation done and logs its run again."""
    from rlanything_core.run.rundir import write_json
    from rlanything_flows.tracking import log_evaluation
    from rlanything_flows.train import learning_curve

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    data = tiny(rounds=1).model_dump()
    data["evaluation"] = {"every": 1, "curve_splits": ["id"]}
    config = type(tiny(rounds=1)).model_validate(data)
    run = RunDir(tmp_path / "run")
    run.init(config)
    tracker = Tracker(run, config, None)
    out = run.root / "eval" / "step_000"
    out.mkdir(parents=True)
    metrics = {
        "eval/id/policy_accuracy": 0.25,
        "eval/id/policy_accuracy_ci_low": 0.1,
        "eval/id/policy_accuracy_ci_high": 0.4,
        "eval/id/episodes": 8.0,
    }
    write_json(out / "eval.json", {"policy": "p", "reward_model": None, **metrics})
    killed = log_evaluation(
        config, metrics, policy="p", reward_model=None, out_dir=out, parent_run_id=tracker.parent_id
    )
    tracker.client.set_terminated(killed, "KILLED")
    assert not tracker.evaluation_logged(out)
    summary: dict[str, object] = {"rounds": []}
    learning_curve(config, run, tracker, summary)
    assert tracker.evaluation_logged(out)
    assert summary["eval"] == [{"step": 0, **metrics}]


def test_a_dataset_inserted_by_another_run_at_once_is_linked_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two identical runs sharing a store log equal datasets (same name and digest). When the
    other run inserts it between MLflow's look-up and insert, the store raises its unique-key
    error; the dataset then exists, so the tracker links it to its own run and goes on."""
    import pandas as pd
    from mlflow.exceptions import MlflowException

    from rlanything_core.base.schemas import write_dataset

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    config = tiny(rounds=1)
    ours, theirs = RunDir(tmp_path / "a"), RunDir(tmp_path / "b")
    for run in (ours, theirs):
        run.init(config)
    tracker, other = Tracker(ours, config, None), Tracker(theirs, config, None)
    pool = tmp_path / "tasks.parquet"
    frame = pd.DataFrame(
        {
            "round": [0, 0],
            "task_id": ["t0", "t1"],
            "task_version": [0, 0],
            "parent_task_id": [None, None],
            "origin": ["seed", "seed"],
            "direction": [None, None],
            "created_round": [0, 0],
            "acc_parent": [None, None],
            "acc_candidate": [None, None],
            "env": ["household", "household"],
            "spec": ["{}", "{}"],
        }
    )
    write_dataset(frame, pool, "tasks")
    real = tracker.client.log_inputs
    calls = []

    def racing(run_id: str, datasets: list) -> None:
        calls.append(run_id)
        if len(calls) == 1:  # the other run wins the insert; the store refuses ours
            other._log_input(other.parent_id, pool, "tasks", "tasks_round_000", "input")
            raise MlflowException(
                "(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
                "datasets.name, datasets.digest"
            )
        real(run_id, datasets=datasets)

    monkeypatch.setattr(
        tracker.client, "log_inputs", lambda run_id, datasets: racing(run_id, datasets)
    )
    tracker._log_input(tracker.parent_id, pool, "tasks", "tasks_round_000", "input")
    assert len(calls) == 2
    for run_id in (tracker.parent_id, other.parent_id):
        inputs = tracker.client.get_run(run_id).inputs.dataset_inputs
        assert [i.dataset.name for i in inputs] == ["tasks_round_000"]
    digests = {
        i.dataset.digest
        for r in (tracker.parent_id, other.parent_id)
        for i in tracker.client.get_run(r).inputs.dataset_inputs
    }
    assert len(digests) == 1

    def refused(run_id: str, datasets: list) -> None:
        raise MlflowException("the store is read-only")

    monkeypatch.setattr(tracker.client, "log_inputs", refused)
    with pytest.raises(MlflowException, match="read-only"):  # any other failure is not hidden
        tracker._log_input(tracker.parent_id, pool, "tasks", "tasks_round_001", "input")
    mlflow.end_run()
