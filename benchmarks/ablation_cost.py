"""Where an ablation's training time went: per row, the minutes its runs spent in each stage of
their rounds (docs/results.md, "Cost"; issue 20 asks for a 60-minute `make ablation`).

    python benchmarks/ablation_cost.py runs/ablation --out ablation-cost.json

Stage seconds are the stage records' own (`round_NNN/_stages/*.json`, what the run directory
keeps for every stage). They leave out the held-out evaluations and the flow's own work between
stages (model loading, MLflow): the ablation's wall time, which `time` gives, holds those too.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from common import save


def cell_cost(cell: Path) -> dict[str, float] | None:
    """Seconds per stage of one (row, seed) directory's rounds and its rounds done; None when it
    has not started."""
    paths = sorted(cell.glob("run/round_*/_stages/*.json"))
    if not paths:
        return None
    stages: dict[str, float] = defaultdict(float)
    for path in paths:
        stages[path.stem] += float(json.loads(path.read_text())["seconds"])
    rounds = {p.parent.parent.name for p in paths if p.stem == "acceptance-check"}
    return dict(stages) | {"rounds": float(len(rounds)), "stages": sum(stages.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ablation", type=Path, help="the ablation's --out directory")
    parser.add_argument("--out", type=Path, required=True, help="JSON result")
    args = parser.parse_args()
    cells = {}
    for cell in sorted(args.ablation.glob("*/seed_*")):
        cost = cell_cost(cell)
        if cost is not None:
            cells[f"{cell.parent.name}/{cell.name}"] = cost
    rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for name, cost in cells.items():
        for key, value in cost.items():
            rows[name.split("/")[0]][key] += value
    warm = args.ablation / "warm_start" / "warm_start" / "_stages" / "warm-start.json"
    result = {
        "cells": cells,
        "rows": {k: dict(v) for k, v in rows.items()},
        "warm_start_seconds": json.loads(warm.read_text())["seconds"] if warm.is_file() else None,
        "command": f"python benchmarks/ablation_cost.py {args.ablation} --out {args.out}",
    }
    save(args.out, result)
    names = ("rollout", "reward-scoring", "policy-update", "rm-update", "task-rewriting",
             "acceptance-check", "stages")  # fmt: skip
    print("minutes | row | runs | rounds | " + " | ".join(names))
    for row, cost in result["rows"].items():
        runs = sum(1 for name in cells if name.startswith(f"{row}/"))
        minutes = " | ".join(f"{cost.get(n, 0.0) / 60:.1f}" for n in names)
        print(f"| {row} | {runs} | {cost['rounds']:.0f} | {minutes} |")


if __name__ == "__main__":
    main()
