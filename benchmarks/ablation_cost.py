"""Where an ablation's time went: per row, the seconds its runs spent in each stage, in held-out
evaluations and in all (README "Ablation"; issue 20 asks for a 60-minute `make ablation`).

    python benchmarks/ablation_cost.py runs/ablation --out ablation-cost.json

Stage seconds are the stage records' own (`round_NNN/_stages/*.json`, what the run directory
keeps for every stage). A run's wall time is read from its files: from the first stage's start
(its finish less its seconds) to the newest file of the cell (its last evaluation); what the
stages do not account for is evaluation and the flow's own work (model loading between stages,
MLflow). Runs that ran side by side overlap, so the rows' wall times add up to more than the
ablation's.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from common import git_commit, save


def _finished(record: dict[str, object]) -> float:
    return datetime.strptime(str(record["finished_at"]), "%Y-%m-%dT%H:%M:%S%z").timestamp()


def cell_cost(cell: Path) -> dict[str, float] | None:
    """Seconds per stage of one (row, seed) directory, its wall time and the rest; None when it
    has not started."""
    records = [json.loads(p.read_text()) for p in sorted(cell.glob("run/round_*/_stages/*.json"))]
    if not records:
        return None
    stages: dict[str, float] = defaultdict(float)
    for record, path in zip(records, sorted(cell.glob("run/round_*/_stages/*.json")), strict=True):
        stages[path.stem] += float(record["seconds"])
    start = min(_finished(r) - float(r["seconds"]) for r in records)
    newest = max(p.stat().st_mtime for p in cell.rglob("*") if p.is_file())
    wall = newest - start
    return dict(stages) | {
        "rounds": float(len({p.parent.parent.name for p in cell.glob("run/round_*/_stages")})),
        "wall": wall,
        "outside_stages": wall - sum(stages.values()),
    }


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
        "commit": git_commit(),
    }
    save(args.out, result)
    print(f"{'row':<14} {'runs':>4} {'rounds':>6} {'wall min':>9} " + " ".join(
        f"{s[:12]:>12}" for s in ("rollout", "reward-scoring", "policy-update", "rm-update",
                                  "acceptance-check", "task-rewriting", "outside")
    ))  # fmt: skip
    for row, cost in result["rows"].items():
        runs = sum(1 for name in cells if name.startswith(f"{row}/"))
        stages = [cost.get(s, 0.0) / 60 for s in ("rollout", "reward-scoring", "policy-update",
                  "rm-update", "acceptance-check", "task-rewriting", "outside_stages")]  # fmt: skip
        print(f"{row:<14} {runs:>4} {cost['rounds']:>6.0f} {cost['wall'] / 60:>9.1f} "
              + " ".join(f"{m:>12.1f}" for m in stages))  # fmt: skip


if __name__ == "__main__":
    main()
