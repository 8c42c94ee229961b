"""Rollout and reward-scoring throughput against a plain batched `model.generate`.

Both sides decode the same prompts with the same model, batch size, sampling temperature and
`max_new_tokens`, in the same batches. The rollout side is `rollout.play` (environment steps,
prompt rendering, parsing included); the scoring side is `judging.judge` with m votes per step.
The baseline is `transformers`' `model.generate(do_sample=True, top_k=0, top_p=1.0)` on the
prompts they decoded. Overhead ratio = our seconds per generated token / generate's. Our side
runs twice, sharing each batch's common prompt prefix (the default) and prefilling every prompt
whole (`share_prefix=False`), with the same seeds: the prefix-sharing speed-up at equal work.

    python benchmarks/throughput.py --config configs/tiny.yaml --out results.json
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch
from common import bench_config, save

from rlanything_core.base.schemas import rows_frame
from rlanything_core.envs.interface import TaskRef
from rlanything_core.models.engines import HFEngine
from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import eos_ids
from rlanything_core.run.judging import judge
from rlanything_core.run.rollout import Sampling, play

# (our seconds, our tokens, generate's seconds, generate's tokens, generations,
#  our seconds with whole-prompt prefills, whether those sampled the same tokens)
Timing = tuple[float, int, float, int, int, float, bool]


def generate_baseline(
    model: Any,
    tokenizer: Any,
    batches: Sequence[Sequence[list[int]]],
    *,
    max_new_tokens: int,
    temperature: float,
) -> tuple[float, int]:
    """Seconds and generated tokens (up to and including EOS) of `model.generate` per batch."""
    stop = sorted(eos_ids(model, tokenizer))
    pad = tokenizer.pad_token_id
    tokens, start = 0, time.perf_counter()
    for batch in batches:
        width = max(len(p) for p in batch)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        with torch.no_grad():
            out = model.generate(
                input_ids=ids.to(model.device),
                attention_mask=mask.to(model.device),
                do_sample=temperature > 0,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                pad_token_id=pad,
                eos_token_id=stop,
            )
        for row in out[:, width:].tolist():
            ends = [i for i, t in enumerate(row) if t in stop]
            tokens += ends[0] + 1 if ends else len(row)
    return time.perf_counter() - start, tokens


def same_batches(prompts: Sequence[list[int]], batch_size: int) -> list[list[list[int]]]:
    """The batches `modelling.generate` forms: sorted by length, then chunks of batch_size."""
    order = sorted(prompts, key=lambda p: (len(p), p))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def measure(config_path: str, num_tasks: int, repeats: int) -> dict[str, Any]:
    config = bench_config(config_path)
    pm, rm = config.policy.model, config.reward_model.model
    policy, policy_tok = load_model(pm.source, device=pm.device, dtype=pm.dtype)
    judge_model, judge_tok = load_model(rm.source, device=rm.device, dtype=rm.dtype)
    env = config.environment.env
    specs = env.generate("id", num_tasks, seed=7)
    tasks = [TaskRef(f"bench-{i:03d}", 1, s) for i, s in enumerate(specs)]
    sampling = Sampling(
        temperature=pm.temperature, max_new_tokens=pm.max_new_tokens, batch_size=pm.batch_size
    )
    rm_kwargs = {
        "votes": config.reward_model.votes,
        "round_idx": 0,
        "checkpoint": rm.source,
        "temperature": rm.temperature,
        "max_new_tokens": rm.max_new_tokens,
        "batch_size": rm.batch_size,
        "env": env,
    }
    rollout_runs, judge_runs = [], []
    for k in range(repeats + 1):  # the first repeat warms up and is not counted
        timed: dict[bool, tuple[float, pd.DataFrame]] = {}
        for share in (False, True):
            start = time.perf_counter()
            rows = play(HFEngine(policy, policy_tok, share), env, tasks, sampling=sampling,
                        rollouts_per_task=config.rollouts_per_task, round_idx=0, base_seed=k,
                        checkpoint=pm.source)  # fmt: skip
            timed[share] = (time.perf_counter() - start, rows_frame(rows, "rollouts"))
        (play_s, rollouts), (whole_s, whole) = timed[True], timed[False]
        same = list(whole["response_token_ids"].map(list)) == list(
            rollouts["response_token_ids"].map(list)
        )
        play_tokens = int(rollouts["response_token_ids"].map(len).sum())
        # model.generate on the rollout's prompts, batched per lockstep step as play batches them
        batches = [
            b
            for _, step in rollouts.groupby("step_idx")
            for b in same_batches(list(step["prompt_token_ids"].map(list)), pm.batch_size)
        ]
        base_s, base_tokens = generate_baseline(
            policy, policy_tok, batches, max_new_tokens=pm.max_new_tokens,
            temperature=pm.temperature)  # fmt: skip
        judged: dict[bool, tuple[float, pd.DataFrame]] = {}
        for share in (False, True):
            start = time.perf_counter()
            engine = HFEngine(judge_model, judge_tok, share)
            out = pd.DataFrame(judge(engine, rollouts, base_seed=k, **rm_kwargs))
            judged[share] = (time.perf_counter() - start, out)
        (judge_s, votes), (jwhole_s, jwhole) = judged[True], judged[False]
        jsame = list(jwhole["response_token_ids"].map(list)) == list(
            votes["response_token_ids"].map(list)
        )
        judge_tokens = int(votes["response_token_ids"].map(len).sum())
        judge_batches = same_batches(list(votes["prompt_token_ids"].map(list)), rm.batch_size)
        jbase_s, jbase_tokens = generate_baseline(
            judge_model, judge_tok, judge_batches, max_new_tokens=rm.max_new_tokens,
            temperature=rm.temperature)  # fmt: skip
        if k == 0:
            continue
        rollout_runs.append(
            (play_s, play_tokens, base_s, base_tokens, len(rollouts), whole_s, same)
        )
        judge_runs.append(
            (judge_s, judge_tokens, jbase_s, jbase_tokens, len(votes), jwhole_s, jsame)
        )
    return {
        "config": config_path,
        "policy": pm.source,
        "reward_model": rm.source,
        "tasks": num_tasks,
        "rollouts_per_task": config.rollouts_per_task,
        "votes": config.reward_model.votes,
        "repeats": repeats,
        "rollout": _summary(rollout_runs, pm.batch_size, pm.max_new_tokens),
        "reward_scoring": _summary(judge_runs, rm.batch_size, rm.max_new_tokens),
    }


def _summary(runs: list[Timing], batch: int, new: int) -> dict[str, Any]:
    ours_s, ours_tok, base_s, base_tok, n, whole_s, _ = (
        sum(col) for col in zip(*runs, strict=True)
    )
    ours_rate, base_rate = ours_tok / ours_s, base_tok / base_s
    return {
        "batch_size": batch,
        "max_new_tokens": new,
        "generations": n,
        "ours_seconds": round(ours_s, 3),
        "ours_tokens": ours_tok,
        "ours_tokens_per_s": round(ours_rate, 1),
        "generate_seconds": round(base_s, 3),
        "generate_tokens": base_tok,
        "generate_tokens_per_s": round(base_rate, 1),
        # seconds per token, ours / generate's: 1.0 = no overhead, < 1 = faster than generate
        "overhead_ratio": round(base_rate / ours_rate, 3),
        # the same decoding with every prompt prefilled whole (no shared prefix): its seconds,
        # the speed-up sharing gives, and whether both sampled the same tokens (equal work)
        "whole_prompts_seconds": round(whole_s, 3),
        "prefix_sharing_speedup": round(whole_s / ours_s, 3),
        "same_tokens": all(run[6] for run in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/tiny.yaml")
    parser.add_argument("--tasks", type=int, default=8, help="household tasks to play")
    parser.add_argument("--repeats", type=int, default=2, help="timed repeats after a warm-up")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    save(args.out, measure(args.config, args.tasks, args.repeats))


if __name__ == "__main__":
    main()
