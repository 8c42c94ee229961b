"""Seconds per warm-start (supervised) step, by dtype and length grouping, and rollout speed.

The pairs are the config's own policy warm-start pairs (the environment's demonstrations, as
`rlanything train` builds them); each variant trains a fresh copy of the config's policy model
for `--steps` micro-batches of `warm_start.micro_batch_size` from the same shuffled order, after
`--warmup` untimed steps. The generation side times `modelling.generate` on `--prompts` of those
prompts at the policy's batch size and `max_new_tokens`. Variants: float32 or "fastest-mixed"
(bfloat16 autocast where the CPU has it), and random or length-grouped micro-batches.

    python benchmarks/sft_speed.py --config configs/learning-household-3000.yaml \
        --out benchmarks/results/sft-speed.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch
from common import bench_config, save

from rlanything_core.models.checkpoints import make_optimizer
from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import generate, response_logprobs
from rlanything_core.models.sft import micro_batches, tokenize_demos
from rlanything_core.run.warm_start import warm_start_demos

DTYPES = ("float32", "fastest-mixed")


def time_sft(
    source: str,
    pairs: list[tuple[list[int], list[int]]],
    *,
    dtype: str,
    group_by_length: bool,
    size: int,
    lr: float,
    steps: int,
    warmup: int,
) -> dict[str, Any]:
    """Median and mean seconds per step over `steps` timed steps of one variant."""
    model, tokenizer = load_model(source, device="cpu", dtype=dtype, trainable=True)
    optimizer = make_optimizer(model, lr=lr)
    rng = np.random.default_rng(0)
    lengths = [len(p) + len(r) for p, r in pairs]
    batches = micro_batches(lengths, size, rng, group_by_length=group_by_length)
    seconds: list[float] = []
    padded = real = 0
    for k, rows in enumerate(batches[: warmup + steps]):
        batch = [pairs[i] for i in rows]
        start = time.perf_counter()
        logp, mask = response_logprobs(
            model,
            [p for p, _ in batch],
            [r for _, r in batch],
            temperature=1.0,
            pad_id=tokenizer.pad_token_id,
        )
        loss = -(logp * mask).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if k >= warmup:
            seconds.append(time.perf_counter() - start)
            width = max(len(p) for p, _ in batch) + max(len(r) for _, r in batch)
            padded += width * len(batch)
            real += sum(len(p) + len(r) for p, r in batch)
    return {
        "dtype": dtype,
        "group_by_length": group_by_length,
        "steps": len(seconds),
        "median_s_per_step": float(np.median(seconds)),
        "mean_s_per_step": float(np.mean(seconds)),
        "padding_fraction": 1.0 - real / padded,
    }


def time_generation(
    source: str, prompts: list[Any], *, dtype: str, batch_size: int, max_new_tokens: int
) -> dict[str, Any]:
    """Seconds to sample one answer for each prompt (after one untimed batch)."""
    model, tokenizer = load_model(source, device="cpu", dtype=dtype)
    seeds = list(range(len(prompts)))
    kwargs = {"max_new_tokens": max_new_tokens, "temperature": 1.0, "batch_size": batch_size}
    generate(model, tokenizer, prompts[:batch_size], seeds[:batch_size], **kwargs)
    start = time.perf_counter()
    generate(model, tokenizer, prompts, seeds, **kwargs)
    return {"dtype": dtype, "prompts": len(prompts), "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/learning-household.yaml")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    config = bench_config(args.config)
    ws, model = config.policy.warm_start, config.policy.model
    demos = warm_start_demos(config, "policy", ws)
    _, tokenizer = load_model(model.source, device="cpu")
    pairs = tokenize_demos(tokenizer, demos)
    sft = [
        time_sft(
            model.source,
            pairs,
            dtype=dtype,
            group_by_length=grouped,
            size=ws.micro_batch_size,
            lr=ws.lr,
            steps=args.steps,
            warmup=args.warmup,
        )
        for dtype in DTYPES
        for grouped in (False, True)
    ]
    base = sft[0]["median_s_per_step"]
    for row in sft:
        row["speedup"] = base / row["median_s_per_step"]
        print(row)
    prompts = [d.prompt for d in demos[: args.prompts]]
    gen = [
        time_generation(
            model.source,
            prompts,
            dtype=dtype,
            batch_size=model.batch_size,
            max_new_tokens=model.max_new_tokens,
        )
        for dtype in DTYPES
    ]
    for row in gen:
        row["speedup"] = gen[0]["seconds"] / row["seconds"]
        print(row)
    save(
        args.out,
        {
            "benchmark": "sft_speed",
            "config_file": args.config,
            "pairs": len(pairs),
            "micro_batch_size": ws.micro_batch_size,
            "torch_threads": torch.get_num_threads(),
            "sft": sft,
            "generation": gen,
        },
    )


if __name__ == "__main__":
    main()
