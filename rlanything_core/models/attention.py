"""Attention for training on a CPU: PyTorch's fused forward, a backward made of matrix products.

On a CPU, `scaled_dot_product_attention`'s fused (flash) kernel computes the forward fast, but its
backward runs far below the matrix-product units: profiling a SmolLM2-135M LoRA step (8 rows of
128 tokens, bfloat16, 2 cores with AMX) put 20 % of the step in the flash backward at about 20
GFLOP/s, 15 times its forward's time (`benchmarks/results/intel-amx-bf16/`). transformers' eager
attention is faster there but keeps every layer's (B, heads, L, L) probabilities for the
backward. `SdpaMathBackward` keeps SDPA's forward and what it saves (q, k, v), and recomputes the
probabilities in the backward, a few (batch·head) slices at a time, with the standard gradients of
softmax attention. For scores s = q·kᵀ·c + bias (c the scale, bias 0 or −∞ from the mask),
p = softmax(s) along the keys, o = p·v and the output's gradient g:

    dv = pᵀ·g
    dp = g·vᵀ
    ds = p ⊙ (dp − rowsum(dp ⊙ p))
    dq = ds·k·c,   dk = dsᵀ·q·c

Rows whose every key a boolean mask hides (left padding's queries) get p = 0 and no gradient. The
probabilities and their gradient are computed in float32 (float64 for float64 inputs), as eager
attention's softmax is; the matrix products run in the inputs' dtype.

`attention_forward` is the function transformers calls (registered as `NAME` with
`AttentionInterface`, and SDPA's mask builder with `AttentionMaskInterface`). It is
transformers' SDPA attention itself except where a backward will follow, on a CPU, in bfloat16
or float16 (`HALF`), with no dropout or position bias; `use_for_training` switches a CPU model
being trained to it. Measured on that host, alternating the two attentions step by step (10
pairs): 2.99 s a step against 3.58 s with SDPA's backward, 1.20x.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "rlanything_sdpa"

HALF = (torch.bfloat16, torch.float16)
"""The dtypes whose fused CPU backward is the slow one; in float32 it is faster than this one
(0.90x a SmolLM2 step on the same host), so float32 attention stays SDPA's."""

SLICE_ELEMENTS = 1 << 22
"""Score elements (batch·head slices × L × L) the backward holds at once: 16 MiB in float32 per
tensor, a handful of tensors."""


def _bias(
    mask: torch.Tensor | None, causal: bool, q_len: int, k_len: int, device: torch.device
) -> torch.Tensor | None:
    """The additive bias (0 where a query attends, −∞ where not), broadcastable to the scores.
    `causal` is SDPA's flag, set only where there is no mask."""
    if causal:
        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, device=device).masked_fill(~mask, float("-inf"))
    return mask


class SdpaMathBackward(torch.autograd.Function):
    """o = softmax(q·kᵀ·scale + mask)·v for q (B, H, L, d), k and v (B, H, S, d) (key heads
    already repeated for grouped queries); `mask` None, boolean (True: attend) or additive,
    broadcastable to (B, H, L, S)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        scale: float,
        causal: bool,
    ) -> torch.Tensor:
        ctx.save_for_backward(q, k, v, mask)
        ctx.scale, ctx.causal = scale, causal
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, is_causal=causal
        )

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        q, k, v, mask = ctx.saved_tensors
        scale = ctx.scale
        b, h, q_len, d = q.shape
        k_len = k.shape[2]
        bias = _bias(mask, ctx.causal, q_len, k_len, q.device)
        if bias is not None:
            bias = bias.expand(b, h, q_len, k_len).reshape(b * h, q_len, k_len)
        q3, k3, v3 = (t.reshape(b * h, -1, d) for t in (q, k, v))
        g3 = grad.reshape(b * h, q_len, d).to(q.dtype)
        dq, dk, dv = torch.empty_like(q3), torch.empty_like(k3), torch.empty_like(v3)
        exact = torch.promote_types(q.dtype, torch.float32)  # softmax and its gradient
        step = max(1, SLICE_ELEMENTS // (q_len * k_len))
        for lo in range(0, b * h, step):
            hi = min(lo + step, b * h)
            qs, ks, vs, gs = q3[lo:hi], k3[lo:hi], v3[lo:hi], g3[lo:hi]
            s = (qs @ ks.transpose(1, 2)).to(exact) * scale  # (n, L, S)
            if bias is not None:
                s = s + bias[lo:hi]
            p = torch.softmax(s, dim=-1).nan_to_num_(0.0)  # a fully masked row: 0, not NaN
            dv[lo:hi] = p.to(v.dtype).transpose(1, 2) @ gs
            dp = (gs @ vs.transpose(1, 2)).to(exact)
            ds = (p * (dp - (dp * p).sum(-1, keepdim=True))).to(q.dtype)
            dq[lo:hi] = (ds @ ks) * scale
            dk[lo:hi] = (ds.transpose(1, 2) @ qs) * scale
        return dq.view_as(q), dk.view_as(k), dv.view_as(v), None, None, None


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: (B, H, L, d) inputs, output (B, L, H, d)."""
    training = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if (
        not training
        or query.device.type != "cpu"
        or query.dtype not in HALF
        or dropout
        or kwargs.get("position_bias") is not None
        or kwargs.get("softcap") is not None
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
            is_causal=is_causal, **kwargs,
        )  # fmt: skip
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    out = SdpaMathBackward.apply(query, key, value, attention_mask, scale, causal)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, attention_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)


def use_for_training(model: Any) -> bool:
    """Switch a model about to be trained on the CPU from transformers' SDPA attention to
    `attention_forward`; False (and nothing changed) where the model uses another attention
    or cannot switch."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    try:
        model.set_attn_implementation(NAME)
    except (ValueError, ImportError, AttributeError):
        return False
    return True
