"""End-to-end, continued: the round and training flows on the other environments (coding, GUI,
TextWorld, a user's own), served models, sharded rollouts, RLoop and run-directory
resilience. A file of its own so that the test workers share the end-to-end runs evenly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import torch
from flow_helpers import (
    ROOT,
    ROUND_FILES,
    STAGES,
    _eval_last_round,
    _task_runs,
    _two_rounds_finished,
    _weights,
    reference,
    tiny,
)
from prefect.client.orchestration import get_client
from suite import copy_run

from rlanything_core.base.schemas import read_dataset
from rlanything_core.models.config import EngineConfig
from rlanything_core.models.loading import resolve_source
from rlanything_core.models.services import Service, free_port, serve_command
from rlanything_core.run.config import RunConfig, load_config
from rlanything_core.run.rundir import RunDir
from rlanything_flows.evaluate import rlanything_eval
from rlanything_flows.train import rlanything_train

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_coding_two_rounds_with_unit_test_reward_model(tmp_path: Path) -> None:
    """configs/coding-tiny.yaml: programs and generated tests run in the sandbox; the RM is
    trained on its tests' rewards; UT accuracy and Detect reach MLflow."""
    config = load_config(ROOT / "configs" / "coding-tiny.yaml")
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))
    _two_rounds_finished(run, summary)
    rollouts = read_dataset(run.dataset(0, "rollouts"), "rollouts")
    assert (rollouts["num_steps"] == 1).all() and rollouts["pass_fraction"].notna().all()
    assert rollouts["action_valid"].any()  # the warm-started policy writes code blocks
    passed = rollouts["outcome"] > 0
    assert (rollouts.loc[passed, "pass_fraction"] == 1.0).all()
    tests = read_dataset(run.dataset(0, "unit_tests"), "unit_tests")
    assert len(tests) == config.environment.num_tasks * config.reward_model.tests_per_task
    votes = read_dataset(run.dataset(0, "judgments"), "judgments")
    assert len(votes) == len(rollouts) * config.reward_model.tests_per_task
    assert set(votes.loc[votes["verdict"].notna(), "verdict"]) <= {-1, 1}
    samples = read_dataset(run.dataset(0, "test_samples"), "test_samples")
    assert len(samples) == len(tests)
    assert read_dataset(run.dataset(0, "rm_samples"), "rm_samples").empty
    pool = read_dataset(run.dataset(2, "tasks"), "tasks")
    assert set(pool["env"]) == {"coding"}

    client = mlflow.tracking.MlflowClient()
    parent = client.get_run(summary["mlflow_run_id"])
    for key in ("reward_model/ut_accuracy", "reward_model/detect", "policy/accuracy"):
        history = client.get_metric_history(parent.info.run_id, key)
        assert [m.step for m in history] == [0, 1], key
        assert all(0.0 <= m.value <= 1.0 for m in history)
    start = _weights(run.warm_start_checkpoint("reward_model"))
    end = _weights(run.checkpoint("reward_model", 1))
    assert any(not torch.equal(start[k], end[k]) for k in start)

    metrics = rlanything_eval(
        config=config,
        policy=str(run.checkpoint("policy", 1)),
        reward_model=str(run.checkpoint("reward_model", 1)),
        out_dir=str(tmp_path / "eval"),
    )
    for split in ("id", "ood"):
        for name in ("policy_accuracy", "rm_ut_accuracy", "rm_detect", "rm_parse_failure_rate"):
            assert 0.0 <= metrics[f"eval/{split}/{name}"] <= 1.0, (split, name)
        read_dataset(tmp_path / "eval" / f"{split}_unit_tests.parquet", "unit_tests")


@pytest.fixture(scope="module")
def served_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`rlanything serve` processes for the tiny judge and the tiny policy."""
    log_dir = tmp_path_factory.mktemp("served")
    services = {}
    for source in ("tiny-judge:0", "tiny-policy:0"):
        port = free_port()
        command = serve_command(resolve_source(source), port, name=source, device="cpu")
        services[source] = Service(command, port=port, log_path=log_dir / f"{port}.log").start()
    yield {name: s.url for name, s in services.items()}
    for s in services.values():
        s.stop()


def _engine(config: RunConfig, role: str, url: str) -> RunConfig:
    section = getattr(config, role)
    model = section.model.model_copy(update={"engine": EngineConfig(kind="openai", url=url)})
    return config.model_copy(update={role: section.model_copy(update={"model": model})})


def test_served_reward_model_gives_the_in_process_verdicts(
    tmp_path: Path, served_models: dict[str, str]
) -> None:
    config = tiny(rounds=1, mode="policy")
    local, remote = reference(1, mode="policy"), RunDir(tmp_path / "served")
    served = _engine(config, "reward_model", served_models["tiny-judge:0"])
    rlanything_train(config=served, run_dir=str(remote.root))
    columns = ["task_id", "rollout_idx", "step_idx", "vote_idx", "seed", "reasoning", "verdict"]
    a = read_dataset(local.dataset(0, "judgments"), "judgments")[columns]
    b = read_dataset(remote.dataset(0, "judgments"), "judgments")[columns]
    assert len(a) > 0
    pd.testing.assert_frame_equal(a, b)


def test_policy_served_with_adapter_reload_between_rounds(
    tmp_path: Path, served_models: dict[str, str]
) -> None:
    """The vLLM client path against `rlanything serve`: each round's LoRA policy checkpoint is
    loaded into the server as an adapter, and the rollouts equal the in-process ones."""
    config = tiny(rounds=2, mode="outcome_only")
    update = config.policy.update.model_copy(update={"lora_rank": 4})
    config = config.model_copy(
        update={"policy": config.policy.model_copy(update={"update": update})}
    )
    local, remote = RunDir(tmp_path / "local"), RunDir(tmp_path / "served")
    rlanything_train(config=config, run_dir=str(local.root))
    served = _engine(config, "policy", served_models["tiny-policy:0"])
    rlanything_train(config=served, run_dir=str(remote.root))
    assert (remote.checkpoint("policy", 0) / "adapter_config.json").is_file()
    columns = ["task_id", "rollout_idx", "step_idx", "seed", "checkpoint", "response", "outcome"]
    for r in range(2):
        a = read_dataset(local.dataset(r, "rollouts"), "rollouts")[columns]
        b = read_dataset(remote.dataset(r, "rollouts"), "rollouts")[columns]
        pd.testing.assert_frame_equal(a, b)
    assert read_dataset(remote.dataset(1, "rollouts"), "rollouts")["checkpoint"].iloc[0] == (
        "checkpoints/policy/round_000"
    )


def test_sharded_rollouts_and_two_process_updates_give_the_one_process_round(
    tmp_path: Path,
) -> None:
    """policy.rollout_workers: 2 (a local Dask cluster through prefect-dask) and
    update.distributed.processes: 2 (torchrun, gloo) in the flow: the same rollouts as one
    process, shard tasks visible in Prefect, and the same checkpoint within float rounding."""
    config = tiny(rounds=1, mode="policy")  # outcome-only: tiny policies fail alike, A = 0
    distributed = config.policy.update.distributed.model_copy(update={"processes": 2})
    parallel = config.model_copy(
        update={
            "policy": config.policy.model_copy(
                update={
                    "rollout_workers": 2,
                    "update": config.policy.update.model_copy(update={"distributed": distributed}),
                }
            )
        }
    )
    one, two = reference(1, mode="policy"), RunDir(tmp_path / "two")
    summary = rlanything_train(config=parallel, run_dir=str(two.root))
    columns = ["task_id", "rollout_idx", "step_idx", "seed", "checkpoint", "response", "outcome"]
    a = read_dataset(one.dataset(0, "rollouts"), "rollouts")[columns]
    b = read_dataset(two.dataset(0, "rollouts"), "rollouts")[columns]
    assert len(a) > 0
    pd.testing.assert_frame_equal(a, b)
    start = _weights(Path(resolve_source("tiny-policy:0")))
    wa, wb = _weights(one.checkpoint("policy", 0)), _weights(two.checkpoint("policy", 0))
    assert max(float((wa[k] - start[k]).abs().max()) for k in wa) > 1e-4  # the update moved
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], atol=1e-5, rtol=1e-4, msg=name)
    names = [t.name for t in _task_runs(summary["prefect_flow_run_ids"][-1])]
    shards = sorted(n for n in names if n.startswith("rollout-shard"))
    assert shards == ["rollout-shard-0-round-0", "rollout-shard-1-round-0"], names


def test_rloop_two_cycles_end_to_end(tmp_path: Path) -> None:
    """configs/rloop-tiny.yaml through the CLI: 2 cycles of 2 rounds, each followed by the three
    exploitation stages; the expert set is the successful steps of hard tasks; the refined policy
    starts the next cycle; Prefect and MLflow show every phase under its name."""
    from rlanything_core.method.rloop import expert_steps
    from rlanything_flows.cli import main

    root = tmp_path / "rloop"
    config = load_config(ROOT / "configs" / "rloop-tiny.yaml")
    assert main(["rloop", "--config", str(ROOT / "configs" / "rloop-tiny.yaml"),
                 "--run-dir", str(root)]) == 0  # fmt: skip
    summary = json.loads((root / "summary.json").read_text())
    assert [c["cycle"] for c in summary["cycles"]] == [0, 1]
    for c, cycle in enumerate(summary["cycles"]):
        run = RunDir(root / f"cycle_{c:03d}")
        for r in range(2):
            for stage in STAGES:
                assert run.finished(r, stage) is not None, (c, r, stage)
        for stage in ("harvest-trajectories", "build-expert-set", "sft-update"):
            assert run.finished(-2, stage) is not None, (c, stage)
        harvest = read_dataset(run.phase_dir(-2) / "harvest.parquet", "rollouts")
        assert set(harvest["round"]) == {0, 1}  # both rounds' checkpoints were harvested
        expert = read_dataset(run.phase_dir(-2) / "expert_set.parquet", "expert_set")
        expected, hard = expert_steps(harvest, config.rloop.hard_threshold)
        assert len(expert) == len(expected) == cycle["rloop/expert_set_size"] > 0
        assert (expert["task_success_rate"] < 1.0).all()
        assert cycle["rloop/hard_tasks"] == hard
        assert 0.0 <= cycle["rloop/id/pass_at_1"] <= cycle["rloop/id/pass_at_4"] <= 1.0
        # the refined policy is the start policy fine-tuned, and starts the next cycle
        refined = _weights(run.refined_checkpoint())
        start = _weights(Path(resolve_source(load_config(run.config_path).policy.model.source)))
        assert max(float((refined[k] - start[k]).abs().max()) for k in refined) > 1e-4
    cycle_1 = load_config(root / "cycle_001" / "config.yaml")
    assert cycle_1.policy.model.source == str(RunDir(root / "cycle_000").refined_checkpoint())
    assert cycle_1.reward_model.model.source == str(
        RunDir(root / "cycle_000").checkpoint("reward_model", 1)
    )
    pool_0 = read_dataset(RunDir(root / "cycle_000").dataset(2, "tasks"), "tasks")
    pool_1 = read_dataset(RunDir(root / "cycle_001").dataset(0, "tasks"), "tasks")
    assert pool_1.drop(columns="round").equals(pool_0.drop(columns="round"))

    # Resume, as after a crash in cycle 1's sft-update: only that stage runs again.
    last = RunDir(root / "cycle_001")
    harvested = last.marker(-2, "harvest-trajectories").stat().st_mtime_ns
    last.marker(-2, "sft-update").unlink()
    summary["cycles"].pop()
    (root / "summary.json").write_text(json.dumps(summary))
    assert main(["rloop", "--config", str(ROOT / "configs" / "rloop-tiny.yaml"),
                 "--run-dir", str(root)]) == 0  # fmt: skip
    assert last.finished(-2, "sft-update") is not None
    assert last.marker(-2, "harvest-trajectories").stat().st_mtime_ns == harvested
    summary = json.loads((root / "summary.json").read_text())
    assert [c["cycle"] for c in summary["cycles"]] == [0, 1]

    names = {t.name for t in _task_runs(summary["prefect_flow_run_ids"][0])}  # the first run
    for c in ("cycle_000", "cycle_001"):
        assert {
            f"{s}-{c}" for s in ("harvest-trajectories", "build-expert-set", "sft-update")
        } <= names
    assert {"rollout-round-0", "acceptance-check-round-1"} <= names

    client = mlflow.MlflowClient()
    parent = client.get_run(summary["mlflow_run_id"])
    assert (
        parent.data.metrics["rloop/expert_set_size"]
        == summary["cycles"][1]["rloop/expert_set_size"]
    )
    cycles = mlflow.search_runs(
        experiment_names=[config.tracking.experiment],
        filter_string=f"tags.`mlflow.parentRunId` = '{summary['mlflow_run_id']}'",
        output_format="list",
    )
    assert sorted(r.info.run_name for r in cycles) == ["cycle_000", "cycle_001"]
    for cycle_run in cycles:
        assert cycle_run.data.tags["rloop.alias"] == f"cycle-{cycle_run.info.run_name[-1]}"
        assert {"rloop/sft_loss", "rloop/hard_tasks", "rloop/id/pass_at_2"} <= set(
            cycle_run.data.metrics
        )
        contexts = [
            {t.key: t.value for t in i.tags}["mlflow.data.context"]
            for i in cycle_run.inputs.dataset_inputs
        ]
        assert contexts.count("sft") == 1
        rounds = mlflow.search_runs(
            experiment_names=[config.tracking.experiment],
            filter_string=f"tags.`mlflow.parentRunId` = '{cycle_run.info.run_id}'",
            output_format="list",
        )
        assert {"round_000", "round_001"} <= {r.info.run_name for r in rounds}


def test_gui_two_rounds_in_headless_chromium(tmp_path: Path) -> None:
    """configs/gui-tiny.yaml: every stage of two rounds on web apps in headless Chromium (started
    and stopped by the rollout stages); screenshot paths in the rollouts resolve to PNG files;
    the policy's warm start was made by the expert in the browser; eval writes its own."""
    config = load_config(ROOT / "configs" / "gui-tiny.yaml")
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))
    _two_rounds_finished(run, summary, "gui")
    for r in range(2):
        rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
        assert rollouts["observation"].str.contains(r"(?:^|\n)Page: ").all()
        assert rollouts["screenshot"].notna().all()
        for shot in rollouts["screenshot"]:
            assert (run.root / shot).read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), shot
        assert set(rollouts["outcome"]) <= {-1, 1}
    sft = read_dataset(run.root / "warm_start" / "policy_sft.parquet", "sft_samples")
    assert len(sft) > 0 and sft["prompt"].str.contains("Page: ").all()
    assert sft["response"].str.contains(r"\\boxed\{(?:click|type|select|done)\(").all()
    start = _weights(Path(resolve_source(config.policy.model.source)))
    end = _weights(run.warm_start_checkpoint("policy"))
    assert any(not torch.equal(start[k], end[k]) for k in start)

    out = tmp_path / "eval"
    for split, rollouts in _eval_last_round(config, run, out).items():
        assert all((out / shot).is_file() for shot in rollouts["screenshot"]), split


def test_textworld_two_rounds_on_generated_games(tmp_path: Path) -> None:
    """configs/textworld-tiny.yaml: every stage of two rounds on games TextWorld generates here;
    the rollouts follow the games' admissible commands, the warm start follows their winning
    policies, and eval plays held-out games of both splits."""
    config = load_config(ROOT / "configs" / "textworld-tiny.yaml")
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))
    _two_rounds_finished(run, summary, "textworld")
    for r in range(2):
        rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
        assert rollouts["prompt"].str.contains("Admissible actions:").all()
        assert rollouts.loc[rollouts["action_valid"], "action"].notna().all()
        assert set(rollouts["outcome"]) <= {-1, 1}
        assert rollouts["screenshot"].isna().all()
    sft = read_dataset(run.root / "warm_start" / "policy_sft.parquet", "sft_samples")
    assert len(sft) > 0 and sft["response"].str.contains(r"\\boxed\{\d+\}").all()

    for split, rollouts in _eval_last_round(config, run, tmp_path / "eval").items():
        assert rollouts["goal"].str.len().gt(0).all(), split


def test_a_user_environment_named_by_its_file_trains_through_the_whole_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/corridor (the smaller example of docs/own-environment.md), outside the package
    and named by its file: two rounds of every stage on its episodes, its judge prompt, its
    rewrite prompt and its spec validation, with valid proposals played by the acceptance
    check; eval too."""
    monkeypatch.chdir(ROOT)
    config = load_config(ROOT / "examples" / "corridor" / "config.yaml")
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))
    _two_rounds_finished(run, summary, config.environment.name)
    rollouts = read_dataset(run.dataset(0, "rollouts"), "rollouts")
    assert rollouts["observation"].str.startswith("You are at cell").all()
    assert rollouts["action_valid"].mean() > 0.5  # the warm start taught \boxed{left|right}
    judged = read_dataset(run.dataset(0, "judgments"), "judgments")
    assert judged["prompt"].str.contains("one move of an agent in a corridor").all()
    valid = pd.concat(
        read_dataset(run.dataset(r, "candidates"), "candidates").query("valid") for r in (0, 1)
    )
    assert len(valid) > 0 and valid["spec"].str.contains('"door"').all()
    played = pd.concat(read_dataset(run.dataset(r, "acceptance"), "acceptance") for r in (0, 1))
    assert set(played["candidate_id"]) == set(valid["candidate_id"])
    for split, rows in _eval_last_round(config, run, tmp_path / "eval").items():
        assert rows["goal"].str.startswith("reach the door").all(), split


def test_a_moved_run_directory_resumes_as_if_it_had_not_moved(tmp_path: Path) -> None:
    """One round, the run directory moved elsewhere, then the second round: its datasets are
    byte for byte those of a run that trained both rounds where it was."""
    whole = reference(2)
    first = RunDir(copy_run(reference(1).root, tmp_path / "first"))
    (tmp_path / "elsewhere").mkdir()
    moved = RunDir(first.root.rename(tmp_path / "elsewhere" / "moved"))
    summary = rlanything_train(config=tiny(rounds=2), run_dir=str(moved.root))
    _two_rounds_finished(moved, summary)
    for name in ROUND_FILES:
        a, b = whole.dataset(1, name), moved.dataset(1, name)
        assert a.read_bytes() == b.read_bytes(), name
    assert moved.verify_all() == whole.verify_all()


def test_rounds_play_batches_of_the_pool(tmp_path: Path) -> None:
    """tasks_per_round 2 of a 4-task pool: the two rounds play disjoint halves, every rewrite
    is of a task its round played, and the pool keeps its 4 tasks."""
    base = tiny(rounds=2)
    environment = base.environment.model_copy(update={"num_tasks": 4, "tasks_per_round": 2})
    config = RunConfig.model_validate(base.model_dump() | {"environment": environment})
    run = RunDir(tmp_path / "run")
    summary = rlanything_train(config=config, run_dir=str(run.root))

    _two_rounds_finished(run, summary)
    played = []
    for r in range(2):
        rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
        played.append(set(rollouts["task_id"]))
        candidates = read_dataset(run.dataset(r, "candidates"), "candidates")
        assert set(candidates["parent_task_id"]) <= played[r]
    assert len(played[0]) == len(played[1]) == 2 and not played[0] & played[1]
    pool = read_dataset(run.dataset(2, "tasks"), "tasks")
    assert set(pool["task_id"]) == played[0] | played[1]


def test_mlflow_artifacts_never_land_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new experiment of a local store keeps its artifacts in $RLANYTHING_DATA/mlartifacts (or
    where `tracking.artifact_location` says), whatever directory the process runs in."""
    from rlanything_flows.tracking import open_experiment

    work = tmp_path / "worker-cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("RLANYTHING_DATA", str(tmp_path / "data"))
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    open_experiment(uri, "nightly runs")
    (work / "plot.txt").write_text("x")
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(work / "plot.txt"), "plots")
    expected = tmp_path / "data" / "mlartifacts" / "nightly_runs"
    assert mlflow.get_experiment_by_name("nightly runs").artifact_location == expected.as_uri()
    assert (expected / run.info.run_id / "artifacts" / "plots" / "plot.txt").is_file()
    assert sorted(p.name for p in work.iterdir()) == ["plot.txt"]  # no mlruns/ here

    chosen = tmp_path / "chosen"
    open_experiment(uri, "configured", str(chosen))
    assert mlflow.get_experiment_by_name("configured").artifact_location == str(chosen)
    open_experiment(uri, "configured", str(tmp_path / "elsewhere"))  # it exists: kept
    assert mlflow.get_experiment_by_name("configured").artifact_location == str(chosen)


def test_rewrite_table_names_the_changed_fields_and_keys_are_valid() -> None:
    from rlanything_flows.round import spec_changes
    from rlanything_flows.tracking import artifact_slug

    before = '{"goal_type": "put", "num_rooms": 1, "max_steps": 12}'
    after = '{"goal_type": "put", "num_rooms": 2, "max_steps": 14}'
    assert spec_changes(before, after) == "max_steps: 12 → 14, num_rooms: 1 → 2"
    assert spec_changes(before, before) == "(no change)"
    assert spec_changes(before, "not json") == "(not JSON)"
    assert artifact_slug("Nightly_Tiny/2026-11-24 run") == "nightly-tiny-2026-11-24-run"
    assert artifact_slug("___") == "run"


def test_resume_marks_what_a_killed_run_left_running_as_crashed(tmp_path: Path) -> None:
    """A SIGKILL leaves the flow run, its round subflow and a stage task "Running" in Prefect
    forever, and in MLflow the round run it was logging; the next flow run on the run directory
    marks them Crashed (MLflow: KILLED), naming itself, and logs the round anew."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterParentFlowRunId,
    )
    from prefect.states import Running

    config = tiny(rounds=1, mode="outcome_only")
    run = RunDir(tmp_path / "run")
    killed = rlanything_train(config=config, run_dir=str(run.root))["prefect_flow_run_ids"][0]
    with get_client(sync_client=True) as client:
        (round_run,) = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[killed])
            )
        )
        stage = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[round_run.id]))
        )[0]
        for flow_run_id in (killed, round_run.id):
            client.set_flow_run_state(flow_run_id, Running(), force=True)
        client.set_task_run_state(stage.id, Running(), force=True)
    # MLflow: the process died while logging the round: its run RUNNING, the round not listed
    ml = mlflow.tracking.MlflowClient()
    parent_id = json.loads(run.summary_path.read_text())["mlflow_run_id"]
    experiment = ml.get_run(parent_id).info.experiment_id
    by_round = f"tags.mlflow.parentRunId = '{parent_id}' and tags.`rlanything.round` = '0'"
    (half_logged,) = ml.search_runs([experiment], filter_string=by_round)
    ml.update_run(half_logged.info.run_id, status="RUNNING")
    stored = json.loads(run.summary_path.read_text())
    stored["rounds"] = []
    run.summary_path.write_text(json.dumps(stored))

    resumed = rlanything_train(config=config, run_dir=str(run.root))["prefect_flow_run_ids"][1]
    attempts = {r.info.run_id: r for r in ml.search_runs([experiment], filter_string=by_round)}
    assert attempts[half_logged.info.run_id].info.status == "KILLED"
    assert attempts[half_logged.info.run_id].data.tags["rlanything.superseded_by"] == resumed
    assert [r.info.status for k, r in attempts.items() if k != half_logged.info.run_id] == [
        "FINISHED"
    ]
    versions = ml.search_model_versions("name = 'rlanything-tiny-policy'")
    assert [v.run_id for v in versions if v.tags["rlanything.parent_run_id"] == parent_id] == [
        k for k in attempts if k != half_logged.info.run_id
    ]
    with get_client(sync_client=True) as client:
        for flow_run_id in (killed, round_run.id):
            state = client.read_flow_run(flow_run_id).state
            assert state is not None and state.is_crashed(), flow_run_id
            assert resumed in (state.message or "")
        task_state = client.read_task_run(stage.id).state
        assert task_state is not None and task_state.is_crashed()
        assert client.read_flow_run(resumed).state.is_completed()  # type: ignore[union-attr]
