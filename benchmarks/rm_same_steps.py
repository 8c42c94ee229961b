"""Does training the reward model make it a better judge? Both judges on the same steps.

The ablation's "RM process (balanced)" column judges each row's own held-out episodes: a trained
row's judge sees a trained policy's steps, Before's the warm-start policy's. That mixes two
changes, the judge's and the steps'. The Policy row (its RM never trained) shows the second
alone: on TextWorld its fixed judge fell 76.7 → 70.9 % balanced as its policy improved.

This compares like with like. For each run directory, the held-out in-domain steps of its
learning-curve point `--step` (`eval/step_NNN/id_rollouts.parquet`, judged there by the RM of
that round) are judged again by the reward model the run started from (its warm start, or the
config's source), with the same votes, seeds and sampling. Printed per run and written with
`--out`: both judges' balanced process accuracy with 95 % intervals clustered by task, the
paired difference (`signals.judge_gain`), plain accuracy and the majority
baseline, on that many steps and tasks.

    python benchmarks/rm_same_steps.py RUN [RUN ...] --step 4 --out J
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import pandas as pd
from common import percent, save

from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.signals import (
    judge_gain,
    judge_metrics,
    outcome_verdicts,
    task_key,
    verdict_matrix,
)
from rlanything_core.run.config import load_config
from rlanything_core.run.rundir import RunDir
from rlanything_flows.evaluate import judge_held_out


def compare(
    rollouts: pd.DataFrame, trained: pd.DataFrame, started: pd.DataFrame, votes: int
) -> dict[str, Any]:
    """Both judges' metrics on `rollouts` (`signals.judge_metrics`), the paired difference of
    their balanced process accuracies, trained − started, in points, and the metrics of the
    judge that consistency feedback pulls toward (`signals.outcome_verdicts`: each step judged
    by its episode's outcome)."""
    gain = judge_gain(rollouts, trained, started, votes)
    return {
        "steps": len(rollouts),
        "tasks": int(task_key(rollouts).nunique()),
        "trained": judge_metrics(rollouts, verdict_matrix(rollouts, trained, votes)),
        "started": judge_metrics(rollouts, verdict_matrix(rollouts, started, votes)),
        "outcome_judge": judge_metrics(rollouts, outcome_verdicts(rollouts, votes)),
        "balanced_gain_points": [100 * gain.value, 100 * gain.low, 100 * gain.high],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", help="run directories that train their RM")
    parser.add_argument("--step", type=int, required=True, help="the curve point to judge")
    parser.add_argument("--out", help="also write the figures to this JSON file")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    print("| run | steps (tasks) | trained RM balanced | starting RM balanced | trained − starting "
          "| outcome as judge, balanced | majority baseline |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for root in args.run_dirs:
        run = RunDir(root)
        config = load_config(run.config_path)
        point = run.root / "eval" / f"step_{args.step:03d}"
        judged = json.loads((point / "eval.json").read_text())
        rollouts = read_dataset(point / "id_rollouts.parquet", "rollouts")
        trained = read_dataset(point / "id_judgments.parquet", "judgments")
        rm = config.reward_model
        source = run.model_before("reward_model", 0, rm.model.source)
        if source == judged["reward_model"]:
            raise SystemExit(f"{root}: step {args.step} was judged by {source}, the starting RM")
        start = time.perf_counter()
        description = f"{root} step {args.step}: the starting RM judging"
        started = judge_held_out(config, source, rollouts, description)
        found = compare(rollouts, trained, started, rm.votes)
        g = found["balanced_gain_points"]
        print(
            f"| {root} | {found['steps']} ({found['tasks']}) | "
            f"{percent(found['trained'], 'process_balanced_accuracy')} | "
            f"{percent(found['started'], 'process_balanced_accuracy')} | "
            f"{g[0]:+.1f} [{g[1]:+.1f}, {g[2]:+.1f}] | "
            f"{percent(found['outcome_judge'], 'process_balanced_accuracy')} | "
            f"{100 * found['trained']['process_majority_baseline']:.1f} |"
        )
        rows.append(
            {
                "run_dir": str(root),
                "step": args.step,
                "trained_rm": judged["reward_model"],
                "starting_rm": source,
                "judging_seconds": round(time.perf_counter() - start, 1),
                **found,
            }
        )
    if args.out:
        save(args.out, {"benchmark": "rm_same_steps", "runs": rows})


if __name__ == "__main__":
    main()
