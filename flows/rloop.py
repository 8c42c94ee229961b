"""`rlanything-rloop`: RLoop (Zeng et al., arXiv 2511.04285), cycles of exploration and
exploitation.

Cycle c, in `<run_dir>/cycle_NNN/` (a run directory of its own):
1. exploration: `rloop.rounds_per_cycle` ordinary rounds of the config's mode, each the
   `rlanything-round` subflow, starting from the cycle's start policy;
2. exploitation: `harvest-trajectories` → `build-expert-set` → `sft-update` (tasks/rloop.py);
   the refined policy is `cycle_NNN/checkpoints/policy/refined`;
3. with `rloop.evaluate`, the refined policy on the held-out sets (`rlanything-eval`: accuracy
   and pass@k), logged as `rloop/<split>/...`.
The refined policy starts cycle c + 1. The reward model carries on from the previous cycle's
last checkpoint, and the task pool from its last pool. Warm starts run once, before cycle 0.

MLflow: one run for the RLoop run, a nested run per cycle, and per round a run nested in its
cycle's. Resumable: finished rounds, stages and evaluations are not redone.
"""

from __future__ import annotations

import json
from typing import Any

from prefect import flow
from prefect.runtime import flow_run

from rlanything_core.base.schemas import read_dataset, write_dataset
from rlanything_core.base.seeding import derive_seed
from rlanything_core.run.config import RunConfig
from rlanything_core.run.rundir import EXPLOITATION, RunDir, write_json
from rlanything_flows.ablate import warm_started
from rlanything_flows.evaluate import rlanything_eval
from rlanything_flows.tracking import Tracker
from rlanything_flows.train import train_rounds
from rlanything_tasks.common import StageChain
from rlanything_tasks.rloop import EXPLOITATION_STAGES


@flow(name="rlanything-rloop")
def rlanything_rloop(config: RunConfig, run_dir: str = "runs/rloop") -> dict[str, Any]:
    """Run (or continue) `config.rloop.cycles` RLoop cycles in `run_dir`; returns the summary."""
    root = RunDir(run_dir)
    with root.exclusive():  # one process per RLoop directory (its cycles live inside it)
        root.init(config)
        summary: dict[str, Any] = (
            json.loads(root.summary_path.read_text())
            if root.summary_path.is_file()
            else {"run_dir": str(root.root), "cycles": []}
        )
        summary.setdefault("prefect_flow_run_ids", []).append(flow_run.get_id())
        with Tracker(root, config, flow_run.get_id()).finishing() as tracker:
            summary["mlflow_run_id"] = tracker.parent_id
            base = warm_started(config, RunDir(root.root / "warm_start"))
            for c in range(len(summary["cycles"]), config.rloop.cycles):
                summary["cycles"].append(_cycle(base, root, c, tracker.parent_id))
                write_json(root.summary_path, summary)
    summary["mlflow_ui"] = tracker.ui_hint()
    return summary


def _cycle(base: RunConfig, root: RunDir, c: int, rloop_id: str) -> dict[str, Any]:
    """One cycle: exploration rounds, exploitation stages, evaluation; its summary row."""
    run = RunDir(root.root / f"cycle_{c:03d}")
    config = cycle_config(base, root, c)
    run.init(config)
    if c > 0 and not run.dataset(0, "tasks").is_file():  # the pool carries over
        previous = RunDir(root.root / f"cycle_{c - 1:03d}")
        pool = read_dataset(previous.dataset(config.rounds, "tasks"), "tasks").assign(round=0)
        write_dataset(pool, run.dataset(0, "tasks"), "tasks")
    with Tracker(run, config, flow_run.get_id(), parent_run_id=rloop_id).finishing() as tracker:
        rounds = train_rounds(config, run, tracker)["rounds"]
        metrics: dict[str, float] = {}
        chain = StageChain(config, str(run.root), EXPLOITATION, {})
        for stage in EXPLOITATION_STAGES:
            metrics |= chain(stage)["metrics"]
        refined = run.refined_checkpoint()
        if config.rloop.evaluate:
            metrics |= _evaluate(config, run, str(refined), tracker.parent_id)
        tracker.log_cycle(c, metrics, run.phase_dir(EXPLOITATION) / "expert_set.parquet",
                          refined, rloop_id)  # fmt: skip
    return {
        "cycle": c,
        "start_policy": config.policy.model.source,
        "refined_policy": str(refined),
        "train_accuracy": [r["policy/accuracy"] for r in rounds],
        **metrics,
    }


def cycle_config(base: RunConfig, root: RunDir, c: int) -> RunConfig:
    """Cycle c's config: `rounds_per_cycle` rounds with a seed of its own, from the previous
    cycle's refined policy and last reward model (cycle 0: the base config's models)."""
    update: dict[str, Any] = {
        "rounds": base.rloop.rounds_per_cycle,
        "seed": derive_seed(base.seed, "rloop-cycle", c) % 2**31,
    }
    if c > 0:
        previous = RunDir(root.root / f"cycle_{c - 1:03d}")
        sources = {
            "policy": str(previous.refined_checkpoint()),
            "reward_model": previous.model_before(
                "reward_model", base.rloop.rounds_per_cycle, base.reward_model.model.source
            ),
        }
        for role, source in sources.items():
            section = getattr(base, role)
            model = section.model.model_copy(update={"source": source})
            update[role] = section.model_copy(update={"model": model})
    return base.model_copy(update=update)


def _evaluate(config: RunConfig, run: RunDir, policy: str, parent_id: str) -> dict[str, float]:
    """The refined policy on the held-out sets, once per cycle (eval.json makes it resumable)."""
    out = run.root / "eval"
    if (out / "eval.json").is_file():
        stored = json.loads((out / "eval.json").read_text())
    else:
        stored = rlanything_eval(
            config=config, policy=policy, out_dir=str(out), parent_run_id=parent_id
        )
    return {
        f"rloop/{key.removeprefix('eval/')}": float(value)
        for key, value in stored.items()
        if key.startswith("eval/")
    }
