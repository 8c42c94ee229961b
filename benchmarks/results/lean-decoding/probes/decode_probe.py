"""transformers' decode step on SmolLM2-135M (bfloat16): ms a step by answers and prompt length."""

import os
import time

import torch
from transformers import AutoModelForCausalLM

torch.manual_seed(0)
path = os.path.expanduser("~/.cache/rlanything/smollm2-135m-instruct")
print(os.listdir(path))
m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
print(
    m.config.num_hidden_layers,
    m.config.num_attention_heads,
    m.config.num_key_value_heads,
    m.config._attn_implementation,
)
for B, L in [(8, 400), (32, 400), (24, 600)]:
    ids = torch.randint(100, 1000, (B, L))
    with torch.no_grad():
        t = time.perf_counter()
        out = m(input_ids=ids, use_cache=True, logits_to_keep=1)
        tp = time.perf_counter() - t
        pkv = out.past_key_values
        att = torch.ones(B, L, dtype=torch.long)
        times = []
        for _s in range(12):
            att = torch.cat([att, att.new_ones(B, 1)], 1)
            t = time.perf_counter()
            out = m(
                input_ids=torch.randint(100, 1000, (B, 1)),
                attention_mask=att,
                past_key_values=pkv,
                use_cache=True,
            )
            times.append(time.perf_counter() - t)
            pkv = out.past_key_values
    flops = 2 * 135e6 * B
    med = sorted(times)[6]
    print(
        f"B={B} L={L} prefill {tp:.2f}s decode step median {med * 1000:.1f} ms -> "
        f"{flops / med / 1e9:.1f} GFLOP/s"
    )
