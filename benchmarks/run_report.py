"""Per-round and held-out figures of a finished run of any environment, from its Parquet files.

    python benchmarks/run_report.py --run-dir runs/textworld-demo \
        --eval-dir runs/textworld-demo-eval --out benchmarks/results/textworld-demo.json

Per round: episodes, steps, the rollout stage's steps per second, success, invalid actions, the
share of steps with progress, and the reward model's votes (+1, -1, unparsable); held out (an
`rlanything eval` directory): the same without throughput.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd
from common import save

from rlanything_core.base.schemas import read_dataset
from rlanything_core.run.rundir import RunDir


def _votes(path: Path) -> dict[str, int] | None:
    """The reward model's votes in a judgments file, or None without one."""
    if not path.is_file():
        return None
    verdict = pd.read_parquet(path, columns=["verdict"])["verdict"]
    return {
        "plus": int((verdict == 1).sum()),
        "minus": int((verdict == -1).sum()),
        "unparsable": int(verdict.isna().sum()),
    }


def run_rounds(run_dir: Path) -> list[dict[str, Any]]:
    """Per round of a finished run: rollout throughput, success and invalid actions."""
    run = RunDir(run_dir)
    rounds = []
    r = 0
    while (marker := run.finished(r, "rollout")) is not None:
        rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
        episodes = rollouts.drop_duplicates(["task_id", "task_version", "rollout_idx"])
        rounds.append(
            {
                "round": r,
                "episodes": len(episodes),
                "steps": len(rollouts),
                "rollout_seconds": round(marker["seconds"], 1),
                "steps_per_s": round(len(rollouts) / marker["seconds"], 3),
                "success_rate": float((episodes["outcome"] > 0).mean()),
                "invalid_action_rate": float((~rollouts["action_valid"]).mean()),
                "progress_rate": float(rollouts["progress"].mean()),
                "rm_votes": _votes(run.dataset(r, "judgments")),
            }
        )
        r += 1
    return rounds


def eval_success(eval_dir: Path) -> dict[str, Any]:
    """Held-out success and invalid-action rates from `rlanything eval`'s rollouts."""
    out: dict[str, Any] = {}
    for split in ("id", "ood"):
        rollouts = pd.read_parquet(eval_dir / f"{split}_rollouts.parquet")
        episodes = rollouts.drop_duplicates(["task_id", "task_version", "rollout_idx"])
        out[split] = {
            "episodes": len(episodes),
            "success_rate": float((episodes["outcome"] > 0).mean()),
            "invalid_action_rate": float((~rollouts["action_valid"]).mean()),
            "progress_rate": float(rollouts["progress"].mean()),
            "rm_votes": _votes(eval_dir / f"{split}_judgments.parquet"),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, required=True, help="a finished training run")
    parser.add_argument("--eval-dir", type=Path, help="`rlanything eval` output of its policy")
    parser.add_argument("--out", required=True, help="JSON output")
    args = parser.parse_args()
    result: dict[str, Any] = {"run_dir": str(args.run_dir), "rounds": run_rounds(args.run_dir)}
    if args.eval_dir:
        result["eval"] = eval_success(args.eval_dir)
    save(args.out, result)


if __name__ == "__main__":
    main()
