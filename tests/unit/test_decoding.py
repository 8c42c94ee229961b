"""The lean decode step (decoding.LeanDecoder) against transformers' step on a tiny local Llama."""

from __future__ import annotations

import pytest
import torch

from rlanything_core.method.prompts import policy_messages
from rlanything_core.models.decoding import _rows, lean_supported
from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import (
    MIN_SHARED_PREFIX,
    encode_chat,
    generate,
    response_logprobs,
    shared_prefix_length,
)

# One task's prompts at different steps (a shared prefix, rows of different lengths: padding),
# one of them three times (the m votes on a step: rows regrouped by prompt), one twice.
STEPS = [
    policy_messages(
        "put a mug in cabinet", [], f"You are at shelf {i}.", ["look"] + ["go to x"] * i
    )
    for i in range(4)
]
BATCH = [STEPS[0], STEPS[1], STEPS[1], STEPS[1], STEPS[2], STEPS[3], STEPS[3]]
SEEDS = list(range(31, 31 + len(BATCH)))


def _forward_calls(model: torch.nn.Module) -> list[int]:
    """Counts every `model.forward` from now on (one entry per call)."""
    calls: list[int] = []
    forward = model.forward

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return forward(*args, **kwargs)

    model.forward = counted  # type: ignore[method-assign]
    return calls


def _lora(model: torch.nn.Module) -> None:
    """Give the LoRA adapters weights that change the outputs (B starts at 0)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_lean_decoding_matches_the_transformers_step(lora_rank: int) -> None:
    model, tok = load_model("tiny", device="cpu", trainable=lora_rank > 0, lora_rank=lora_rank)
    if lora_rank:
        _lora(model)
    assert lean_supported(model)
    encoded = [encode_chat(tok, p) for p in STEPS]
    assert shared_prefix_length(encoded) >= MIN_SHARED_PREFIX
    assert len({len(e) for e in encoded}) > 1  # left padding inside the batch
    calls = _forward_calls(model)
    kwargs = {"max_new_tokens": 12, "temperature": 1.0, "top_logprobs": 3, "ignore_eos": True}
    lean = generate(model, tok, BATCH, SEEDS, **kwargs)  # type: ignore[arg-type]
    assert len(calls) == 2  # the shared prefix and the prompts; no forward per decoded token
    hf = generate(model, tok, BATCH, SEEDS, lean_decoding=False, **kwargs)  # type: ignore[arg-type]
    assert len(calls) == 2 + 2 + 11  # transformers' step: a forward for each token after the first
    assert [g.token_ids for g in lean] == [g.token_ids for g in hf]
    assert lean[1].token_ids != lean[2].token_ids  # one prompt, three seeds: three answers
    for a, b in zip(lean, hf, strict=True):
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )
        assert [[t for t, _ in top] for top in a.top_logprobs] == [
            [t for t, _ in top] for top in b.top_logprobs
        ]


def test_lean_decoding_without_a_shared_prefix_or_regrouped_rows() -> None:
    model, tok = load_model("tiny", device="cpu")
    one = [STEPS[0]]  # one prompt: nothing shared, row b continues prompt b
    for prompts in (one, STEPS):
        seeds = list(range(len(prompts)))
        lean, hf = (
            generate(
                model,
                tok,
                prompts,
                seeds,
                max_new_tokens=8,
                temperature=1.0,
                share_prefix=False,
                lean_decoding=lean,
            )
            for lean in (True, False)
        )
        assert [g.token_ids for g in lean] == [g.token_ids for g in hf]
        for a, b in zip(lean, hf, strict=True):
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5


@pytest.mark.parametrize("dtype", ["bfloat16", "bfloat16-mixed"])
def test_lean_decoding_in_bfloat16_stays_as_close_to_float32_as_the_transformers_step(
    dtype: str,
) -> None:
    # Both steps round differently in bfloat16; neither is the reference. Against the float32
    # model's log-probs of the same tokens, the lean step's mean error is at most 1.5x the
    # transformers step's (measured on SmolLM2-135M, bfloat16: 0.039 against 0.041).
    model, tok = load_model("tiny", device="cpu", dtype=dtype)
    reference, _ = load_model("tiny", device="cpu", dtype="float32")
    errors = {}
    for lean in (True, False):
        gens = generate(
            model, tok, BATCH, SEEDS, max_new_tokens=12, temperature=1.0, lean_decoding=lean
        )
        with torch.no_grad():
            ref, _ = response_logprobs(
                reference,
                [g.prompt_token_ids for g in gens],
                [g.token_ids for g in gens],
                temperature=1.0,
                pad_id=tok.pad_token_id,
            )
        errors[lean] = torch.cat(
            [
                (ref[i, : len(g.logprobs)] - torch.tensor(g.logprobs)).abs()
                for i, g in enumerate(gens)
            ]
        ).mean()
    assert errors[False] > 0  # bfloat16 does round
    assert errors[True] <= 1.5 * errors[False]


def test_lean_decoding_is_not_used_where_its_step_would_differ() -> None:
    model, _ = load_model("tiny", device="cpu")
    assert lean_supported(model)
    model.config.sliding_window = 64
    assert not lean_supported(model)
    model.config.sliding_window = None
    model.config.model_type = "gemma"  # scales its embeddings: another step
    assert not lean_supported(model)


def test_rows_are_regrouped_by_the_prompt_they_continue() -> None:
    assert _rows([0, 1, 2], torch.device("cpu")) is None
    rows = _rows([0, 1, 1, 1, 2, 3, 3], torch.device("cpu"))
    assert rows is not None and (rows.groups, rows.slots) == (4, 3)
    # groups of 3 slots; a short group repeats its first row
    assert rows.gather.tolist() == [0, 0, 0, 1, 2, 3, 4, 4, 4, 5, 6, 5]
    assert rows.slot.tolist() == [0, 3, 4, 5, 6, 9, 10]
