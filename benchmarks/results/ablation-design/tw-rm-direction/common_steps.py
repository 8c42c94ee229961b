"""Every run's trained RM on one set of steps, so that two runs' judges compare paired.

`rm_same_steps.py` judges each run's own step-R held-out steps, which its own policy played, so
a plain and a balanced run are judged on different steps. Here every run's last RM
(`checkpoints/reward_model/round_{R-1}`) judges the same steps: the held-out in-domain steps of
the first run's `eval/step_000`, which the shared warm-started policy played (the same tasks,
seeds and policy for every run from one ready.yaml), already judged there by the starting RM.
Prints and writes each judge's balanced process accuracy (95 % interval clustered by task),
plain accuracy and the majority baseline, and the paired differences (trained − starting, and
each balanced run − the plain run of the same seed) with `signals.judge_gain`.

    python benchmarks/results/ablation-design/tw-rm-direction/common_steps.py OUT.json RUN [RUN ...]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from common import save

from rlanything_flows.evaluate import judge_held_out
from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.signals import judge_gain, judge_metrics, verdict_matrix
from rlanything_core.run.config import load_config
from rlanything_core.run.rundir import RunDir


def points(estimate: Any) -> list[float]:
    return [
        round(100 * estimate.value, 2),
        round(100 * estimate.low, 2),
        round(100 * estimate.high, 2),
    ]


def main(out: Path, roots: list[str]) -> None:
    point = Path(roots[0]) / "eval" / "step_000"
    rollouts = read_dataset(point / "id_rollouts.parquet", "rollouts")
    started = read_dataset(point / "id_judgments.parquet", "judgments")
    votes = load_config(RunDir(roots[0]).config_path).reward_model.votes
    judged: dict[str, Any] = {}
    rows: dict[str, Any] = {
        "starting": {"metrics": judge_metrics(rollouts, verdict_matrix(rollouts, started, votes))}
    }
    for root in roots:
        run = RunDir(root)
        config = load_config(run.config_path)
        same = read_dataset(run.root / "eval" / "step_000" / "id_rollouts.parquet", "rollouts")
        if len(same) != len(rollouts) or not same["prompt"].equals(rollouts["prompt"]):
            raise SystemExit(f"{root}: its step-0 held-out steps differ from {roots[0]}'s")
        rm = run.root / "checkpoints" / "reward_model" / f"round_{config.rounds - 1:03d}"
        arm = "direction" if config.reward_model.balance_directions else "plain"
        name = f"{arm}-seed{config.seed}"
        judged[name] = judge_held_out(config, str(rm), rollouts, f"{name}'s last RM")
        rows[name] = {
            "run_dir": root,
            "reward_model": str(rm),
            "metrics": judge_metrics(rollouts, verdict_matrix(rollouts, judged[name], votes)),
            "minus_starting_points": points(judge_gain(rollouts, judged[name], started, votes)),
        }
    for name in judged:
        plain = name.replace("direction", "plain")
        if name.startswith("direction") and plain in judged:
            gain = judge_gain(rollouts, judged[name], judged[plain], votes)
            rows[name]["minus_plain_same_seed_points"] = points(gain)
    for name, row in rows.items():
        m = row["metrics"]
        majority = 100 * m["process_majority_baseline"]
        versus = f"− starting {row.get('minus_starting_points')}"
        versus += f", − plain {row.get('minus_plain_same_seed_points')}"
        print(
            f"{name}: balanced {100 * m['process_balanced_accuracy']:.1f} "
            f"[{100 * m['process_balanced_accuracy_ci_low']:.1f}, "
            f"{100 * m['process_balanced_accuracy_ci_high']:.1f}], plain "
            f"{100 * m['process_accuracy']:.1f} (majority {majority:.1f}); {versus}"
        )
    save(
        out,
        {
            "benchmark": "common_steps",
            "steps": len(rollouts),
            "held_out": str(point),
            "judges": rows,
        },
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
