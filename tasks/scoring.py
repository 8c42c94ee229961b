"""Stages 1 and 2: the policy plays the round's tasks; the reward model scores every step."""

from __future__ import annotations

import pandas as pd

from rlanything_core.envs.interface import TaskRef
from rlanything_core.method.signals import cut_episodes
from rlanything_core.models.engines import open_engine
from rlanything_core.run.config import RunConfig
from rlanything_core.run.pool import round_batch
from rlanything_core.run.rundir import Inputs, RunDir
from rlanything_tasks.common import stage_task
from rlanything_tasks.playing import Metrics, Outputs, judge_steps, play_policy, unit_test_votes


def round_tasks(config: RunConfig, pool: pd.DataFrame, r: int) -> list[TaskRef]:
    """The tasks round r plays: its batch of the `pool` (`environment.tasks_per_round`), led by
    the rewrites accepted in round r − 1 where tasks adapt (`adaptation.replay_accepted`)."""
    replay = config.adapts_tasks and config.adaptation.replay_accepted
    return round_batch(pool, config.environment, config.seed, r, replay_accepted=replay)


@stage_task("rollout")
def rollout(config: RunConfig, run: RunDir, r: int, inputs: Inputs) -> tuple[Outputs, Metrics]:
    """The policy plays every task of the round's batch (the whole pool by default) G times."""
    tasks = round_tasks(config, inputs.read("tasks"), r)
    source = run.model_before("policy", r, config.policy.model.source)
    rows = play_policy(config, run, r, source, tasks, "rollout")
    cut = cut_episodes(
        pd.DataFrame(rows, columns=["task_id", "task_version", "rollout_idx", "done"])
    )
    if cut:
        print(
            f"round {r} rollout: {cut} episodes reached the step limit without ending and count as "
            f"failed (environment.max_episode_steps: {config.environment.max_episode_steps}, or "
            "the task's max_steps); an episode should set done when it ends.",
            flush=True,
        )
    return {"rollouts": run.write(rows, r, "rollouts")}, {"rollout/steps": float(len(rows))}


@stage_task("reward-scoring")
def reward_scoring(
    config: RunConfig, run: RunDir, r: int, inputs: Inputs
) -> tuple[Outputs, Metrics]:
    """The reward model judges every step m times, or (unit-test mode) writes tests for every
    task that every program then runs on; nothing in outcome-only mode."""
    rows: list[dict[str, object]] = []
    tests: list[dict[str, object]] = []
    if config.uses_reward_model:
        rollouts = inputs.read("rollouts")
        rm = config.reward_model
        source = run.model_before("reward_model", r, rm.model.source)
        engine = open_engine(rm.model, source, "reward_model", rm.update.lora_rank)
        if config.writes_unit_tests:
            pool = round_tasks(config, inputs.read("tasks"), r)
            tests, rows = unit_test_votes(
                config, engine, rollouts, pool, run.label(source), r, f"round {r}"
            )
        else:
            rows = judge_steps(
                config,
                engine,
                rollouts,
                round_idx=r,
                base_seed=config.seed,
                checkpoint=run.label(source),
                description=f"round {r} reward scoring",
            )
    outputs = {
        "judgments": run.write(rows, r, "judgments"),
        "unit_tests": run.write(tests, r, "unit_tests"),
    }
    return outputs, {"reward_model/votes": float(len(rows))}
