"""Prefill of 8 prompts of 150 tokens, SmolLM2-135M bfloat16: transformers' SDPA attention
against its eager attention, seconds a pass (mean of 5, after one), twice each.

    .venv/bin/python benchmarks/results/sampling/probes/prefill_eager.py
"""

import time

import torch

from rlanything_core.models.loading import load_model

model, tok = load_model("embedded:smollm2-135m-instruct", device="cpu", dtype="bfloat16")
ids = torch.randint(100, 40000, (8, 150))


def run() -> None:
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True,
              logits_to_keep=1)  # fmt: skip


for impl in ("sdpa", "eager", "sdpa", "eager"):
    model.set_attn_implementation(impl)
    run()
    start = time.perf_counter()
    for _ in range(5):
        run()
    print(f"{impl}: {(time.perf_counter() - start) / 5:.3f} s")
