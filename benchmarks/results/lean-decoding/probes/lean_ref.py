"""Lean and transformers' decode steps in bfloat16 against the float32 model's log-probs."""

import torch

from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import generate, response_logprobs

src = "embedded:smollm2-135m-instruct"
bf, tok = load_model(src, device="cpu", dtype="bfloat16")
fp, _ = load_model(src, device="cpu", dtype="float32")
sysmsg = {
    "role": "system",
    "content": "You are in a house. Answer with one action in \\boxed{}. " * 6,
}
prompts = []
for i in range(8):
    p = [
        sysmsg,
        {"role": "user", "content": f"Task {i % 3}: put mug {i % 3} on shelf. You see table {i}."},
    ]
    prompts += [p] * (3 if i % 2 else 1)
seeds = list(range(len(prompts)))
for lean in (False, True):
    gens = generate(
        bf,
        tok,
        prompts,
        seeds,
        max_new_tokens=16,
        temperature=1.0,
        batch_size=16,
        lean_decoding=lean,
        ignore_eos=True,
    )
    with torch.no_grad():
        ref, mask = response_logprobs(
            fp,
            [g.prompt_token_ids for g in gens],
            [g.token_ids for g in gens],
            temperature=1.0,
            pad_id=tok.pad_token_id,
        )
    d = torch.cat(
        [(ref[i, : len(g.logprobs)] - torch.tensor(g.logprobs)).abs() for i, g in enumerate(gens)]
    )
    print(
        "lean" if lean else "hf  ",
        f"bf16 sampler vs float32 recompute: mean |diff| {d.mean():.4f}, "
        f"p99 {d.quantile(0.99):.4f}, max {d.max():.4f}, n={d.numel()}",
    )
