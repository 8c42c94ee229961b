"""Resume is honest: a file of a finished stage that is damaged stops it with the remedy named,
and following the remedy (by hand, deleting the markers, or with `--redo-from`) trains the
lost stages again until every file verifies, never reporting success over the damage."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
from flow_helpers import reference, tiny
from suite import copy_run

from rlanything_core.run.rundir import ROUND_STAGES, RunDir, RunDirError
from rlanything_flows.cli import main
from rlanything_flows.train import rlanything_train

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _truncate(path: Path) -> int:
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[: size // 2])
    return size


def test_a_damaged_checkpoint_is_trained_again_and_never_reported_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tiny(rounds=2)
    # the only test that resumes a copy of this reference: the MLflow runs checked are its own
    run = RunDir(copy_run(reference(2).root, tmp_path / "run"))
    first = json.loads(run.summary_path.read_text())
    markers = run.verify_all()
    weights = run.checkpoint("policy", 0) / "model.safetensors"
    size = _truncate(weights)
    remedy = f"rlanything resume --run-dir {run.root} --redo-from 0/policy-update"
    with pytest.raises(RunDirError, match=f"truncated.*{remedy}"):
        rlanything_train(config=config, run_dir=str(run.root))

    # the remedy by hand: that stage's marker and every later one deleted
    for stage in ROUND_STAGES[ROUND_STAGES.index("policy-update") :]:
        run.marker(0, stage).unlink()
    for stage in ROUND_STAGES:
        run.marker(1, stage).unlink()
    summary = rlanything_train(config=config, run_dir=str(run.root))
    assert weights.stat().st_size == size
    assert run.verify_all() == markers
    assert [r["round"] for r in summary["rounds"]] == [0, 1]

    # the redone rounds repeat the first run's results, and MLflow holds one live run a round
    def results(rounds: list[dict[str, float]]) -> str:  # JSON: nan equals nan there
        kept = [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in rounds]
        return json.dumps(kept, sort_keys=True)

    assert results(summary["rounds"]) == results(first["rounds"])
    client = mlflow.MlflowClient()
    # the attempt that stopped on the damaged file ended the run FAILED; this one trained
    assert client.get_run(summary["mlflow_run_id"]).info.status == "FINISHED"
    children = client.search_runs(
        [client.get_run(summary["mlflow_run_id"]).info.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{summary['mlflow_run_id']}'",
    )
    finished = sorted(
        c.data.tags["rlanything.round"] for c in children if c.info.status == "FINISHED"
    )
    assert finished == ["0", "1"]
    assert all(c.data.tags.get("rlanything.redone") for c in children if c.info.status == "KILLED")
    history = client.get_metric_history(summary["mlflow_run_id"], "policy/accuracy")
    assert sorted(m.step for m in history) == [0, 1]  # the same values: not logged twice

    # the remedy in one command
    _truncate(weights)
    capsys.readouterr()
    assert main(["resume", "--run-dir", str(run.root), "--redo-from", "0/policy-update"]) == 0
    assert "redoing from round 0, stage policy-update: removed 11 stage marker(s)" in (
        capsys.readouterr().out
    )
    assert weights.stat().st_size == size
    assert run.verify_all() == markers
    assert main(["resume", "--run-dir", str(run.root), "--redo-from", "2"]) == 2
    assert main(["resume", "--run-dir", str(run.root), "--redo-from", "0/polish"]) == 2


def test_a_damaged_warm_start_checkpoint_is_trained_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A warm-started role's checkpoint truncated after the run: resume names the file and
    `--redo-from warm-start`; deleting the warm start's marker by hand does not keep the damaged
    role (its record's sizes and digests are checked), and the one command restores it too."""
    from rlanything_core.run.config import load_config
    from rlanything_core.run.rundir import WARM_START, WARM_START_STAGE

    config = load_config(Path(__file__).resolve().parents[1] / "data" / "faults.yaml").model_copy(
        update={"rounds": 1}
    )
    run = RunDir(tmp_path / "run")
    rlanything_train(config=config, run_dir=str(run.root))
    markers = run.verify_all()
    weights = run.warm_start_checkpoint("reward_model") / "model.safetensors"
    size = _truncate(weights)
    remedy = f"rlanything resume --run-dir {run.root} --redo-from warm-start"
    with pytest.raises(RunDirError, match=f"{weights}.*truncated.*{remedy}"):
        rlanything_train(config=config, run_dir=str(run.root))

    run.marker(WARM_START, WARM_START_STAGE).unlink()  # by hand: the marker, the rounds' markers
    for stage in ROUND_STAGES:
        run.marker(0, stage).unlink()
    capsys.readouterr()
    rlanything_train(config=config, run_dir=str(run.root))
    out = capsys.readouterr().out
    assert f"warm start reward_model: trained again, {weights} has" in out
    assert "warm start policy: finished before" in out  # the intact roles are kept
    assert weights.stat().st_size == size
    assert run.verify_all() == markers

    _truncate(weights)
    assert main(["resume", "--run-dir", str(run.root), "--redo-from", WARM_START_STAGE]) == 0
    assert "redoing from the warm start: removed 8 stage marker(s)" in capsys.readouterr().out
    assert weights.stat().st_size == size
    assert run.verify_all() == markers
