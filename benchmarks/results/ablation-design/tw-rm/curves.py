"""Per round of each run: the policy's accuracy on the round's tasks, and on the round's own
steps the RM's balanced process accuracy beside the outcome as judge's (`signals.judge_metrics`,
`signals.outcome_verdicts`), each with its 95 % interval clustered by task; both again on the
steps the RM update learns from (tasks inside `reward_model.accuracy_band`). Reads the rounds'
Parquet files only.

    python benchmarks/results/ablation-design/tw-rm/curves.py OUT.json RUN_DIR [RUN_DIR ...]

Also draws OUT.png: per run, the in-band RM and outcome-as-judge curves with their intervals.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from rlanything_core.base.atomic import atomic_path
from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.feedback import in_accuracy_band
from rlanything_core.method.signals import (
    judge_metrics,
    outcome_verdicts,
    task_accuracies,
    verdict_matrix,
)
from rlanything_core.run.config import load_config
from rlanything_core.run.rundir import RunDir

KEY = "process_balanced_accuracy"


def in_band(rollouts: pd.DataFrame, accuracy: pd.Series, band: tuple[float, float]) -> pd.DataFrame:
    """The steps of the tasks whose accuracy over these rollouts (`task_accuracies(rollouts)`)
    lies inside `band`."""
    kept = accuracy[in_accuracy_band(accuracy.to_numpy(), *band)].index
    return rollouts[rollouts.set_index(["task_id", "task_version"]).index.isin(kept)]


def interval(metrics: dict[str, float]) -> list[float]:
    return [round(100 * metrics[KEY + s], 1) for s in ("", "_ci_low", "_ci_high")]


def main() -> None:
    out, roots = Path(sys.argv[1]), sys.argv[2:]
    found: dict[str, list[dict[str, object]]] = {}
    for root in roots:
        run = RunDir(root)
        config = load_config(run.config_path)
        votes, band = config.reward_model.votes, config.reward_model.accuracy_band
        rows = []
        for r in range(config.rounds):
            if not run.dataset(r, "judgments").is_file():
                break
            rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
            judgments = read_dataset(run.dataset(r, "judgments"), "judgments")
            accuracy = task_accuracies(rollouts)
            row: dict[str, object] = {
                "round": r,
                "policy_accuracy": round(100 * float(accuracy.mean()), 1),
            }
            for name, steps in (("all", rollouts), ("in_band", in_band(rollouts, accuracy, band))):
                verdicts = verdict_matrix(steps, judgments, votes)
                row[f"{name}_steps"] = len(steps)
                row[f"{name}_rm_balanced"] = interval(judge_metrics(steps, verdicts))
                row[f"{name}_outcome_judge_balanced"] = interval(
                    judge_metrics(steps, outcome_verdicts(steps, votes))
                )
            rows.append(row)
            print(root, rows[-1])
        found[str(root)] = rows
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(found, indent=1) + "\n")
    plot(found, out.with_suffix(".png"))


def plot(found: dict[str, list[dict[str, object]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (root, rows) in enumerate(found.items()):
        name = "/".join(Path(root).parts[-3:-1])  # arm/seed_N
        rounds = [r["round"] for r in rows]
        for key, style, label in (
            ("in_band_rm_balanced", "-", "RM"),
            ("in_band_outcome_judge_balanced", "--", "outcome as judge"),
        ):
            values = [r[key] for r in rows]  # [value, low, high]
            colour = f"C{i}"
            ax.plot(rounds, [v[0] for v in values], style, color=colour, label=f"{name}: {label}")
            ax.fill_between(
                rounds, [v[1] for v in values], [v[2] for v in values], color=colour, alpha=0.1
            )
    ax.set_xlabel("round")
    ax.set_ylabel("balanced process accuracy, % (in-band steps)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
