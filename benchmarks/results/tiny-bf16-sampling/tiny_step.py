"""A tiny-128x4 training step and no-grad forward at the household update's shape (32 rows × 250
tokens, logits for the last 12), in float32, bfloat16 weights and float32 weights autocast to
bfloat16, each with sdpa and eager attention; one thread, median of 5 after 2 warm-ups.

    python tiny_step.py CHECKPOINT OUT.json
"""

import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable

import torch
from transformers import AutoModelForCausalLM

ARMS = {
    "float32": (torch.float32, False),
    "bfloat16": (torch.bfloat16, False),
    "float32-autocast-bfloat16": (torch.float32, True),
}


def median_seconds(fn: Callable[[], None]) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 4)


def measure(source: str, dtype: torch.dtype, autocast: bool, attn: str) -> dict[str, float]:
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation=attn)
    model.train()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (32, 250), generator=generator)

    def compute() -> contextlib.AbstractContextManager[object]:
        on = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else None
        return on or contextlib.nullcontext()

    def step() -> None:
        with compute():
            out = model(input_ids=ids, logits_to_keep=12)
        out.logits.float().logsumexp(-1).mean().backward()

    def forward() -> None:
        with torch.no_grad(), compute():
            model(input_ids=ids, logits_to_keep=12)

    return {"train_step_s": median_seconds(step), "nograd_forward_s": median_seconds(forward)}


def main() -> None:
    torch.set_num_threads(1)
    source, out_path = sys.argv[1], sys.argv[2]
    results = {}
    for name, (dtype, autocast) in ARMS.items():
        for attn in ("sdpa", "eager"):
            results[f"{name}-{attn}"] = measure(source, dtype, autocast, attn)
            print(name, attn, results[f"{name}-{attn}"], flush=True)
    with open(out_path, "w") as f:
        json.dump({"torch_threads": 1, "shape": [32, 250], **results}, f, indent=1)


main()
