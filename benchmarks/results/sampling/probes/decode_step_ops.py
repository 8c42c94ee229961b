"""Per decode step, which operators take the time: `torch.profiler` over `generate` with 41
and with 1 new tokens (8 prompts of about 110 tokens, SmolLM2-135M bfloat16, lean decode step),
the difference divided by 40.

    .venv/bin/python benchmarks/results/sampling/probes/decode_step_ops.py
"""

from torch.profiler import ProfilerActivity, profile

from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import generate

model, tok = load_model("embedded:smollm2-135m-instruct", device="cpu", dtype="bfloat16")
prompts = [
    [{"role": "user", "content": f"Task {i}: put mug {i} on shelf {i}. "
      + f"You see table {i}, chair {i}, lamp. " * 8}]
    for i in range(8)
]  # fmt: skip
seeds = list(range(8))


def run(new_tokens: int) -> dict[str, tuple[float, int]]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        generate(model, tok, prompts, seeds, max_new_tokens=new_tokens, temperature=1.0,
                 batch_size=32, lean_decoding=True, ignore_eos=True)  # fmt: skip
    return {e.key: (e.self_cpu_time_total, e.count) for e in prof.key_averages()}


run(3)
short, long = run(1), run(41)
per_step = {
    k: ((v[0] - short.get(k, (0, 0))[0]) / 40 / 1000, (v[1] - short.get(k, (0, 0))[1]) / 40)
    for k, v in long.items()
}
print(f"per decode step, self CPU time in all: {sum(v[0] for v in per_step.values()):.1f} ms")
for k, (ms, calls) in sorted(per_step.items(), key=lambda kv: -kv[1][0])[:22]:
    print(f"{k:45s} {ms:7.2f} ms  {calls:6.0f} calls")
