"""Pool the learning curves of several seeds of one recipe: per rounds done, every seed's held-out
accuracy, their mean ± std, and the 95 % interval of all seeds' episodes together, clustered by
(task, seed) (`flows.ablate.pooled_intervals`, as the ablation pools its seeds).

    python benchmarks/pool_seeds.py --out RESULT.json RUN_DIR [RUN_DIR ...]

Each RUN_DIR is a run trained with `evaluation.every` (its eval/step_NNN/). Where every run's
step-0 evaluation is the same measurement (the runs share a warm start and the evaluation seeds,
so their step-0 rollouts are identical), it is counted once: pooling it per seed would count one
measurement several times and narrow its interval. Each later step also gets the paired gain over
step 0 on the tasks every seed played at both (`paired_gain`): a paired test of the seeds
together.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from common import save

from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.stats import Estimate, paired_difference
from rlanything_flows.ablate import per_task_accuracy, pooled_intervals

KEY = "eval/{split}/policy_accuracy"


def paired_gain(befores: list[pd.Series], afters: list[pd.Series]) -> Estimate:
    """The gain of `afters` over `befores`, one pair of per-task accuracies per seed, paired by
    task: d_t = the mean over seeds of (after_t − before_t) on the tasks every seed played at
    both points, and D = mean_t d_t with `stats.paired_difference`'s interval, tasks as units
    (a task's seeds are averaged first, so a task that is easy for every seed counts once)."""
    tasks = befores[0].index
    for series in [*befores, *afters]:
        tasks = tasks.intersection(series.index)
    after = np.mean([a[tasks].to_numpy(dtype=float) for a in afters], axis=0)
    before = np.mean([b[tasks].to_numpy(dtype=float) for b in befores], axis=0)
    return paired_difference(after, before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories, one per seed")
    parser.add_argument("--split", default="id", choices=["id", "ood"])
    parser.add_argument("--out", required=True, help="JSON result path")
    args = parser.parse_args()
    runs = [Path(r) for r in args.runs]
    steps = sorted(
        set.intersection(
            *(
                {int(p.name.removeprefix("step_")) for p in (r / "eval").glob("step_*")}
                for r in runs
            )
        )
    )
    key = KEY.format(split=args.split)
    lines = [
        "| rounds done | "
        + " | ".join(f"seed run {i}" for i in range(len(runs)))
        + " | mean ± std | pooled [95 % CI] | episodes | paired gain over step 0 [95 % CI] |",
        "|---|" + "---|" * (len(runs) + 4),
    ]
    curve = []
    befores: list[pd.Series] = []
    for step in steps:
        frames = {
            i: read_dataset(
                r / "eval" / f"step_{step:03d}" / f"{args.split}_rollouts.parquet", "rollouts"
            )
            for i, r in enumerate(runs)
        }
        accs = [
            float(json.loads((r / "eval" / f"step_{step:03d}" / "eval.json").read_text())[key])
            for r in runs
        ]
        columns = ["task_id", "rollout_idx", "step_idx", "response", "outcome"]
        same = all(f[columns].equals(frames[0][columns]) for f in frames.values())
        chosen = {0: frames[0]} if same else frames
        pooled = pooled_intervals({i: {args.split: (f, None)} for i, f in chosen.items()}, 1)[key]
        episodes = sum(len(f.drop_duplicates(["task_id", "rollout_idx"])) for f in chosen.values())
        by_task = [
            per_task_accuracy({0: {args.split: (f, None)}}, args.split) for f in frames.values()
        ]
        paired, cell = None, "–"
        if step == steps[0]:
            befores = by_task
        else:
            paired = paired_gain(befores, by_task)
            cell = f"{paired[0] * 100:+.1f} [{paired[1] * 100:+.1f}, {paired[2] * 100:+.1f}]"
        curve.append({"step": step, "per_seed": accs, "mean": float(np.mean(accs)),
                      "std": float(np.std(accs)), "pooled": pooled, "episodes": episodes,
                      "one_measurement": same,
                      "paired_gain": None if paired is None else list(paired)})  # fmt: skip
        lines.append(
            f"| {step} | " + " | ".join(f"{a * 100:.1f}" for a in accs)
            + f" | {np.mean(accs) * 100:.1f} ± {np.std(accs) * 100:.1f} | "
            f"{pooled[0] * 100:.1f} [{pooled[1] * 100:.1f}, {pooled[2] * 100:.1f}] | {episodes}"
            f" | {cell} |"
        )  # fmt: skip
    save(Path(args.out), {"benchmark": "learning-seeds", "runs": [str(r) for r in runs],
                          "split": args.split, "curve": curve})  # fmt: skip
    print("\n".join(lines))


if __name__ == "__main__":
    main()
