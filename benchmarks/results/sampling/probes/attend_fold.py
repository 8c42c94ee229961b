"""The lean step's attention for one layer (8 rows of distinct prompts, 90 shared tokens, 110
own prompt tokens, 10 generated; SmolLM2's 9 query and 3 key/value heads of 64) against one
dense attention over each row's whole sequence (the shared prefix copied per row), float32,
µs a call, and their largest difference.

    .venv/bin/python benchmarks/results/sampling/probes/attend_fold.py
"""

import time

import torch

B, H, KV, D, S, W, T = 8, 9, 3, 64, 90, 110, 10
G = H // KV
torch.manual_seed(0)
q = torch.randn(B, H, 1, D)
sk, sv = torch.randn(KV, S, D), torch.randn(KV, S, D)
pk, pv = torch.randn(B, KV, W, D), torch.randn(B, KV, W, D)
ok, ov = torch.randn(B, KV, T, D), torch.randn(B, KV, T, D)
bias = torch.zeros(B, 1, 1, W)


def us(f, n: int = 300) -> float:
    for _ in range(5):
        f()
    start = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - start) / n * 1e6


def lean() -> torch.Tensor:  # as decoding.LeanDecoder._attend, rows of distinct prompts
    qq = q.view(B, KV, G, D)
    by_head = qq.transpose(0, 1).reshape(KV, B * G, D)
    s_shared = (by_head @ sk.transpose(1, 2)).view(KV, B, G, -1).transpose(0, 1)
    scores = torch.cat([s_shared, qq @ pk.transpose(2, 3) + bias, qq @ ok.transpose(2, 3)], -1)
    p_shared, p_prompt, p_own = torch.softmax(scores * 0.125, -1).split([S, W, T], -1)
    out = p_own @ ov + p_prompt @ pv
    shared_out = (p_shared.transpose(0, 1).reshape(KV, B * G, S) @ sv).view(KV, B, G, D)
    return (out + shared_out.transpose(0, 1)).reshape(B, H, D)


full_k = torch.cat([sk[None].expand(B, -1, -1, -1), pk, ok], 2).contiguous()
full_v = torch.cat([sv[None].expand(B, -1, -1, -1), pv, ov], 2).contiguous()


def dense() -> torch.Tensor:
    scores = q.view(B, KV, G, D) @ full_k.transpose(2, 3) * 0.125
    return (torch.softmax(scores, -1) @ full_v).reshape(B, H, D)


print(f"lean {us(lean):.0f} us, dense {us(dense):.0f} us, max difference "
      f"{(lean() - dense()).abs().max().item():.1e}")  # fmt: skip
