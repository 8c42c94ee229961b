"""The benchmark scripts' own logic (benchmarks/ is not a package: its directory is put on the
path, as running a script there does)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import round_profile


def _llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config)


def test_round_profile_tells_a_training_forward_with_a_cache_from_a_prefill() -> None:
    """Generation's prefill and decode, a log-prob pass, and a training pass that computes a
    shared prefix with a KV cache and the rest against it: the training forwards (gradients on)
    count as train_forward whatever their cache, and their backward gets their FLOPs × (1 +
    trainable share)."""
    model = _llama()
    total = sum(p.numel() for p in model.parameters())
    profile = round_profile.Profile()
    ids = torch.randint(0, 64, (2, 6))
    with round_profile.patched(profile):
        with torch.no_grad():
            cache = model(input_ids=ids, use_cache=True).past_key_values
            model(input_ids=ids[:, -1:], past_key_values=cache, use_cache=True)
            model(input_ids=ids, use_cache=False)
        # as `modelling._shared_prefix`: the prefix once, on one row, its cache copied to both
        cache = model(input_ids=ids[:1, :4], use_cache=True).past_key_values
        cache.reorder_cache(torch.zeros(2, dtype=torch.long))
        rest = model(input_ids=ids[:, 4:], past_key_values=cache, use_cache=False)
        rest.logits.sum().backward()
    key = "outside stages"
    assert profile.tokens[(key, "prefill")] == 12
    assert profile.tokens[(key, "decode")] == 2
    assert profile.tokens[(key, "logprob")] == 12
    assert profile.tokens[(key, "train_forward")] == 4 + 4
    train_flops = 2.0 * total * 8
    assert profile.flops[(key, "train_forward")] == pytest.approx(train_flops)
    # every weight trainable: the activations' gradients and the weights' (as many again)
    assert profile.flops[(key, "backward")] == pytest.approx(2 * train_flops)
    # A frozen model under gradients (nothing to train) is not a training forward
    frozen = _llama().requires_grad_(False)
    with round_profile.patched(profile):
        frozen(input_ids=ids, use_cache=True)
    assert profile.tokens[(key, "prefill")] == 24


def test_round_profile_counts_the_updates_old_logprob_passes_as_logprob() -> None:
    """`response_logprobs` without gradients (an update's old log-probs) computes a shared prompt
    prefix with a KV cache and the rest against it: both forwards are log-prob passes, not a
    generation's prefill; the same call with gradients on stays a training forward, and the patch
    is gone after the block."""
    from rlanything_core.models import modelling

    model = _llama()
    profile = round_profile.Profile()
    shared = list(range(3, 3 + modelling.MIN_SHARED_PREFIX))
    prompts = [[*shared, 1, 2], [*shared, 5]]
    responses = [[7, 8], [9]]
    original = modelling.response_logprobs
    with round_profile.patched(profile):
        with torch.no_grad():
            modelling.response_logprobs(model, prompts, responses, temperature=1.0, pad_id=0)
        logp, _ = modelling.response_logprobs(model, prompts, responses, temperature=1.0, pad_id=0)
        logp.sum().backward()
    assert modelling.response_logprobs is original
    key = "outside stages"
    assert profile.tokens[(key, "prefill")] == 0
    assert profile.tokens[(key, "decode")] == 0
    # the shared prefix once (one row), then both rows' own tokens and responses
    assert profile.tokens[(key, "logprob")] == profile.tokens[(key, "train_forward")] > 0
    assert profile.tokens[(key, "logprob")] < 2 * (len(shared) + 4)
