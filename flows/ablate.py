"""`rlanything-ablate`: the paper's Table 1 rows with identical budgets and seeds.

Rows: Before (no training), Outcome-only (GRPO), Policy (integrated feedback, fixed RM and tasks),
+Reward (the RM trained by consistency feedback), +Reward+Env (task adaptation); beyond the paper,
Step-only (+Reward with no outcome term in the policy's reward) and Anchor-state (+Reward with
anchor-state groups, `advantage.grouping: state`). `rows` picks a subset. Each trained row
is a full training run per seed, evaluated with `rlanything-eval` on the same held-out sets;
"Before" evaluates the models the runs start from. When the config enables warm starts, they run
once (in `<out>/warm_start`, with the config's seed) and every row and seed starts from those
checkpoints, so rows differ only in what they train (with `workers` > 1 the roles' warm starts
train side by side, to the same checkpoints). Outcome-only trains no reward model, so its
RM columns stay empty. Resumable: a (row, seed) whose eval.json exists is not rerun.

With `evaluation.every`, each row's learning curve is pooled over seeds per rounds done
(`ablation.json` "curves", `ablation_heldout.png`, `ablation_rm_process.png`). Its first point is
Before's evaluation, copied (`share_start`), and where the curve covers both splits its last point
is the row's evaluation: evaluations do not depend on the row or the seed, only on the models.

The RM columns are balanced accuracies (the mean of the recalls on both classes), beside the
accuracy of always predicting the majority outcome: a plain accuracy rewards a constant verdict
with the base rate. Each cell is the mean ± std over seeds and the 95 % interval of the pooled
estimate: every seed's held-out episodes (steps, for the RM process column) together, clustered
by (task, seed). The held-out tasks are the same for every seed, but each seed's episodes of a
task form a cluster of their own: pooling them per task would call the seeds' trained models
one model (`rlanything_core.method.stats`). So the interval is about these tasks' episodes under the
row's training, seeds included as replications, not about other task sets. "Before" evaluates
the same models with the same seeds for every seed: its interval is that of one seed's episodes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from prefect import flow, task
from prefect.task_runners import ProcessPoolTaskRunner

from rlanything_core.base.atomic import atomic_path
from rlanything_core.base.host import machine
from rlanything_core.base.schemas import read_dataset, write_dataset
from rlanything_core.method.rloop import episodes
from rlanything_core.method.signals import judge_gain, task_key
from rlanything_core.method.stats import CI_SUFFIXES, as_metrics, paired_difference
from rlanything_core.run.config import Mode, RunConfig
from rlanything_core.run.rundir import WARM_START, RunDir, write_json
from rlanything_core.run.warm_start import warm_start_roles
from rlanything_flows.evaluate import (
    SPLITS,
    held_out_digest,
    judge_held_out,
    policy_metrics,
    reward_model_metrics,
    rlanything_eval,
)
from rlanything_flows.tracking import plot_heldout, plot_rows
from rlanything_flows.train import rlanything_train
from rlanything_tasks.common import run_stage
from rlanything_tasks.stages import warm_start


@dataclass(frozen=True)
class Row:
    """One row of the table: the mode it trains in (None: no training, "Before") and the
    `advantage` settings it changes; `slug` names its directory."""

    name: str
    slug: str
    mode: Mode | None
    advantage: tuple[tuple[str, Any], ...] = ()


ROWS: tuple[Row, ...] = (
    Row("Before", "before", None),
    Row("Outcome-only", "outcome-only", "outcome_only"),
    Row("Policy", "policy", "policy"),
    Row("+Reward", "reward", "reward"),
    Row("+Reward+Env", "reward-env", "env"),
    # Beyond the paper, at the same budget: the trained RM's step signal with no outcome term
    # (its second claim, step-wise signals beat outcome signals), and +Reward with anchor-state
    # groups instead of step-index groups (GiGPO, arXiv 2505.10978).
    Row("Step-only", "step-only", "reward", (("outcome_weight", 0.0),)),
    Row("Anchor-state", "anchor-state", "reward", (("estimator", "step"), ("grouping", "state"))),
)
ROW_SLUGS = tuple(row.slug for row in ROWS)
GAIN = "eval/id/rm_process_balanced_gain"
"""A row's trained RM against the RM it started from on the same held-out in-domain steps, in
balanced process accuracy (`start_judged`, `signals.judge_gain`)."""
START_JUDGMENTS = "id_start_judgments.parquet"
"""The final in-domain held-out steps of a run that trains its RM, judged by the RM it started
from, beside the evaluation's own `id_judgments.parquet`."""
COLUMNS = (
    ("eval/id/policy_accuracy", "Policy ID"),
    ("eval/ood/policy_accuracy", "Policy OOD"),
    ("eval/id/rm_process_balanced_accuracy", "RM process (balanced)"),
    (GAIN, "RM gain, same steps (balanced)"),
    ("eval/id/outcome_judge_process_balanced_accuracy", "Outcome as judge (balanced)"),
    ("eval/id/rm_outcome_balanced_accuracy", "RM outcome (balanced)"),
    ("eval/id/rm_outcome_majority_baseline", "RM outcome majority baseline"),
    ("accepted_tasks", "Accepted tasks"),
)
PAIRED = (
    ("Outcome-only", "Before"),
    ("Policy", "Before"),
    ("+Reward", "Before"),
    ("+Reward+Env", "Before"),
    ("Step-only", "Before"),
    ("Anchor-state", "Before"),
    ("Policy", "Outcome-only"),
    ("+Reward", "Policy"),
    ("+Reward+Env", "+Reward"),
    ("Step-only", "Outcome-only"),
    ("Anchor-state", "+Reward"),
)
"""Paired comparisons on the held-out tasks (`paired_differences`): every trained row against
Before; the paper's ordering, each RLAnything row against the one above it; its second claim,
the trained RM's step signal against the outcome alone; anchor-state against step-index groups."""
# One cell's eval datasets per split: (rollouts, judgments or None).
Datasets = dict[str, tuple[pd.DataFrame, pd.DataFrame | None]]
# One cell's in-domain held-out steps, judged by its trained RM and by the RM it started from.
Judged = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]


@flow(name="rlanything-ablate")
def rlanything_ablate(
    config: RunConfig,
    seeds: int,
    out_dir: str,
    rows: list[str] | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """Train and evaluate every row (or those whose slugs are in `rows`) for seeds
    0..seeds−1 (config.seed + k), Before once; write ablation.json (per row: [mean, std] over
    seeds, the pooled [value, low, high] of every accuracy, and the per-seed values),
    ablation.md and per-round plots to `out_dir`. With `workers` > 1 the (row, seed) runs train
    side by side in that many processes (Prefect's process pool), each with its share of the
    CPU's cores as torch threads."""
    unknown = sorted(set(rows or ()) - set(ROW_SLUGS))
    if unknown:
        raise ValueError(f"unknown ablation rows {unknown}; choose from {', '.join(ROW_SLUGS)}")
    chosen = [row for row in ROWS if rows is None or row.slug in rows]
    started = time.time()
    out = Path(out_dir).resolve()
    config = warm_started(config, RunDir(out / "warm_start"), workers)
    results: dict[str, list[dict[str, float]]] = {}
    datasets: dict[str, dict[int, Datasets]] = {}
    curves: dict[str, list[list[dict[str, float]]]] = {}
    heldout: dict[str, dict[int, dict[int, Datasets]]] = {}  # row -> step -> seed -> datasets
    judged: dict[str, dict[int, Judged]] = {}  # row -> seed -> both judges on the same steps
    once: set[tuple[str, int]] = set()  # (row, step) that is one measurement for every seed
    # Before evaluates the same warm-started models with the same evaluation seeds at every
    # seed: one evaluation is the whole measurement, shown without a spread. It plays as many
    # episodes per task as the trained rows pool over their seeds, so that its interval is not
    # wider for want of episodes alone.
    cells = [
        Cell(row, seed, out / row.slug / f"seed_{seed}", _row_config(config, row, seed, seeds))
        for row in chosen
        for seed in range(config.seed, config.seed + (seeds if row.mode is not None else 1))
    ]
    before = out / "before" / f"seed_{config.seed}" / "eval"
    for cell in cells:  # Before first: the trained rows' curves start from its evaluation
        if cell.row.mode is None:
            _evaluated(cell)
    pending = [c for c in cells if c.row.mode is not None and len(_rounds(c.run)) < config.rounds]
    if (before / "eval.json").is_file():
        for cell in cells:
            if cell.row.mode is not None:
                share_start(before, cell.run, cell.config)
    if workers > 1 and len(pending) > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        with ProcessPoolTaskRunner(max_workers=workers) as runner:
            futures = [
                runner.submit(
                    train_cell,
                    {
                        "config": c.config,
                        "run_dir": str(c.run.root),
                        "threads": threads,
                        "row": c.row.slug,
                    },
                )
                for c in pending
            ]
            for future in futures:
                future.result()
    else:
        for cell in pending:
            rlanything_train(config=cell.config, run_dir=str(cell.run.root))
    for cell in cells:
        name, mode, seed = cell.row.name, cell.row.mode, cell.seed
        evaluated = _evaluated(cell)
        curve = curve_datasets(cell.config, cell.run) if mode is not None else {}
        metrics = json.loads((evaluated / "eval.json").read_text())
        at_end = curve.get(config.rounds) if evaluated.name == f"step_{config.rounds:03d}" else None
        found = at_end or eval_datasets(cell.config, evaluated)
        # recomputed from the eval's datasets: pass@k, intervals and balanced accuracies
        # also for an eval.json written before they existed
        metrics |= _metrics(found, config.reward_model.votes)
        start = start_judged(cell, evaluated)
        if start is not None and found["id"][1] is not None:
            both = (found["id"][0], found["id"][1], start)
            judged.setdefault(name, {})[seed] = both
            metrics |= as_metrics(GAIN, judge_gain(*both, config.reward_model.votes))
        datasets.setdefault(name, {})[seed] = found
        rounds = _rounds(cell.run)
        accepted = 0.0 if mode != "env" else float(rounds[-1]["env/accepted_tasks_total"])
        results.setdefault(name, []).append(
            {k: v for k, v in metrics.items() if k.startswith("eval/")}
            | {"accepted_tasks": accepted}
        )
        if mode is not None:
            curves.setdefault(name, []).append(rounds)
            for step, found_at in curve.items():
                by_seed = heldout.setdefault(name, {}).setdefault(step, {})
                if step == 0 and _shared(cell.run):  # Before's evaluation: one measurement
                    once.add((name, step))
                    if by_seed:
                        continue
                by_seed[seed] = found_at
    summary = _summarize(results)
    pooled = {
        name: pooled_intervals(by_seed, config.reward_model.votes)
        for name, by_seed in datasets.items()
    }
    for name, pairs in judged.items():
        if len(pairs) == len(datasets[name]):
            pooled[name][GAIN] = pooled_gain(pairs, config.reward_model.votes)
    per_step = pooled_curves(heldout, once, seeds, config.reward_model.votes)
    paired = paired_differences(datasets)
    # What this invocation did and where: a resumed ablation's seconds cover only its part.
    invocation = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.time() - started, 1),
        "runs_trained": len(pending),
        "workers": workers,
        "machine": machine(),
    }
    write_json(out / "ablation.json", {"seeds": seeds, "rounds": config.rounds, "rows": summary,
                                       "pooled": pooled, "paired": paired, "per_seed": results,
                                       "curves": per_step, "invocation": invocation})  # fmt: skip
    with atomic_path(out / "ablation.md") as tmp:
        tmp.write_text(
            _markdown(summary, pooled, seeds, config.rounds)
            + _paired_table(paired)
            + _invocation_line(invocation)
        )
    plot_rows(curves, out)
    plot_heldout(per_step, out)
    return summary


@dataclass(frozen=True)
class Cell:
    """One (row, seed) of the table: its directory and its run's config."""

    row: Row
    seed: int
    root: Path
    config: RunConfig

    @property
    def run(self) -> RunDir:
        return RunDir(self.root / "run")


def _row_config(config: RunConfig, row: Row, seed: int, seeds: int) -> RunConfig:
    """The row's run config for one seed; Before's evaluation plays `seeds` times the
    configured episodes per task (the trained rows' pooled count)."""
    evaluation = config.evaluation.model_dump()
    if row.mode is None:
        evaluation["rollouts_per_task"] *= seeds
    return RunConfig.model_validate(
        config.model_dump()
        | {"mode": row.mode or "policy", "seed": seed, "evaluation": evaluation}
        | {"advantage": config.advantage.model_dump() | dict(row.advantage)}
    )


@task(name="train-cell")
def train_cell(config: RunConfig, run_dir: str, threads: int, row: str) -> None:
    """Train one (row, seed) in a worker process with `threads` torch threads, then evaluate it
    there (its held-out evaluation after the last round, and `start_judged`), so that the runs'
    evaluations also run side by side rather than one after another in the parent."""
    # Imported here: the process pool pickles this function by value, and a flow pickled with it
    # would lose its module's names (the parameter types Prefect validates against).
    from rlanything_flows.ablate import ROWS, Cell, _evaluated, start_judged
    from rlanything_flows.train import rlanything_train as train

    torch.set_num_threads(threads)
    train(config=config, run_dir=run_dir)
    chosen = next(r for r in ROWS if r.slug == row)
    cell = Cell(chosen, config.seed, Path(run_dir).parent, config)
    start_judged(cell, _evaluated(cell))


@task(name="warm-start-part")
def warm_start_part(config: RunConfig, run_dir: str, role: str, threads: int) -> None:
    """One role's warm start in a worker process with `threads` torch threads
    (`tasks.warm_start.warm_start_role`), recorded in the run's warm_start/<role>.json."""
    from rlanything_tasks.warm_start import warm_start_role  # by value in the pool, as `train_cell`

    torch.set_num_threads(threads)
    warm_start_role(config, RunDir(Path(run_dir)), role)


def _evaluated(cell: Cell) -> Path:
    """The directory of the cell's held-out evaluation, run now if missing: the models after the
    last round (Before: the starting ones). Where the learning curve's last point covers both
    splits it is that evaluation; where it covers some (`evaluation.curve_splits`), only the
    others are played, and the curve's splits are taken from it (`_adopt`): the same models,
    tasks and evaluation seeds would play the same episodes again. A stored evaluation whose
    split played other episodes than the config asks for (`_current`: another count, another
    `held_out_digest`, e.g. new `evaluation.ood_options`) is moved to eval.stale and that split
    played again; its current splits are kept."""
    config, mode, run = cell.config, cell.row.mode, cell.run
    last = run.root / "eval" / f"step_{config.rounds:03d}"
    covered = [
        s
        for s in SPLITS
        if mode is not None and s in config.evaluation.curve_splits and _current(last, config, s)
    ]
    if covered == list(SPLITS):
        return last
    evaluated = cell.root / "eval"
    kept = [s for s in SPLITS if s not in covered and _current(evaluated, config, s)]
    if len(covered) + len(kept) == len(SPLITS):
        return evaluated
    stale = evaluated.with_name("eval.stale")  # kept, not deleted: one older evaluation
    if (evaluated / "eval.json").is_file():
        shutil.rmtree(stale, ignore_errors=True)
        evaluated.rename(stale)
    else:  # an evaluation stopped before its eval.json: nothing of it is kept
        shutil.rmtree(evaluated, ignore_errors=True)
        kept = []
    after = 0 if mode is None else config.rounds
    rlanything_eval(
        config=config,
        policy=run.model_before("policy", after, config.policy.model.source),
        reward_model=None
        if mode == "outcome_only"
        else run.model_before("reward_model", after, config.reward_model.model.source),
        out_dir=str(evaluated),
        splits=[s for s in SPLITS if s not in covered and s not in kept],
    )
    if kept:
        _adopt(stale, evaluated, kept)
    if covered:
        _adopt(last, evaluated, covered)
    return evaluated


def _adopt(source: Path, evaluated: Path, splits: Sequence[str]) -> None:
    """Complete the evaluation in `evaluated` with `splits` of the one in `source` (of the same
    models): their datasets copied, their metrics and held-out digests merged into eval.json
    (written last, atomically: an interrupted merge leaves an eval.json without these splits,
    which `_current` finds incomplete and has redone)."""
    for split in splits:
        for path in source.glob(f"{split}_*.parquet"):
            with atomic_path(evaluated / path.name) as tmp:
                shutil.copyfile(path, tmp)
    prefixes = tuple(f"eval/{split}/" for split in splits)
    stored = json.loads((source / "eval.json").read_text())
    adopted = {key: value for key, value in stored.items() if key.startswith(prefixes)}
    merged = json.loads((evaluated / "eval.json").read_text()) | adopted
    digests = merged.get("held_out", {}) | {
        split: digest for split, digest in stored.get("held_out", {}).items() if split in splits
    }
    write_json(
        evaluated / "eval.json",
        merged | {"held_out": digests, "adopted_from": str(source)},
    )


def _current(evaluated: Path, config: RunConfig, split: str) -> bool:
    """Whether a stored evaluation played `split`'s episodes as the config asks: as many (an
    older ablation's Before played fewer) and with the same `held_out_digest`. One stored
    without digests (before 2026-11-27) played each split as the environment defines it, so
    its ood split is stale where `evaluation.ood_options` redefine it."""
    if not (evaluated / "eval.json").is_file():
        return False
    stored = json.loads((evaluated / "eval.json").read_text())
    ev = config.evaluation
    if stored.get(f"eval/{split}/episodes") != ev.num_tasks * ev.rollouts_per_task:
        return False
    digest = stored.get("held_out", {}).get(split)
    if digest is None:
        return split != "ood" or ev.ood_options is None
    return bool(digest == held_out_digest(config, split))


def start_judged(cell: Cell, evaluated: Path) -> pd.DataFrame | None:
    """For a run that trains its (judging) RM: the in-domain steps of its final evaluation
    judged again by the RM the run started from, with the evaluation's votes, seeds and
    sampling (`START_JUDGMENTS` in `evaluated`, judged once and kept), so that the trained and
    the starting judge are compared on the same steps (`GAIN`). None for other rows."""
    config = cell.config
    if cell.row.mode is None or not config.trains_reward_model or config.writes_unit_tests:
        return None
    path = evaluated / START_JUDGMENTS
    if not path.is_file():
        source = cell.run.model_before("reward_model", 0, config.reward_model.model.source)
        rollouts = read_dataset(evaluated / "id_rollouts.parquet", "rollouts")
        judged = judge_held_out(config, source, rollouts, "eval id judging by the starting RM")
        write_dataset(judged, path, "judgments")
    return read_dataset(path, "judgments")


def pooled_gain(by_seed: dict[int, Judged], votes: int) -> list[float]:
    """`GAIN` on all seeds' steps together, [value, low, high], clustered by (task, seed)."""
    rollouts, trained, started = (
        pd.concat([_per_seed(both[k], seed) for seed, both in by_seed.items()], ignore_index=True)
        for k in range(3)
    )
    return list(judge_gain(rollouts, trained, started, votes))


def warm_started(config: RunConfig, run: RunDir, workers: int = 1) -> RunConfig:
    """Run the config's warm starts once in `run` (resumable) and return the config with the
    warm-started checkpoints as model sources and warm starts off; unchanged without any. With
    `workers` > 1 the roles not yet warm-started train side by side first, in that many
    processes (`warm_start_part`), the largest first (episodes × epochs); the warm-start stage
    then finds them finished and keeps them. Each role's checkpoint is the one it would get
    alone: its training depends on its own pairs and the seed, not on the others'."""
    roles: dict[str, Any] = {
        "policy": config.policy,
        "reward_model": config.reward_model,
        "env_model": config.env_model,
    }
    if not any(role.warm_start.enabled for role in roles.values()):
        return config
    every_model = config.model_copy(update={"mode": "env"})  # warm the RM even if a row skips it
    run.init(every_model)
    pending = [
        role for role in warm_start_roles(every_model) if not run.warm_start_record(role).is_file()
    ]
    if workers > 1 and len(pending) > 1:
        pending.sort(key=lambda r: -roles[r].warm_start.episodes * roles[r].warm_start.epochs)
        threads = max(1, (os.cpu_count() or 1) // workers)
        with ProcessPoolTaskRunner(max_workers=min(workers, len(pending))) as runner:
            futures = [
                runner.submit(
                    warm_start_part,
                    {
                        "config": every_model,
                        "run_dir": str(run.root),
                        "role": r,
                        "threads": threads,
                    },
                )
                for r in pending
            ]
            for future in futures:
                future.result()
    outputs = run_stage(warm_start, every_model, str(run.root), WARM_START).record["outputs"]
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


def share_start(before: Path, run: RunDir, config: RunConfig) -> None:
    """Give a row's learning curve Before's evaluation as its first point (eval/step_000/):
    the same warm-started models, evaluated with the same `evaluation.seed` in every row and
    seed, so each row would only repeat it. Copies the curve's splits (and the RM's judgments
    where the row uses an RM); nothing when step 0 is the run's own evaluation or already this
    copy of Before's (a copy of an older Before evaluation, of other episodes or another
    `held_out_digest`, is replaced)."""
    start = run.root / "eval" / "step_000"
    stored = json.loads((before / "eval.json").read_text())
    prefixes = tuple(f"eval/{split}/" for split in config.evaluation.curve_splits)
    rm = tuple(f"{prefix}rm_" for prefix in prefixes)
    kept = {
        key: value
        for key, value in stored.items()
        if key.startswith(prefixes) and (config.uses_reward_model or not key.startswith(rm))
    }
    splits = config.evaluation.curve_splits
    kept["held_out"] = {k: v for k, v in stored.get("held_out", {}).items() if k in splits}
    if (start / "eval.json").is_file():
        copied = json.loads((start / "eval.json").read_text())
        counts = [f"eval/{split}/episodes" for split in splits]
        same = all(copied[k] == kept[k] for k in counts)
        if "shared_from" not in copied or (same and copied.get("held_out", {}) == kept["held_out"]):
            return
    tmp = start.with_name(".step_000.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for split in config.evaluation.curve_splits:
        names = [f"{split}_rollouts.parquet"]
        if config.uses_reward_model and (before / f"{split}_judgments.parquet").is_file():
            names.append(f"{split}_judgments.parquet")
        for name in names:
            shutil.copyfile(before / name, tmp / name)
    (tmp / "eval.json").write_text(json.dumps(kept | {"shared_from": str(before)}, indent=1))
    if start.exists():  # an older Before's copy: swapped out, then removed
        old = start.with_name(".step_000.old")
        shutil.rmtree(old, ignore_errors=True)
        start.rename(old)
        tmp.rename(start)
        shutil.rmtree(old)
    else:
        tmp.rename(start)


def curve_datasets(config: RunConfig, run: RunDir) -> dict[int, Datasets]:
    """The learning curve's eval datasets of a trained run (`evaluation.every`), per step
    (rounds completed): eval/step_NNN/ of the run directory; none without a curve."""
    steps = sorted((run.root / "eval").glob("step_*/eval.json"))
    return {
        int(path.parent.name.removeprefix("step_")): eval_datasets(
            config, path.parent, config.evaluation.curve_splits
        )
        for path in steps
    }


def eval_datasets(config: RunConfig, eval_dir: Path, splits: tuple[str, ...] = SPLITS) -> Datasets:
    """Each split's eval rollouts, and the judging RM's judgments where there are (none for
    Outcome-only, nor for a unit-test-writing RM, whose judgments are test verdicts)."""
    found: Datasets = {}
    for split in splits:
        rollouts = read_dataset(eval_dir / f"{split}_rollouts.parquet", "rollouts")
        path = eval_dir / f"{split}_judgments.parquet"
        judged = path.is_file() and not config.writes_unit_tests
        found[split] = (rollouts, read_dataset(path, "judgments") if judged else None)
    return found


def _metrics(found: Datasets, votes: int) -> dict[str, float]:
    """`policy_metrics` and, where judged, `reward_model_metrics` of every split."""
    metrics: dict[str, float] = {}
    for split, (rollouts, judgments) in found.items():
        metrics |= policy_metrics(split, rollouts)
        if judgments is not None:
            metrics |= reward_model_metrics(split, rollouts, judgments, votes)
    return metrics


def pooled_intervals(by_seed: dict[int, Datasets], votes: int) -> dict[str, list[float]]:
    """Every accuracy with an interval, on all seeds' eval datasets together: [value, low,
    high]. A task's episodes of each seed form a cluster of their own (the task id is prefixed
    with the seed); the RM metrics only when every seed's RM was judged."""
    found: Datasets = {}
    for split in next(iter(by_seed.values())):
        cells = [(seed, *cell[split]) for seed, cell in by_seed.items()]
        rollouts = pd.concat([_per_seed(r, seed) for seed, r, _ in cells], ignore_index=True)
        judged = all(j is not None for _, _, j in cells)
        judgments = (
            pd.concat([_per_seed(j, seed) for seed, _, j in cells if j is not None])
            if judged
            else None
        )
        found[split] = (rollouts, judgments)
    metrics = _metrics(found, votes)
    return {
        key: [value, metrics[f"{key}_ci_low"], metrics[f"{key}_ci_high"]]
        for key, value in metrics.items()
        if f"{key}_ci_low" in metrics
    }


def pooled_curves(
    heldout: dict[str, dict[int, dict[int, Datasets]]],
    once: set[tuple[str, int]],
    seeds: int,
    votes: int,
) -> dict[str, list[dict[str, Any]]]:
    """Each row's learning curve, pooled over seeds per rounds done (`pooled_intervals`): the
    steps that every seed evaluated, and those in `once` (row, step), which are one measurement
    shared by every seed (Before's evaluation as step 0) and counted once, not once per seed."""
    return {
        name: [
            {"step": step, **pooled_intervals(by_seed, votes)}
            for step, by_seed in sorted(steps.items())
            if len(by_seed) == seeds or (name, step) in once
        ]
        for name, steps in heldout.items()
    }


def paired_differences(datasets: dict[str, dict[int, Datasets]]) -> dict[str, dict[str, Any]]:
    """Per `PAIRED` comparison of two rows present, "A − B": per split, the paired difference
    of their held-out accuracies over the tasks both played, [D, low, high]
    (`stats.paired_difference`; a task's accuracy pools every seed's episodes of it), and the
    number of tasks."""
    found: dict[str, dict[str, Any]] = {}
    for a, b in PAIRED:
        if a not in datasets or b not in datasets:
            continue
        compared: dict[str, Any] = {}
        for split in SPLITS:
            if not all(split in cell for row in (a, b) for cell in datasets[row].values()):
                continue
            acc_a, acc_b = (per_task_accuracy(datasets[row], split) for row in (a, b))
            both = acc_a.index.intersection(acc_b.index)
            estimate = paired_difference(acc_a[both].to_numpy(), acc_b[both].to_numpy())
            compared[f"eval/{split}/policy_accuracy"] = list(estimate)
            compared[f"eval/{split}/tasks"] = len(both)
        found[f"{a} − {b}"] = compared
    return found


def per_task_accuracy(by_seed: dict[int, Datasets], split: str) -> pd.Series:
    """Per task ("task_id@version"): the share of every seed's episodes of it that succeeded."""
    played = pd.concat([episodes(cell[split][0]) for cell in by_seed.values()], ignore_index=True)
    return (played["outcome"] > 0).groupby(task_key(played)).mean()


def _invocation_line(invocation: dict[str, Any]) -> str:
    """The wall time of the command that wrote the table, with what it trained, on which CPU."""
    cpu = invocation["machine"]
    return (
        f"\nThis command: {invocation['seconds'] / 60:.1f} min, {invocation['runs_trained']} "
        f"runs trained, {invocation['workers']} workers; {cpu['cpu_model']} "
        f"({cpu['cpu_count']} cores, {', '.join(cpu['cpu_flags'])}), {invocation['measured_at']}.\n"
    )


def _paired_table(paired: dict[str, dict[str, Any]]) -> str:
    if not paired:
        return ""
    lines = [
        "",
        "Paired differences on the same held-out tasks, in points: each task's accuracy over "
        "all of a row's episodes of it (every seed's), the difference averaged over tasks, its "
        "95 % interval with tasks as units (a paired test: it excludes 0 when one row beats the "
        "other on these tasks).",
        "",
        "| Comparison | " + " | ".join(f"{s.upper()} (tasks)" for s in SPLITS) + " |",
        "|---|" + "---|" * len(SPLITS),
    ]
    for name, compared in paired.items():
        cells = []
        for split in SPLITS:
            key = f"eval/{split}/policy_accuracy"
            if key not in compared:
                cells.append("–")
                continue
            value, low, high = (100 * v for v in compared[key])
            interval = "n/a" if np.isnan(low) else f"{low:+.1f}, {high:+.1f}"
            cells.append(f"{value:+.1f} [{interval}] ({compared[f'eval/{split}/tasks']})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _shared(run: RunDir) -> bool:
    """Whether the run's step-0 evaluation is Before's, copied by `share_start`."""
    stored = json.loads((run.root / "eval" / "step_000" / "eval.json").read_text())
    return "shared_from" in stored


def _per_seed(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    return frame.assign(task_id=f"seed_{seed}/" + frame["task_id"])


def _summarize(results: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, list[float]]]:
    """Per row and metric: [mean, population std] over seeds (nan when a seed's value is
    undefined); a per-seed interval's bounds are left out (the pooled interval replaces them)."""
    summary: dict[str, dict[str, list[float]]] = {}
    for name, cells in results.items():
        frame = pd.DataFrame(cells)
        summary[name] = {
            key: [float(frame[key].to_numpy().mean()), float(np.std(frame[key].to_numpy()))]
            for key in frame.columns
            if not key.endswith(CI_SUFFIXES)
        }
    return summary


def _markdown(
    summary: dict[str, dict[str, list[float]]],
    pooled: dict[str, dict[str, list[float]]],
    seeds: int,
    rounds: int,
) -> str:
    """Table 1's columns, then pass@k on the same held-out sets, in %."""
    # the k every row has: Before, playing more episodes per task, has more
    ks = sorted(
        set.intersection(
            *({int(key.rsplit("_", 1)[1]) for key in row if "pass_at_" in key}
              for row in summary.values())
        )
    )  # fmt: skip
    passes = [
        (f"eval/{split}/pass_at_{k}", f"{split.upper()} pass@{k}") for split in SPLITS for k in ks
    ]
    spread = "Mean ± std over" if seeds > 1 else "Value of"
    lines = [
        f"{spread} {seeds} seed(s), {rounds} round(s) per run; accuracies in %; [low, high]: "
        "95 % interval of all seeds' held-out episodes pooled, clustered by (task, seed) "
        "(n/a: a single cluster). RM columns: balanced accuracy (mean recall of both classes). "
        "RM gain, same steps: the trained RM's balanced process accuracy minus that of the RM "
        "the run started from, both judging the row's final in-domain held-out steps (points; "
        "paired interval). Outcome as judge: the balanced process accuracy, on the same "
        "steps, of calling every step of a won episode progress and every step of a lost one "
        "not, the judge that consistency feedback rewards agreeing with. "
        "Before is one evaluation (every seed would evaluate the same warm-started models with "
        "the same evaluation seeds) playing as many episodes per task as a trained row pools "
        "over its seeds; its interval is clustered by task.",
        "",
    ]
    lines += _table(summary, pooled, seeds, COLUMNS)
    lines += ["", "pass@k on the same held-out sets, in %:", ""]
    lines += _table(summary, pooled, seeds, tuple(passes))
    return "\n".join(lines) + "\n"


def _table(
    summary: dict[str, dict[str, list[float]]],
    pooled: dict[str, dict[str, list[float]]],
    seeds: int,
    columns: tuple[tuple[str, str], ...],
) -> list[str]:
    lines = [
        "| Row | " + " | ".join(label for _, label in columns) + " |",
        "|" + "---|" * (len(columns) + 1),
    ]
    for name in summary:
        cells = []
        for key, _ in columns:
            if key not in summary[name]:
                cells.append("–")
                continue
            scale = 1.0 if key == "accepted_tasks" else 100.0
            mean, std = summary[name][key]
            spread = seeds > 1 and name != "Before"
            cell = _scaled(mean, scale) + (f" ± {_scaled(std, scale)}" if spread else "")
            if key in pooled[name]:
                _, low, high = pooled[name][key]
                interval = "n/a" if np.isnan(low) else f"{low * 100:.1f}, {high * 100:.1f}"
                cell += f" [{interval}]"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _scaled(value: float, scale: float) -> str:
    return "n/a" if np.isnan(value) else f"{value * scale:.1f}"
