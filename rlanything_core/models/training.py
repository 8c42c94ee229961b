"""Policy and reward-model updates: pick the kept samples, load the checkpoint, run one PPO-clip
update (`models.ppo_update`), save the new checkpoint. Also the supervised fine-tuning step used
for warm starts (and by RLoop's rejection-sampling fine-tuning).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
import pandas as pd
import torch

from rlanything_core.base import failpoints
from rlanything_core.base.atomic import atomic_path
from rlanything_core.base.seeding import derive_seed, seed_everything
from rlanything_core.models.checkpoints import make_optimizer, save_checkpoint
from rlanything_core.models.config import UpdateConfig
from rlanything_core.models.devices import pick_device
from rlanything_core.models.distributed import Group, join_group, leave_group
from rlanything_core.models.loading import load_model, load_tokenizer
from rlanything_core.models.modelling import TrainSample, ppo_update, with_eos
from rlanything_core.models.sft import finetune_and_save


def select_samples(
    signals: pd.DataFrame,
    texts: pd.DataFrame,
    keys: list[str],
    *,
    eos_id: int,
    max_samples: int | None,
    seed: int,
    with_sampler_logprobs: bool = False,
) -> list[TrainSample]:
    """Join kept signal rows to their prompt/response tokens by `keys` and build TrainSamples.

    A seeded random subset of `max_samples` is taken when there are more kept rows. With
    `with_sampler_logprobs` each sample also carries the log-probs its sampler recorded
    (`texts.sampler_logprobs`: the rollouts have them, the RM's votes do not).
    """
    columns = [*keys, "prompt_token_ids", "response_token_ids"]
    if with_sampler_logprobs:
        if "sampler_logprobs" not in texts.columns:
            raise ValueError(
                "update.old_logprobs is 'sampler' but these samples carry no sampler_logprobs "
                "column (only the policy's rollouts record them); set old_logprobs: recompute"
            )
        columns.append("sampler_logprobs")
    kept = signals.loc[signals["kept"], [*keys, "advantage"]]
    joined = kept.merge(
        texts[columns],
        on=keys,
        how="left",
        validate="one_to_one",
    )
    if joined["prompt_token_ids"].isna().any():
        missing = joined.loc[joined["prompt_token_ids"].isna(), keys].head(3).to_dict("records")
        raise ValueError(f"advantage rows without a matching sample, e.g. {missing}")
    if max_samples is not None and len(joined) > max_samples:
        rng = np.random.default_rng(seed % (1 << 32))
        joined = joined.iloc[np.sort(rng.choice(len(joined), max_samples, replace=False))]
    return [
        TrainSample(
            prompt_ids=[int(t) for t in row.prompt_token_ids],
            response_ids=with_eos([int(t) for t in row.response_token_ids], eos_id),
            advantage=float(row.advantage),
            old_logprobs=(
                [float(x) for x in row.sampler_logprobs] if with_sampler_logprobs else None
            ),
        )
        for row in joined.itertuples()
    ]


def _load_trainable(
    source: str, device: str, dtype: str, lora_rank: int, lora_alpha: int, seed: int, purpose: str
) -> tuple[Any, Any]:
    """Seed the process for this update, then load `source` ready to train."""
    seed_everything(derive_seed(seed, purpose) % (1 << 32))
    return load_model(
        source,
        device=device,
        dtype=dtype,
        trainable=True,
        lora_rank=lora_rank,
        lora_alpha=lora_alpha,
    )


def rl_update(
    source: str,
    out_dir: str | Path,
    build_samples: Callable[[int], list[TrainSample]],
    update: UpdateConfig,
    *,
    device: str,
    dtype: str,
    temperature: float,
    seed: int,
    on_step: Callable[[int], None] | None = None,
    group: Group | None = None,
) -> dict[str, float]:
    """Load `source` for training, update it on the samples, save the result to `out_dir`.

    `build_samples(eos_id)` returns the samples (it needs the tokenizer's EOS id). With no
    sample the model is saved unchanged and the metrics say `skipped = 1`. When
    `update.distributed.processes` > 1 the update runs in that many torchrun processes
    (distributed.py); `group` is set inside them.
    """
    if group is None and update.distributed.processes > 1:
        samples = build_samples(load_tokenizer(source).eos_token_id)
        if samples:  # else nothing to spread: this process saves the unchanged model
            return _launch(
                source, out_dir, samples, update, device, dtype, temperature, seed, on_step
            )
    group = group or Group()
    model, tokenizer = _load_trainable(
        source, device, dtype, update.lora_rank, update.lora_alpha, seed, "update"
    )
    samples = build_samples(tokenizer.eos_token_id)
    keep = update.keep_optimizer and update.distributed.strategy != "fsdp"
    if not samples:  # the optimizer's state goes on unchanged to the next round
        if group.is_main:
            optimizer = _optimizer(model, update, source, keep)
            save_checkpoint(model, tokenizer, out_dir, optimizer if keep else None)
        return {"samples": 0.0, "skipped": 1.0}
    trained = group.wrap(model)
    optimizer = _optimizer(trained, update, source, keep)
    metrics = ppo_update(
        trained,
        optimizer,
        samples,
        pad_id=tokenizer.pad_token_id,
        temperature=temperature,
        clip_eps=update.clip_eps,
        kl_beta=update.kl_beta,
        optimizer_steps=update.optimizer_steps,
        micro_batch_size=update.micro_batch_size,
        max_grad_norm=update.max_grad_norm,
        epochs=update.epochs,
        warmup_steps=update.warmup_steps,
        group=group,
        on_step=on_step,
        reuse_sampler_logprobs=update.old_logprobs == "sampler",
    )
    metrics["skipped"] = 0.0
    gathered = group.full_state_dict(trained)
    if gathered is not None:  # FSDP: the shards, gathered into an unsharded copy
        model, _ = _load_trainable(
            source, "cpu", dtype, update.lora_rank, update.lora_alpha, seed, "update"
        )
        model.load_state_dict(gathered)
    if group.is_main:
        save_checkpoint(model, tokenizer, out_dir, optimizer if keep else None)
    return metrics


def _optimizer(model: Any, update: UpdateConfig, source: str, keep: bool) -> torch.optim.AdamW:
    """The run's AdamW: restored from `source`'s saved state when `keep` and it has one."""
    resume = Path(source) if keep and Path(source).is_dir() else None
    return make_optimizer(model, lr=update.lr, weight_decay=update.weight_decay, resume_from=resume)


def _launch(
    source: str,
    out_dir: str | Path,
    samples: list[TrainSample],
    update: UpdateConfig,
    device: str,
    dtype: str,
    temperature: float,
    seed: int,
    on_step: Callable[[int], None] | None,
) -> dict[str, float]:
    """Run the update in `update.distributed.processes` torchrun processes; their metrics."""
    with tempfile.TemporaryDirectory(prefix="rlanything-update-") as tmp:
        work = Path(tmp)
        pd.DataFrame([dataclasses.asdict(s) for s in samples]).to_parquet(work / "samples.parquet")
        job = {
            "source": source,
            "out_dir": str(out_dir),
            "update": update.model_dump(),
            "device": device,
            "dtype": dtype,
            "temperature": temperature,
            "seed": seed,
        }
        (work / "job.json").write_text(json.dumps(job))
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={update.distributed.processes}",
            "--module",
            "rlanything_core.models.training",
            str(work),
        ]
        progress, done = work / "progress", 0
        attempts = update.distributed.max_restarts + 1
        for attempt in range(1, attempts + 1):
            with (work / "output.log").open("wb") as log:
                proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
                try:
                    while proc.poll() is None or done < _size(progress):
                        time.sleep(0.2)
                        steps = _size(progress)  # a new attempt counts from 0 again
                        if on_step is not None and steps > done:
                            on_step(steps - done)
                        done = max(done, steps)
                finally:  # interrupted (Ctrl-C, a cancelled flow run): torchrun stops its workers
                    if proc.poll() is None:
                        proc.terminate()
                        proc.wait()
            if proc.returncode == 0:
                break
            tail = (work / "output.log").read_text(errors="replace")[-4000:]
            what = (
                f"the distributed update ({update.distributed.processes} processes, "
                f"{update.distributed.strategy}) failed with exit status {proc.returncode} "
                f"(attempt {attempt} of {attempts})"
            )
            if attempt == attempts:
                raise RuntimeError(f"{what}; its output ends:\n{tail}")
            warnings.warn(f"{what}; starting it again. Its output ended:\n{tail}", stacklevel=2)
        return json.loads((work / "metrics.json").read_text())


def _tick(progress: BinaryIO, steps: int) -> None:
    progress.write(b"." * steps)


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _worker(work: Path) -> None:
    """One torchrun process of `_launch`: join the group, update, rank 0 reports."""
    job = json.loads((work / "job.json").read_text())
    update = UpdateConfig.model_validate(job["update"])
    cuda = pick_device(job["device"]).type == "cuda"
    group, device = join_group(update.distributed.strategy, cuda=cuda)
    try:
        failpoints.worker_joined(group.rank)
        frame = pd.read_parquet(work / "samples.parquet")
        samples = [
            TrainSample(
                [int(t) for t in r.prompt_ids],
                [int(t) for t in r.response_ids],
                float(r.advantage),
                None if r.old_logprobs is None else [float(x) for x in r.old_logprobs],
            )
            for r in frame.itertuples()
        ]
        # A restarted group starts its count over; the launcher reports only steps past its tally.
        with (work / "progress").open("wb" if group.is_main else "ab", buffering=0) as progress:
            metrics = rl_update(
                job["source"],
                job["out_dir"],
                lambda _eos: samples,
                update,
                device=device,
                dtype=job["dtype"],
                temperature=job["temperature"],
                seed=job["seed"],
                on_step=(lambda n: _tick(progress, n)) if group.is_main else None,
                group=group,
            )
        if group.is_main:
            with atomic_path(work / "metrics.json") as tmp:
                tmp.write_text(json.dumps(metrics))
    finally:
        leave_group()


def sft_finetune(
    source: str,
    out_dir: str | Path,
    build_pairs: Callable[[Any], list[tuple[list[int], list[int]]]],
    *,
    device: str = "auto",
    dtype: str = "auto",
    lora_rank: int = 0,
    lora_alpha: int = 32,
    lr: float,
    epochs: int,
    micro_batch_size: int,
    seed: int,
    lr_schedule: Literal["constant", "linear"] = "constant",
    group_by_length: bool = False,
    max_forward_tokens: int | None = None,
    on_step: Callable[[int], None] | None = None,
) -> tuple[dict[str, float], list[tuple[list[int], list[int]]]]:
    """Load `source`, fine-tune it on `build_pairs(tokenizer)`, save it to `out_dir`.

    Pairs are (prompt ids, response ids incl. EOS), e.g. `tokenize_demos`. With no pair the
    model is saved unchanged. Returns the metrics and the pairs (the record of what was trained
    on).
    """
    model, tokenizer = _load_trainable(source, device, dtype, lora_rank, lora_alpha, seed, "sft")
    pairs = build_pairs(tokenizer)
    metrics = finetune_and_save(
        model,
        tokenizer,
        pairs,
        out_dir,
        lr=lr,
        epochs=epochs,
        micro_batch_size=micro_batch_size,
        seed=seed,
        lr_schedule=lr_schedule,
        group_by_length=group_by_length,
        max_forward_tokens=max_forward_tokens,
        on_step=on_step,
    )
    return metrics, pairs


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
