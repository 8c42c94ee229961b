"""`make run`'s training, timed: `rlanything train --config configs/demo.yaml` from start to end
(the embedded model's conversion is cached; the warm starts, every round and, where the config
evaluates, the held-out evaluations included), in an isolated working directory, with the peak
resident memory of its process tree (the Prefect server included) sampled every 0.2 s, the peak's
breakdown by process, the peak of the tree's proportional set size (shared pages once), and the
wall seconds and peak resident memory of each part of the run (`parts`: the run directory's
stage markers, each written when its part ends, cut the run into parts).

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


def _markers(root: Path) -> list[tuple[float, str]]:
    """(time written, part it ends) for every marker a run directory holds, in time order: a
    warm-start role's record, a held-out evaluation's eval.json, a round stage's marker."""
    found = [(p, f"warm start {p.stem}") for p in root.glob("warm_start/*.json")]
    found += [(p, f"evaluation {p.parent.name}") for p in root.glob("eval/step_*/eval.json")]
    found += [(p, f"{p.parent.parent.name} {p.stem}") for p in root.glob("round_*/_stages/*.json")]
    return sorted((p.stat().st_mtime, name) for p, name in found)


def parts(
    samples: list[tuple[float, int]], markers: list[tuple[float, str]], start: float, end: float
) -> list[dict[str, Any]]:
    """Each part's wall seconds and peak resident megabytes: a part runs from the marker
    before it (or `start`) to its own marker; "exit" from the last marker to `end`. The first
    part includes the start (Prefect's server, loading the model)."""
    bounds = [*markers, (end, "exit")]
    out, since = [], start
    for until, name in bounds:
        peak = max((rss for t, rss in samples if since <= t <= until), default=0)
        out.append({"part": name, "seconds": round(until - since, 1),
                    "peak_rss_mb": round(peak / 2**20, 1)})  # fmt: skip
        since = until
    return out


def measure(config_path: str) -> dict[str, Any]:
    config = str(Path(config_path).resolve())
    with isolated_workdir("demo-run") as root:
        command = [sys.executable, "-m", "rlanything_flows.cli", "train", "--config", config]
        command += ["--run-dir", str(root / "run")]
        start, wall = time.perf_counter(), time.time()
        process = subprocess.Popen(command, cwd=Path(__file__).resolve().parent.parent)
        with PeakRss(process.pid) as rss:
            code = process.wait()
        seconds = time.perf_counter() - start
        by_part = parts(rss.samples, _markers(root / "run"), wall, time.time())
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
        "parts": by_part,
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
