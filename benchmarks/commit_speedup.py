"""A round's speed-up over an older commit at equal work: the same config trained with the old
commit's code and then with this tree's, one after the other, and each stage's seconds compared.

Each side runs `python -m flows.cli train --config CONFIG --run-dir DIR` in its own process
with its code first on the path (the old commit checked out in a temporary git worktree), its
own Prefect home and MLflow store, the same model cache, in the same virtual environment and
on the same machine. The config should run one round and hold the work fixed (`rounds: 1`,
fixed tasks and seeds); `benchmarks/results/equal-work-round/` has the demo's.

Equal work, asserted at run time (`common.EqualWorkError`) and recorded under `invariants`: the
two rounds played the same number of steps (rollout rows) and judged the same number of votes
(judgment rows), their policy and RM updates trained on as many samples each, and their
sampled answers' tokens, played and judged, are within `TOKEN_TOLERANCE` (sampling makes them
differ when the code's numerics do). The acceptance check is left out of the ratio: the two
codes may accept different rewrites and so replay different episodes; its seconds and work
are recorded beside it.

    python benchmarks/commit_speedup.py --old b94463e \\
        --config benchmarks/results/equal-work-round/demo-b94463e-1round.yaml \\
        --out benchmarks/results/equal-work-round/equal-work-round-HEAD.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
from common import REPO, EqualWorkError, PeakRss, git_commit, save

TOKEN_TOLERANCE = 0.1
"""Largest relative difference of the two sides' sampled answer tokens."""

PARTS = ("rollouts", "judgments", "candidates", "acceptance")
UPDATES = ("policy/update_samples", "reward_model/update_samples")
TOKENS = ("rollouts_response_tokens", "judgments_response_tokens")


def import_paths(code: Path, packages: Path) -> tuple[list[Path], str]:
    """The import path that runs the code at `code` rather than the installed package, and the
    CLI module to run there: code whose flows/ and tasks/ install as rlanything_flows and
    rlanything_tasks gets a folder of links under those names (`packages`); older code imports
    flows and tasks from its root."""
    setup = code / "setup.py"
    if not setup.is_file() or "rlanything_flows" not in setup.read_text():
        return [code], "flows.cli"
    packages.mkdir(parents=True, exist_ok=True)
    for folder in ("flows", "tasks"):
        (packages / f"rlanything_{folder}").symlink_to(code / folder, target_is_directory=True)
    return [packages, code], "rlanything_flows.cli"


def train(code: Path, config: Path, root: Path, name: str) -> tuple[Path, float, int]:
    """Train `config` with the code at `code`; (its run directory, wall seconds, peak RSS)."""
    run_dir = root / f"run-{name}"
    paths, module = import_paths(code, root / f"packages-{name}")
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join(map(str, paths)),
        "PREFECT_HOME": str(root / f"prefect-{name}"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{root / f'mlflow-{name}.db'}",
    }
    command = [sys.executable, "-m", module, "train", "--config", str(config)]
    log = root / f"{name}.log"
    start = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*command, "--run-dir", str(run_dir)], cwd=code, env=env, stdout=out, stderr=out
        )
        with PeakRss(proc.pid) as rss:
            proc.wait()
    wall = time.perf_counter() - start
    if proc.returncode:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{name}'s run failed with status {proc.returncode}:\n{tail}")
    print(f"{name}: {wall:.1f} s", flush=True)
    return run_dir, wall, rss.peak


def one_run(run_dir: Path) -> dict[str, Any]:
    """A one-round run's stage seconds (its summary.json) and the work it did."""
    summary = json.loads((run_dir / "summary.json").read_text())["rounds"][0]
    stages = {
        k.removeprefix("timing/").removesuffix("_s"): round(v, 2)
        for k, v in summary.items()
        if k.startswith("timing/")
    }
    work: dict[str, int] = {key: int(summary[key]) for key in UPDATES if key in summary}
    for part in PARTS:
        path = run_dir / "round_000" / f"{part}.parquet"
        if path.is_file():
            frame = pd.read_parquet(path)
            work[f"{part}_rows"] = len(frame)
            if "response_token_ids" in frame:
                work[f"{part}_response_tokens"] = int(frame["response_token_ids"].map(len).sum())
    total = sum(stages.values())
    return {
        "stage_seconds": stages,
        "round_seconds": round(total, 2),
        "round_seconds_without_acceptance": round(total - stages.get("acceptance_check", 0), 2),
        "work": work,
    }


def equal_work(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The invariants of two runs' work, checked: raises EqualWorkError naming the first that
    does not hold, else returns them. Update samples are compared where both runs record them
    (runs before the policy's and RM's update metrics were kept do not)."""
    a, b = old["work"], new["work"]
    exact = ["rollouts_rows", "judgments_rows", *(k for k in UPDATES if k in a and k in b)]
    for key in exact:
        if a.get(key) != b.get(key):
            raise EqualWorkError(f"{key}: {a.get(key)} against {b.get(key)}, not the same work")
    for key in TOKENS:
        if abs(a[key] - b[key]) > TOKEN_TOLERANCE * a[key]:
            raise EqualWorkError(
                f"{key}: {a[key]} against {b[key]}, more than {TOKEN_TOLERANCE:.0%} apart"
            )
    return {
        "same": {key: a[key] for key in exact},
        "token_tolerance": TOKEN_TOLERANCE,
        "tokens": {key: [a[key], b[key]] for key in TOKENS},
    }


def compare(old_commit: str, config: Path) -> dict[str, Any]:
    """Train `config` with `old_commit`'s code, then with this tree's; the stages compared."""
    with tempfile.TemporaryDirectory(prefix="rlanything-bench-commits-") as tmp:
        root = Path(tmp)
        worktree = root / "old"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--quiet", str(worktree), old_commit],
            cwd=REPO,
            check=True,
        )
        try:
            runs = {}
            for name, code in ((old_commit, worktree), (git_commit() or "HEAD", REPO)):
                run_dir, wall, peak = train(code, config.resolve(), root, name)
                runs[name] = one_run(run_dir) | {
                    "wall_seconds": round(wall, 1),
                    "peak_rss_tree_mb": round(peak / 2**20, 1),
                }
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=True
            )
    old, new = runs.values()
    invariants = equal_work(old, new)
    return {
        "benchmark": "equal-work-round",
        "config": str(config),
        "old_commit": old_commit,
        "invariants": invariants,
        "runs": runs,
        "ratio_without_acceptance": round(
            old["round_seconds_without_acceptance"] / new["round_seconds_without_acceptance"], 3
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the older commit to compare against")
    parser.add_argument("--config", type=Path, required=True, help="a one-round config")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    save(args.out, compare(args.old, args.config))


if __name__ == "__main__":
    main()
