"""Policy and reward-model updates: pick the kept samples, load the checkpoint, run one PPO-clip
update (`models.ppo_update`), save the new checkpoint. Also the supervised fine-tuning step used
for warm starts (and by RLoop's rejection-sampling fine-tuning).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from rlanything_core.config import UpdateConfig
from rlanything_core.demos import Demo
from rlanything_core.models import (
    TrainSample,
    encode_chat,
    load_model,
    make_optimizer,
    ppo_update,
    response_logprobs,
    save_checkpoint,
    with_eos,
)
from rlanything_core.seeding import derive_seed, seed_everything

STEP_KEY = ["task_id", "task_version", "rollout_idx", "step_idx"]


def select_samples(
    signals: pd.DataFrame,
    texts: pd.DataFrame,
    keys: list[str],
    *,
    eos_id: int,
    max_samples: int | None,
    seed: int,
) -> list[TrainSample]:
    """Join kept signal rows to their prompt/response tokens by `keys` and build TrainSamples.

    A seeded random subset of `max_samples` is taken when there are more kept rows.
    """
    kept = signals.loc[signals["kept"], [*keys, "advantage"]]
    joined = kept.merge(
        texts[[*keys, "prompt_token_ids", "response_token_ids"]],
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
) -> dict[str, float]:
    """Load `source` for training, update it on the samples, save the result to `out_dir`.

    `build_samples(eos_id)` returns the samples (it needs the tokenizer's EOS id). With no
    sample the model is saved unchanged and the metrics say `skipped = 1`.
    """
    model, tokenizer = _load_trainable(
        source, device, dtype, update.lora_rank, update.lora_alpha, seed, "update"
    )
    samples = build_samples(tokenizer.eos_token_id)
    if samples:
        metrics = ppo_update(
            model,
            make_optimizer(model, lr=update.lr, weight_decay=update.weight_decay),
            samples,
            pad_id=tokenizer.pad_token_id,
            temperature=temperature,
            clip_eps=update.clip_eps,
            kl_beta=update.kl_beta,
            optimizer_steps=update.optimizer_steps,
            micro_batch_size=update.micro_batch_size,
            max_grad_norm=update.max_grad_norm,
            on_step=on_step,
        )
        metrics["skipped"] = 0.0
    else:
        metrics = {"samples": 0.0, "skipped": 1.0}
    save_checkpoint(model, tokenizer, out_dir)
    return metrics


def sft_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    pairs: Sequence[tuple[list[int], list[int]]],
    *,
    pad_id: int,
    epochs: int = 1,
    micro_batch_size: int = 8,
    seed: int = 0,
    on_step: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Supervised fine-tuning: minimize −log π(response | prompt), mean over response tokens.

    One optimizer step per micro-batch; pairs are shuffled each epoch with a seeded generator.

    Args:
        pairs: (prompt token ids, response token ids incl. EOS).
    """
    model.train()
    rng = np.random.default_rng(seed % (1 << 32))
    losses: list[float] = []
    for _ in range(epochs):
        order = rng.permutation(len(pairs))
        for start in range(0, len(order), micro_batch_size):
            batch = [pairs[i] for i in order[start : start + micro_batch_size]]
            logp, mask = response_logprobs(
                model,  # type: ignore[arg-type]
                [p for p, _ in batch],
                [r for _, r in batch],
                temperature=1.0,
                pad_id=pad_id,
            )
            loss = -(logp * mask).sum() / mask.sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if on_step is not None:
                on_step(1)
    return {
        "sft_loss": float(np.mean(losses[-max(1, len(losses) // 4) :])),
        "sft_steps": float(len(losses)),
    }


def tokenize_demos(tokenizer: Any, demos: Sequence[Demo]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids + EOS) per demo, the prompt rendered by the chat template."""
    return [
        (
            encode_chat(tokenizer, d.prompt),
            [*tokenizer(d.answer, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id],
        )
        for d in demos
    ]


def sft_finetune(
    source: str,
    out_dir: str | Path,
    demos: Sequence[Demo],
    *,
    device: str = "auto",
    dtype: str = "auto",
    lora_rank: int = 0,
    lora_alpha: int = 32,
    lr: float,
    epochs: int,
    micro_batch_size: int,
    seed: int,
    on_step: Callable[[int], None] | None = None,
) -> tuple[dict[str, float], list[tuple[list[int], list[int]]]]:
    """Load `source`, fine-tune it on `demos`, save it to `out_dir`.

    Returns the metrics and the tokenized pairs (for the record of what was trained on).
    """
    model, tokenizer = _load_trainable(source, device, dtype, lora_rank, lora_alpha, seed, "sft")
    pairs = tokenize_demos(tokenizer, demos)
    metrics = sft_update(
        model,
        make_optimizer(model, lr=lr),
        pairs,
        pad_id=tokenizer.pad_token_id,
        epochs=epochs,
        micro_batch_size=micro_batch_size,
        seed=seed,
        on_step=on_step,
    )
    save_checkpoint(model, tokenizer, out_dir)
    return metrics, pairs
