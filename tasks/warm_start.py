"""The warm start: supervised fine-tuning of each enabled model on the environment's expert
pairs, once, before round 0."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rlanything_core.base import failpoints
from rlanything_core.base.schemas import rows_frame, write_dataset
from rlanything_core.models.sft import tokenize_demos
from rlanything_core.models.training import sft_finetune
from rlanything_core.run import warm_cache
from rlanything_core.run.config import RunConfig
from rlanything_core.run.envcheck import answer_limit, answer_overflow
from rlanything_core.run.rundir import (
    WARM_START,
    WARM_START_STAGE,
    Inputs,
    RunDir,
    RunDirError,
    write_json,
)
from rlanything_core.run.warm_start import sft_rows, warm_start_demos, warm_start_roles
from rlanything_tasks.common import progress, stage_task
from rlanything_tasks.playing import Metrics, Outputs


@stage_task(WARM_START_STAGE)
def warm_start(config: RunConfig, run: RunDir, r: int, inputs: Inputs) -> tuple[Outputs, Metrics]:
    """Supervised fine-tuning of the policy, the reward model and the environment model on
    expert-made pairs, once, before round 0 (only those whose warm_start is enabled,
    `warm_start_roles`). It reads no dataset (`inputs`): its pairs are the environment's
    demonstrations. Each finished role is recorded in `warm_start/<role>.json` (written last),
    so that a retried stage (a crash, a Prefect retry) keeps the roles it finished and their
    checkpoints, and so that roles warm-started beforehand in other processes
    (`flows.ablate.warm_started`) are kept."""
    outputs: Outputs = {}
    metrics: Metrics = {}
    for role in warm_start_roles(config):
        done, scores = warm_start_role(config, run, role)
        outputs |= done
        metrics |= scores
    return outputs, metrics


Pairs = list[tuple[list[int], list[int]]]


def warm_start_role(config: RunConfig, run: RunDir, role: str) -> tuple[Outputs, Metrics]:
    """One role's warm start: its checkpoint and SFT dataset (outputs) and its loss and pair
    count (metrics), recorded last in `warm_start/<role>.json`; a role recorded before, whose
    files verify against that record, is kept and not trained again."""
    finished = run.warm_start_record(role)
    if finished.is_file():  # a retried stage keeps the roles it finished, if they verify
        record = json.loads(finished.read_text())
        kept = {k: str(run.root / v) for k, v in record["outputs"].items()}
        try:
            missing = [p for p in kept.values() if not Path(p).exists()]
            if missing:
                raise RunDirError(f"{missing[0]} is missing; ")
            run.verify(WARM_START, WARM_START_STAGE, record, finished)
        except RunDirError as exc:
            print(f"warm start {role}: trained again, {str(exc).split(';')[0]}", flush=True)
        else:
            print(f"warm start {role}: finished before ({finished}), kept", flush=True)
            return kept, record["metrics"]
    settings = getattr(config, role)
    model, ws = settings.model, settings.warm_start
    lora_rank = settings.lora_rank if role == "env_model" else settings.update.lora_rank
    demos = warm_start_demos(config, role, ws)
    out = run.warm_start_checkpoint(role)
    path = run.root / "warm_start" / f"{role}_sft.parquet"
    key = warm_cache.warm_start_key(config, role, demos) if ws.cache else None
    cached = warm_cache.restore(role, key, out, path) if key else None
    if cached is not None:
        print(f"warm start {role}: reused from the cache ({warm_cache.entry(role, str(key))})",
              flush=True)  # fmt: skip
        return _finish(run, role, out, path, cached)
    steps = ws.epochs * math.ceil(len(demos) / ws.micro_batch_size)

    def build_pairs(tokenizer: Any) -> Pairs:
        return _fitting(config, role, tokenize_demos(tokenizer, demos))

    with progress(f"warm start {role}", total=steps) as advance, failpoints.part(role):
        m, pairs = sft_finetune(
            model.source,
            out,
            build_pairs,
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
    write_dataset(rows_frame(rows, "sft_samples"), path, "sft_samples")
    scores: Metrics = {
        f"{role}/warm_start_loss": m["sft_loss"],
        f"{role}/warm_start_pairs": float(len(demos)),
    }
    if key:
        warm_cache.store(role, key, out, path, scores)
    return _finish(run, role, out, path, scores)


def _fitting(config: RunConfig, role: str, pairs: Pairs) -> Pairs:
    """`pairs`, after one line saying so when some answers are longer than the role may
    generate: the model then learns answers it is cut off writing (`rlanything check-env`
    fails on the same)."""
    if getattr(getattr(config, role), "answers", "generate") != "choose":
        lengths = [len(answer) - 1 for _, answer in pairs]  # less the EOS
        problem = answer_overflow(role, lengths, answer_limit(config, role))
        if problem:
            print(f"warm start {role}: {problem}.", flush=True)
    return pairs


def _finish(
    run: RunDir, role: str, out: Path, path: Path, scores: Metrics
) -> tuple[Outputs, Metrics]:
    """Record a role's finished warm start (its checkpoint `out` and SFT dataset `path`, with
    every file's size and sha256, checked before the role is kept) in `warm_start/<role>.json`,
    written last."""
    done: Outputs = {f"{role}_sft": str(path), f"{role}_checkpoint": str(out)}
    finished = run.warm_start_record(role)
    # relative to the run directory, as the stage markers are: a moved run keeps them
    write_json(finished, {"outputs": {k: run.label(v) for k, v in done.items()},
                          "files": run.output_files(done), "metrics": scores})  # fmt: skip
    return done, scores
