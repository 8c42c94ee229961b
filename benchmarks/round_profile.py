"""Where a round's time goes, and how close its model work comes to the machine's matmul peak.

Runs `rlanything-train` in this process on a config (default: the `make run` demo, one round
after its warm starts) with the model's forward, backward, optimizer step, checkpoint I/O and
Parquet I/O timed, and splits each stage's time into:
- prefill: generation forwards over prompts (`use_cache=True`, no gradients): whole prompts,
  and the rest of each prompt after a batch's shared prefix (against that prefix's cache);
- decode: generation forwards of one new token per answer against the KV cache (transformers'
  step or `decoding.LeanDecoder.step`);
- logprob: forwards without gradients inside `response_logprobs` (the updates' old log-probs,
  with or without a shared prefix's cache) and any other forward without gradients or cache;
- train_forward, backward, optimizer: the updates' loss forwards (gradients on, into trainable
  weights; a micro-batch's shared prompt prefix computed once with a KV cache included),
  backward passes, AdamW steps;
- checkpoint_io: model and adapter loads and saves; parquet_io: dataset reads and writes;
- other: the rest of the stage (tokenizing, sampling between decode steps, environments,
  Python).
A forward's FLOPs are counted as 2 × parameters × tokens (attention's own products left out,
small at these lengths), twice: over every position the forward computes, padding included
(what the machine did: `mfu`), and over real tokens only, the positions its attention mask keeps
(the useful work: `mfu_real_tokens`); a padded batch shows the difference. A backward
computes the activations' gradients (as many FLOPs as its forwards) and the trainable
weights' (as many again × the trainable share: with LoRA almost none), so it is counted as its
forwards' FLOPs × (1 + trainable / parameters).
Achieved FLOP/s are set against the peak of dense matmuls measured in the same process and
thread count, in float32 and in bfloat16 (`--matmul-size` square matrices), as MFU.

    python benchmarks/round_profile.py --config configs/demo-smollm2.yaml --out results.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.parquet as pq
import torch
from common import PeakRss, bench_config, isolated_workdir, save
from peft import PeftModel
from transformers import PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaForCausalLM

import rlanything_flows.train
from rlanything_core.base import failpoints
from rlanything_core.models import modelling
from rlanything_core.models.decoding import LeanDecoder
from rlanything_core.models.devices import autocast_dtype, pick_device, resolve_dtype

CATEGORIES = (
    "prefill",
    "decode",
    "logprob",
    "train_forward",
    "backward",
    "optimizer",
    "checkpoint_io",
    "parquet_io",
)


def matmul_peak(size: int, dtype: torch.dtype, seconds: float = 2.0) -> float:
    """FLOP/s of square `size` × `size` matmuls in `dtype`, the best of repeated timings."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    for _ in range(2):
        torch.matmul(a, b)
    best, spent = float("inf"), 0.0
    while spent < seconds:
        start = time.perf_counter()
        torch.matmul(a, b)
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
    return 2 * size**3 / best


class Profile:
    """Seconds, tokens and FLOPs per (stage, category), from patched entry points."""

    def __init__(self) -> None:
        self.seconds: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.flops: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.tokens: defaultdict[tuple[str, str], int] = defaultdict(int)
        # the same over real tokens only (padding left out)
        self.real_flops: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.real_tokens: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.stage_seconds: defaultdict[str, float] = defaultdict(float)
        self.stage = "outside stages"
        self._local = threading.local()  # nested calls (a save inside a save) count once
        self._pending_backward_flops = self._pending_backward_real_flops = 0.0
        # Per model object, not per id(): a freed model's id can come back for another model.
        self._params: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()

    def _parameters(self, model: Any) -> tuple[int, int]:
        """(all parameters, trainable ones) of `model`."""
        if model not in self._params:
            params = list(model.parameters())
            trainable = sum(p.numel() for p in params if p.requires_grad)
            self._params[model] = (sum(p.numel() for p in params), trainable)
        return self._params[model]

    @contextlib.contextmanager
    def timing(
        self,
        category: str,
        tokens: int = 0,
        flops: float = 0.0,
        real: tuple[int, float] | None = None,
    ) -> Iterator[None]:
        """Time the block as `category`, with its tokens and FLOPs; `real`: (tokens, FLOPs)
        over real tokens only, where padding was computed too (default: all of them)."""
        if getattr(self._local, "busy", False):
            yield
            return
        self._local.busy = True
        start = time.perf_counter()
        try:
            yield
        finally:
            key = (self.stage, category)
            self.seconds[key] += time.perf_counter() - start
            self.tokens[key] += tokens
            self.flops[key] += flops
            real_tokens, real_flops = real if real is not None else (tokens, flops)
            self.real_tokens[key] += real_tokens
            self.real_flops[key] += real_flops
            self._local.busy = False

    def forward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(model: Any, *args: Any, **kwargs: Any) -> Any:
            ids = kwargs.get("input_ids", args[0] if args else None)
            cache = kwargs.get("cache", kwargs.get("past_key_values"))  # renamed in transformers 5
            tokens = int(ids.numel()) if ids is not None else 0
            total, trainable = self._parameters(model)
            flops = 2.0 * total * tokens
            # the new positions' columns of the attention mask: 0 where a row is padded
            mask = kwargs.get("attention_mask")
            real_tokens = (
                int(mask[..., -ids.shape[-1] :].sum())
                if mask is not None and ids is not None
                else tokens
            )
            real_flops = 2.0 * total * real_tokens
            # A training forward runs with gradients into trainable weights, whether or not it
            # uses a KV cache (the updates compute a micro-batch's shared prompt prefix once
            # with a cache, then each sample's rest against it); generation never does. A
            # prompt's rest after a shared prefix is prefilled against the prefix's cache:
            # decoding is one new token per row.
            if torch.is_grad_enabled() and trainable:
                category = "train_forward"
                self._pending_backward_flops += flops * (1 + trainable / total)
                self._pending_backward_real_flops += real_flops * (1 + trainable / total)
            elif getattr(self._local, "logprobs", False):
                category = "logprob"
            elif cache is not None and ids is not None and ids.shape[-1] == 1:
                category = "decode"
            elif kwargs.get("use_cache") or cache is not None:
                category = "prefill"
            else:
                category = "logprob"
            with self.timing(category, tokens, flops, (real_tokens, real_flops)):
                return original(model, *args, **kwargs)

        return timed

    def lean_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Time `LeanDecoder.step` (one new token per answer, no `forward` call) as decode."""

        def timed(decoder: Any, tokens: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            total, _ = self._parameters(decoder.model)
            with self.timing("decode", int(tokens.numel()), 2.0 * total * tokens.numel()):
                return original(decoder, tokens, *args, **kwargs)

        return timed

    def logprobs(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Mark the forwards of `response_logprobs` (which uses a KV cache for a shared prompt
        prefix, as generation does) as log-prob passes."""

        def marked(*args: Any, **kwargs: Any) -> Any:
            outer = getattr(self._local, "logprobs", False)
            self._local.logprobs = True
            try:
                return original(*args, **kwargs)
            finally:
                self._local.logprobs = outer

        return marked

    def backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            flops, self._pending_backward_flops = self._pending_backward_flops, 0.0
            real, self._pending_backward_real_flops = self._pending_backward_real_flops, 0.0
            with self.timing("backward", 0, flops, (0, real)):
                return original(tensor, *args, **kwargs)

        return timed

    def plain(self, category: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.timing(category):
                return original(*args, **kwargs)

        return timed

    def in_stage(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @contextlib.contextmanager
        def staged(round_idx: int, stage: str) -> Iterator[None]:
            name = stage if round_idx >= 0 else f"{stage} (before round 0)"
            previous, self.stage = self.stage, name
            start = time.perf_counter()
            try:
                with original(round_idx, stage):
                    yield
            finally:
                self.stage_seconds[name] += time.perf_counter() - start
                self.stage = previous

        return staged


@contextlib.contextmanager
def patched(profile: Profile) -> Iterator[None]:
    """Install the profile's timers on the entry points named in the module docstring."""
    classmethods = [
        (PreTrainedModel, "from_pretrained", "checkpoint_io"),
        (PeftModel, "from_pretrained", "checkpoint_io"),
    ]
    methods: list[tuple[Any, str, Callable[..., Any]]] = [
        (LlamaForCausalLM, "forward", profile.forward(LlamaForCausalLM.forward)),
        (LeanDecoder, "step", profile.lean_step(LeanDecoder.step)),
        (modelling, "response_logprobs", profile.logprobs(modelling.response_logprobs)),
        (torch.Tensor, "backward", profile.backward(torch.Tensor.backward)),
        (torch.optim.AdamW, "step", profile.plain("optimizer", torch.optim.AdamW.step)),
        (
            PreTrainedModel,
            "save_pretrained",
            profile.plain("checkpoint_io", PreTrainedModel.save_pretrained),
        ),
        (PeftModel, "save_pretrained", profile.plain("checkpoint_io", PeftModel.save_pretrained)),
        (pq, "write_table", profile.plain("parquet_io", pq.write_table)),
        (pq, "read_table", profile.plain("parquet_io", pq.read_table)),
        (failpoints, "in_stage", profile.in_stage(failpoints.in_stage)),
    ]
    # What each owner held itself (None: it inherited the attribute, e.g. AdamW's step).
    saved = [(owner, attr, vars(owner).get(attr)) for owner, attr, _ in methods]
    saved += [(owner, attr, vars(owner)[attr]) for owner, attr, _ in classmethods]
    for owner, attr, wrapper in methods:
        setattr(owner, attr, wrapper)
    for owner, attr, category in classmethods:
        function = vars(owner)[attr].__func__
        setattr(owner, attr, classmethod(profile.plain(category, function)))
    try:
        yield
    finally:
        for owner, attr, original in saved:
            if original is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)


def report(profile: Profile, peaks: dict[str, float], model_dtype: str) -> dict[str, Any]:
    """Per stage: seconds, each category's share, tokens, FLOP/s and MFU against `model_dtype`'s
    matmul peak."""
    peak = peaks[model_dtype]
    stages = []
    for stage, total in profile.stage_seconds.items():
        parts: dict[str, Any] = {}
        counted = 0.0
        for category in CATEGORIES:
            seconds = profile.seconds.get((stage, category), 0.0)
            if not seconds:
                continue
            counted += seconds
            flops = profile.flops.get((stage, category), 0.0)
            part: dict[str, Any] = {
                "seconds": round(seconds, 3),
                "share": round(seconds / total, 4),
            }
            if flops:
                part |= {
                    "tokens": profile.tokens.get((stage, category), 0),
                    "gflop_per_s": round(flops / seconds / 1e9, 2),
                    "mfu": round(flops / seconds / peak, 4),
                    "real_tokens": profile.real_tokens.get((stage, category), 0),
                    "mfu_real_tokens": round(
                        profile.real_flops.get((stage, category), 0.0) / seconds / peak, 4
                    ),
                }
            parts[category] = part
        parts["other"] = {
            "seconds": round(total - counted, 3),
            "share": round((total - counted) / total, 4),
        }
        stages.append({"stage": stage, "seconds": round(total, 3), "parts": parts})
    totals: dict[str, float] = defaultdict(float)
    for (_, category), seconds in profile.seconds.items():
        totals[category] += seconds
    return {"stages": stages, "seconds_by_category": {k: round(v, 2) for k, v in totals.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/demo-smollm2.yaml")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    peaks = {
        name: matmul_peak(args.matmul_size, dtype)
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))
    }
    config = bench_config(args.config, rounds=args.rounds)
    model_dtype = "bfloat16" if _compute_dtype(config) == torch.bfloat16 else "float32"
    profile = Profile()
    with isolated_workdir("profile") as root, PeakRss() as rss, patched(profile):
        start = time.perf_counter()
        rlanything_flows.train.rlanything_train(config=config, run_dir=str(root / "run"))
        wall = time.perf_counter() - start
        summary = json.loads((root / "run" / "summary.json").read_text())
    save(
        args.out,
        {
            "benchmark": "round_profile",
            "config": args.config,
            "rounds": args.rounds,
            "wall_seconds": round(wall, 1),
            "peak_rss_tree_mb": round(rss.peak / 2**20, 1),
            "matmul_peak_gflop_per_s": {k: round(v / 1e9, 1) for k, v in peaks.items()},
            "matmul_size": args.matmul_size,
            "model_dtype": model_dtype,
            **report(profile, peaks, model_dtype),
            # what the updates reported (ratio, KL, sampler_logprob_gap where reused), per round
            "update_metrics": [
                {k: v for k, v in r.items() if k.startswith(("policy/", "reward_model/"))}
                for r in summary["rounds"]
            ],
        },
    )


def _compute_dtype(config: Any) -> torch.dtype:
    """The dtype the policy computes in on this machine (autocast's where it is mixed)."""
    model = config.policy.model
    device = pick_device(model.device)
    return autocast_dtype(model.dtype, device) or resolve_dtype(model.dtype, device)


if __name__ == "__main__":
    main()
