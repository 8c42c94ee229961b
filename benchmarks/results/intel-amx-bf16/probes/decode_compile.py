"""Probe: where a SmolLM2 lean decode step's time goes on this CPU, and whether torch.compile pays
(killed before its first row: decode-compile.txt).

For each batch shape (B answers over U distinct prompts of P tokens, as the demo's rollout and
reward scoring decode them) it prefills once, then times N lean decode steps three ways:

- eager: `LeanDecoder.step` as `generate` runs it;
- linears only: the same step's matrix products alone (every q/k/v/o, MLP and head projection
  on a (B, hidden) input), the floor a step cannot go under without reading fewer weights;
- compiled: `torch.compile(decoder._step, dynamic=True)` (inductor, CPU), first call timed
  apart (the compile), then the same N steps.

    python probes/decode_compile.py --out J [--steps 48] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from rlanything_core.models.decoding import LeanDecoder
from rlanything_core.models.default import ensure_default_model
from rlanything_core.models.devices import cpu_has_native_bf16
from rlanything_core.models.modelling import _prefill

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
from common import save


def decoder(model, batch: int, distinct: int, prompt: int, steps: int) -> LeanDecoder:
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(100, 40000, (prompt // 2,), generator=g).tolist()
    prompts = [
        tuple(prefix + torch.randint(100, 40000, (prompt - len(prefix),), generator=g).tolist())
        for _ in range(distinct)
    ]
    row_of = [b % distinct for b in range(batch)]
    out, attention, _, shared = _prefill(model, prompts, pad_id=0, share_prefix=True)
    return LeanDecoder(
        model,
        out.past_key_values,
        attention,
        shared=shared,
        row_of=row_of,
        max_new_tokens=steps + 2,
    )


def time_steps(step, batch: int, prompt: int, steps: int) -> list[float]:
    tokens = torch.full((batch,), 1234)
    out = []
    for t in range(steps):
        positions = torch.full((batch, 1), prompt + t)
        start = time.perf_counter()
        step(tokens, positions)
        out.append(time.perf_counter() - start)
    return out


def linears_only(model, batch: int, steps: int) -> list[float]:
    body = model.model
    x = torch.randn(batch, 1, model.config.hidden_size, dtype=model.dtype)
    out = []
    with torch.no_grad():
        for _ in range(steps):
            start = time.perf_counter()
            for layer in body.layers:
                a = layer.self_attn
                a.q_proj(x), a.k_proj(x), a.v_proj(x), a.o_proj(x)
                layer.mlp(x)
            model.get_output_embeddings()(x)
            out.append(time.perf_counter() - start)
    return out


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if cpu_has_native_bf16() else torch.float32
    model = AutoModelForCausalLM.from_pretrained(ensure_default_model(), dtype=dtype).eval()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    shapes = [(8, 8, 400), (48, 16, 600)]  # rollout-like, scoring-like (3 votes a prompt)
    rows = []
    with torch.no_grad():
        for batch, distinct, prompt in shapes:
            eager = decoder(model, batch, distinct, prompt, args.steps)
            e = time_steps(eager.step, batch, prompt, args.steps)
            lin = linears_only(model, batch, args.steps)
            comp = decoder(model, batch, distinct, prompt, args.steps + 1)
            compiled = torch.compile(comp._step, dynamic=True)
            start = time.perf_counter()
            compiled(torch.full((batch,), 1234), torch.full((batch, 1), prompt))
            first = time.perf_counter() - start
            c = time_steps(compiled, batch, prompt + 1, args.steps)
            # the compiled step's logits against eager's on the same state
            a = decoder(model, batch, distinct, prompt, 4)
            b = decoder(model, batch, distinct, prompt, 4)
            cb = torch.compile(b._step, dynamic=True)
            tok, pos = torch.full((batch,), 1234), torch.full((batch, 1), prompt)
            diff = (a._step(tok, pos).float() - cb(tok, pos).float()).abs().max().item()
            rows.append(
                {
                    "batch": batch,
                    "distinct_prompts": distinct,
                    "prompt_tokens": prompt,
                    "eager_ms": round(median(e) * 1e3, 2),
                    "linears_only_ms": round(median(lin) * 1e3, 2),
                    "compiled_ms": round(median(c) * 1e3, 2),
                    "compile_first_call_s": round(first, 1),
                    "speedup": round(median(e) / median(c), 3),
                    "max_abs_logit_diff": diff,
                }
            )
            print(rows[-1], flush=True)
    save(
        args.out,
        {
            "probe": "decode_compile",
            "dtype": str(dtype),
            "threads": args.threads,
            "steps_timed": args.steps,
            "weight_bytes": weights,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
