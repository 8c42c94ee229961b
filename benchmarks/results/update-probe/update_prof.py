"""One update micro-batch of SmolLM2-135M (bfloat16, LoRA 16): step time, a torch profile of
it, and the same step with eager attention instead of SDPA."""

import time

from torch.profiler import ProfilerActivity, profile

from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import encode_chat, response_logprobs

model, tok = load_model(
    "embedded:smollm2-135m-instruct", device="cpu", dtype="bfloat16", trainable=True, lora_rank=16
)
model.train()
SYSTEM = "You are in a house. Rooms have furniture and objects. Answer with one action. " * 5
prompts = [
    encode_chat(
        tok,
        [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Task {i}: put mug {i}. " + f"You see table {i}. " * 4},
        ],
    )
    for i in range(4)
]
responses = [[100 + i + j for j in range(14)] for i in range(4)]


def step() -> None:
    logp, mask = response_logprobs(
        model, prompts, responses, temperature=1.0, pad_id=tok.pad_token_id
    )
    (logp * mask).sum().backward()


def timed(runs: int = 3) -> float:
    step()
    start = time.perf_counter()
    for _ in range(runs):
        step()
    return (time.perf_counter() - start) / runs


print(f"prompt length {len(prompts[0])}; sdpa step {1000 * timed():.0f} ms")
with profile(activities=[ProfilerActivity.CPU]) as prof:
    step()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
for implementation in ("eager", "sdpa", "eager"):
    model.set_attn_implementation(implementation)
    print(f"{implementation}: step {1000 * timed():.0f} ms")
