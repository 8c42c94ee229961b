"""`rlanything-ablate`: the paper's Table 1 rows with identical budgets and seeds.

Rows: Before (no training), Outcome-only (GRPO), Policy (integrated feedback, fixed RM and tasks),
+Reward (the RM trained by consistency feedback), +Reward+Env (task adaptation). Each trained row
is a full training run per seed, evaluated with `rlanything-eval` on the same held-out sets;
"Before" evaluates the models the runs start from. When the config enables warm starts, they run
once (in `<out>/warm_start`, with the config's seed) and every row and seed starts from those
checkpoints, so rows differ only in what they train. Outcome-only trains no reward model, so its
RM columns stay empty. Resumable: a (row, seed) whose eval.json exists is not rerun.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from prefect import flow

from flows.evaluate import SPLITS, policy_metrics, rlanything_eval
from flows.tracking import plot_rows
from flows.train import rlanything_train
from rlanything_core.config import Mode, RunConfig
from rlanything_core.rundir import WARM_START, RunDir, write_json
from rlanything_core.schemas import read_dataset
from tasks.stages import warm_start

ROWS: tuple[tuple[str, Mode | None], ...] = (
    ("Before", None),
    ("Outcome-only", "outcome_only"),
    ("Policy", "policy"),
    ("+Reward", "reward"),
    ("+Reward+Env", "env"),
)
SLUGS = {
    "Before": "before",
    "Outcome-only": "outcome-only",
    "Policy": "policy",
    "+Reward": "reward",
    "+Reward+Env": "reward-env",
}
COLUMNS = (
    ("eval/id/policy_accuracy", "Policy ID"),
    ("eval/ood/policy_accuracy", "Policy OOD"),
    ("eval/id/rm_process_accuracy", "RM process"),
    ("eval/id/rm_outcome_accuracy", "RM outcome"),
    ("accepted_tasks", "Accepted tasks"),
)


@flow(name="rlanything-ablate")
def rlanything_ablate(config: RunConfig, seeds: int, out_dir: str) -> dict[str, Any]:
    """Train and evaluate every row for seeds 0..seeds−1 (config.seed + k); write
    ablation.json, ablation.md and per-round plots to `out_dir`."""
    out = Path(out_dir).resolve()
    config = warm_started(config, RunDir(out / "warm_start"))
    results: dict[str, list[dict[str, float]]] = {}
    curves: dict[str, list[list[dict[str, float]]]] = {}
    for name, mode in ROWS:
        for k in range(seeds):
            seed = config.seed + k
            cell = out / SLUGS[name] / f"seed_{seed}"
            run = RunDir(cell / "run")
            row_config = config.model_copy(update={"mode": mode or "policy", "seed": seed})
            if mode is not None and len(_rounds(run)) < config.rounds:
                rlanything_train(config=row_config, run_dir=str(run.root))
            if not (cell / "eval" / "eval.json").is_file():
                after = 0 if mode is None else config.rounds
                rlanything_eval(
                    config=row_config,
                    policy=run.model_before("policy", after, config.policy.model.source),
                    reward_model=None
                    if mode == "outcome_only"
                    else run.model_before("reward_model", after, config.reward_model.model.source),
                    out_dir=str(cell / "eval"),
                )
            metrics = json.loads((cell / "eval" / "eval.json").read_text())
            for split in SPLITS:  # pass@k from the eval's rollouts (also for older eval.json)
                rollouts = read_dataset(cell / "eval" / f"{split}_rollouts.parquet", "rollouts")
                metrics |= policy_metrics(split, rollouts)
            rounds = _rounds(run)
            accepted = 0.0 if mode != "env" else float(rounds[-1]["env/accepted_tasks_total"])
            results.setdefault(name, []).append(
                {k: v for k, v in metrics.items() if k.startswith("eval/")}
                | {"accepted_tasks": accepted}
            )
            if mode is not None:
                curves.setdefault(name, []).append(rounds)
    summary = _summarize(results)
    write_json(out / "ablation.json", {"seeds": seeds, "rounds": config.rounds, "rows": summary,
                                       "per_seed": results})  # fmt: skip
    (out / "ablation.md").write_text(_markdown(summary, seeds, config.rounds))
    plot_rows(curves, out)
    return summary


def warm_started(config: RunConfig, run: RunDir) -> RunConfig:
    """Run the config's warm starts once in `run` (resumable) and return the config with the
    warm-started checkpoints as model sources and warm starts off; unchanged without any."""
    roles: dict[str, Any] = {
        "policy": config.policy,
        "reward_model": config.reward_model,
        "env_model": config.env_model,
    }
    if not any(role.warm_start.enabled for role in roles.values()):
        return config
    every_model = config.model_copy(update={"mode": "env"})  # warm the RM even if a row skips it
    run.init(every_model)
    outputs = warm_start(every_model, str(run.root), WARM_START)["outputs"]
    update = {}
    for name, role in roles.items():
        off = role.warm_start.model_copy(update={"enabled": False})
        source = outputs.get(f"{name}_checkpoint", role.model.source)
        model = role.model.model_copy(update={"source": source})
        update[name] = role.model_copy(update={"model": model, "warm_start": off})
    return config.model_copy(update=update)


def _rounds(run: RunDir) -> list[dict[str, float]]:
    if not run.summary_path.is_file():
        return []
    rounds: list[dict[str, float]] = json.loads(run.summary_path.read_text())["rounds"]
    return rounds


def _summarize(results: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, list[float]]]:
    """Per row and column: [mean, population std] over seeds."""
    summary: dict[str, dict[str, list[float]]] = {}
    for name, cells in results.items():
        frame = pd.DataFrame(cells)
        summary[name] = {
            key: [float(frame[key].mean()), float(np.std(frame[key].to_numpy()))]
            for key in frame.columns
            if frame[key].notna().all()
        }
    return summary


def _markdown(summary: dict[str, dict[str, list[float]]], seeds: int, rounds: int) -> str:
    """Table 1's columns, then pass@k on the same held-out sets; mean ± std, in %."""
    ks = sorted(
        {int(key.rsplit("_", 1)[1]) for row in summary.values() for key in row if "pass_at_" in key}
    )
    passes = [
        (f"eval/{split}/pass_at_{k}", f"{split.upper()} pass@{k}") for split in SPLITS for k in ks
    ]
    lines = [f"Mean ± std over {seeds} seed(s), {rounds} round(s) per run; accuracies in %.", ""]
    lines += _table(summary, COLUMNS)
    lines += ["", "pass@k on the same held-out sets, in %:", ""]
    lines += _table(summary, tuple(passes))
    return "\n".join(lines) + "\n"


def _table(
    summary: dict[str, dict[str, list[float]]], columns: tuple[tuple[str, str], ...]
) -> list[str]:
    lines = [
        "| Row | " + " | ".join(label for _, label in columns) + " |",
        "|" + "---|" * (len(columns) + 1),
    ]
    for name, _ in ROWS:
        cells = []
        for key, _ in columns:
            if key not in summary[name]:
                cells.append("–")
                continue
            mean, std = summary[name][key]
            scale = 1.0 if key == "accepted_tasks" else 100.0
            cells.append(f"{mean * scale:.1f} ± {std * scale:.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines
