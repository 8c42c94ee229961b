"""`make run`'s training, timed: `rlanything train --config configs/demo.yaml` from start to end
(the embedded model's conversion is cached; the warm starts, every round and, where the config
evaluates, the held-out evaluations included), in an isolated working directory, with the peak
resident memory of its process tree (the Prefect server included) sampled every 0.2 s, the peak's
breakdown by process, and the peak of the tree's proportional set size (shared pages once).

    python benchmarks/demo_run.py --config configs/demo.yaml --out benchmarks/results/demo-run.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import PeakRss, isolated_workdir, save

from rlanything_core.run.rundir import RunDir


def measure(config_path: str) -> dict[str, Any]:
    config = str(Path(config_path).resolve())
    with isolated_workdir("demo-run") as root:
        command = [sys.executable, "-m", "flows.cli", "train", "--config", config]
        command += ["--run-dir", str(root / "run")]
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=Path(__file__).resolve().parent.parent)
        with PeakRss(process.pid) as rss:
            code = process.wait()
        seconds = time.perf_counter() - start
        if code != 0:
            raise SystemExit(f"the demo run failed with exit code {code}")
        summary = json.loads(RunDir(root / "run").summary_path.read_text())
    return {
        "benchmark": "demo_run",
        "config": config_path,
        # The allocator settings the run inherits (unset: glibc's and torch's defaults).
        "allocator_env": {
            k: os.environ.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "THP_MEM_ALLOC_ENABLE")
        },
        "wall_seconds": round(seconds, 1),
        "peak_rss_tree_mb": round(rss.peak / 2**20, 1),
        "peak_rss_parts_mb": {k: round(v / 2**20, 1) for k, v in rss.parts.items()},
        "peak_pss_tree_mb": round(rss.peak_pss / 2**20, 1),
        "rounds": summary["rounds"],
        "eval": summary.get("eval", []),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/demo.yaml")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    save(args.out, measure(args.config))


if __name__ == "__main__":
    main()
