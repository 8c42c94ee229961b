"""The learning benchmark: does the policy get better on held-out tasks?

    python benchmarks/learning.py --config configs/learning-household.yaml \
        --run-dir runs/learning-household --out benchmarks/results/learning-household.json

Runs `rlanything train` on the config (which sets `evaluation.every`, so the run evaluates its
policy on the held-out sets before training and every few rounds), times it, and writes one JSON:
the machine (with its CPU's bfloat16 flags), the config, the wall time, the per-round training
figures and the held-out learning curve with 95 % intervals clustered by task, and whether the
last point beats the first (non-overlapping intervals). It also copies the run's learning-curve
PNG beside the JSON. A finished run directory is resumed, not retrained; `--collect` only gathers
the figures of a run made before (the sweep's runs in benchmarks/results/learning/).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import git_commit, save

from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.rloop import episodes
from rlanything_core.method.signals import task_key
from rlanything_core.method.stats import accuracy, as_metrics
from rlanything_core.run.config import load_config
from rlanything_core.run.rundir import RunDir
from rlanything_flows.train import paired_gain

ROUND_KEYS = (
    "policy/accuracy",
    "policy/invalid_actions",
    "policy/kept_samples",
    "policy/tasks_in_band",
    "policy/kl",
    "policy/clip_fraction",
    "policy/mean_episode_steps",
    "timing/rollout_s",
    "timing/policy_update_s",
)


def training_accuracy(run_dir: Path, round_idx: int) -> dict[str, float]:
    """The round's success on its own pool with its 95 % interval clustered by task, and the
    episodes it rests on (from the round's rollouts)."""
    played = episodes(read_dataset(RunDir(run_dir).dataset(round_idx, "rollouts"), "rollouts"))
    estimate = accuracy(played["outcome"] > 0, task_key(played))
    return {**as_metrics("train/accuracy", estimate), "train/episodes": float(len(played))}


def curve_point(point: dict[str, Any], split: str) -> dict[str, float] | None:
    """Accuracy and its interval of one split at one curve step, or None if not evaluated."""
    key = f"eval/{split}/policy_accuracy"
    if key not in point:
        return None
    return {
        "accuracy": point[key],
        "ci_low": point[f"{key}_ci_low"],
        "ci_high": point[f"{key}_ci_high"],
        "episodes": point[f"eval/{split}/episodes"],
        "tasks": point[f"eval/{split}/tasks"],
        "invalid_actions": point[f"eval/{split}/invalid_actions"],
    }


def verdict(curve: list[dict[str, Any]], split: str, run_dir: Path | None = None) -> dict[str, Any]:
    """Before (step 0) against the last step of one split: the gain, whether the 95 % intervals
    are apart, and (with the run directory) the paired difference on the tasks both steps played
    (`stats.paired_difference`, tasks as units: a paired test, apart from 0 when the policy
    got better on these tasks)."""
    points = [(p["step"], c) for p in curve if (c := curve_point(p, split)) is not None]
    if len(points) < 2:
        return {}
    (first_step, first), (last_step, last) = points[0], points[-1]
    found: dict[str, Any] = {
        "before": first["accuracy"],
        "after": last["accuracy"],
        "after_step": last_step,
        "gain_points": 100.0 * (last["accuracy"] - first["accuracy"]),
        "intervals_apart": last["ci_low"] > first["ci_high"] or last["ci_high"] < first["ci_low"],
    }
    if run_dir is None:
        return found
    paired = paired_gain(run_dir, split, first_step, last_step)
    if paired is None:
        return found
    found["paired_gain_points"] = [round(100.0 * v, 2) for v in paired[0]]
    found["paired_tasks"] = paired[1]
    return found


def table(curve: list[dict[str, Any]]) -> str:
    """The learning curve as a Markdown table: accuracy [95 % interval] per split, in %."""
    lines = ["| rounds done | ID accuracy [95 % CI] | OOD accuracy [95 % CI] | episodes/split |"]
    lines.append("|---|---|---|---|")
    for p in curve:
        ind, ood = (curve_point(p, split) for split in ("id", "ood"))
        cells = [
            "–"
            if c is None
            else f"{100 * c['accuracy']:.1f} [{100 * c['ci_low']:.1f}, {100 * c['ci_high']:.1f}]"
            for c in (ind, ood)
        ]
        count = f"{ind['episodes']:.0f}" if ind else "–"
        lines.append(f"| {p['step']} | {cells[0]} | {cells[1]} | {count} |")
    return "\n".join(lines)


STOP_GRACE_S = 60.0
"""How long a stopped run may take to end before its process group is killed."""


def _run_as_group(command: list[str]) -> int:
    """Run `command` in a process group of its own and return its exit code. A SIGTERM or
    SIGINT sent to this script goes to that whole group: the run and the Prefect server it
    started stop together, and running this script again resumes the run. A group still alive
    `STOP_GRACE_S` later is killed (SIGKILL): Prefect turns SIGTERM into an exception raised
    wherever the run is, and one raised inside a finalizer is lost (seen: a run that went on
    into its next evaluation). Writes are atomic, so a killed run resumes as a stopped one."""
    child = subprocess.Popen(command, env=os.environ, start_new_session=True)
    deadline: list[float] = []

    def signal_group(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    def forward(signum: int, _frame: object) -> None:
        signal_group(signum)
        deadline[:] = deadline or [time.monotonic() + STOP_GRACE_S]

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            try:
                return child.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                if deadline and time.monotonic() > deadline[0]:
                    signal_group(signal.SIGKILL)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--out", required=True, help="JSON result path")
    parser.add_argument(
        "--collect",
        action="store_true",
        help="only gather the figures of a run made before (no training, no wall time)",
    )
    args = parser.parse_args()
    config = load_config(args.config)
    if config.evaluation.every is None and not args.collect:
        sys.exit(f"error: {args.config} sets no evaluation.every, so the run draws no curve")
    run_dir = Path(args.run_dir)
    command = [
        str(Path(sys.executable).parent / "rlanything"),
        *("train", "--config", args.config, "--run-dir", str(run_dir)),
    ]
    if (run_dir / "state.json").is_file():
        command = [command[0], "resume", "--run-dir", str(run_dir)]
    seconds = None
    if not args.collect:
        started = time.monotonic()
        code = _run_as_group(command)
        if code != 0:
            sys.exit(f"error: {' '.join(command)} exited with {code}")
        seconds = round(time.monotonic() - started, 1)
    summary = json.loads((run_dir / "summary.json").read_text())
    curve = summary.get("eval", [])
    out = Path(args.out)
    png = run_dir / "plots" / "learning_curve.png"
    if png.is_file():
        shutil.copyfile(png, out.with_suffix(".png"))
    commit = git_commit()
    save(
        out,
        {
            "benchmark": "learning",
            "command": " ".join([Path(command[0]).name, *command[1:]]),
            "config_file": args.config,
            "config": config.model_dump(mode="json"),
            "commit": commit,
            "wall_seconds": seconds,
            "rounds": [
                {
                    "round": r["round"],
                    **{k: r[k] for k in ROUND_KEYS if k in r},
                    **training_accuracy(run_dir, r["round"]),
                }
                for r in summary["rounds"]
            ],
            "curve": curve,
            "id": verdict(curve, "id", run_dir),
            "ood": verdict(curve, "ood", run_dir),
        },
    )
    print(table(curve))


if __name__ == "__main__":
    main()
