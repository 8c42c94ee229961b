"""Rollout and reward-scoring throughput against a plain batched `model.generate`.

Both sides decode the same prompts with the same model, batch size, sampling temperature and
`max_new_tokens`, in the same batches, and stop at the same tokens (the model's EOS ids). The
rollout side is `rollout.play` (environment steps,
prompt rendering, parsing included); the scoring side is `judging.judge` with m votes per step.
The baseline is `transformers`' `model.generate(do_sample=True, top_k=0, top_p=1.0)` on the
prompts they decoded. Overhead ratio = our seconds per generated token / generate's. Our side
runs three times with the same seeds: as shipped (a batch's common prompt prefix prefilled once,
`decoding.LeanDecoder`'s decode step), with transformers' decode step (`lean_decoding=False`),
and also prefilling every prompt whole (`share_prefix=False`): the speed-ups of lean decoding
and of prefix sharing at equal work, and whether all three sampled the same tokens.

Equal work, asserted at run time (`common.EqualWorkError`) and recorded under `invariants`:
every side decodes the same prompts (`generate` is handed the prompts the rollout and the
scoring decoded, batched as they were) with the same sampling settings and stopping, and makes
the same number of generations; the generated tokens (up to and including EOS) of each side are
within `TOKEN_TOLERANCE` of ours, as sampling makes them differ. Rates are per generated token.

    python benchmarks/throughput.py --config configs/tiny.yaml --out results.json
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch
from common import EqualWorkError, bench_config, save

from rlanything_core.base.schemas import rows_frame
from rlanything_core.envs.interface import TaskRef
from rlanything_core.models.engines import HFEngine
from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import eos_ids
from rlanything_core.run.judging import judge
from rlanything_core.run.rollout import Sampling, play

TOKEN_TOLERANCE = 0.1
"""Largest relative difference of a side's generated tokens from ours."""

# (share_prefix, lean_decoding) of each arm of ours
ARMS = {"ours": (True, True), "hf_step": (True, False), "whole": (False, False)}
# one timed repeat: per arm of ours and for "generate", (seconds, tokens, generations), and
# whether the arms of ours sampled the same tokens
Timing = tuple[dict[str, tuple[float, int, int]], bool]


def _arms(runs: dict[str, tuple[float, pd.DataFrame]]) -> dict[str, tuple[float, int, int]]:
    return {
        arm: (seconds, int(frame["response_token_ids"].map(len).sum()), len(frame))
        for arm, (seconds, frame) in runs.items()
    }


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
        which = "warm-up" if k == 0 else f"repeat {k} of {repeats}"
        timed: dict[str, tuple[float, pd.DataFrame]] = {}
        for arm, (share, lean) in ARMS.items():
            start = time.perf_counter()
            rows = play(HFEngine(policy, policy_tok, share, lean), env, tasks, sampling=sampling,
                        rollouts_per_task=config.rollouts_per_task, round_idx=0, base_seed=k,
                        checkpoint=pm.source)  # fmt: skip
            timed[arm] = (time.perf_counter() - start, rows_frame(rows, "rollouts"))
            _progress(which, f"rollout, {arm}", timed[arm][0])
        rollouts = timed["ours"][1]
        same = _same_tokens(timed)
        # model.generate on the rollout's prompts, batched per lockstep step as play batches them
        batches = [
            b
            for _, step in rollouts.groupby("step_idx")
            for b in same_batches(list(step["prompt_token_ids"].map(list)), pm.batch_size)
        ]
        base_s, base_tokens = generate_baseline(
            policy, policy_tok, batches, max_new_tokens=pm.max_new_tokens,
            temperature=pm.temperature)  # fmt: skip
        _progress(which, "rollout, generate", base_s)
        judged: dict[str, tuple[float, pd.DataFrame]] = {}
        for arm, (share, lean) in ARMS.items():
            start = time.perf_counter()
            engine = HFEngine(judge_model, judge_tok, share, lean)
            out = pd.DataFrame(judge(engine, rollouts, base_seed=k, **rm_kwargs))
            judged[arm] = (time.perf_counter() - start, out)
            _progress(which, f"reward scoring, {arm}", judged[arm][0])
        votes = judged["ours"][1]
        jsame = _same_tokens(judged)
        judge_batches = same_batches(list(votes["prompt_token_ids"].map(list)), rm.batch_size)
        jbase_s, jbase_tokens = generate_baseline(
            judge_model, judge_tok, judge_batches, max_new_tokens=rm.max_new_tokens,
            temperature=rm.temperature)  # fmt: skip
        _progress(which, "reward scoring, generate", jbase_s)
        if k == 0:
            continue
        arms = _arms(timed) | {"generate": (base_s, base_tokens, sum(map(len, batches)))}
        rollout_runs.append((arms, same))
        arms = _arms(judged) | {"generate": (jbase_s, jbase_tokens, sum(map(len, judge_batches)))}
        judge_runs.append((arms, jsame))
    return {
        "config": config_path,
        "policy": pm.source,
        "reward_model": rm.source,
        "tasks": num_tasks,
        "rollouts_per_task": config.rollouts_per_task,
        "votes": config.reward_model.votes,
        "repeats": repeats,
        "rollout": equal_work(_summary(rollout_runs, pm.batch_size, pm.max_new_tokens)),
        "reward_scoring": equal_work(_summary(judge_runs, rm.batch_size, rm.max_new_tokens)),
        "sampling": {"top_k": 0, "top_p": 1.0, "stop": "the model's EOS ids"},
    }


def equal_work(summary: dict[str, Any]) -> dict[str, Any]:
    """`summary` with its invariants, checked: every side made as many generations as ours
    and generated within `TOKEN_TOLERANCE` of our tokens; raises EqualWorkError otherwise."""
    ours, generations = summary["ours_tokens"], summary["generations"]
    sides = {"generate": "generate", "hf_step": "hf_step", "whole_prompts": "whole_prompts"}
    for name, prefix in sides.items():
        made = summary[f"{prefix}_generations"]
        if made != generations:
            raise EqualWorkError(f"{name} made {made} generations and ours {generations}")
        tokens = summary[f"{prefix}_tokens"]
        if abs(tokens - ours) > TOKEN_TOLERANCE * ours:
            raise EqualWorkError(
                f"{name} generated {tokens} tokens and ours {ours}: more than "
                f"{TOKEN_TOLERANCE:.0%} apart, not the same work"
            )
    return summary | {
        "invariants": {
            "generations": generations,
            "token_tolerance": TOKEN_TOLERANCE,
            "tokens": {
                name: summary[f"{p}_tokens"] for name, p in {"ours": "ours", **sides}.items()
            },
        }
    }


def _progress(which: str, part: str, seconds: float) -> None:
    """One line per timed part: the benchmark runs for minutes on the demo's model."""
    print(f"{which}: {part} {seconds:.1f} s", flush=True)


def _same_tokens(arms: dict[str, tuple[float, pd.DataFrame]]) -> bool:
    """Whether every arm sampled the same tokens as "ours" (equal work)."""
    ours = list(arms["ours"][1]["response_token_ids"].map(list))
    return all(list(frame["response_token_ids"].map(list)) == ours for _, frame in arms.values())


def _summary(runs: list[Timing], batch: int, new: int) -> dict[str, Any]:
    """Seconds, tokens and generations of each arm summed over the repeats; rates and speed-ups
    per generated token (in bfloat16 the arms of ours may sample different tokens, so play
    episodes of other lengths: not quite equal work)."""
    total = {
        arm: tuple(sum(run[0][arm][i] for run in runs) for i in range(3))
        for arm in (*ARMS, "generate")
    }
    rate = {arm: tokens / seconds for arm, (seconds, tokens, _) in total.items()}
    return {
        "batch_size": batch,
        "max_new_tokens": new,
        "generations": total["ours"][2],
        "ours_seconds": round(total["ours"][0], 3),
        "ours_tokens": total["ours"][1],
        "ours_tokens_per_s": round(rate["ours"], 1),
        "generate_seconds": round(total["generate"][0], 3),
        "generate_tokens": total["generate"][1],
        "generate_tokens_per_s": round(rate["generate"], 1),
        "generate_generations": total["generate"][2],
        # seconds per token, ours / generate's: 1.0 = no overhead, < 1 = faster than generate
        "overhead_ratio": round(rate["generate"] / rate["ours"], 3),
        # the same decoding with transformers' decode step, and that with every prompt
        # prefilled whole (no shared prefix): their seconds, tokens and generations, the
        # speed-ups (per token) lean decoding and prefix sharing give, and whether all three
        # sampled the same tokens (equal work)
        "hf_step_seconds": round(total["hf_step"][0], 3),
        "hf_step_tokens": total["hf_step"][1],
        "hf_step_generations": total["hf_step"][2],
        "lean_decoding_speedup": round(rate["ours"] / rate["hf_step"], 3),
        "whole_prompts_seconds": round(total["whole"][0], 3),
        "whole_prompts_tokens": total["whole"][1],
        "whole_prompts_generations": total["whole"][2],
        "prefix_sharing_speedup": round(rate["hf_step"] / rate["whole"], 3),
        "same_tokens": all(run[1] for run in runs),
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
