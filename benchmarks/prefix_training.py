"""Seconds of a policy and a reward-model update with and without the shared prompt prefix
computed once per micro-batch (`response_logprobs(share_prefix=...)`), on a round a run wrote;
with `--compare old-logprobs`, the policy update with π_old reused from the sampler against
recomputed (`update.old_logprobs`).

Each role's update is `rl_update` on the round's own samples (the stage's inputs: the kept
steps, or the RM's kept votes) from the checkpoint the round started with, in this process,
runs alternating A (shared) and B (whole prompts) so that drift in the machine's speed falls on
both; the median of each and the paired ratio are reported, with both updates' metrics (equal
but for rounding: the same loss, KL and gradient norm to about 6 digits).

    python benchmarks/prefix_training.py --run-dir RUN --round 3 --runs 3 \
        --out benchmarks/results/prefix-training.json
    python benchmarks/prefix_training.py --run-dir RUN --round 0 --runs 5 --roles policy \
        --compare old-logprobs --out J
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from typing import Any

import torch
from common import save

from rlanything_core.base.schemas import STEP_KEY, read_dataset
from rlanything_core.models import modelling
from rlanything_core.models.training import rl_update, select_samples
from rlanything_core.run.config import load_config
from rlanything_core.run.rundir import RunDir

WHOLE = modelling.response_logprobs


def timed_update(
    run: RunDir, r: int, role: str, share: bool, old_logprobs: str = "recompute"
) -> tuple[float, dict[str, float]]:
    config = load_config(run.config_path)
    if role == "policy":
        names, keys = ("policy_samples", "rollouts"), STEP_KEY
        update, model = config.policy.update, config.policy.model
    else:
        names, keys = ("rm_samples", "judgments"), [*STEP_KEY, "vote_idx"]
        update, model = config.reward_model.update, config.reward_model.model
    update = update.model_copy(update={"old_logprobs": old_logprobs})
    round_dir = run.root / f"round_{r:03d}"
    signals, texts = (read_dataset(round_dir / f"{n}.parquet", n) for n in names)
    modelling.response_logprobs = functools.partial(WHOLE, share_prefix=share)  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            metrics = rl_update(
                run.model_before(role, r, model.source),
                out,
                lambda eos: select_samples(
                    signals,
                    texts,
                    keys,
                    eos_id=eos,
                    max_samples=update.max_samples,
                    seed=r,
                    with_sampler_logprobs=old_logprobs == "sampler",
                ),
                update,
                device=model.device,
                dtype=model.dtype,
                temperature=model.temperature,
                seed=r,
            )
            return time.perf_counter() - start, metrics
    finally:
        modelling.response_logprobs = WHOLE  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--round", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--roles", default="policy,reward_model")
    parser.add_argument("--compare", choices=["prefix", "old-logprobs"], default="prefix")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    variants = (
        {"shared": (True, "recompute"), "whole": (False, "recompute")}
        if args.compare == "prefix"
        else {"sampler": (True, "sampler"), "recompute": (True, "recompute")}
    )
    a, b = variants
    run = RunDir(args.run_dir)
    result: dict[str, Any] = {
        "benchmark": "prefix_training",
        "compare": args.compare,
        "run_dir": args.run_dir,
        "round": args.round,
        "threads": torch.get_num_threads(),
        "roles": {},
    }
    for role in args.roles.split(","):
        seconds: dict[str, list[float]] = {name: [] for name in variants}
        metrics: dict[str, dict[str, float]] = {}
        for k in range(args.runs):
            for name, (share, old_logprobs) in variants.items():
                s, metrics[name] = timed_update(run, args.round, role, share, old_logprobs)
                seconds[name].append(s)
                print(f"{role} run {k} {name}: {s:.1f} s", flush=True)
        ratios = [x / y for x, y in zip(seconds[a], seconds[b], strict=True)]
        result["roles"][role] = {
            "seconds": seconds,
            **{f"median_{name}_s": statistics.median(seconds[name]) for name in variants},
            f"median_ratio_{a}_over_{b}": statistics.median(ratios),
            "metrics": metrics,
        }
    save(args.out, result)


if __name__ == "__main__":
    main()
