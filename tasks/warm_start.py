"""The warm start: supervised fine-tuning of each enabled model on the environment's expert
pairs, once, before round 0."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rlanything_core.base import failpoints
from rlanything_core.base.schemas import rows_frame, write_dataset
from rlanything_core.models.sft import tokenize_demos
from rlanything_core.models.training import sft_finetune
from rlanything_core.run.config import RunConfig
from rlanything_core.run.rundir import Inputs, RunDir, write_json
from rlanything_core.run.warm_start import sft_rows, warm_start_demos
from tasks.common import progress, stage_task
from tasks.playing import Metrics, Outputs


@stage_task("warm-start")
def warm_start(config: RunConfig, run: RunDir, r: int, inputs: Inputs) -> tuple[Outputs, Metrics]:
    """Supervised fine-tuning of the policy, the reward model and the environment model on
    expert-made pairs, once, before round 0 (only those whose warm_start is enabled). It reads
    no dataset (`inputs`): its pairs are the environment's demonstrations. Each finished role
    is recorded in `warm_start/<role>.json` (written last), so that a retried stage (a crash, a
    Prefect retry) keeps the roles it finished and their checkpoints."""
    outputs: Outputs = {}
    metrics: Metrics = {}
    roles = (
        ("policy", config.policy.model, config.policy.warm_start, config.policy.update.lora_rank),
        (
            "reward_model",
            config.reward_model.model,
            config.reward_model.warm_start,
            config.reward_model.update.lora_rank,
        ),
        (
            "env_model",
            config.env_model.model,
            config.env_model.warm_start,
            config.env_model.lora_rank,
        ),
    )
    for role, model, ws, lora_rank in roles:
        if not ws.enabled or (role == "reward_model" and not config.uses_reward_model):
            continue
        finished = run.root / "warm_start" / f"{role}.json"
        if finished.is_file():  # a retried stage keeps the roles it finished
            record = json.loads(finished.read_text())
            kept = {k: str(run.root / v) for k, v in record["outputs"].items()}
            if all(Path(p).exists() for p in kept.values()):
                print(f"warm start {role}: finished before ({finished}), kept", flush=True)
                outputs |= kept
                metrics |= record["metrics"]
                continue
        demos = warm_start_demos(config, role, ws)
        out = run.warm_start_checkpoint(role)
        steps = ws.epochs * math.ceil(len(demos) / ws.micro_batch_size)
        with progress(f"warm start {role}", total=steps) as advance, failpoints.part(role):
            m, pairs = sft_finetune(
                model.source,
                out,
                lambda tokenizer, demos=demos: tokenize_demos(tokenizer, demos),
                device=model.device,
                dtype=model.dtype,
                lora_rank=lora_rank,
                lr=ws.lr,
                epochs=ws.epochs,
                micro_batch_size=ws.micro_batch_size,
                seed=config.seed,
                lr_schedule=ws.lr_schedule,
                group_by_length=ws.group_by_length,
                max_forward_tokens=ws.max_forward_tokens,
                on_step=advance,
            )
        rows = sft_rows(role, demos, pairs, seed=config.seed, checkpoint=run.label(str(out)))
        path = run.root / "warm_start" / f"{role}_sft.parquet"
        done: Outputs = {
            f"{role}_sft": str(write_dataset(rows_frame(rows, "sft_samples"), path, "sft_samples")),
            f"{role}_checkpoint": str(out),
        }
        scores: Metrics = {
            f"{role}/warm_start_loss": m["sft_loss"],
            f"{role}/warm_start_pairs": float(len(demos)),
        }
        # relative to the run directory, as the stage markers are: a moved run keeps them
        write_json(finished, {"outputs": {k: run.label(v) for k, v in done.items()},
                              "metrics": scores})  # fmt: skip
        outputs |= done
        metrics |= scores
    return outputs, metrics
