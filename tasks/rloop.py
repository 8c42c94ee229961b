"""RLoop's exploitation stages (arXiv 2511.04285), as Prefect tasks after a cycle's rounds:
harvest-trajectories → build-expert-set → sft-update. They pass Parquet files in the cycle's
`exploitation/` directory and resume by their markers, like the round's stages.
"""

from __future__ import annotations

import math

import pandas as pd

from rlanything_core.base.schemas import SCHEMAS, write_dataset
from rlanything_core.base.seeding import derive_seed
from rlanything_core.method.rloop import episodes, expert_steps
from rlanything_core.models.modelling import with_eos
from rlanything_core.models.training import sft_finetune
from rlanything_core.run.config import RunConfig
from rlanything_core.run.rundir import EXPLOITATION, Inputs, RunDir
from rlanything_tasks.common import progress, stage_task

Outputs = dict[str, str]
Metrics = dict[str, float]


def _path(run: RunDir, name: str) -> str:
    return str(run.phase_dir(EXPLOITATION) / f"{name}.parquet")


@stage_task("harvest-trajectories")
def harvest_trajectories(
    config: RunConfig, run: RunDir, r: int, inputs: Inputs
) -> tuple[Outputs, Metrics]:
    """The rollouts of the cycle's harvested rounds, played by its intermediate checkpoints,
    with their outcomes, in one file (the rollouts schema). Its input is the cycle's training
    rounds, read from the run directory, not `inputs`."""
    rounds = config.rloop.harvest_rounds or list(range(config.rloop.rounds_per_cycle))
    frame = pd.concat([run.read(k, "rollouts") for k in rounds], ignore_index=True)
    path = write_dataset(frame, _path(run, "harvest"), "rollouts")
    played = episodes(frame)
    return {"harvest": str(path)}, {
        "rloop/harvested_episodes": float(len(played)),
        "rloop/harvest_accuracy": float((played["outcome"] > 0).mean()) if len(played) else 0.0,
    }


@stage_task("build-expert-set")
def build_expert_set(
    config: RunConfig, run: RunDir, r: int, inputs: Inputs
) -> tuple[Outputs, Metrics]:
    """Successful trajectories on hard tasks (success rate over the harvest below
    `rloop.hard_threshold`): the expert set."""
    harvest = inputs.read("harvest", "rollouts")
    steps, hard = expert_steps(harvest, config.rloop.hard_threshold)
    path = write_dataset(steps[SCHEMAS["expert_set"].names], _path(run, "expert_set"), "expert_set")
    return {"expert_set": str(path)}, {
        "rloop/hard_tasks": float(hard),
        "rloop/expert_set_size": float(len(steps)),
        "rloop/expert_episodes": float(len(episodes(steps))) if len(steps) else 0.0,
    }


@stage_task("sft-update")
def sft_update(config: RunConfig, run: RunDir, r: int, inputs: Inputs) -> tuple[Outputs, Metrics]:
    """Rejection-sampling fine-tuning: the cycle's start policy (not its last RL checkpoint)
    fine-tuned on the expert set → checkpoints/policy/refined, the next cycle's start. An empty
    expert set leaves the start policy unchanged."""
    expert = inputs.read("expert_set")
    rl, policy = config.rloop, config.policy
    out = run.refined_checkpoint()
    steps = rl.sft_epochs * math.ceil(len(expert) / rl.sft_micro_batch_size)
    with progress("sft-update (expert set)", total=steps) as advance:
        metrics, _ = sft_finetune(
            policy.model.source,
            out,
            lambda tokenizer: [
                (
                    [int(t) for t in row.prompt_token_ids],
                    with_eos([int(t) for t in row.response_token_ids], tokenizer.eos_token_id),
                )
                for row in expert.itertuples()
            ],
            device=policy.model.device,
            dtype=policy.model.dtype,
            lora_rank=policy.update.lora_rank,
            lora_alpha=policy.update.lora_alpha,
            lr=rl.sft_lr,
            epochs=rl.sft_epochs,
            micro_batch_size=rl.sft_micro_batch_size,
            seed=derive_seed(config.seed, "rloop-sft"),
            on_step=advance,
        )
    return {"checkpoint": str(out)}, {f"rloop/{k}": v for k, v in metrics.items()} | {
        "rloop/sft_skipped": float(expert.empty)
    }


EXPLOITATION_STAGES = (harvest_trajectories, build_expert_set, sft_update)
