"""What the policy is trained towards, round by round, against the ground truth.

For each round of a run (`policy_samples.parquet` beside `rollouts.parquet`): among the steps the
policy update keeps, how often the sign of a step's advantage agrees with the environment's
progress label (the expert planner: did the step shorten the plan?). "Balanced" is the mean of
the two recalls, P(A > 0 | progress) and P(A < 0 | no progress); "gap" is the mean advantage of
progress steps minus that of the others. A better judge feeds the policy better step signals
only if these rise; the rows of an ablation compare by them on the same warm start. Prints each
measure's mean over seeds per row (an ablation's ROW/seed_N/run) and round.

    python benchmarks/policy_signal.py --run-dir RUN [--run-dir RUN ...] --out J
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import pandas as pd
from common import save

from rlanything_core.base.schemas import STEP_KEY
from rlanything_core.method.stats import balanced_accuracy


def round_signal(round_dir: Path) -> dict[str, Any]:
    samples = pd.read_parquet(round_dir / "policy_samples.parquet")
    steps = pd.read_parquet(round_dir / "rollouts.parquet", columns=[*STEP_KEY, "progress"])
    joined = samples.merge(steps, on=STEP_KEY, validate="one_to_one")
    kept = joined[joined["kept"]]
    progress = kept["progress"].astype(bool)
    up, down = kept["advantage"] > 0, kept["advantage"] < 0
    agree = (up & progress) | (down & ~progress)
    balanced = balanced_accuracy(agree, progress, kept["task_id"]).value  # nan: a class absent
    return {
        "kept": len(kept),
        "progress_share": float(progress.mean()) if len(kept) else None,
        "sign_agreement": float(agree.mean()) if len(kept) else None,
        "sign_agreement_balanced": None if math.isnan(balanced) else balanced,
        "advantage_gap": float(
            kept.loc[progress, "advantage"].mean() - kept.loc[~progress, "advantage"].mean()
        )
        if progress.any() and (~progress).any()
        else None,
    }


def run_signal(run_dir: Path) -> list[dict[str, Any]]:
    rounds = sorted(p for p in run_dir.glob("round_*") if (p / "policy_samples.parquet").is_file())
    return [{"round": int(p.name.removeprefix("round_"))} | round_signal(p) for p in rounds]


def by_row(runs: dict[Path, list[dict[str, Any]]]) -> dict[str, dict[int, dict[str, float]]]:
    """Each measure's mean over seeds, per ablation row (an ablation's ROW/seed_N/run) and
    round; a run outside that layout is a row of its own."""
    frames = []
    for run, rounds in runs.items():
        seeded = run.name == "run" and run.parent.name.startswith("seed_")
        row = run.parent.parent.name if seeded else str(run)
        frames.append(pd.DataFrame(rounds).assign(row=row))
    means = pd.concat(frames).groupby(["row", "round"]).mean(numeric_only=True)
    table: dict[str, dict[int, dict[str, float]]] = {}
    for (row, rnd), values in means.iterrows():
        table.setdefault(str(row), {})[int(rnd)] = {k: float(v) for k, v in values.items()}
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", action="append", required=True, type=Path)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    runs = {run: run_signal(run) for run in args.run_dir}
    rows = by_row(runs)
    print("| row | round | kept steps | sign agreement % | balanced % | advantage gap |")
    print("|---|---|---|---|---|---|")
    for row, rounds in rows.items():
        for rnd, m in rounds.items():
            print(
                f"| {row} | {rnd} | {m['kept']:.0f} | {100 * m['sign_agreement']:.1f} | "
                f"{100 * m['sign_agreement_balanced']:.1f} | {m['advantage_gap']:.3f} |"
            )
    save(
        args.out,
        {
            "benchmark": "policy_signal",
            "by_row": rows,
            "runs": {str(r): v for r, v in runs.items()},
        },
    )


if __name__ == "__main__":
    main()
