"""Probe: where one SmolLM2 LoRA training step's time goes on this CPU (bfloat16 where native).

LoRA rank 16 on every linear layer; by default a micro-batch of 8 rows of 128
tokens (prompt 96, response 32), forward (response log-probs) and backward. Times N steps
without a profiler, then profiles 2 and prints the operators by self CPU time.

    python probes/train_step.py --out J [--steps 6] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import response_logprobs

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
from common import save


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="fastest")
    parser.add_argument("--prompts", default="96,96,96,96,96,96,96,96", help="prompt lengths")
    parser.add_argument("--response", type=int, default=32, help="response tokens a row")
    parser.add_argument("--ab", action="store_true", help="also time it against SDPA, alternated")
    parser.add_argument("--attn", default="loaded", help="loaded (load_model's), sdpa or eager")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(
        "embedded:smollm2-135m-instruct", dtype=args.dtype, trainable=True, lora_rank=16
    )
    if args.attn != "loaded":
        model.set_attn_implementation(args.attn)
    attn = model.config._attn_implementation
    if args.ab and attn == "sdpa":
        parser.error("--ab times an attention against SDPA: pick one with --attn (e.g. eager)")
    g = torch.Generator().manual_seed(0)
    lengths = [int(n) for n in args.prompts.split(",")]
    prompts = [torch.randint(100, 40000, (n,), generator=g).tolist() for n in lengths]
    responses = [torch.randint(100, 40000, (args.response,), generator=g).tolist() for _ in lengths]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        logp, mask = response_logprobs(
            model, prompts, responses, temperature=1.0, pad_id=tok.pad_token_id
        )
        (-(logp * mask).sum() / mask.sum()).backward()
        opt.step()

    step()
    if args.ab:  # the two attentions alternated step by step, so the host's drift hits both
        both: dict[str, list[float]] = {attn: [], "sdpa": []}
        for _ in range(args.steps):
            for name in both:
                model.set_attn_implementation(name)
                start = time.perf_counter()
                step()
                both[name].append(time.perf_counter() - start)
        model.set_attn_implementation(attn)
        medians = {name: sorted(ts)[len(ts) // 2] for name, ts in both.items()}
        ab = {
            "step_seconds": both,
            "median_s": medians,
            "ratio_sdpa_over_loaded": medians["sdpa"] / medians[attn],
        }
        print(json.dumps({"medians": medians, "ratio": ab["ratio_sdpa_over_loaded"]}))
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
        step()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    print(table)
    total = sum(e.self_cpu_time_total for e in prof.key_averages())
    ops = sorted(
        ((e.key, e.self_cpu_time_total / total) for e in prof.key_averages()), key=lambda kv: -kv[1]
    )[:25]
    n = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    tokens = sum(lengths) + args.response * len(lengths)
    flops = 4 * n * tokens  # forward 2N, backward 2N per token: frozen weights get no gradient
    med = sorted(times)[len(times) // 2]
    save(
        args.out,
        {
            "probe": "train_step",
            "dtype": str(next(model.parameters()).dtype),
            "threads": args.threads,
            "attn": attn,
            "prompts": lengths,
            "response": args.response,
            "step_seconds": times,
            "median_s": med,
            "approx_gflop_per_s_4N": flops / med / 1e9,
            "self_cpu_share": ops,
            "ab": ab if args.ab else None,
        },
    )


if __name__ == "__main__":
    main()
