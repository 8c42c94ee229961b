"""Decode steps that read each prompt's keys and values once, whichever rows share it.

`generate` prefills each distinct prompt of a batch once (the m votes on one step share one
prompt; a prefix every prompt shares is computed once on one row). transformers' decode step then
needs one key/value cache row per sampled answer: the prompt's keys and values are copied to every
row that continues it, and every step's attention reads them again for each row, after grouped
query attention has expanded them to one copy per query head. On a CPU that memory traffic, not
the matrix products, sets the step's time: SmolLM2-135M decoding 32 answers of 400-token prompts
took 319 ms a step, 27 GFLOP/s (`benchmarks/decode_step.py`).

`LeanDecoder` is the decode step of a Llama-family model (Llama, Mistral without a sliding window,
Qwen2) written against the model's own modules, so LoRA adapters, biases, norms and the rotary
embedding are the model's. Only the attention differs, in where it reads the keys and values
from, not in what it computes. The cache has three levels:

- the shared prefix, one copy for the whole batch: (kv heads, S, head dim);
- each distinct prompt's own tokens, one copy per distinct prompt: (U, kv heads, W, head dim),
  left-padded as prefilled (masked);
- each row's generated tokens, preallocated for `max_new_tokens`: (B, kv heads, T, head dim).

For a query of row b, head h (kv head j = h // g, with g query heads per kv head):

    s = q_bh · [K_shared_j ; K_prompt(b)_j ; K_own(b)_j]ᵀ · scale      (padding masked to −∞)
    o_bh = softmax(s) · [V_shared_j ; V_prompt(b)_j ; V_own(b)_j]

one softmax over the concatenated keys, as attention over the row's whole sequence computes it;
the query heads of every row that reads the same keys are stacked into one matrix product with
them. The result equals the transformers step up to floating-point effects of the shapes
(`test_lean_decoding_matches_the_transformers_step`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from peft import PeftModel
from torch.distributed.fsdp import FSDPModule
from torch.nn.parallel import DistributedDataParallel
from transformers import PreTrainedModel
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

LEAN_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2"})
"""Architectures whose decoder layer is: norm, q/k/v projections, rotary embedding, attention,
output projection, residual, norm, MLP, residual (what `LeanDecoder.step` runs)."""

AUTOCAST_ATTRIBUTE = "rlanything_autocast_dtype"
"""Set on a model whose forward passes run under `torch.autocast` (loading._autocast_forward):
the lean step, which does not call `forward`, runs under the same autocast."""


def _base(model: Any) -> Any:
    return model.get_base_model() if isinstance(model, PeftModel) else model


def sliding_window(model: PreTrainedModel) -> int:
    """The window the model's attention slides over, in tokens; 0 when it attends to all."""
    if getattr(model.config, "use_sliding_window", True) is False:
        return 0
    return int(getattr(model.config, "sliding_window", None) or 0)


def lean_supported(model: PreTrainedModel) -> bool:
    """Whether `LeanDecoder` can run `model`'s decode steps: a Llama-family architecture, not
    wrapped for DDP or FSDP (their forward synchronizes ranks), no sliding window, and the
    layer structure the step runs (no per-head query/key norms)."""
    if isinstance(model, DistributedDataParallel | FSDPModule):
        return False
    base = _base(model)
    if base.config.model_type not in LEAN_MODEL_TYPES or sliding_window(base):
        return False
    layers = getattr(getattr(base, "model", None), "layers", None)
    if not layers:
        return False
    attention = layers[0].self_attn
    return all(hasattr(attention, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")) and not (
        hasattr(attention, "q_norm") or hasattr(attention, "k_norm")
    )


@dataclass
class _Rows:
    """Which rows continue which distinct prompt, laid out for stacked matrix products:
    `gather` (U·n,) picks rows into U groups of n slots (a short group repeats a row; its
    extra slots are never read back), `slot` (B,) is each row's place in that layout. None
    where row b continues prompt b (nothing to regroup)."""

    groups: int
    slots: int
    gather: torch.Tensor
    slot: torch.Tensor


def _rows(row_of: Sequence[int], device: torch.device) -> _Rows | None:
    if list(row_of) == list(range(len(row_of))):
        return None
    members: dict[int, list[int]] = {}
    for b, u in enumerate(row_of):
        members.setdefault(u, []).append(b)
    n = max(len(m) for m in members.values())
    gather, slot = [], [0] * len(row_of)
    for u in range(len(members)):
        rows = members[u]
        for i, b in enumerate(rows):
            slot[b] = u * n + i
        gather += rows + [rows[0]] * (n - len(rows))
    as_tensor = torch.tensor(gather, device=device), torch.tensor(slot, device=device)
    return _Rows(len(members), n, *as_tensor)


class LeanDecoder:
    """Decode steps for one batch after its prefill (see the module's docstring).

    `cache` is the prefill's transformers cache over the U distinct prompts, each row laid out
    [shared prefix (`shared` tokens)][left padding][own tokens], `attention` its (U, S + W) mask,
    `row_of` the distinct prompt each of the B answers continues."""

    def __init__(
        self,
        model: PreTrainedModel,
        cache: Any,
        attention: torch.Tensor,
        *,
        shared: int,
        row_of: Sequence[int],
        max_new_tokens: int,
    ) -> None:
        base = _base(model)
        self.model = base  # its parameters: benchmarks count a step's FLOPs by them
        self.body, self.head = base.model, base.get_output_embeddings()
        self.autocast = getattr(model, AUTOCAST_ATTRIBUTE, None) or getattr(
            base, AUTOCAST_ATTRIBUTE, None
        )
        config = base.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        first = self.body.layers[0].self_attn
        self.head_dim, self.scaling = first.head_dim, first.scaling
        self.batch, self.shared = len(row_of), shared
        device = attention.device
        self.rows = _rows(row_of, device)
        own = attention[:, shared:]  # (U, W)
        index = torch.tensor(list(row_of), device=device)
        # (B, 1, 1, W): 0 where the prompt has a token, −∞ at its padding
        padding = torch.zeros(own.shape, device=device).masked_fill(own == 0, float("-inf"))
        self.prompt_bias = padding[index][:, None, None, :]
        self.shared_kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.prompt_kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.own_kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        for layer in cache.layers:
            # (U, kv heads, S + W, d): the shared prefix from row 0 (every row holds a copy),
            # each prompt's own part, in float32 as the fused attention kernels compute (scores
            # rounded to bfloat16 would move a token's log-prob by up to 0.2; a float32 model's
            # are views, not copies)
            keys, values = layer.keys, layer.values
            self.shared_kv.append((keys[0, :, :shared].float(), values[0, :, :shared].float()))
            self.prompt_kv.append((keys[:, :, shared:].float(), values[:, :, shared:].float()))
            shape = (self.batch, self.kv_heads, max_new_tokens, self.head_dim)
            own = torch.empty(shape, dtype=torch.float32, device=device)
            self.own_kv.append((own, torch.empty_like(own)))  # written one token a step
        self.length = 0  # generated tokens whose keys and values are cached

    def _stacked(self, x: torch.Tensor) -> torch.Tensor:
        """(B, kv heads, r, c) → (U, kv heads, n·r, c): each distinct prompt's rows side by side."""
        assert self.rows is not None
        _, kv, r, c = x.shape
        grouped = x[self.rows.gather].view(self.rows.groups, self.rows.slots, kv, r, c)
        return grouped.transpose(1, 2).reshape(self.rows.groups, kv, self.rows.slots * r, c)

    def _unstacked(self, x: torch.Tensor, r: int) -> torch.Tensor:
        """`_stacked`'s inverse: (U, kv heads, n·r, c) → (B, kv heads, r, c)."""
        assert self.rows is not None
        u, kv, _, c = x.shape
        flat = x.view(u, kv, self.rows.slots, r, c).transpose(1, 2).reshape(-1, kv, r, c)
        return flat[self.rows.slot]

    def _attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """q (B, heads, 1, d) → attention output (B, heads, d) over the row's three levels."""
        b, g, d = self.batch, self.heads // self.kv_heads, self.head_dim
        q = q.float().view(b, self.kv_heads, g, d)
        shared_k, shared_v = self.shared_kv[layer]
        prompt_k, prompt_v = self.prompt_kv[layer]
        own_k, own_v = (t[:, :, : self.length] for t in self.own_kv[layer])
        # every row's query heads against the shared prefix at once: (kv, B·g, S)
        by_head = q.transpose(0, 1).reshape(self.kv_heads, b * g, d)
        s_shared = (by_head @ shared_k.transpose(1, 2)).view(self.kv_heads, b, g, -1)
        s_shared = s_shared.transpose(0, 1)  # (B, kv, g, S)
        if self.rows is None:
            s_prompt = q @ prompt_k.transpose(2, 3)  # (B, kv, g, W)
        else:
            s_prompt = self._unstacked(self._stacked(q) @ prompt_k.transpose(2, 3), g)
        s_own = q @ own_k.transpose(2, 3)  # (B, kv, g, t)
        # padding masked (−∞ · scale stays −∞)
        scores = torch.cat([s_shared, s_prompt + self.prompt_bias, s_own], dim=-1) * self.scaling
        lo = s_shared.shape[-1]
        p = torch.softmax(scores, dim=-1)
        p_shared, p_prompt, p_own = p.split([lo, s_prompt.shape[-1], own_k.shape[2]], dim=-1)
        out = p_own @ own_v  # (B, kv, g, d)
        if lo:
            by_head = p_shared.transpose(0, 1).reshape(self.kv_heads, b * g, lo)
            out = out + (by_head @ shared_v).view(self.kv_heads, b, g, d).transpose(0, 1)
        if self.rows is None:
            out = out + p_prompt @ prompt_v
        else:
            out = out + self._unstacked(self._stacked(p_prompt) @ prompt_v, g)
        return out.reshape(b, self.heads, d)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (B,) at `positions` (B, 1); the next-token logits (B, V)."""
        if self.autocast is None:
            return self._step(tokens, positions)
        with torch.autocast(tokens.device.type, dtype=self.autocast):
            return self._step(tokens, positions)

    def _step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        b, d = self.batch, self.head_dim
        x = self.body.embed_tokens(tokens[:, None])  # (B, 1, hidden)
        cos, sin = self.body.rotary_emb(x, positions)  # (B, 1, d)
        t = self.length
        self.length += 1
        for i, layer in enumerate(self.body.layers):
            attention = layer.self_attn
            h = layer.input_layernorm(x)
            q = attention.q_proj(h).view(b, 1, self.heads, d).transpose(1, 2)
            k = attention.k_proj(h).view(b, 1, self.kv_heads, d).transpose(1, 2)
            v = attention.v_proj(h).view(b, 1, self.kv_heads, d).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)  # (B, 1, 1, d) against (B, heads, 1, d)
            own_k, own_v = self.own_kv[i]
            own_k[:, :, t] = k[:, :, 0]  # to float32
            own_v[:, :, t] = v[:, :, 0]
            o = self._attend(i, q).to(h.dtype)
            x = x + attention.o_proj(o.reshape(b, 1, self.heads * d))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.head(self.body.norm(x))[:, 0]  # (B, V)
