"""Users' environments through the whole loop, in process against the session's Prefect server:
a corridor whose episodes never end and one whose parse_spec raises ValueError (example_envs.py)
finish their runs with the faults counted, and two rounds train on the OpenEnv example server
with its name and URL on the MLflow run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from example_envs import OPENENV_EXAMPLE, OPENENV_SERVER, corridor_config

from rlanything_core.envs.openenv.client import LocalServer
from rlanything_core.run.config import parse_config

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_a_run_whose_episodes_never_end_finishes_with_them_cut_and_counted(
    tmp_path: Path, broken_envs: Path
) -> None:
    from rlanything_core.base.schemas import read_dataset
    from rlanything_core.method.signals import cut_episodes
    from rlanything_core.run.config import load_config
    from rlanything_core.run.rundir import RunDir
    from rlanything_flows.train import rlanything_train

    path = corridor_config(tmp_path, f"{broken_envs}:NeverEnds", rounds=1)
    data = yaml.safe_load(path.read_text())
    data["environment"]["max_episode_steps"] = 3  # below every corridor task's own max_steps
    data["evaluation"]["every"] = 1
    path.write_text(yaml.safe_dump(data))
    config = load_config(path)
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))
    rollouts = read_dataset(run.dataset(0, "rollouts"), "rollouts")
    episodes = 8 * 4  # the corridor config's tasks x rollouts
    assert cut_episodes(rollouts) == episodes and (rollouts["outcome"] == -1).all()
    lengths = rollouts.groupby(["task_id", "rollout_idx"])["step_idx"].max() + 1
    assert (lengths == 3).all()
    assert summary["rounds"][0]["policy/cut_episodes"] == episodes
    assert summary["eval"][-1]["eval/id/cut_episodes"] == 8 * 2


def test_proposals_whose_parse_spec_raises_value_error_are_counted_invalid(
    tmp_path: Path, broken_envs: Path
) -> None:
    from rlanything_core.base.schemas import read_dataset
    from rlanything_core.run.config import load_config
    from rlanything_core.run.rundir import RunDir
    from rlanything_flows.train import rlanything_train

    config = load_config(corridor_config(tmp_path, f"{broken_envs}:RaisesValueError"))
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))
    assert [r["round"] for r in summary["rounds"]] == [0, 1]
    candidates = [read_dataset(run.dataset(r, "candidates"), "candidates") for r in (0, 1)]
    raised = sum(
        c["error"].str.contains("ValueError from parse_spec", na=False).sum() for c in candidates
    )
    assert raised > 0 and not any(c["valid"].any() for c in candidates)


def test_two_rounds_train_on_a_local_server_and_mlflow_names_it(
    openenv_server: LocalServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import mlflow

    from rlanything_core.base.schemas import read_dataset
    from rlanything_core.run.config import load_config
    from rlanything_core.run.rundir import RunDir
    from rlanything_flows.train import rlanything_train

    base = load_config(OPENENV_EXAMPLE / "config.yaml")
    options = {**base.environment.options, "command": None, "url": openenv_server.url}
    config = parse_config(
        {
            **base.model_dump(mode="json"),
            "environment": {**base.environment.model_dump(mode="json"), "options": options},
        }
    )
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))
    assert [r["round"] for r in summary["rounds"]] == [0, 1]
    rollouts = read_dataset(run.dataset(1, "rollouts"), "rollouts")
    assert rollouts["goal"].str.startswith("find the secret number between 1 and").all()
    assert len(rollouts) >= 32  # every episode of round 1 took a step on the server
    candidates = read_dataset(run.dataset(0, "candidates"), "candidates")
    assert len(candidates) == 8  # the environment model was asked for every task
    parent = mlflow.get_run(summary["mlflow_run_id"])
    assert parent.data.tags["openenv.name"] == "GuessEnvironment"
    assert parent.data.tags["openenv.url"] == openenv_server.url
    assert parent.data.params["environment.options.url"] == openenv_server.url

    # A server whose reset takes no declared task parameters: rewriting is skipped, said once
    # a round, and the run goes on.
    bare = {"command": OPENENV_SERVER, "goal": "find the secret number", "max_steps": 3}
    plain = parse_config(
        {
            **config.model_dump(mode="json"),
            "rounds": 1,
            "environment": {**config.environment.model_dump(mode="json"), "options": bare},
        }
    )
    capsys.readouterr()
    summary = rlanything_train(config=plain, run_dir=str(tmp_path / "plain"))
    out = capsys.readouterr().out
    assert "round 0 task rewriting: skipped, the OpenEnv environment declares no task" in out
    assert summary["rounds"][0]["env/candidates"] == 0
