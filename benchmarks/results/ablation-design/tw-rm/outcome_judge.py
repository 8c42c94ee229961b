"""The outcome as judge (`signals.outcome_verdicts`) on one evaluation's held-out steps: its
balanced process accuracy on all of them and on the tasks inside the RM update's band, with 95 %
intervals clustered by task.

    python benchmarks/results/ablation-design/tw-rm/outcome_judge.py EVAL_DIR OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from curves import in_band, interval

from rlanything_core.base.atomic import atomic_path
from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.signals import (
    judge_metrics,
    outcome_verdicts,
    task_accuracies,
    task_key,
)

BAND = (0.2, 0.8)


def main() -> None:
    evaluated, out = Path(sys.argv[1]), Path(sys.argv[2])
    stored = json.loads((evaluated / "eval.json").read_text())
    found: dict[str, object] = {"eval_dir": str(evaluated), "policy": stored.get("policy")}
    for split in ("id", "ood"):
        rollouts = read_dataset(evaluated / f"{split}_rollouts.parquet", "rollouts")
        row: dict[str, object] = {
            "policy_accuracy": [
                stored[f"eval/{split}/policy_accuracy{s}"] for s in ("", "_ci_low", "_ci_high")
            ],
            "episodes": stored[f"eval/{split}/episodes"],
        }
        banded = in_band(rollouts, task_accuracies(rollouts), BAND)
        for name, steps in (("all", rollouts), ("in_band", banded)):
            metrics = judge_metrics(steps, outcome_verdicts(steps, 3))
            row[f"{name}_steps"] = len(steps)
            row[f"{name}_tasks"] = int(task_key(steps).nunique())
            row[f"{name}_outcome_judge_balanced"] = interval(metrics)
        found[split] = row
        print(split, row)
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
