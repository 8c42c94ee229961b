"""Prefill with and without a batch's shared prompt prefix computed once (`modelling._prefill`).

The prompts are the policy's on held-out household tasks of the config's environment, played
with random valid answers (each distinct prompt once, sorted by length as `generate` batches
them). For each batch size: the prefix all the batch's prompts share, and the median seconds of
a prefill with the prefix computed once and with every prompt prefilled whole, alternating.

    python benchmarks/prefill_sharing.py --config configs/demo-smollm2.yaml \
        --out benchmarks/results/prefill-sharing-demo.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import torch
from common import bench_config, save

from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import _prefill, encode_chat, shared_prefix_length


def policy_prompts(config_path: str, tasks: int, tokenizer: Any) -> list[tuple[int, ...]]:
    """Distinct policy prompts of `tasks` held-out tasks played with random valid answers."""
    env = bench_config(config_path).environment.env
    rng = random.Random(0)
    prompts: set[tuple[int, ...]] = set()
    for spec in env.generate("id", tasks, seed=7):
        episode = env.new_episode(spec, None, None)
        while not episode.done:
            prompts.add(tuple(encode_chat(tokenizer, episode.messages())))
            actions = episode.episode.actions  # type: ignore[attr-defined]
            episode.act(f"\\boxed{{{rng.randint(1, len(actions))}}}")
    return sorted(prompts, key=lambda p: (len(p), p))


def measure(config_path: str, tasks: int, sizes: list[int], repeats: int) -> dict[str, Any]:
    config = bench_config(config_path)
    pm = config.policy.model
    model, tokenizer = load_model(pm.source, device=pm.device, dtype=pm.dtype)
    prompts = policy_prompts(config_path, tasks, tokenizer)
    middle = len(prompts) // 2
    results = []
    for size in sizes:
        batch = prompts[middle : middle + size]
        seconds: dict[bool, list[float]] = {False: [], True: []}
        with torch.no_grad():
            for _ in range(repeats + 1):  # the first pair warms up
                for share in (False, True):
                    start = time.perf_counter()
                    _prefill(model, batch, pad_id=tokenizer.pad_token_id, share_prefix=share)
                    seconds[share].append(time.perf_counter() - start)
        whole, once = (statistics.median(seconds[s][1:]) for s in (False, True))
        results.append(
            {
                "prompts": len(batch),
                "prompt_tokens": [len(batch[0]), len(batch[-1])],
                "shared_prefix_tokens": shared_prefix_length(batch),
                "whole_prompts_seconds": round(whole, 3),
                "shared_prefix_seconds": round(once, 3),
                "speedup": round(whole / once, 3),
            }
        )
    return {
        "benchmark": "prefill_sharing",
        "config": config_path,
        "model": pm.source,
        "dtype": str(next(model.parameters()).dtype),
        "distinct_prompts": len(prompts),
        "repeats": repeats,
        "batches": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/demo-smollm2.yaml")
    parser.add_argument("--tasks", type=int, default=16, help="household tasks to play")
    parser.add_argument("--sizes", default="2,8,16", help="batch sizes (distinct prompts)")
    parser.add_argument("--repeats", type=int, default=3, help="timed pairs after a warm-up")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    save(args.out, measure(args.config, args.tasks, sizes, args.repeats))


if __name__ == "__main__":
    main()
