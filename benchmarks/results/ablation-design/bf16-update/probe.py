"""Probe: the household ablation's policy and RM updates in float32 against bfloat16-mixed,
`rl_update` in this process at one torch thread, alternating, two runs each (README here).

    OMP_NUM_THREADS=1 python benchmarks/results/ablation-design/bf16-update/probe.py RUN_DIR
"""

from __future__ import annotations

import sys
import tempfile
import time

import torch

from rlanything_core.base.schemas import STEP_KEY, read_dataset
from rlanything_core.models.training import rl_update, select_samples
from rlanything_core.run.config import load_config
from rlanything_core.run.rundir import RunDir

ROUND = 1


def timed(run: RunDir, role: str, dtype: str) -> tuple[float, dict[str, float]]:
    config = load_config(run.config_path)
    if role == "policy":
        names, keys = ("policy_samples", "rollouts"), STEP_KEY
        update, model = config.policy.update, config.policy.model
    else:
        names, keys = ("rm_samples", "judgments"), [*STEP_KEY, "vote_idx"]
        update, model = config.reward_model.update, config.reward_model.model
    signals, texts = (
        read_dataset(run.root / f"round_{ROUND:03d}" / f"{n}.parquet", n) for n in names
    )
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        metrics = rl_update(
            run.model_before(role, ROUND, model.source),
            out,
            lambda eos: select_samples(
                signals, texts, keys, eos_id=eos, max_samples=update.max_samples, seed=ROUND
            ),
            update,
            device="cpu",
            dtype=dtype,
            temperature=model.temperature,
            seed=ROUND,
        )
        return time.perf_counter() - start, metrics


def main() -> None:
    torch.set_num_threads(1)
    run = RunDir(sys.argv[1])
    for role in ("policy", "reward_model"):
        for _ in range(2):
            for dtype in ("float32", "bfloat16-mixed"):
                seconds, metrics = timed(run, role, dtype)
                shown = {k: round(metrics[k], 4) for k in ("loss", "kl", "grad_norm", "samples")}
                print(role, dtype, round(seconds, 1), shown, flush=True)


if __name__ == "__main__":
    main()
