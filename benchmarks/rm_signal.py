"""What the reward model is trained towards, round by round, against the ground truth.

For each round of a run that trains its RM (`rm_samples.parquet` beside `rollouts.parquet`):
how often the m votes are right about the step (the environment's progress label), how many
votes the RM update keeps, and how often a kept vote that the update reinforces (advantage > 0)
or pushes away from (advantage < 0) was right. Training helps the judge while the reinforced
votes are mostly right and the pushed-away ones mostly wrong.

    python benchmarks/rm_signal.py --run-dir RUN [--run-dir RUN ...] --out J
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd
from common import save

from rlanything_core.base.schemas import STEP_KEY


def round_signal(round_dir: Path) -> dict[str, Any]:
    votes = pd.read_parquet(round_dir / "rm_samples.parquet")
    steps = pd.read_parquet(round_dir / "rollouts.parquet", columns=[*STEP_KEY, "progress"])
    joined = votes.merge(steps, on=STEP_KEY, validate="many_to_one")
    joined["right"] = joined["verdict"] == joined["progress"].astype(bool).map({True: 1, False: -1})
    kept = joined[joined["kept"]]
    up, down = kept[kept["advantage"] > 0], kept[kept["advantage"] < 0]
    unanimous = joined.groupby(STEP_KEY)["verdict"].nunique() == 1
    return {
        "votes": len(joined),
        "votes_right": float(joined["right"].mean()),
        "progress_share": float(joined["progress"].astype(bool).mean()),
        "progress_verdicts": float((joined["verdict"] == 1).mean()),
        "unanimous_steps": float(unanimous.mean()),
        "kept": len(kept),
        "reinforced": len(up),
        "reinforced_right": float(up["right"].mean()) if len(up) else None,
        "reinforced_progress_verdicts": float((up["verdict"] == 1).mean()) if len(up) else None,
        "pushed_away": len(down),
        "pushed_away_right": float(down["right"].mean()) if len(down) else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", action="append", required=True, type=Path)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {}
    for run in args.run_dir:
        rounds = sorted(p for p in run.glob("round_*") if (p / "rm_samples.parquet").is_file())
        runs[str(run)] = [{"round": int(p.name[6:]), **round_signal(p)} for p in rounds]
        for r in runs[str(run)]:
            print(
                f"{run} round {r['round']}: votes right {r['votes_right']:.3f}, kept {r['kept']}, "
                f"reinforced right {r['reinforced_right']}, pushed away right "
                f"{r['pushed_away_right']}"
            )
    save(args.out, {"benchmark": "rm_signal", "runs": runs})


if __name__ == "__main__":
    main()
