"""Seconds to draw one token per row from SmolLM2-sized log-probs (24 rows × 49 152 tokens, the
demo's RM batch), each row from its own generator: `torch.multinomial` per row (as `generate`
drew before 70fb3e4), a uniform per token with the exponential race (70fb3e4), and
`modelling.sample_rows`, the inverse cumulative distribution (beb2e22), timed first and again
last (glibc's allocator returns large freed buffers to the system until it has seen one
freed, so the same call can pay page faults depending on what ran before it).

    .venv/bin/python benchmarks/results/sampling/probes/sampler_time.py
"""

import time

import torch

from rlanything_core.models.modelling import sample_rows

ROWS, VOCAB = 24, 49152


def per_call_ms(draw, n: int = 50) -> float:
    for _ in range(3):
        draw()
    start = time.perf_counter()
    for _ in range(n):
        draw()
    return (time.perf_counter() - start) / n * 1e3


torch.manual_seed(0)
logp = torch.log_softmax(torch.randn(ROWS, VOCAB), dim=-1)
probs = logp.exp()
gens = [torch.Generator().manual_seed(i) for i in range(ROWS)]


def multinomial() -> torch.Tensor:
    return torch.cat([torch.multinomial(probs[i], 1, generator=gens[i]) for i in range(ROWS)])


def race() -> torch.Tensor:
    uniform = torch.stack([torch.rand(VOCAB, generator=g) for g in gens])
    return (logp - torch.log(-torch.log(uniform))).argmax(dim=-1)


print(f"{torch.get_num_threads()} threads, {ROWS} rows x {VOCAB} tokens, ms per draw of all rows:")
print(f"  sample_rows (inverse CDF)     {per_call_ms(lambda: sample_rows(logp, gens)):7.2f}")
print(f"  torch.multinomial per row     {per_call_ms(multinomial):7.2f}")
print(f"  uniform per token, race       {per_call_ms(race):7.2f}")
print(f"  sample_rows again, after them {per_call_ms(lambda: sample_rows(logp, gens)):7.2f}")
