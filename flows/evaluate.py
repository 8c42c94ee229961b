"""`rlanything-eval`: a policy (and optionally a reward model) on held-out task sets.

In-domain and out-of-domain sets are generated with `evaluation.seed`, so every checkpoint of
every run is measured on the same tasks. Writes `<split>_rollouts.parquet`,
`<split>_judgments.parquet` and `eval.json` (with each split's `held_out_digest`) to the output
directory, and the metrics to MLflow.
Every accuracy comes with its 95 % interval (`<metric>_ci_low`, `<metric>_ci_high`), clustered
by task: episodes, and steps, of one task are correlated (`rlanything_core.method.stats`). With a
unit-test-writing reward model (coding) it also writes `<split>_unit_tests.parquet` and measures
UT accuracy and Detect instead of process and outcome accuracy.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from prefect import flow

from rlanything_core.base.schemas import read_dataset, rows_frame, write_dataset
from rlanything_core.base.seeding import derive_seed
from rlanything_core.envs.interface import TaskRef
from rlanything_core.method.rloop import episodes, pass_at_k_per_task
from rlanything_core.method.signals import (
    cut_episodes,
    judge_metrics,
    outcome_verdicts,
    task_key,
    test_samples,
    verdict_matrix,
)
from rlanything_core.method.stats import accuracy, as_metrics
from rlanything_core.models.engines import open_engine
from rlanything_core.run.config import RunConfig
from rlanything_core.run.rundir import write_json
from rlanything_flows.tracking import log_evaluation
from rlanything_tasks.playing import judge_steps, play_tasks, unit_test_votes

SPLITS = ("id", "ood")


def eval_tasks(config: RunConfig, split: str) -> list[TaskRef]:
    """The held-out task set of `split`: `evaluation.num_tasks` tasks drawn with
    `evaluation.seed` (the ood split's as `evaluation.ood_options` say), the same for every
    checkpoint of every run."""
    ev = config.evaluation
    seed = derive_seed(ev.seed, split) % 2**31
    env = config.held_out_environment(split)  # type: ignore[arg-type]
    specs = list(env.generate(split, ev.num_tasks, seed))  # type: ignore[arg-type]
    return [TaskRef(f"eval-{split}-{i:03d}", 1, s) for i, s in enumerate(specs)]


def held_out_digest(config: RunConfig, split: str) -> str:
    """A digest of what defines `split`'s held-out episodes: the environment and its options
    (with `evaluation.ood_options` for ood), the tasks' count and seed and the episodes per
    task. An evaluation stored with another digest played other episodes (`flows.ablate` redoes
    it)."""
    env, ev = config.environment, config.evaluation
    defining = {
        "environment": env.name,
        "options": env.options,
        "ood_options": ev.ood_options if split == "ood" else None,
        "tasks": ev.num_tasks,
        "seed": ev.seed,
        "rollouts_per_task": ev.rollouts_per_task,
        "split": split,
    }
    return hashlib.sha256(json.dumps(defining, sort_keys=True).encode()).hexdigest()[:16]


def eval_run_name() -> str:
    """The evaluation's flow run name: `eval-step-N` for the learning curve's step N (the
    checkpoints after N rounds, in eval/step_NNN/), else `eval-<output directory>`."""
    from prefect.runtime import flow_run

    out = Path(str(flow_run.parameters.get("out_dir", "eval"))).name
    step = re.fullmatch(r"step_(\d+)", out)
    return f"eval-step-{int(step.group(1))}" if step else f"eval-{out}"


@flow(name="rlanything-eval", flow_run_name=eval_run_name)
def rlanything_eval(
    config: RunConfig,
    policy: str,
    reward_model: str | None = None,
    out_dir: str = "runs/eval",
    parent_run_id: str | None = None,
    splits: Sequence[str] = SPLITS,
) -> dict[str, float]:
    """Policy accuracy and pass@k per split (`policy_metrics`); with a reward model also its
    process and outcome accuracies and parse-failure rate on the same steps
    (`reward_model_metrics`). The MLflow run is nested under `parent_run_id` when given.
    `splits` narrows the held-out sets (the learning curve's `evaluation.curve_splits`)."""
    out = Path(out_dir)
    ev = config.evaluation
    policy_engine = open_engine(
        config.policy.model, policy, "policy", config.policy.update.lora_rank
    )
    judge_engine = (
        None
        if reward_model is None
        else open_engine(
            config.reward_model.model,
            reward_model,
            "reward_model",
            config.reward_model.update.lora_rank,
        )
    )
    metrics: dict[str, float] = {}
    for split in splits:
        tasks = eval_tasks(config, split)
        rows = play_tasks(
            config,
            policy_engine,
            tasks,
            rollouts_per_task=ev.rollouts_per_task,
            round_idx=0,
            base_seed=ev.seed,
            checkpoint=policy,
            purpose="eval",
            description=f"eval {split} rollout",
            screens=out / "screenshots" / split,
            root=out,
        )
        path = write_dataset(
            rows_frame(rows, "rollouts"), out / f"{split}_rollouts.parquet", "rollouts"
        )
        rollouts = read_dataset(path, "rollouts")
        metrics |= policy_metrics(split, rollouts)
        if judge_engine is not None and config.writes_unit_tests:
            assert reward_model is not None
            tests, votes = unit_test_votes(
                config, judge_engine, rollouts, tasks, reward_model, 0, f"eval {split}"
            )
            written = write_dataset(
                rows_frame(tests, "unit_tests"), out / f"{split}_unit_tests.parquet", "unit_tests"
            )
            path = write_dataset(
                rows_frame(votes, "judgments"), out / f"{split}_judgments.parquet", "judgments"
            )
            _, ut = test_samples(
                rollouts,
                read_dataset(written, "unit_tests"),
                read_dataset(path, "judgments"),
                invalid_penalty=config.reward_model.parse_failure_penalty,
                eps=config.advantage.eps,
                band=(0.0, 1.0),
            )
            metrics[f"eval/{split}/rm_ut_accuracy"] = ut["reward_model/ut_accuracy"]
            metrics[f"eval/{split}/rm_detect"] = ut["reward_model/detect"]
            metrics[f"eval/{split}/rm_parse_failure_rate"] = ut["reward_model/parse_failure_rate"]
        elif judge_engine is not None:
            assert reward_model is not None
            votes = judge_steps(
                config,
                judge_engine,
                rollouts,
                round_idx=0,
                base_seed=ev.seed,
                checkpoint=reward_model,
                description=f"eval {split} judging",
            )
            path = write_dataset(
                rows_frame(votes, "judgments"), out / f"{split}_judgments.parquet", "judgments"
            )
            judgments = read_dataset(path, "judgments")
            metrics |= reward_model_metrics(split, rollouts, judgments, config.reward_model.votes)
    held_out = {split: held_out_digest(config, split) for split in splits}
    write_json(
        out / "eval.json",
        {"policy": policy, "reward_model": reward_model, "held_out": held_out, **metrics},
    )
    log_evaluation(
        config,
        metrics,
        policy=policy,
        reward_model=reward_model,
        out_dir=out,
        parent_run_id=parent_run_id,
    )
    return metrics


def judge_held_out(
    config: RunConfig, reward_model: str, rollouts: pd.DataFrame, description: str
) -> pd.DataFrame:
    """`rollouts`' steps judged by `reward_model` as `rlanything_eval` judges held-out steps
    (`config.reward_model`'s votes and sampling, `evaluation.seed`): a judgments frame. For
    judging stored held-out steps again with another RM (`ablate.start_judged`)."""
    rm = config.reward_model
    engine = open_engine(rm.model, reward_model, "reward_model", rm.update.lora_rank)
    votes = judge_steps(
        config,
        engine,
        rollouts,
        round_idx=0,
        base_seed=config.evaluation.seed,
        checkpoint=reward_model,
        description=description,
    )
    return rows_frame(votes, "judgments")


def policy_metrics(split: str, rollouts: pd.DataFrame) -> dict[str, float]:
    """On one split's rollouts: accuracy (episodes that succeed) and pass@k for k = 1 … episodes
    per task, and the share of steps whose answer named no admissible action, each with its 95 %
    interval clustered by task; and the episodes, tasks and steps played."""
    played = episodes(rollouts)
    tasks = task_key(played)
    prefix = f"eval/{split}"
    metrics = as_metrics(f"{prefix}/policy_accuracy", accuracy(played["outcome"] > 0, tasks))
    invalid = accuracy(~rollouts["action_valid"].to_numpy(bool), task_key(rollouts))
    metrics |= as_metrics(f"{prefix}/invalid_actions", invalid)
    per_task = pass_at_k_per_task(rollouts)  # (tasks, k): one cluster per row
    for k, values in per_task.items():
        estimate = accuracy(values, np.arange(len(values)))  # a mean of per-task values
        metrics |= as_metrics(f"{prefix}/pass_at_{k}", estimate)
    metrics[f"{prefix}/episodes"] = float(len(played))
    metrics[f"{prefix}/tasks"] = float(tasks.nunique())
    metrics[f"{prefix}/steps"] = float(len(rollouts))
    metrics[f"{prefix}/cut_episodes"] = float(cut_episodes(rollouts))
    return metrics


def reward_model_metrics(
    split: str, rollouts: pd.DataFrame, judgments: pd.DataFrame, votes: int
) -> dict[str, float]:
    """A judging reward model on one split's steps: `signals.judge_metrics` as
    `eval/<split>/rm_<name>` (its steps as `rm_steps`), and the share of unparsed votes. Beside
    it, on the same steps, the balanced process accuracy of the judge that consistency feedback
    pulls the RM toward (`signals.outcome_verdicts`, each step judged by its episode's outcome)
    as `eval/<split>/outcome_judge_process_balanced_accuracy`."""
    metrics = {
        f"eval/{split}/rm_{name}": value
        for name, value in judge_metrics(
            rollouts, verdict_matrix(rollouts, judgments, votes)
        ).items()
    }
    metrics[f"eval/{split}/rm_parse_failure_rate"] = float(judgments["verdict"].isna().mean())
    by_outcome = judge_metrics(rollouts, outcome_verdicts(rollouts, votes))
    name = "process_balanced_accuracy"
    for suffix in ("", "_ci_low", "_ci_high"):
        metrics[f"eval/{split}/outcome_judge_{name}{suffix}"] = by_outcome[name + suffix]
    return metrics
