"""`rlanything-eval`: a policy (and optionally a reward model) on held-out task sets.

In-domain and out-of-domain sets are generated with `evaluation.seed`, so every checkpoint of
every run is measured on the same tasks. Writes `<split>_rollouts.parquet`,
`<split>_judgments.parquet` and `eval.json` to the output directory, and the metrics to MLflow.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from prefect import flow

from flows.tracking import log_evaluation
from rlanything_core.config import RunConfig
from rlanything_core.envs.household import generate_specs
from rlanything_core.judging import judge
from rlanything_core.models import load_model
from rlanything_core.rollout import Sampling, TaskRef, play
from rlanything_core.rundir import write_json
from rlanything_core.schemas import read_dataset, rows_frame, write_dataset
from rlanything_core.seeding import derive_seed
from rlanything_core.signals import outcome_accuracy, process_accuracy
from tasks.common import progress

SPLITS = ("id", "ood")


@flow(name="rlanything-eval")
def rlanything_eval(
    config: RunConfig, policy: str, reward_model: str | None = None, out_dir: str = "runs/eval"
) -> dict[str, float]:
    """Policy accuracy per split; with a reward model also its process and outcome accuracy and
    parse-failure rate on the same steps."""
    out = Path(out_dir)
    ev, env = config.evaluation, config.environment
    pm = config.policy.model
    model, tokenizer = load_model(policy, device=pm.device, dtype=pm.dtype)
    sampling = Sampling(pm.temperature, pm.max_new_tokens, pm.batch_size, env.history_steps)
    metrics: dict[str, float] = {}
    for split in SPLITS:
        specs = generate_specs(
            split, ev.num_tasks, seed=derive_seed(ev.seed, split) % 2**31, step_slack=env.step_slack
        )
        tasks = [TaskRef(f"eval-{split}-{i:03d}", 1, s) for i, s in enumerate(specs)]
        with progress(f"eval {split} rollout", total=len(tasks) * ev.rollouts_per_task) as advance:
            rows = play(
                model,
                tokenizer,
                tasks,
                rollouts_per_task=ev.rollouts_per_task,
                round_idx=0,
                base_seed=ev.seed,
                checkpoint=policy,
                sampling=sampling,
                purpose="eval",
                on_episodes=advance,
            )
        path = write_dataset(
            rows_frame(rows, "rollouts"), out / f"{split}_rollouts.parquet", "rollouts"
        )
        rollouts = read_dataset(path, "rollouts")
        episodes = rollouts.drop_duplicates(["task_id", "rollout_idx"])
        metrics[f"eval/{split}/policy_accuracy"] = float((episodes["outcome"] > 0).mean())
        metrics[f"eval/{split}/invalid_actions"] = float((~rollouts["action_valid"]).mean())
        if reward_model is not None:
            metrics |= _judge(config, reward_model, rollouts, split, out)
    write_json(out / "eval.json", {"policy": policy, "reward_model": reward_model, **metrics})
    log_evaluation(config, metrics, policy=policy, reward_model=reward_model, out_dir=out)
    return metrics


def _judge(
    config: RunConfig, source: str, rollouts: pd.DataFrame, split: str, out: Path
) -> dict[str, float]:
    rm = config.reward_model
    model, tokenizer = load_model(source, device=rm.model.device, dtype=rm.model.dtype)
    with progress(f"eval {split} judging", total=len(rollouts) * rm.votes) as advance:
        rows = judge(
            model,
            tokenizer,
            rollouts,
            votes=rm.votes,
            round_idx=0,
            base_seed=config.evaluation.seed,
            checkpoint=source,
            temperature=rm.model.temperature,
            max_new_tokens=rm.model.max_new_tokens,
            batch_size=rm.model.batch_size,
            history_steps=config.environment.history_steps,
            on_batch=advance,
        )
    path = write_dataset(
        rows_frame(rows, "judgments"), out / f"{split}_judgments.parquet", "judgments"
    )
    judgments = read_dataset(path, "judgments")
    return {
        f"eval/{split}/rm_process_accuracy": process_accuracy(rollouts, judgments, rm.votes),
        f"eval/{split}/rm_outcome_accuracy": outcome_accuracy(rollouts, judgments, rm.votes),
        f"eval/{split}/rm_parse_failure_rate": float(judgments["verdict"].isna().mean()),
    }
