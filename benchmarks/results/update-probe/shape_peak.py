"""bfloat16 matmul GFLOP/s of SmolLM2-135M's linear layers at update sizes, against 2048²."""

import time

import torch


def rate(m: int, k: int, n: int, reps: int = 20) -> float:
    a = torch.randn(m, k, dtype=torch.bfloat16)
    b = torch.randn(k, n, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * m * k * n * reps / (time.perf_counter() - start) / 1e9


square = rate(2048, 2048, 2048, 10)
print(f"square 2048: {square:.0f} GFLOP/s")
LAYERS = {
    "q/o 576x576": (576, 576),
    "k/v 576x192": (576, 192),
    "gate/up 576x1536": (576, 1536),
    "down 1536x576": (1536, 576),
    "lm_head 576x49152": (576, 49152),
}
for tokens in (600, 1200, 2400):
    for name, (k, n) in LAYERS.items():
        got = rate(tokens, k, n)
        print(f"{tokens} {name}: {got:.0f} GFLOP/s ({100 * got / square:.0f} % of square)")
