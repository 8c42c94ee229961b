"""Lean against transformers' decode step, SmolLM2 bfloat16: U distinct prompts, m answers each."""

import time

from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import generate

model, tok = load_model("embedded:smollm2-135m-instruct", device="cpu", dtype="bfloat16")
sysmsg = {
    "role": "system",
    "content": "You are in a house. Rooms have furniture and objects. "
    "Answer with one admissible action in \\boxed{}. " * 14,
}


def prompts_for(U, m):
    ps = []
    for i in range(U):
        p = [
            sysmsg,
            {
                "role": "user",
                "content": f"Task {i}: put mug {i} on shelf {i}. "
                + f"You see table {i}, chair {i}, lamp. " * 8,
            },
        ]
        ps += [p] * m
    return ps


for U, m in [(8, 1), (32, 1), (8, 3)]:
    ps = prompts_for(U, m)
    seeds = list(range(len(ps)))
    for lean in (False, True, False, True):
        t = time.perf_counter()
        generate(
            model,
            tok,
            ps,
            seeds,
            max_new_tokens=20,
            temperature=1.0,
            batch_size=32,
            lean_decoding=lean,
            ignore_eos=True,
        )
        el = time.perf_counter() - t
        # decode-only estimate: subtract prefill (max_new_tokens=1)
        t = time.perf_counter()
        generate(
            model,
            tok,
            ps,
            seeds,
            max_new_tokens=1,
            temperature=1.0,
            batch_size=32,
            lean_decoding=lean,
            ignore_eos=True,
        )
        pf = time.perf_counter() - t
        print(
            f"U={U} m={m} {'lean' if lean else 'hf  '} total {el:.2f}s prefill {pf:.2f}s "
            f"decode/step {(el - pf) / 19 * 1000:.0f} ms"
        )
