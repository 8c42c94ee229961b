"""Per round of each run: the policy's accuracy on the round's tasks, and on the round's own
steps the RM's balanced process accuracy beside the outcome as judge's (`signals.judge_metrics`,
`signals.outcome_verdicts`), each with its 95 % interval clustered by task. Reads the rounds'
Parquet files only.

    python benchmarks/results/ablation-design/tw-rm/curves.py OUT.json RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.signals import (
    judge_metrics,
    outcome_verdicts,
    task_accuracies,
    verdict_matrix,
)
from rlanything_core.run.config import load_config
from rlanything_core.run.rundir import RunDir

KEY = "process_balanced_accuracy"


def interval(metrics: dict[str, float]) -> list[float]:
    return [round(100 * metrics[KEY + s], 1) for s in ("", "_ci_low", "_ci_high")]


def main() -> None:
    out, roots = Path(sys.argv[1]), sys.argv[2:]
    found: dict[str, list[dict[str, object]]] = {}
    for root in roots:
        run = RunDir(root)
        votes = load_config(run.config_path).reward_model.votes
        rows = []
        for r in range(load_config(run.config_path).rounds):
            if not run.dataset(r, "judgments").is_file():
                break
            rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
            judgments = read_dataset(run.dataset(r, "judgments"), "judgments")
            rm = judge_metrics(rollouts, verdict_matrix(rollouts, judgments, votes))
            by_outcome = judge_metrics(rollouts, outcome_verdicts(rollouts, votes))
            rows.append(
                {
                    "round": r,
                    "policy_accuracy": round(100 * float(task_accuracies(rollouts).mean()), 1),
                    "steps": len(rollouts),
                    "rm_balanced": interval(rm),
                    "outcome_judge_balanced": interval(by_outcome),
                }
            )
            print(root, rows[-1])
        found[str(root)] = rows
    out.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
