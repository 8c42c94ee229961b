"""The reward model's verdicts on each round of training runs, against the ground truth.

    python benchmarks/judge_rounds.py runs/ablation/reward/seed_*/run

For every round of every run directory given: its steps and episodes, the RM's process accuracy
and balanced accuracy with 95 % intervals clustered by task, and the process majority baseline
(`rlanything_core.method.signals.judge_metrics`, as evaluation computes them on held-out steps). The
rounds' own MLflow metrics carry no intervals; this recomputes them from the round's files.
`--out FILE` also writes them, with each round's share of unparsed votes, as JSON.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from common import percent, save

from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.signals import judge_metrics, verdict_matrix
from rlanything_core.run.config import load_config
from rlanything_core.run.rundir import RunDir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", help="run directories of judged training runs")
    parser.add_argument("--out", help="also write the figures to this JSON file")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    print("| run | round | steps | episodes | process accuracy | balanced | majority baseline |")
    print("|---|---|---|---|---|---|---|")
    for root in args.run_dirs:
        run = RunDir(root)
        votes = load_config(run.config_path).reward_model.votes
        r = 0
        while run.dataset(r, "judgments").is_file():
            rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
            judgments = read_dataset(run.dataset(r, "judgments"), "judgments")
            m = judge_metrics(rollouts, verdict_matrix(rollouts, judgments, votes))
            episodes = rollouts.drop_duplicates(["task_id", "task_version", "rollout_idx"])
            print(
                f"| {Path(root)} | {r} | {m['steps']:.0f} | {len(episodes)} | "
                f"{percent(m, 'process_accuracy')} | {percent(m, 'process_balanced_accuracy')} | "
                f"{100 * m['process_majority_baseline']:.1f} |"
            )
            rows.append(
                {
                    "run_dir": str(root),
                    "round": r,
                    "episodes": len(episodes),
                    "parse_failure_rate": float(judgments["verdict"].isna().mean()),
                    **m,
                }
            )
            r += 1
    if args.out:
        save(args.out, {"benchmark": "judge_rounds", "rounds": rows})


if __name__ == "__main__":
    main()
