"""`make run`'s training, timed: `rlanything train --config configs/demo.yaml` from start to end
(the warm starts, every round and the held-out evaluations included), in an isolated working
directory, with the peak resident memory of its process tree (the Prefect server included)
sampled every 0.2 s, the peak's breakdown by process, the peak of the tree's proportional set
size (shared pages once), the wall seconds and peak resident memory of each part of the run
(`parts`: the run directory's stage markers, each written when its part ends, cut the run into
parts), and what its end table shows (`result`: held-out policy accuracy and the reward model's
balanced process accuracy Before and After, the paired gain, the tasks accepted).

With `--fresh-cache` it runs twice with a new, empty cache: a user's first `make run` (the tiny
models built, every warm start trained) and second (the warm starts reused from the cache).

    python benchmarks/demo_run.py --config configs/demo.yaml --fresh-cache \
        --out benchmarks/results/demo-run.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
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


def _result(summary: dict[str, Any]) -> dict[str, Any]:
    """What the run's end table shows, from its summary: held-out policy accuracy and the RM's
    balanced process accuracy Before (step 0) and After (the last step), each [value, low,
    high], the paired gain [D, low, high] with its tasks, episodes and steps, and the tasks
    accepted."""
    points = sorted(summary.get("eval", []), key=lambda p: p["step"])
    if len(points) < 2:
        return {}
    first, last = points[0], points[-1]

    def triple(point: dict[str, Any], key: str) -> list[float] | None:
        name = f"eval/id/{key}"
        if name not in point:
            return None
        return [point[name], point[f"{name}_ci_low"], point[f"{name}_ci_high"]]

    return {
        "after_step": last["step"],
        "policy_accuracy": {"before": triple(first, "policy_accuracy"),
                            "after": triple(last, "policy_accuracy")},
        "policy_gain": triple(last, "policy_gain"),
        "policy_gain_tasks": last.get("eval/id/policy_gain_tasks"),
        "episodes": last.get("eval/id/episodes"),
        "rm_balanced_process_accuracy": {
            "before": triple(first, "rm_process_balanced_accuracy"),
            "after": triple(last, "rm_process_balanced_accuracy"),
        },
        "rm_process_majority_baseline": last.get("eval/id/rm_process_majority_baseline"),
        "rm_steps": last.get("eval/id/rm_steps"),
        "accepted_tasks": summary.get("accepted_tasks_total", 0),
    }  # fmt: skip


def measure(config_path: str, label: str) -> dict[str, Any]:
    """One `rlanything train` of `config_path`, timed, in an isolated working directory (the
    warm-start cache is the one $RLANYTHING_CACHE names)."""
    config = str(Path(config_path).resolve())
    with isolated_workdir("demo-run") as root:
        command = [sys.executable, "-m", "rlanything_flows.cli", "train", "--config", config]
        command += ["--run-dir", str(root / "run")]
        start, wall = time.perf_counter(), time.time()
        process = subprocess.Popen(
            command, cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.PIPE, text=True
        )
        with PeakRss(process.pid) as rss:
            assert process.stdout is not None
            output = []
            for line in process.stdout:
                print(line, end="", flush=True)
                output.append(line)
            code = process.wait()
        seconds = time.perf_counter() - start
        by_part = parts(rss.samples, _markers(root / "run"), wall, time.time())
        if code != 0:
            raise SystemExit(f"the demo run ({label}) failed with exit code {code}")
        summary = json.loads(RunDir(root / "run").summary_path.read_text())
    reused = [line.split(":")[0].removeprefix("warm start ") for line in output
              if "reused from the cache" in line]  # fmt: skip
    return {
        "run": label,
        "wall_seconds": round(seconds, 1),
        "warm_starts_reused": reused,
        "peak_rss_tree_mb": round(rss.peak / 2**20, 1),
        "peak_rss_parts_mb": {k: round(v / 2**20, 1) for k, v in rss.parts.items()},
        "peak_pss_tree_mb": round(rss.peak_pss / 2**20, 1),
        "parts": by_part,
        "result": _result(summary),
        "rounds": summary["rounds"],
        "eval": summary.get("eval", []),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/demo.yaml")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--fresh-cache",
        action="store_true",
        help="run twice with a new, empty cache directory: the first run builds the tiny models "
        "and the warm starts, the second reuses them (as a user's first and second `make run`)",
    )
    args = parser.parse_args()
    runs = []
    with contextlib.ExitStack() as stack:
        if args.fresh_cache:
            cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="rlanything-cache-"))
            os.environ["RLANYTHING_CACHE"] = cache
        runs.append(measure(args.config, "first"))
        if args.fresh_cache:
            runs.append(measure(args.config, "second"))
    first = runs[0]
    save(
        args.out,
        {
            "benchmark": "demo_run",
            "config": args.config,
            "cache": "fresh" if args.fresh_cache else "the user's",
            # The allocator settings the run inherits (unset: glibc's and torch's defaults).
            "allocator_env": {
                k: os.environ.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "THP_MEM_ALLOC_ENABLE")
            },
            # the first run's figures at the top level, as `targets.py` reads them
            **{k: first[k] for k in ("wall_seconds", "peak_rss_tree_mb", "peak_pss_tree_mb")},
            "result": first["result"],
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
