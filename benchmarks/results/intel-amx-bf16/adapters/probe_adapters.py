"""Probe: a SmolLM2 LoRA step with PEFT's float32 adapters (its input casts) against
`loading.compute_adapters_in` (adapters multiplied in bfloat16, weights kept float32); the base
in bfloat16 in both, steps alternated in one process. Also the log-prob gap between the arms.

    python probe_adapters.py THREADS STEPS ROWS PROMPT_TOKENS OUT   (responses of 32 tokens)

`compute_adapters_in` was withdrawn (b3b64b7): run this on f1dcfbb's tree, the last that has it
(`git worktree add DIR f1dcfbb`, then PYTHONPATH=DIR).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from rlanything_core.models import loading
from rlanything_core.models.modelling import response_logprobs

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
from common import save

threads, steps, rows, plen = (int(a) for a in sys.argv[1:5])
out = sys.argv[5]
torch.set_num_threads(threads)
arms = {}
real = loading.compute_adapters_in
for name in ("peft_float32", "compute_in_bf16"):
    loading.compute_adapters_in = real if name == "compute_in_bf16" else (lambda m, d: None)
    torch.manual_seed(0)
    model, tok = loading.load_model(
        "embedded:smollm2-135m-instruct", dtype="fastest", trainable=True, lora_rank=16
    )
    with torch.no_grad():  # a trained-looking adapter: B nonzero
        g = torch.Generator().manual_seed(1)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.01)
    params = [p for p in model.parameters() if p.requires_grad]
    print(name, sorted({str(p.dtype) for p in params}), sum(p.numel() for p in params), flush=True)
    arms[name] = (model, torch.optim.AdamW(params, lr=1e-4), tok)
loading.compute_adapters_in = real
g = torch.Generator().manual_seed(0)
prompts = [torch.randint(100, 40000, (plen,), generator=g).tolist() for _ in range(rows)]
responses = [torch.randint(100, 40000, (32,), generator=g).tolist() for _ in range(rows)]
with torch.no_grad():
    lp = {
        n: response_logprobs(m, prompts, responses, temperature=1.0, pad_id=t.pad_token_id)
        for n, (m, _, t) in arms.items()
    }
(a, mask), (b, _) = lp["peft_float32"], lp["compute_in_bf16"]
gap = ((a - b).abs() * mask).sum().item() / mask.sum().item()
print("mean |log-prob gap| per token", gap, flush=True)


def step(name):
    model, opt, tok = arms[name]
    opt.zero_grad(set_to_none=True)
    logp, mask = response_logprobs(
        model, prompts, responses, temperature=1.0, pad_id=tok.pad_token_id
    )
    loss = -(logp * mask).sum() / mask.sum()
    loss.backward()
    opt.step()
    return loss.item()


print({n: step(n) for n in arms}, flush=True)
times = {n: [] for n in arms}
for _ in range(steps):
    for name in arms:
        t = time.perf_counter()
        step(name)
        times[name].append(time.perf_counter() - t)
med = {n: sorted(v)[len(v) // 2] for n, v in times.items()}
save(
    out,
    {
        "benchmark": "probe_adapters",
        "threads": threads,
        "rows": rows,
        "prompt_tokens": plen,
        "response_tokens": 32,
        "logprob_gap_mean_per_token": gap,
        "step_seconds": times,
        "median_s": med,
        "ratio_peft_float32_over_compute_in_bf16": med["peft_float32"] / med["compute_in_bf16"],
    },
)
