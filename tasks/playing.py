"""What the stages share: playing tasks with a loaded policy (here or over Dask workers),
judging steps with a loaded reward model, unit-test votes, and writing a round's rows."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pandas as pd
import torch
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect_dask import DaskTaskRunner

from rlanything_core.base.generation import Engine
from rlanything_core.envs.interface import TaskRef, WritesUnitTests
from rlanything_core.models.engines import open_engine
from rlanything_core.run.config import PolicyConfig, RunConfig
from rlanything_core.run.judging import judge
from rlanything_core.run.rollout import Sampling, Screens, play
from rlanything_core.run.rundir import RunDir
from rlanything_tasks.common import progress, retry_if_transient

Outputs = dict[str, str]
Metrics = dict[str, float]


def sampling_of(policy: PolicyConfig) -> Sampling:
    return Sampling(
        temperature=policy.model.temperature,
        max_new_tokens=policy.model.max_new_tokens,
        batch_size=policy.model.batch_size,
        choose=policy.answers == "choose",
        answer_score=policy.answer_score,
    )


def play_tasks(
    config: RunConfig,
    engine: Engine,
    tasks: list[TaskRef],
    *,
    rollouts_per_task: int,
    round_idx: int,
    base_seed: int,
    checkpoint: str,
    purpose: str,
    description: str,
    screens: Path | None = None,
    root: Path | None = None,
) -> list[dict[str, object]]:
    """A loaded policy plays every task, sampling as `config.policy.model` says; progress bar.
    Gui episodes save screenshots under `screens`, recorded relative to `root`."""
    with progress(description, total=len(tasks) * rollouts_per_task) as advance:
        return play(
            engine,
            config.environment.env,
            tasks,
            rollouts_per_task=rollouts_per_task,
            round_idx=round_idx,
            base_seed=base_seed,
            checkpoint=checkpoint,
            sampling=sampling_of(config.policy),
            purpose=purpose,
            screens=Screens(screens, root),
            on_episodes=advance,
            max_steps=config.environment.max_episode_steps,
        )


def judge_steps(
    config: RunConfig,
    engine: Engine,
    rollouts: pd.DataFrame,
    *,
    round_idx: int,
    base_seed: int,
    checkpoint: str,
    description: str,
) -> list[dict[str, object]]:
    """A loaded reward model votes m times on every step, as `config.reward_model` says."""
    rm = config.reward_model
    with progress(description, total=len(rollouts) * rm.votes) as advance:
        return judge(
            engine,
            rollouts,
            votes=rm.votes,
            round_idx=round_idx,
            base_seed=base_seed,
            checkpoint=checkpoint,
            temperature=rm.model.temperature,
            max_new_tokens=rm.model.max_new_tokens,
            batch_size=rm.model.batch_size,
            env=config.environment.env,
            on_batch=advance,
            verdicts=rm.verdicts if rm.answers == "choose" else None,
        )


def play_policy(
    config: RunConfig, run: RunDir, r: int, source: str, tasks: list[TaskRef], purpose: str
) -> list[dict[str, object]]:
    """The policy `source` plays every task G times: here, or sharded over
    `policy.rollout_workers` Dask worker processes (prefect-dask) in task order, so that the rows
    come out as one process would write them."""
    workers = min(config.policy.rollout_workers, len(tasks))
    screens = run.round_dir(r) / "screenshots" / purpose
    if not tasks or (workers <= 1 and not config.policy.rollout_cluster):
        engine = open_engine(config.policy.model, source, "policy", config.policy.update.lora_rank)
        return play_tasks(
            config,
            engine,
            tasks,
            rollouts_per_task=config.rollouts_per_task,
            round_idx=r,
            base_seed=config.seed,
            checkpoint=run.label(source),
            purpose=purpose,
            description=f"round {r} {purpose}",
            screens=screens,
            root=run.root,
        )
    bounds = [len(tasks) * k // workers for k in range(workers + 1)]
    shards = [tasks[a:b] for a, b in itertools.pairwise(bounds)]
    if config.policy.rollout_cluster:
        runner = DaskTaskRunner(address=config.policy.rollout_cluster)
        threads = None  # the remote workers' own machines decide
    else:
        runner = DaskTaskRunner(
            cluster_kwargs={"n_workers": len(shards), "threads_per_worker": 1, "processes": True}
        )
        threads = max(1, (os.cpu_count() or 1) // len(shards))  # the cores, shared out
    total = len(tasks) * config.rollouts_per_task
    description = f"round {r} {purpose} ({len(shards)} workers)"
    with progress(description, total=total) as advance, runner:
        futures = [
            runner.submit(
                play_shard,
                parameters={
                    "config": config,
                    "source": source,
                    "tasks": shard,
                    "shard": k,
                    "round_idx": r,
                    "checkpoint": run.label(source),
                    "purpose": purpose,
                    "threads": threads,
                    "screens": screens,
                    "root": run.root,
                },
            )
            for k, shard in enumerate(shards)
        ]
        rows: list[dict[str, object]] = []
        for future, shard in zip(futures, shards, strict=True):
            rows += future.result()
            advance(len(shard) * config.rollouts_per_task)
    return rows


@task(
    name="rollout-shard",
    task_run_name="{purpose}-shard-{shard}-round-{round_idx}",
    cache_policy=NO_CACHE,
    retries=2,
    retry_condition_fn=retry_if_transient,
)
def play_shard(
    config: RunConfig,
    source: str,
    tasks: list[TaskRef],
    shard: int,
    round_idx: int,
    checkpoint: str,
    purpose: str,
    threads: int | None,
    screens: Path | None = None,
    root: Path | None = None,
) -> list[dict[str, object]]:
    """One worker's share of `_play`: its own copy of the policy plays its tasks G times."""
    if threads is not None:
        torch.set_num_threads(threads)
    engine = open_engine(config.policy.model, source, "policy", config.policy.update.lora_rank)
    return play(
        engine,
        config.environment.env,
        tasks,
        rollouts_per_task=config.rollouts_per_task,
        round_idx=round_idx,
        base_seed=config.seed,
        checkpoint=checkpoint,
        sampling=sampling_of(config.policy),
        purpose=purpose,
        screens=Screens(screens, root),
        max_steps=config.environment.max_episode_steps,
    )


def unit_test_votes(
    config: RunConfig,
    engine: Engine,
    rollouts: pd.DataFrame,
    tasks: list[TaskRef],
    checkpoint: str,
    round_idx: int,
    description: str,
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The RM writes tests for every coding task in `tasks`; every program of `rollouts` runs on
    its task's tests. Returns the unit_tests rows and the judgments rows (one vote per program
    and test)."""
    rm = config.reward_model
    env = config.environment.env
    assert isinstance(env, WritesUnitTests)  # RunConfig checks it
    with progress(f"{description} unit tests", total=len(tasks) * rm.tests_per_task) as advance:
        tests = env.write_tests(
            engine,
            tasks,
            tests_per_task=rm.tests_per_task,
            round_idx=round_idx,
            base_seed=config.seed,
            checkpoint=checkpoint,
            temperature=rm.model.temperature,
            max_new_tokens=rm.model.max_new_tokens,
            batch_size=rm.model.batch_size,
            on_batch=advance,
        )
    frame = pd.DataFrame(tests)
    with progress(f"{description} programs on tests", total=len(rollouts)) as advance:
        votes = env.run_generated_tests(rollouts, frame, tasks, on_program=advance)
    return tests, votes
