"""Models: load with transformers, generate with per-sample seeds, score log-probs, train one
PPO-clip update (full fine-tuning or LoRA), save and load checkpoints in Hugging Face format.

The policy, the reward model and the environment model are all causal LMs with a chat template;
this module serves all three.

Choices (the policy loss of RLAnything, arXiv 2602.02488, and its reference code):
1. Generation is a plain batched decoding loop over the model's KV cache, so that every sample
   draws from its own `torch.Generator` seeded by `derive_seed(...)`: a sample does not depend on
   which other samples share its batch (up to floating-point effects of padding). A batch
   prefills each distinct prompt once, and the prefix its prompts share (system prompt, task)
   once for all of them (`_prefill`), as vLLM's prefix caching reuses a shared prefix's KV cache.
2. Log-probs are taken from logits divided by the sampling temperature (as TRL and verl do), both
   in the sampler and in training, so the two are comparable.
3. The old log-probs of an update are recomputed with the loaded checkpoint before the first
   optimizer step; the sampler's log-probs are kept only for diagnostics.
4. EOS is appended to every training response that does not already end with it.
5. One AdamW per trained model for the whole run (`update.keep_optimizer`): its state is saved
   beside the weights of every RL checkpoint (`optimizer.pt`) and restored by the next round's
   update, as a single long-running optimizer would keep it. A fresh Adam takes steps of about
   lr·sign(g) on every weight whatever the signal, so a few steps per round from a fresh one are
   mostly noise. Warm-start (supervised) checkpoints carry no optimizer state: RL starts afresh.
6. `epochs` passes over the same mini-batches per update, all against the old log-probs taken
   before the first step (PPO's several epochs within the clip); 1 = one pass, as the reference.
7. With `policy.answers: choose` the rollout draws each answer among the admissible ones by the
   policy's probability of writing it, renormalized over the list (`choose_answers`), and the
   update trains that answer's tokens as if they had been sampled. Its gradient A·∇ℓ_k (ℓ_k the
   answer's log-prob) leaves out the renormalization's −A·Σ_j p_j∇ℓ_j (p_j the choice
   probabilities), whose mean over a state's draws is −E[A | state]·Σ_j p_j∇ℓ_j: zero where the
   advantages of a state's draws average zero, as GRPO's standardized advantages do per task
   (not per state). It keeps the update at one forward pass per sample, not one per listed
   answer.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from transformers import LlamaModel, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from rlanything_core.base.generation import AnswerScore, Generation, Messages
from rlanything_core.method.losses import ppo_clip_k3_loss
from rlanything_core.models.constraints import TokenConstraint
from rlanything_core.models.decoding import LeanDecoder, lean_supported, sliding_window
from rlanything_core.models.distributed import Group

CACHE_ARG = (
    "cache" if "cache" in inspect.signature(LlamaModel.forward).parameters else "past_key_values"
)
"""The keyword a model's forward takes its KV cache by, and the name of the output field that
returns it: transformers renamed `past_key_values` to `cache` (the old names still work there,
with a deprecation warning)."""


def kv_cache(out: Any) -> Any:
    """The KV cache a forward returned: its field named `CACHE_ARG`."""
    return getattr(out, CACHE_ARG)


def encode_chat(tokenizer: PreTrainedTokenizerBase, messages: Messages) -> list[int]:
    """Token ids of `messages` rendered by the chat template, ending with the assistant header."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Every token id that ends a generation (tokenizer EOS and the generation config's)."""
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(model.generation_config, "eos_token_id", None)
    ids |= set(gen_eos) if isinstance(gen_eos, list) else {gen_eos}
    return {i for i in ids if i is not None}


# on_token(prompt index, token id, log-prob, top alternatives) -> end this answer here
TokenCallback = Callable[[int, int, float, list[tuple[int, float]]], bool]


def sample_rows(
    logp: torch.Tensor, generators: Sequence[torch.Generator], *, skip: Sequence[bool] = ()
) -> torch.Tensor:
    """One token per row of `logp` (B, V) log-probs, row b drawn with `generators[b]`, by
    inverting the cumulative distribution: the first token v whose cumulative probability
    C_bv = Σ_{w ≤ v} exp(logp_bw) exceeds U_b·C_bV, U_b uniform on [0, 1) from the row's
    generator (one draw per row; the sums in float64). It picks v with probability
    exp(logp_bv) / C_bV, as `torch.multinomial` does, whose exponential draws (one per token)
    took 1.0 ms per row of SmolLM2's 49 152 tokens on a 2-core CPU: 24.7 ms for 24 rows,
    against 1.8 ms for this (benchmarks/results/sampling/README.md). A token of
    probability 0 (masked, −∞) is never picked: its interval is empty. Rows in `skip` (already
    finished) draw nothing and get 0."""
    batch, vocab = logp.shape
    skipped = [bool(skip and skip[b]) for b in range(batch)]
    uniform = torch.cat(
        [
            torch.zeros(1, dtype=torch.float64, device=logp.device)
            if skipped[b]
            else torch.rand(1, generator=g, dtype=torch.float64, device=g.device)
            for b, g in enumerate(generators)
        ]
    ).to(logp.device)  # (B,)
    cumulative = logp.double().exp_().cumsum_(dim=-1)  # (B, V); one buffer, not three
    target = (uniform * cumulative[:, -1])[:, None]  # (B, 1), below C_bV
    # U·C_bV rounding up to C_bV itself (probability about 2⁻⁵³) would index past the end
    picked = torch.searchsorted(cumulative, target, right=True)[:, 0].clamp(max=vocab - 1)
    return picked.masked_fill(torch.tensor(skipped, device=logp.device), 0)


@torch.no_grad()
def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Messages],
    seeds: Sequence[int],
    *,
    max_new_tokens: int,
    temperature: float,
    batch_size: int = 8,
    on_batch: Callable[[int], None] | None = None,
    on_token: TokenCallback | None = None,
    top_logprobs: int = 0,
    ignore_eos: bool = False,
    share_prefix: bool = True,
    constraint: TokenConstraint | None = None,
    lean_decoding: bool = True,
) -> list[Generation]:
    """Sample one answer per prompt, each from its own seeded generator.

    Prompts are bucketed by length into batches of `batch_size`. temperature 0 decodes greedily.
    `on_batch(n)` is called after each batch with its size (progress bars).
    `on_token(i, token_id, logprob, top)` is called with each sampled token of prompt i that does
    not end the answer (streaming, stop strings; `top` is [] unless `top_logprobs`); True ends
    prompt i's answer after that token (finish_reason "stop"). What it raises propagates.
    `top_logprobs=k` also keeps the k likeliest tokens at each position
    (`Generation.top_logprobs`). `ignore_eos` decodes `max_new_tokens` whatever is sampled
    (benchmarks, as vLLM's option of that name). `share_prefix=False` prefills every distinct
    prompt whole, not the prefix a batch shares once (benchmarks, tests). A `constraint`
    (constraints.py) masks the tokens it does not allow before each sample; the log-probs are
    then the masked distribution's. Llama-family models decode with `decoding.LeanDecoder`, which
    reads each prompt's keys and values once per step, not once per answer;
    `lean_decoding=False` uses transformers' step (benchmarks, tests).
    """
    if len(prompts) != len(seeds):
        raise ValueError(f"got {len(prompts)} prompts but {len(seeds)} seeds")
    was_training = model.training
    model.eval()
    encoded = [encode_chat(tokenizer, p) for p in prompts]
    # Identical prompts end up side by side, so a batch prefills each of them once.
    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i]), encoded[i]))
    stop = set() if ignore_eos else eos_ids(model, tokenizer)
    results: list[Generation | None] = [None] * len(encoded)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        outs = _decode_batch(
            model,
            [encoded[i] for i in chunk],
            [seeds[i] for i in chunk],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            stop=stop,
            pad_id=tokenizer.pad_token_id,
            on_token=None if on_token is None else _in_chunk(on_token, chunk),
            top_logprobs=top_logprobs,
            share_prefix=share_prefix,
            constraint=constraint,
            lean_decoding=lean_decoding,
        )
        for i, (tokens, logprobs, tops, ended) in zip(chunk, outs, strict=True):
            text_ids = tokens[:-1] if ended == "eos" else tokens
            results[i] = Generation(
                text=str(tokenizer.decode(text_ids, skip_special_tokens=True)),
                prompt_token_ids=encoded[i],
                token_ids=tokens,
                logprobs=logprobs,
                finish_reason="length" if ended == "length" else "stop",
                top_logprobs=tops,
            )
        if on_batch is not None:
            on_batch(len(chunk))
    model.train(was_training)
    return [r for r in results if r is not None]


def _in_chunk(on_token: TokenCallback, chunk: list[int]) -> TokenCallback:
    """`on_token` called with the prompt's index in `generate`'s input, not in the batch."""
    return lambda row, token, logprob, top: on_token(chunk[row], token, logprob, top)


MIN_SHARED_PREFIX = 16
"""Shortest prefix, in tokens, that `_prefill` computes once for a whole batch."""


def shared_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the prefix all `prompts` share, short of the shortest prompt's last token (each
    prompt keeps at least one token of its own, whose logits start its answer)."""
    first, limit = prompts[0], min(len(p) for p in prompts) - 1
    n = 0
    while n < limit and all(p[n] == first[n] for p in prompts):
        n += 1
    return n


MICRO_BATCH_COST = 32
"""What one more forward and backward costs beyond its tokens, in tokens: it keeps
`micro_batches` from splitting work into many tiny micro-batches to save a few tokens."""


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def micro_batches(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], size: int
) -> list[list[int]]:
    """Split samples into micro-batches of at most `size` that put the fewest token positions
    through `response_logprobs`: each micro-batch computes its prompts' shared prefix once (when
    it is at least `MIN_SHARED_PREFIX` tokens) and pads the rest of every row to its longest.

    Samples are ordered by their prompt's tokens, so that prompts which share a prefix (the
    rollouts of one task from the same state, one episode's steps) sit side by side, and that
    order is cut into runs by dynamic programming over each run's positions plus
    `MICRO_BATCH_COST`. In that order the prefix a run shares is the least common prefix of its
    neighbours. Returns lists of sample indices, in order.
    """
    order = sorted(range(len(prompts)), key=lambda i: (tuple(prompts[i]), i))
    lcp = [_common_prefix(prompts[a], prompts[b]) for a, b in itertools.pairwise(order)]
    n = len(order)
    best = [0.0] + [math.inf] * n  # best[j]: the cheapest split of order[:j]
    start = [0] * (n + 1)
    for j in range(1, n + 1):
        shared, prompt_width, response_width, shortest = math.inf, 0, 0, math.inf
        for i in range(j - 1, max(j - size, 0) - 1, -1):  # the run order[i:j]
            sample = order[i]
            if i < j - 1:
                shared = min(shared, lcp[i])
            prompt_width = max(prompt_width, len(prompts[sample]))
            response_width = max(response_width, len(responses[sample]))
            shortest = min(shortest, len(prompts[sample]))
            rows = j - i
            # shared_prefix_length: short of the shortest prompt's last token
            common = min(shared, shortest - 1) if rows > 1 else 0
            common = common if common >= MIN_SHARED_PREFIX else 0
            cost = common + rows * (prompt_width - common + response_width) + MICRO_BATCH_COST
            if best[i] + cost < best[j]:
                best[j], start[j] = best[i] + cost, i
    runs, j = [], n
    while j > 0:
        runs.append(order[start[j] : j])
        j = start[j]
    return runs[::-1]


def _shared_prefix(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], *, longest: int
) -> tuple[int, Any]:
    """The prefix that every prompt shares, computed once, on one row: (its length, its KV cache
    copied to every row), or (0, None) when it is shorter than `MIN_SHARED_PREFIX`, for one
    prompt, where the model attends over a sliding window shorter than `longest` (a row's
    tokens: padding inside a row would take room in the window that left padding does not), and
    under FSDP (a rank with nothing shared would run one forward, and one round of all-gathers,
    fewer than the others). A DDP-wrapped model computes it on the wrapped module, so that DDP
    sees one forward per backward; its gradients reach the same parameters."""
    if len(prompts) < 2 or isinstance(model, FSDPModule):
        return 0, None
    inner = model.module if isinstance(model, DistributedDataParallel) else model
    window = sliding_window(inner)
    shared = 0 if window and longest > window else shared_prefix_length(prompts)
    if shared < MIN_SHARED_PREFIX:
        return 0, None
    device = next(model.parameters()).device
    head = torch.tensor([list(prompts[0][:shared])], device=device)  # (1, S)
    cache = kv_cache(inner(input_ids=head, use_cache=True, logits_to_keep=1))
    cache.reorder_cache(torch.zeros(len(prompts), dtype=torch.long, device=device))
    return shared, cache


def _prefill(
    model: PreTrainedModel, prompts: list[tuple[int, ...]], *, pad_id: int, share_prefix: bool
) -> tuple[CausalLMOutputWithPast, torch.Tensor, torch.Tensor, int]:
    """Run distinct prompts through the model; (output with the KV cache and the last position's
    logits, attention mask (U, L), position ids (U, L'), the shared prefix's length S (0: none)).

    With `share_prefix`, a prefix of at least `MIN_SHARED_PREFIX` tokens that every prompt shares
    is computed once, on one row, and its KV cache copied to all U rows; the rest of each prompt
    follows it, left-padded, so a row reads [shared prefix][padding][own tokens] with positions
    that skip the padding. Otherwise every prompt is left-padded whole. Both give each prompt the
    same keys and values up to floating-point effects of the shapes
    (`test_a_shared_prefix_is_prefilled_once_with_the_same_result`). Not where the model
    attends over a sliding window shorter than the prompts: padding inside a row would take
    room in the window that left padding does not.
    """
    device = next(model.parameters()).device
    longest = max(len(p) for p in prompts)
    shared, cache = _shared_prefix(model, prompts, longest=longest) if share_prefix else (0, None)
    width = max(len(p) for p in prompts) - shared
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)  # (U, W), left-padded
    own = torch.zeros((len(prompts), width), dtype=torch.long)  # (U, W)
    for u, ids in enumerate(prompts):
        input_ids[u, width - len(ids) + shared :] = torch.tensor(ids[shared:])
        own[u, width - len(ids) + shared :] = 1
    input_ids, own = input_ids.to(device), own.to(device)
    positions = shared + (own.cumsum(-1) - 1).clamp(min=0)  # (U, W)
    attention = torch.cat([own.new_ones((len(prompts), shared)), own], dim=1)  # (U, S + W)
    # Logits of the last position only: all of them would take U × L × vocabulary floats.
    out = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        **{CACHE_ARG: cache},
        use_cache=True,
        logits_to_keep=1,
    )
    return out, attention, positions, shared


def _decode_batch(
    model: PreTrainedModel,
    prompt_ids: list[list[int]],
    seeds: list[int],
    *,
    max_new_tokens: int,
    temperature: float,
    stop: set[int],
    pad_id: int,
    on_token: TokenCallback | None = None,
    top_logprobs: int = 0,
    share_prefix: bool = True,
    constraint: TokenConstraint | None = None,
    lean_decoding: bool = True,
) -> list[tuple[list[int], list[float], list[list[tuple[int, float]]], str]]:
    """Each row's tokens, their log-probs, the top-k alternatives (top_logprobs > 0) and why it
    ended: "eos" (an end token, the last of its tokens), "stop" (`on_token` said so) or
    "length"."""
    device = next(model.parameters()).device
    batch = len(prompt_ids)
    # Prefill each distinct prompt once (e.g. the m votes on one step); the lean decoder reads
    # its keys and values once a step, transformers' step from a copy per answer.
    unique: dict[tuple[int, ...], int] = {}
    row_of = [unique.setdefault(tuple(p), len(unique)) for p in prompt_ids]  # (B,) → unique row
    out, attention, positions, shared = _prefill(
        model, list(unique), pad_id=pad_id, share_prefix=share_prefix
    )
    generators = [torch.Generator(device=device).manual_seed(s) for s in seeds]
    index = torch.tensor(row_of, device=device)
    assert out.logits is not None
    logits_next, cache = out.logits[index][:, -1, :], kv_cache(out)  # (B, V)
    del out
    lean = (
        LeanDecoder(
            model,
            cache,
            attention,
            shared=shared,
            row_of=row_of,
            max_new_tokens=max_new_tokens,
        )
        if lean_decoding and lean_supported(model)
        else None
    )
    if lean is not None:
        cache = None  # the lean decoder holds what it reads (in float32: the bfloat16 one goes)
    else:  # transformers' step: the prompt's cache copied to every row
        cache.reorder_cache(index)  # (U, …) → (B, …)
        attention = attention[index]  # (B, L)
    positions = positions[index]  # (B, L)
    tokens: list[list[int]] = [[] for _ in range(batch)]
    logprobs: list[list[float]] = [[] for _ in range(batch)]
    tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(batch)]
    ended = ["length"] * batch
    finished = [False] * batch
    for step in range(max_new_tokens):
        logits = logits_next.float()  # (B, V)
        if constraint is not None:
            for i in range(batch):
                allowed = None if finished[i] else constraint.allowed(tokens[i], logits.shape[-1])
                if allowed is not None and bool(allowed.any()):
                    logits[i].masked_fill_(~allowed.to(logits.device), float("-inf"))
        logp = torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)
        if temperature > 0:  # each row from its own generator; the draws stay on the device
            picked = sample_rows(logp, generators, skip=finished)  # (B,)
        else:
            picked = logp.argmax(dim=-1)
        # two copies to the host per token (tokens, log-probs), not two per row: each copy is a
        # GPU synchronization
        nxt, picked_logp = picked.tolist(), logp.gather(-1, picked[:, None])[:, 0].tolist()
        if top_logprobs > 0:
            top_lp, top_ids = (t.tolist() for t in logp.topk(top_logprobs, dim=-1))  # (B, k)
        for i in range(batch):
            if finished[i]:
                nxt[i] = pad_id
                continue
            tokens[i].append(nxt[i])
            logprobs[i].append(picked_logp[i])
            if top_logprobs > 0:
                tops[i].append(list(zip(top_ids[i], top_lp[i], strict=True)))
            if nxt[i] in stop:
                finished[i], ended[i] = True, "eos"
            elif on_token is not None and on_token(
                i, nxt[i], logprobs[i][-1], tops[i][-1] if top_logprobs > 0 else []
            ):
                finished[i], ended[i] = True, "stop"
        if all(finished) or step == max_new_tokens - 1:  # no forward for logits never read
            break
        positions = positions[:, -1:] + 1  # (B, 1)
        if lean is not None:
            logits_next = lean.step(torch.tensor(nxt, device=device), positions)
            continue
        attention = torch.cat([attention, attention.new_ones((batch, 1))], dim=1)  # (B, L+t)
        out = model(
            input_ids=torch.tensor(nxt, device=device)[:, None],
            attention_mask=attention,
            position_ids=positions,
            **{CACHE_ARG: cache},
            use_cache=True,
        )
        assert out.logits is not None
        logits_next, cache = out.logits[:, -1, :], kv_cache(out)
    return list(zip(tokens, logprobs, tops, ended, strict=True))


@torch.no_grad()
def choose_answers(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Messages],
    answers: Sequence[Sequence[str]],
    seeds: Sequence[int],
    *,
    temperature: float,
    batch_size: int = 8,
    score: AnswerScore = "sum",
) -> list[Generation]:
    """Pick one of each prompt's `answers` by the model's probability of writing it.

    Answer k of a prompt is scored by ℓ_k = Σ_t log π_T(y_kt | prompt, y_k<t), its tokens being
    `tokenizer(answer) + EOS` as a warm start trains them (temperature-scaled log-probs, as
    `generate`'s). With temperature > 0 the answer is drawn from softmax(ℓ) with the prompt's own
    seeded generator: the policy's own distribution over whole answers, restricted to the listed
    ones and renormalized (GLAM and TWOSOME choose among admissible actions so). temperature 0
    takes argmax ℓ. The Generation reads as if the model had sampled that answer: its tokens,
    their log-probs, finish_reason "stop".

    `score="mean"` scores by the mean instead, ℓ_k / |y_k| (TWOSOME's token normalization): the
    sum favours answers of few tokens wherever the model is unsure, since every token costs
    log-probability.

    Each distinct prompt is prefilled once and its distinct answers follow it packed in one row
    (`_packed_answer_logprobs`), with no copy of the prompt's keys and values per answer. Models
    whose attention cannot take that mask as given (`_packs_answers`) copy the prompt's KV cache
    to a row per answer instead. Prompts are grouped so that a forward pass holds at most
    `batch_size` answers (a prompt with more goes alone).
    """
    if not (len(prompts) == len(answers) == len(seeds)):
        raise ValueError(
            f"got {len(prompts)} prompts, {len(answers)} answer lists and {len(seeds)} seeds"
        )
    for i, listed in enumerate(answers):
        if not listed:
            raise ValueError(f"prompt {i} lists no answers to choose from")
    was_training = model.training
    model.eval()
    encoded = [encode_chat(tokenizer, p) for p in prompts]
    eos = tokenizer.eos_token_id
    tokens = [
        [[*tokenizer(a, add_special_tokens=False)["input_ids"], eos] for a in listed]
        for listed in answers
    ]
    results: dict[int, Generation] = {}
    for group in answer_groups(encoded, tokens, batch_size):
        scored = (_packed_answer_logprobs if _packs_answers(model) else _answer_logprobs)(
            model,
            [encoded[i] for i in group],
            [tokens[i] for i in group],
            temperature=temperature,
            pad_id=tokenizer.pad_token_id,
        )
        for i, per_answer in zip(group, scored, strict=True):
            totals = torch.tensor(
                [sum(lp) / (len(lp) if score == "mean" else 1) for lp in per_answer],
                dtype=torch.float64,
            )
            if temperature > 0:
                generator = torch.Generator().manual_seed(seeds[i])
                k = int(torch.multinomial(torch.softmax(totals, 0), 1, generator=generator))
            else:
                k = int(totals.argmax())
            results[i] = Generation(
                text=answers[i][k],
                prompt_token_ids=encoded[i],
                token_ids=tokens[i][k],
                logprobs=per_answer[k],
                finish_reason="stop",
            )
    model.train(was_training)
    return [results[i] for i in range(len(encoded))]


def answer_groups(
    prompt_ids: Sequence[Sequence[int]], answer_ids: Sequence[Sequence[object]], batch_size: int
) -> list[list[int]]:
    """Indices of the prompts scored together by `choose_answers`: sorted by prompt, at most
    `batch_size` answers a group (a prompt with more goes alone)."""
    order = sorted(range(len(prompt_ids)), key=lambda i: (len(prompt_ids[i]), list(prompt_ids[i])))
    groups: list[list[int]] = [[]]
    rows = 0
    for i in order:
        if groups[-1] and rows + len(answer_ids[i]) > batch_size:
            groups.append([])
            rows = 0
        groups[-1].append(i)
        rows += len(answer_ids[i])
    return groups


def _packs_answers(model: PreTrainedModel) -> bool:
    """Whether `_packed_answer_logprobs` gives this model's log-probs: its attention takes a 4D
    mask as given (eager or SDPA), attends over the whole context (no sliding window) and its
    logits are the output embedding of the decoder's last hidden state (no soft-capping)."""
    config = model.config
    return (
        getattr(config, "_attn_implementation", None) in ("sdpa", "eager")
        and not sliding_window(model)
        and getattr(config, "final_logit_softcapping", None) is None
        and model.get_output_embeddings() is not None
    )


def _packed_answer_logprobs(
    model: PreTrainedModel,
    prompt_ids: list[list[int]],
    answer_ids: list[list[list[int]]],
    *,
    temperature: float,
    pad_id: int,
) -> list[list[list[float]]]:
    """Per prompt, per answer: the log-prob of each answer token (temperature-scaled), with a
    prompt's answers packed into one row after it.

    Each distinct prompt is prefilled once (`_prefill`, sharing the prefix common to all). Then
    one row per prompt holds its distinct answers one after another, [answer 1]…[answer n][pad],
    over that prompt's KV cache: answer k's token t sits at position |prompt| + t and attends
    to the prompt and to answer k's tokens before it, never to another answer (a 4D mask), so it
    sees what it would see after the prompt alone. The prompt's keys and values are not copied
    per answer. The prompt's last logits predict each answer's first token; the logits of answer
    k's token t predict its token t + 1.
    """
    device = next(model.parameters()).device
    embedding = model.get_input_embeddings().weight
    assert isinstance(embedding, torch.Tensor)
    dtype = embedding.dtype  # the attention's: a LoRA adapter's own dtype may differ
    slots: dict[tuple[int, ...], dict[tuple[int, ...], None]] = {}  # prompt → its answers, in order
    for ids_of_prompt, listed in zip(prompt_ids, answer_ids, strict=True):
        slots.setdefault(tuple(ids_of_prompt), {}).update(dict.fromkeys(map(tuple, listed)))
    out, attention, positions, _ = _prefill(model, list(slots), pad_id=pad_id, share_prefix=True)
    assert out.logits is not None
    first = out.logits[:, -1, :].float()  # (U, V): predicts every answer's first token
    width = max(sum(len(a) for a in mine) for mine in slots.values())
    ids = torch.full((len(slots), width), pad_id, dtype=torch.long)  # (U, S), right-padded
    offsets = torch.zeros((len(slots), width), dtype=torch.long)  # (U, S): t within its answer
    segment = torch.zeros((len(slots), width), dtype=torch.long)  # (U, S): answer k ≥ 1, 0 pad
    where: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, int]] = {}  # → (row, column)
    for u, (prompt, mine) in enumerate(slots.items()):
        at = 0
        for k, answer in enumerate(mine, start=1):
            ids[u, at : at + len(answer)] = torch.tensor(answer)
            offsets[u, at : at + len(answer)] = torch.arange(len(answer))
            segment[u, at : at + len(answer)] = k
            where[(prompt, answer)] = (u, at)
            at += len(answer)
    column = torch.arange(width)
    query, key = segment[:, :, None], segment[:, None, :]  # (U, S, 1), (U, 1, S)
    own = (column[:, None] >= column[None, :]) & (key == query) & (key > 0)  # (U, S, S)
    prompt_keys = attention.bool().cpu()[:, None, :].expand(-1, width, -1)  # (U, S, L)
    allowed = torch.cat([prompt_keys, own], dim=2)  # (U, S, L + S)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    rest = model(
        input_ids=ids.to(device),
        attention_mask=mask[:, None].to(device),  # (U, 1, S, L + S)
        position_ids=positions[:, -1:] + 1 + offsets.to(device),
        **{CACHE_ARG: kv_cache(out)},
        use_cache=True,
    ).logits.float()  # (U, S, V): column c predicts the token after it in its answer
    # Answer token t at column c = at + t is predicted by the prompt's last logits when t = 0 and
    # by column c - 1 of `rest` (answer token t - 1's output) otherwise.
    rows: list[int] = []
    columns: list[int] = []  # -1: the prompt's last logits
    for b, listed in enumerate(answer_ids):
        for tokens in listed:
            u, at = where[(tuple(prompt_ids[b]), tuple(tokens))]
            rows.extend([u] * len(tokens))
            columns.extend([-1, *range(at, at + len(tokens) - 1)])
    row, source = torch.tensor(rows, device=device), torch.tensor(columns, device=device)
    starts = source < 0
    picked = rest[row, source.clamp(min=0)]  # (N, V)
    picked[starts] = first[row[starts]]
    targets = torch.tensor([t for listed in answer_ids for a in listed for t in a], device=device)
    if temperature > 0:
        picked = picked / temperature  # (N, V)
    token_logp = torch.log_softmax(picked, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
    flat = token_logp.tolist()
    scored: list[list[list[float]]] = [[] for _ in answer_ids]
    offset = 0
    for b, listed in enumerate(answer_ids):
        for tokens in listed:
            scored[b].append(flat[offset : offset + len(tokens)])
            offset += len(tokens)
    return scored


def _answer_logprobs(
    model: PreTrainedModel,
    prompt_ids: list[list[int]],
    answer_ids: list[list[list[int]]],
    *,
    temperature: float,
    pad_id: int,
) -> list[list[list[float]]]:
    """Per prompt, per answer: the log-prob of each answer token (temperature-scaled)."""
    device = next(model.parameters()).device
    unique: dict[tuple[int, ...], int] = {}
    prompt_row = [unique.setdefault(tuple(p), len(unique)) for p in prompt_ids]
    out, attention, positions, _ = _prefill(model, list(unique), pad_id=pad_id, share_prefix=True)
    assert out.logits is not None
    pairs = [(b, k) for b, listed in enumerate(answer_ids) for k in range(len(listed))]
    index = torch.tensor([prompt_row[b] for b, _ in pairs], device=device)  # (R,) → unique row
    first = out.logits[index, -1, :].float()  # (R, V): predicts each answer's first token
    kv_cache(out).reorder_cache(index)  # (U, …) → (R, …)
    width = max(len(answer_ids[b][k]) for b, k in pairs)
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)  # (R, C), right-padded
    own = torch.zeros((len(pairs), width), dtype=torch.long)  # (R, C)
    for r, (b, k) in enumerate(pairs):
        ids[r, : len(answer_ids[b][k])] = torch.tensor(answer_ids[b][k])
        own[r, : len(answer_ids[b][k])] = 1
    ids, own = ids.to(device), own.to(device)
    rest = model(
        input_ids=ids,
        attention_mask=torch.cat([attention[index], own], dim=1),  # (R, L + C)
        position_ids=positions[index][:, -1:] + 1 + torch.arange(width, device=device),
        **{CACHE_ARG: kv_cache(out)},
        use_cache=True,
    ).logits.float()  # (R, C, V): position t predicts answer token t + 1
    logits = torch.cat([first[:, None, :], rest[:, :-1, :]], dim=1)  # (R, C, V)
    if temperature > 0:
        logits = logits / temperature
    token_logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[..., None]).squeeze(-1)
    scored: list[list[list[float]]] = [[] for _ in answer_ids]
    for r, (b, k) in enumerate(pairs):
        scored[b].append(token_logp[r, : len(answer_ids[b][k])].tolist())
    return scored


def response_logprobs(
    model: PreTrainedModel,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    *,
    temperature: float,
    pad_id: int,
    share_prefix: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(response token | prompt, earlier response tokens), temperature-scaled.

    Rows are laid out as [left pad][prompt][response][right pad] so that every response starts at
    the same column and only the last R+1 positions need logits. With `share_prefix`, a prefix
    of at least `MIN_SHARED_PREFIX` tokens that every prompt shares (a system prompt, the
    instructions) is computed once, on one row, and its keys and values are copied to every row
    (`_prefill`'s layout: [shared prefix][left pad][own prompt][response][right pad], positions
    skipping the padding); gradients flow back through the copies into the one computation
    (not under FSDP). A row's log-probs and gradients are those of the whole layout up to
    floating-point effects of the shapes
    (`test_a_shared_prefix_gives_the_same_logprobs_and_gradients`). The policy's prompts in the
    household benchmark share 134 of their about 240 tokens.

    Returns:
        logp: (B, R) log-probs, R = longest response; mask: (B, R) 1.0 on real response tokens.
    """
    device = next(model.parameters()).device
    batch = len(prompt_ids)
    longest = max(len(p) + len(r) for p, r in zip(prompt_ids, response_ids, strict=True))
    shared, cache = (
        _shared_prefix(model, prompt_ids, longest=longest) if share_prefix else (0, None)
    )
    p_width = max(len(p) for p in prompt_ids) - shared
    r_width = max(len(r) for r in response_ids)
    ids = torch.full((batch, p_width + r_width), pad_id, dtype=torch.long)  # (B, P+R)
    own = torch.zeros_like(ids)  # (B, P+R): 1 on the row's own tokens
    mask = torch.zeros((batch, r_width))  # (B, R)
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids, strict=True)):
        ids[i, p_width - len(p) + shared : p_width] = torch.tensor(list(p[shared:]))
        ids[i, p_width : p_width + len(r)] = torch.tensor(list(r))
        own[i, p_width - len(p) + shared : p_width + len(r)] = 1
        mask[i, : len(r)] = 1.0
    ids, own, mask = ids.to(device), own.to(device), mask.to(device)
    positions = shared + (own.cumsum(-1) - 1).clamp(min=0)  # (B, P+R)
    attention = torch.cat([own.new_ones((batch, shared)), own], dim=1)  # (B, S+P+R)
    out = model(
        input_ids=ids,
        attention_mask=attention,
        position_ids=positions,
        **{CACHE_ARG: cache},
        use_cache=cache is not None,
        logits_to_keep=r_width + 1,
    )
    logits = out.logits[:, :-1, :].float()  # (B, R, V): position t predicts response token t
    if temperature > 0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    targets = ids[:, p_width:]  # (B, R)
    token_logp = logp.gather(-1, targets[..., None]).squeeze(-1)  # (B, R)
    return token_logp * mask, mask


@dataclass(frozen=True)
class TrainSample:
    """One prompt/response pair with its advantage, and optionally the log-probs its sampler
    recorded for the response's tokens (temperature-scaled, one per token)."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    old_logprobs: list[float] | None = None


def sampler_logprobs(samples: Sequence[TrainSample], device: torch.device) -> torch.Tensor | None:
    """The samples' recorded log-probs laid out as `response_logprobs`'s (B, R), zero past a
    row's response; None when a sample has none for some of its tokens (a response the sampler
    cut at max_new_tokens, whose EOS was appended for training)."""
    rows = [s.old_logprobs for s in samples]
    if any(r is None or len(r) != len(s.response_ids) for r, s in zip(rows, samples, strict=True)):
        return None
    out = torch.zeros((len(samples), max(len(s.response_ids) for s in samples)))
    for k, row in enumerate(rows):
        out[k, : len(row)] = torch.tensor(row)  # type: ignore[arg-type]
    return out.to(device)


def with_eos(response_ids: Sequence[int], eos_id: int) -> list[int]:
    """The response ending with EOS (appended when it does not end with it already)."""
    ids = list(response_ids)
    return ids if ids and ids[-1] == eos_id else [*ids, eos_id]


def scale_lr(optimizer: torch.optim.Optimizer, base_lrs: Sequence[float], scale: float) -> None:
    """Set each parameter group's learning rate to its base rate × `scale` (a schedule's step)."""
    for param_group, lr in zip(optimizer.param_groups, base_lrs, strict=True):
        param_group["lr"] = lr * scale


def _steps_taken(optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> int:
    """Optimizer steps taken so far (AdamW keeps a count per parameter; 0 before the first)."""
    state = optimizer.state.get(params[0], {}) if params else {}
    return int(state["step"]) if "step" in state else 0


def ppo_update(
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[TrainSample],
    *,
    pad_id: int,
    temperature: float = 1.0,
    clip_eps: float = 0.2,
    kl_beta: float = 0.01,
    optimizer_steps: int = 4,
    micro_batch_size: int = 4,
    max_grad_norm: float = 1.0,
    epochs: int = 1,
    warmup_steps: int = 0,
    group: Group | None = None,
    on_step: Callable[[int], None] | None = None,
    reuse_sampler_logprobs: bool = False,
) -> dict[str, float]:
    """One RL update: recompute old log-probs, then `epochs` passes of `optimizer_steps` steps on
    equal mini-batches (epochs × optimizer_steps steps in all).

    With `warmup_steps` N > 0 the learning rate rises linearly over the optimizer's first N steps
    (counted in its state, so across the rounds of a kept optimizer): step k, from 0, takes
    lr·min(1, (k + 1)/N). A fresh AdamW's first steps move every parameter by about lr whatever
    the gradient's size (m/√v ≈ ±1); the warmup keeps them small until the moments mean something.

    The loss is `ppo_clip_k3_loss` with the old log-probs as both π_old and the KL reference.
    The first mini-batch is trained before any optimizer step, so its old log-probs are its own
    training forward's, detached: no recompute forward for it, and none at all with one
    optimizer step and one epoch (as TRL's GRPO does when generation and steps are aligned).
    With `reuse_sampler_logprobs` they are the samples' `old_logprobs` (the sampler's), which
    saves the recompute forward of the other mini-batches too: one forward of the update's
    1 + 3·epochs; a micro-batch with a sample that lacks them is recomputed. Before the first
    step the ratio is then exp(trainer − sampler) rather than exactly 1: `sampler_logprob_gap`
    reports the mean |trainer − sampler| over the first mini-batch's tokens
    (`test_sampler_logprobs_as_old_ones_bound_the_update`).
    In a `group` of processes (distributed.py) every process takes its share of each mini-batch
    and `model` is the wrapped one; the gradient is the mean over the whole mini-batch either way.

    Returns:
        Means over optimizer steps of loss, policy_loss, kl, clip_fraction, ratio_mean and
        grad_norm, plus samples (count) and optimizer_steps (taken).
    """
    if not samples:
        raise ValueError("ppo_update needs at least one sample; skip the update when none is kept")
    group = group or Group()
    model.train()
    steps = max(1, min(optimizer_steps, len(samples)))
    chunks = [list(range(len(samples)))[k::steps] for k in range(steps)]
    # Every process runs as many micro-batches as the one with the largest share; an empty one
    # re-runs the chunk's first sample with weight 0, so that the collectives stay in step.
    plan: list[list[tuple[list[int], float]]] = []  # per mini-batch: (sample indices, weight)
    for chunk in chunks:
        if group.world_size == 1:  # micro-batches of prompts that share the most
            runs = micro_batches(
                [samples[i].prompt_ids for i in chunk],
                [samples[i].response_ids for i in chunk],
                micro_batch_size,
            )
            plan.append([([chunk[i] for i in run], len(run) / len(chunk)) for run in runs])
            continue
        # Micro-batches of similar lengths: a micro-batch pads every row to its longest.
        mine = sorted(
            group.take(chunk),
            key=lambda i: (len(samples[i].prompt_ids) + len(samples[i].response_ids), i),
        )
        count = max(1, math.ceil(math.ceil(len(chunk) / group.world_size) / micro_batch_size))
        parts = [mine[i * micro_batch_size : (i + 1) * micro_batch_size] for i in range(count)]
        plan.append([(part or chunk[:1], len(part) / len(chunk)) for part in parts])

    def logprobs(idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return response_logprobs(
            model,
            [samples[i].prompt_ids for i in idx],
            [samples[i].response_ids for i in idx],
            temperature=temperature,
            pad_id=pad_id,
        )

    # Old log-probs from the loaded checkpoint, batched exactly as the updates are batched, so
    # that π_new = π_old holds bit for bit before the first step (padding changes rounding).
    # With `reuse_sampler_logprobs`, the sampler's where every sample of a micro-batch has them.
    device = next(model.parameters()).device
    reused = [
        [
            sampler_logprobs([samples[i] for i in idx], device) if reuse_sampler_logprobs else None
            for idx, _ in micros
        ]
        for micros in plan
    ]
    # The first mini-batch's are taken from its training forward (None until then).
    with torch.no_grad():
        old: list[list[torch.Tensor | None]] = [
            [
                r if r is not None else None if j == 0 else logprobs(idx)[0]
                for (idx, _), r in zip(micros, rs, strict=True)
            ]
            for j, (micros, rs) in enumerate(zip(plan, reused, strict=True))
        ]
    # Sums of |trainer − sampler| and of tokens on the first mini-batch; samples reused.
    sampler = {"gap": 0.0, "gap_tokens": 0.0, "from_sampler": 0.0}

    params = [p for p in model.parameters() if p.requires_grad]
    base_lrs = [float(param_group["lr"]) for param_group in optimizer.param_groups]
    totals: dict[str, float] = {}
    grad_norms = 0.0
    taken = steps * epochs
    batches = [(j, (plan[j], old[j])) for _ in range(epochs) for j in range(len(plan))]
    for n, (j, (micros, old_logps)) in enumerate(batches):
        optimizer.zero_grad(set_to_none=True)
        for k, ((idx, weight), old_logp) in enumerate(zip(micros, old_logps, strict=True)):
            with group.accumulating(model, sync=k == len(micros) - 1):
                logp, mask = logprobs(idx)
                if old_logp is None:  # the first mini-batch, before any step: π_old = π_θ
                    old_logp = old_logps[k] = logp.detach()
                if n < steps and weight > 0 and reused[j][k] is not None:
                    sampler["from_sampler"] += len(idx)
                    if n == 0:  # before any step: the trainer's own log-probs against them
                        sampler["gap"] += float(((logp.detach() - old_logp).abs() * mask).sum())
                        sampler["gap_tokens"] += float(mask.sum())
                adv = torch.tensor([samples[i].advantage for i in idx], device=logp.device)
                loss, metrics = ppo_clip_k3_loss(
                    logp, old_logp, old_logp, adv, mask, clip_eps=clip_eps, kl_beta=kl_beta
                )
                # The group averages gradients over its processes: scale back to a sum.
                (loss * weight * group.world_size).backward()
            metrics["loss"] = loss.item()
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value * weight / taken
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        if warmup_steps:
            scale = min(1.0, (_steps_taken(optimizer, params) + 1) / warmup_steps)
            scale_lr(optimizer, base_lrs, scale)
        optimizer.step()
        full = grad_norm.full_tensor() if isinstance(grad_norm, DTensor) else grad_norm
        grad_norms += float(full) / taken
        if on_step is not None:
            on_step(1)
    scale_lr(optimizer, base_lrs, 1.0)  # the saved state keeps the configured rate
    totals = group.all_sum(totals)
    totals["grad_norm"] = grad_norms
    totals["samples"] = float(len(samples))
    totals["optimizer_steps"] = float(taken)
    if reuse_sampler_logprobs:
        sampler = group.all_sum(sampler)
        totals["old_logprobs_from_sampler"] = sampler["from_sampler"] / len(samples)
        totals["sampler_logprob_gap"] = sampler["gap"] / max(sampler["gap_tokens"], 1.0)
    return totals
