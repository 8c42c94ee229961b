"""Write an equal-work JSON from two runs of `eqw*.sh`: each run's stage seconds (its
`summary.json`), the work it did (rows and response tokens of its round-0 Parquet files) and
its wall clock and peak RSS (`/usr/bin/time -v` in its log).

    .venv/bin/python benchmarks/results/equal-work-round/collect.py --old b94463e \\
        /work/runs/eqw-old /work/runs/eqw-old.log --new ed168b6 /work/runs/eqw-new \\
        /work/runs/eqw-new.log --command "..." --out equal-work-round-ed168b6.json
"""

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common import save

PARTS = ("rollouts", "judgments", "candidates", "acceptance")


def one_run(run_dir: Path, log: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())["rounds"][0]
    stages = {k[len("timing/") : -2]: round(v, 2) for k, v in summary.items()
              if k.startswith("timing/")}  # fmt: skip
    work: dict[str, int] = {}
    for part in PARTS:
        path = run_dir / "round_000" / f"{part}.parquet"
        if path.is_file():
            frame = pd.read_parquet(path)
            work[f"{part}_rows"] = len(frame)
            if "response_token_ids" in frame:
                work[f"{part}_response_tokens"] = int(frame["response_token_ids"].map(len).sum())
    text = log.read_text()
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    total = sum(stages.values())
    return {
        "stage_seconds": stages,
        "round_seconds": round(total, 2),
        "round_seconds_without_acceptance": round(total - stages.get("acceptance_check", 0), 2),
        "work": work,
        "wall_clock": wall.group(1) if wall else None,
        "max_rss_mb": int(rss.group(1)) // 1024 if rss else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", nargs=3, metavar=("COMMIT", "RUN_DIR", "LOG"), required=True)
    parser.add_argument("--new", nargs=3, metavar=("COMMIT", "RUN_DIR", "LOG"), required=True)
    parser.add_argument("--command", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    runs = {c: one_run(Path(d), Path(log)) for c, d, log in (args.old, args.new)}
    old, new = (runs[args.old[0]], runs[args.new[0]])
    save(args.out, {
        "benchmark": "equal-work-round",
        "command": args.command,
        "runs": runs,
        "ratio_without_acceptance": round(old["round_seconds_without_acceptance"]
                                          / new["round_seconds_without_acceptance"], 3),
    })  # fmt: skip


if __name__ == "__main__":
    main()
