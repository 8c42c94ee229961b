"""The CPU training attention (rlanything_core/models/attention.py): SDPA's forward, a backward of
matrix products, against autograd through SDPA itself."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rlanything_core.models import attention
from rlanything_core.models.attention import NAME, SdpaMathBackward, attention_forward
from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import response_logprobs

B, H, L, D = 3, 4, 17, 8


def _inputs(dtype: torch.dtype, kind: str) -> tuple[torch.Tensor, ...]:
    """q, k, v (B, H, L, D), the output's gradient, and the mask of `kind`: "causal" (none,
    SDPA's flag), "bool" or "float" (causal, row 1 left-padded by 5 tokens)."""
    g = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(B, H, L, D, generator=g, dtype=torch.float64) for _ in range(4))
    mask = None
    if kind != "causal":
        keep = torch.ones(L, L, dtype=torch.bool).tril()[None, None].repeat(B, 1, 1, 1)
        keep[1, :, :, :5] = False  # row 1's padding: no query sees its first 5 keys
        grad[1, :, :5] = 0  # padding's outputs reach no loss
        mask = keep
        if kind == "float":
            mask = torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)
    return (*(t.to(dtype) for t in (q, k, v, grad)), mask)


def _grads(fn, q, k, v, grad):  # type: ignore[no-untyped-def]
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    return out.detach(), torch.autograd.grad(out, leaves, grad)


@pytest.mark.parametrize("kind", ["causal", "bool", "float"])
def test_the_math_backward_equals_sdpas_gradients_in_float64(kind: str) -> None:
    q, k, v, grad, mask = _inputs(torch.float64, kind)
    causal = kind == "causal"
    ref_out, ref = _grads(
        lambda *x: F.scaled_dot_product_attention(*x, attn_mask=mask, scale=0.3, is_causal=causal),
        q, k, v, grad,
    )  # fmt: skip
    out, ours = _grads(lambda *x: SdpaMathBackward.apply(*x, mask, 0.3, causal), q, k, v, grad)
    torch.testing.assert_close(out, ref_out, atol=0, rtol=0)  # the forward is SDPA's own
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
        assert a.abs().max() > 0.1  # gradients that are there to compare


def test_slices_of_the_backward_add_up_to_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v, grad, mask = _inputs(torch.float64, "bool")
    fn = lambda *x: SdpaMathBackward.apply(*x, mask, 0.3, False)  # noqa: E731
    _, whole = _grads(fn, q, k, v, grad)
    monkeypatch.setattr(attention, "SLICE_ELEMENTS", 2 * L * L)  # 2 of the 12 (batch, head) slices
    _, sliced = _grads(fn, q, k, v, grad)
    for a, b in zip(sliced, whole, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


class _Grouped(torch.nn.Module):
    num_key_value_groups = 2
    is_causal = True


@pytest.mark.parametrize("kind", ["causal", "bool"])
def test_in_bfloat16_its_error_is_that_of_sdpas_backward(kind: str) -> None:
    """Grouped queries (2 query heads a key head), bfloat16: against float64 SDPA gradients,
    the math backward's error is within twice SDPA's own bfloat16 backward's."""
    q, k, v, grad, mask = _inputs(torch.float64, kind)
    k, v = k[:, : H // 2], v[:, : H // 2]
    module = _Grouped()

    def run(fn, dtype):  # type: ignore[no-untyped-def]
        leaves = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        out, _ = fn(module, *leaves, mask, scaling=0.3)
        return torch.autograd.grad(out, leaves, grad.transpose(1, 2).to(dtype))

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    exact = run(sdpa_attention_forward, torch.float64)
    theirs = run(sdpa_attention_forward, torch.bfloat16)
    ours = run(attention_forward, torch.bfloat16)
    for e, t, o in zip(exact, theirs, ours, strict=True):
        err_theirs, err_ours = ((x.double() - e).abs().max().item() for x in (t, o))
        assert err_ours <= 2 * err_theirs + 1e-3, (err_ours, err_theirs)
        assert (o.double() - e).abs().max() < 0.05 * e.abs().max()


def _lora_grads(model: torch.nn.Module, tok) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14]]  # unequal: padding inside the batch
    responses = [[20, 21, 22], [23, 24, 25, 26]]
    model.zero_grad(set_to_none=True)
    logp, mask = response_logprobs(
        model, prompts, responses, temperature=1.0, pad_id=tok.pad_token_id
    )
    (-(logp * mask).sum()).backward()
    return [p.grad.detach().clone() for p in model.parameters() if p.requires_grad]


def test_a_cpu_model_loaded_for_training_uses_it_with_sdpas_gradients() -> None:
    model, tok = load_model("tiny", device="cpu", dtype="bfloat16", trainable=True, lora_rank=4)
    assert model.config._attn_implementation == NAME
    torch.manual_seed(0)
    with torch.no_grad():  # adapters that change the outputs (B starts at 0)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    ours = _lora_grads(model, tok)
    model.set_attn_implementation("sdpa")
    theirs = _lora_grads(model, tok)
    for a, b in zip(ours, theirs, strict=True):
        assert (a.float() - b.float()).norm() <= 0.03 * b.float().norm() + 1e-6
    frozen, _ = load_model("tiny", device="cpu", dtype="bfloat16")
    assert frozen.config._attn_implementation == "sdpa"  # sampling models keep SDPA


def test_float32_training_keeps_sdpa_exactly() -> None:
    model, tok = load_model("tiny", device="cpu", dtype="float32", trainable=True, lora_rank=4)
    assert model.config._attn_implementation == NAME
    ours = _lora_grads(model, tok)
    model.set_attn_implementation("sdpa")
    for a, b in zip(ours, _lora_grads(model, tok), strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
