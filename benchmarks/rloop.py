"""RLoop against vanilla RL rounds at an equal rollout budget, on the household environment.

For each seed, from the same warm-started tiny models (warm starts run once):
- RLoop: `rloop.cycles` cycles of `rloop.rounds_per_cycle` rounds, each followed by the
  fine-tuning of the cycle's start policy on its expert set; the refined policy of every cycle
  is evaluated;
- vanilla: cycles × rounds_per_cycle ordinary rounds of the same mode; the checkpoint after the
  same number of rounds as each RLoop cycle is evaluated.
Both play the same tasks per round with the same G, so they spend the same rollouts; RLoop's
fine-tuning plays none. Evaluation: accuracy and pass@k on the config's held-out in-domain and
out-of-domain sets. Resumable: finished runs and evaluations in --work are reused.

    python benchmarks/rloop.py --config configs/rloop-household.yaml --seeds 3 \
        --work runs/rloop-bench --out benchmarks/results/rloop-household.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import bench_config, save

from rlanything_core.run.config import RunConfig
from rlanything_core.run.rundir import RunDir
from rlanything_flows.ablate import eval_datasets, pooled_intervals, warm_started
from rlanything_flows.evaluate import SPLITS, rlanything_eval
from rlanything_flows.rloop import rlanything_rloop
from rlanything_flows.train import rlanything_train


def _vanilla(config: RunConfig, work: Path, seed: int) -> list[Path]:
    """The eval directories of the vanilla run's checkpoints after each cycle's rounds."""
    rl = config.rloop
    run = RunDir(work / "vanilla" / f"seed_{seed}")
    rlanything_train(
        config=config.model_copy(update={"rounds": rl.cycles * rl.rounds_per_cycle}),
        run_dir=str(run.root),
    )
    dirs = []
    for c in range(rl.cycles):
        out = run.root / f"eval_cycle_{c}"
        if not (out / "eval.json").is_file():
            policy = str(run.checkpoint("policy", (c + 1) * rl.rounds_per_cycle - 1))
            rlanything_eval(config=config, policy=policy, out_dir=str(out))
        dirs.append(out)
    return dirs


def _rloop(config: RunConfig, work: Path, seed: int) -> list[Path]:
    """The eval directories of each cycle's refined policy."""
    run = RunDir(work / "rloop" / f"seed_{seed}")
    rlanything_rloop(config=config, run_dir=str(run.root))
    return [run.root / f"cycle_{c:03d}" / "eval" for c in range(config.rloop.cycles)]


def _table(
    config: RunConfig, rows: dict[str, list[list[Path]]], ks: list[int]
) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """Per method and cycle: mean ± std over seeds and the 95 % interval of all seeds' episodes
    pooled, clustered by (task, seed), as in the ablation."""
    keys = [
        (f"eval/{split}/{name}", f"{split.upper()} {label}")
        for split in SPLITS
        for name, label in [
            ("policy_accuracy", "acc"),
            *((f"pass_at_{k}", f"pass@{k}") for k in ks),
        ]
    ]
    summary: dict[str, dict[str, dict[str, list[float]]]] = {}
    per_seed: list[dict[str, Any]] = []
    lines = ["| method | cycle | " + " | ".join(label for _, label in keys) + " |"]
    lines.append("|" + "---|" * (len(keys) + 2))
    for method, seeds in rows.items():
        for c in range(len(seeds[0])):
            results = [json.loads((s[c] / "eval.json").read_text()) for s in seeds]
            per_seed += [
                {"method": method, "cycle": c, "seed_index": k, **r} for k, r in enumerate(results)
            ]
            pooled = pooled_intervals(
                {k: eval_datasets(config, s[c]) for k, s in enumerate(seeds)},
                config.reward_model.votes,
            )
            cells, stats = [], {}
            for key, _ in keys:
                values = np.array([r[key] for r in results])
                _, low, high = pooled[key]
                stats[key] = [float(values.mean()), float(values.std()), low, high]
                cells.append(
                    f"{values.mean() * 100:.1f} ± {values.std() * 100:.1f} "
                    f"[{low * 100:.1f}, {high * 100:.1f}]"
                )
            summary.setdefault(method, {})[str(c)] = stats
            lines.append(f"| {method} | {c} | " + " | ".join(cells) + " |")
    return summary, per_seed, "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/rloop-household.yaml")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--work", default="runs/rloop-bench", help="run directories (resumable)")
    parser.add_argument("--out", default="runs/bench/rloop-household.json")
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{work / 'mlflow.db'}")
    start = time.perf_counter()
    config = bench_config(args.config)
    base = warm_started(config, RunDir(work / "warm_start"))
    rows: dict[str, list[list[Path]]] = {"vanilla RL": [], "RLoop": []}
    for k in range(args.seeds):
        seeded = base.model_copy(update={"seed": config.seed + k})
        rows["vanilla RL"].append(_vanilla(seeded, work, config.seed + k))
        rows["RLoop"].append(_rloop(seeded, work, config.seed + k))
    ks = list(range(1, config.evaluation.rollouts_per_task + 1))
    summary, per_seed, table = _table(base, rows, ks)
    rl = config.rloop
    header = (
        f"Mean ± std over {args.seeds} seeds [95 % interval of all seeds' episodes pooled, "
        f"clustered by (task, seed)], in %; cycle c = after "
        f"{rl.rounds_per_cycle} × (c + 1) rounds of {config.environment.num_tasks} tasks × "
        f"{config.rollouts_per_task} rollouts."
    )
    print(header + "\n\n" + table)
    save(
        args.out,
        {
            "benchmark": "rloop-vs-vanilla",
            "config": args.config,
            "seeds": args.seeds,
            "cycles": rl.cycles,
            "rounds_per_cycle": rl.rounds_per_cycle,
            "seconds": time.perf_counter() - start,
            "summary": summary,  # [mean, std over seeds, pooled low, pooled high]
            "per_seed": per_seed,
            "table": header + "\n\n" + table,
        },
    )


if __name__ == "__main__":
    main()
