"""Supervised fine-tuning on (prompt, answer) pairs: the step behind every warm start, RLoop's
rejection-sampling fine-tuning and the tiny test models."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from rlanything_core.envs.demos import Demo
from rlanything_core.models.checkpoints import make_optimizer, save_checkpoint
from rlanything_core.models.modelling import encode_chat, response_logprobs, scale_lr


def sft_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    pairs: Sequence[tuple[list[int], list[int]]],
    *,
    pad_id: int,
    epochs: int = 1,
    micro_batch_size: int = 8,
    seed: int = 0,
    lr_schedule: Literal["constant", "linear"] = "constant",
    group_by_length: bool = False,
    max_forward_tokens: int | None = None,
    on_step: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Supervised fine-tuning: minimize −log π(response | prompt), mean over response tokens.

    One optimizer step per micro-batch; pairs are shuffled each epoch with a seeded generator.
    `lr_schedule="linear"` takes step k of T at lr·(1 − k/T), the optimizer's rate decayed
    linearly toward 0; the optimizer's rate is restored at the end. `group_by_length` batches
    pairs of about the same length together (`micro_batches`).

    `max_forward_tokens` bounds the tokens (rows × longest row, padding included) of one
    forward pass: a micro-batch longer than that runs as several forward and backward passes
    whose gradients add up before its one optimizer step (`forward_chunks`). Each pass's loss is
    its response tokens' summed −log-prob over the whole micro-batch's count, so the step is the
    same as one pass's, up to rounding; the activations held at once are those of one pass.

    Args:
        pairs: (prompt token ids, response token ids incl. EOS).
    """
    model.train()
    rng = np.random.default_rng(seed % (1 << 32))
    losses: list[float] = []
    base_lrs = [float(group["lr"]) for group in optimizer.param_groups]
    total = epochs * math.ceil(len(pairs) / micro_batch_size)
    lengths = [len(p) + len(r) for p, r in pairs]
    for _ in range(epochs):
        for rows in micro_batches(lengths, micro_batch_size, rng, group_by_length=group_by_length):
            if lr_schedule == "linear":
                scale_lr(optimizer, base_lrs, 1.0 - len(losses) / total)
            batch = [pairs[i] for i in rows]
            tokens = sum(len(r) for _, r in batch)  # the response tokens the loss averages over
            optimizer.zero_grad(set_to_none=True)
            loss = 0.0
            for part in forward_chunks(batch, max_forward_tokens):
                logp, mask = response_logprobs(
                    model,  # type: ignore[arg-type]
                    [p for p, _ in part],
                    [r for _, r in part],
                    temperature=1.0,
                    pad_id=pad_id,
                )
                part_loss = -(logp * mask).sum() / tokens
                part_loss.backward()
                loss += part_loss.item()
            optimizer.step()
            losses.append(loss)
            if on_step is not None:
                on_step(1)
    scale_lr(optimizer, base_lrs, 1.0)
    return {
        "sft_loss": float(np.mean(losses[-max(1, len(losses) // 4) :])),
        "sft_steps": float(len(losses)),
    }


def forward_chunks(
    batch: Sequence[tuple[list[int], list[int]]], max_tokens: int | None
) -> list[list[tuple[list[int], list[int]]]]:
    """`batch` cut, in order, into runs of pairs whose rows × longest row (prompt and response)
    is at most `max_tokens`; a pair longer than that alone is a run of its own. One run (the
    batch) when `max_tokens` is None."""
    if max_tokens is None:
        return [list(batch)]
    runs: list[list[tuple[list[int], list[int]]]] = []
    current: list[tuple[list[int], list[int]]] = []
    longest = 0
    for pair in batch:
        length = len(pair[0]) + len(pair[1])
        if current and (len(current) + 1) * max(longest, length) > max_tokens:
            runs.append(current)
            current, longest = [], 0
        current.append(pair)
        longest = max(longest, length)
    return [*runs, current] if current else runs


LENGTH_GROUP = 64
"""Micro-batches per group when `micro_batches` groups by length."""


def micro_batches(
    lengths: Sequence[int], size: int, rng: np.random.Generator, *, group_by_length: bool
) -> list[np.ndarray]:
    """One epoch's micro-batches of row indices, `size` rows each (the last may be smaller).

    The rows are shuffled. With `group_by_length`, each run of `LENGTH_GROUP` × `size` shuffled
    rows is sorted by length before it is cut into batches, and the batches are then shuffled,
    so a batch pads its rows to about their own length while batches still come in random
    order. Either way there are ⌈len(lengths) / size⌉ batches.
    """
    order = rng.permutation(len(lengths))
    if not group_by_length:
        return [order[i : i + size] for i in range(0, len(order), size)]
    batches: list[np.ndarray] = []
    span = LENGTH_GROUP * size
    for start in range(0, len(order), span):
        group = order[start : start + span]
        group = group[np.argsort([lengths[i] for i in group], kind="stable")]
        batches += [group[i : i + size] for i in range(0, len(group), size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def tokenize_demos(tokenizer: Any, demos: Sequence[Demo]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids + EOS) per demo, the prompt rendered by the chat template."""
    return [
        (
            encode_chat(tokenizer, d.prompt),
            [*tokenizer(d.answer, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id],
        )
        for d in demos
    ]


def finetune_and_save(
    model: Any,
    tokenizer: Any,
    pairs: Sequence[tuple[list[int], list[int]]],
    out_dir: str | Path,
    *,
    lr: float,
    epochs: int,
    micro_batch_size: int,
    seed: int,
    lr_schedule: Literal["constant", "linear"] = "constant",
    group_by_length: bool = False,
    max_forward_tokens: int | None = None,
    on_step: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Fine-tune a loaded `model` on `pairs` with a fresh AdamW (`sft_update`), then save it with
    its tokenizer to `out_dir`; with no pair the model is saved unchanged. Its metrics."""
    metrics = (
        sft_update(
            model,
            make_optimizer(model, lr=lr),
            pairs,
            pad_id=tokenizer.pad_token_id,
            epochs=epochs,
            micro_batch_size=micro_batch_size,
            seed=seed,
            lr_schedule=lr_schedule,
            group_by_length=group_by_length,
            max_forward_tokens=max_forward_tokens,
            on_step=on_step,
        )
        if pairs
        else {"sft_steps": 0.0}
    )
    save_checkpoint(model, tokenizer, out_dir)
    return metrics
