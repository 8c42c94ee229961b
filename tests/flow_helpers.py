"""What the flow tests share (tests/flows/): the tiny config, reference runs of it trained once
for the session, and checks of a finished run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import torch
from prefect.client.orchestration import get_client
from safetensors.torch import load_file
from suite import reference_run

import rlanything_tasks.stages
from rlanything_core.base.schemas import SCHEMAS, read_dataset
from rlanything_core.run.config import RunConfig, load_config
from rlanything_core.run.rundir import RunDir
from rlanything_flows.evaluate import rlanything_eval
from rlanything_flows.train import rlanything_train

ROOT = Path(__file__).resolve().parents[1]
STAGES = [t.name for t in rlanything_tasks.stages.STAGES]
ROUND_FILES = [n for n in SCHEMAS if n not in ("sft_samples", "expert_set")]


def tiny(rounds: int, **updates: Any) -> RunConfig:
    return load_config(ROOT / "configs" / "tiny.yaml").model_copy(
        update={"rounds": rounds, **updates}
    )


def reference(rounds: int, **updates: Any) -> RunDir:
    """`tiny(rounds, **updates)` trained once for the session, in process (suite.py): read it,
    or work on a `copy_run` of it. A copy shares the reference's MLflow run and Prefect flow
    runs, so a test that resumes a copy checks its files, or the MLflow runs of its own copy
    only where no other test resumes a copy of the same reference."""
    name = "tiny-" + "-".join([str(rounds), *(f"{k}-{v}" for k, v in sorted(updates.items()))])
    config = tiny(rounds, **updates)
    return RunDir(
        reference_run(name, lambda root: rlanything_train(config=config, run_dir=str(root)))
    )


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def _two_rounds_finished(run: RunDir, summary: dict[str, Any], env: str | None = None) -> None:
    """Rounds 0 and 1 ran every stage, and every round file matches its schema; given `env`,
    the next pool holds tasks of that environment and every invalid rewrite says why."""
    assert [r["round"] for r in summary["rounds"]] == [0, 1]
    for r in range(2):
        for stage in STAGES:
            assert run.finished(r, stage) is not None, (r, stage)
        for name in ROUND_FILES:
            read_dataset(run.dataset(r, name), name)
    if env is not None:
        assert set(read_dataset(run.dataset(2, "tasks"), "tasks")["env"]) == {env}
        candidates = read_dataset(run.dataset(0, "candidates"), "candidates")
        assert len(candidates) > 0 and candidates.loc[~candidates["valid"], "error"].notna().all()


def _eval_last_round(config: RunConfig, run: RunDir, out: Path) -> dict[str, pd.DataFrame]:
    """`rlanything eval` of round 1's checkpoints; each split's rollouts, checked for accuracy in
    [0, 1] and for held-out task ids."""
    metrics = rlanything_eval(
        config=config,
        policy=str(run.checkpoint("policy", 1)),
        reward_model=str(run.checkpoint("reward_model", 1)),
        out_dir=str(out),
    )
    found = {}
    for split in ("id", "ood"):
        assert 0.0 <= metrics[f"eval/{split}/policy_accuracy"] <= 1.0
        found[split] = read_dataset(out / f"{split}_rollouts.parquet", "rollouts")
        assert found[split]["task_id"].str.startswith(f"eval-{split}").all()
    return found


def _task_runs(flow_run_id: str) -> list[Any]:
    """The task runs of a flow run and of its subflow runs (the rounds), without the task runs
    that stand for the subflow runs in their parent (named after the flow)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        rounds = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id])
            )
        )
        runs = []
        for r in [flow_run_id, *(r.id for r in rounds)]:
            runs += client.read_task_runs(
                flow_run_filter=FlowRunFilter(id={"any_": [r]})  # type: ignore[arg-type]
            )
        return [t for t in runs if not t.name.startswith("rlanything-")]
