"""`rlanything-train`: a training run of N rounds, each the `rlanything-round` subflow.

With `evaluation.every` = k it also draws a learning curve: `rlanything-eval` of the starting
models (step 0), of the checkpoints after every k-th round and after the last one (step = rounds
completed), in RUN_DIR/eval/step_NNN/.

Resumable: finished rounds (listed in summary.json), finished stages (their markers) and finished
evaluations (their eval.json) are not redone; MLflow logging of a round or an evaluation is
idempotent.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from datetime import UTC
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterParentFlowRunId,
)
from prefect.client.schemas.objects import FlowRun, State, StateType
from prefect.runtime import flow_run
from prefect.states import Completed, Crashed

from rlanything_core.base.schemas import read_dataset, write_dataset
from rlanything_core.method.rloop import success_rates
from rlanything_core.method.stats import Estimate, paired_difference
from rlanything_core.run.config import ConfigError, RunConfig, load_config
from rlanything_core.run.pool import initial_pool
from rlanything_core.run.rundir import WARM_START, RunDir, write_json
from rlanything_flows.evaluate import rlanything_eval
from rlanything_flows.round import rlanything_round
from rlanything_flows.tracking import Tracker, log_evaluation, record_crash
from rlanything_tasks.common import run_stage
from rlanything_tasks.stages import warm_start

RUN_DIR_FIELDS = ("date", "flow_run_name", "flow_run_id")


def expand_run_dir(template: str, of: FlowRun | None = None) -> str:
    """`template` with {date} (the flow run's scheduled start, UTC, YYYY-MM-DD), {flow_run_name}
    and {flow_run_id} filled in from the flow run `of`, by default the running one. A Retry is
    the same flow run, so it expands to the same directory and resumes it; every new (e.g.
    scheduled) flow run gets its own."""
    if of is None:
        start, name, run_id = flow_run.scheduled_start_time, flow_run.get_name(), flow_run.get_id()
    else:
        start, name, run_id = of.expected_start_time or of.created, of.name, str(of.id)
    fields = {
        "date": start.astimezone(UTC).strftime("%Y-%m-%d") if start else "",
        "flow_run_name": name or "",
        "flow_run_id": run_id or "",
    }
    try:
        return template.format_map(fields)
    except (KeyError, ValueError, IndexError) as exc:
        raise ValueError(
            f"run_dir {template!r} has a placeholder other than "
            f"{', '.join('{' + f + '}' for f in RUN_DIR_FIELDS)} ({exc!r}); use those, or no "
            "braces."
        ) from exc


def pick_config(config: RunConfig | None, config_file: str | None) -> RunConfig:
    """The run config given either as the config itself or as the path of a YAML file
    (relative paths: to the working directory, which for a deployment is the clone it was
    deployed from); exactly one of the two."""
    if (config is None) == (config_file is None):
        raise ConfigError(
            "give the run config either as `config` or as `config_file` (a YAML path such as "
            "configs/tiny.yaml), not "
            + ("both" if config is not None else "neither")
            + "; e.g. prefect deployment run rlanything-train/nightly-tiny "
            "--param config_file=configs/tiny.yaml"
        )
    return config if config is not None else load_config(str(config_file))


def on_train_crashed(flow: Any, flow_run: FlowRun, state: State) -> None:
    """Prefect's crash hook of `rlanything-train`, which the worker runs when the flow run's
    process dies (a kill -9, the OOM killer): mark Crashed, at once, what the flow run left
    Running in Prefect (its round and evaluation subflows and their stages), and end its MLflow
    runs KILLED with the reason (`tracking.record_crash`). A Retry or `rlanything resume` then
    continues the run directory as before."""
    crashed = flow_run  # Prefect passes the hook's arguments by these names
    reason = f"flow run {crashed.name} crashed: {state.message or state.name}"
    mark_crashed([str(crashed.id)], reason)
    root = Path(expand_run_dir(str(crashed.parameters.get("run_dir", "runs/latest")), crashed))
    if not root.is_absolute() and crashed.deployment_id is not None:
        # relative to the directory the flow ran in: the deployment's, not the worker's
        with get_client(sync_client=True) as client:
            path = client.read_deployment(crashed.deployment_id).path
        root = Path(path or ".") / root
    if RunDir(root).state_path.is_file():
        record_crash(RunDir(root), reason)


@flow(name="rlanything-train", on_crashed=[on_train_crashed])
def rlanything_train(
    config: RunConfig | None = None,
    run_dir: str = "runs/latest",
    config_file: str | None = None,
) -> Any:
    """Run (or continue) the config's rounds in `run_dir`; returns the summary. The config is
    `config` or the YAML file `config_file` (`pick_config`).

    `run_dir` may hold {date}, {flow_run_name} and {flow_run_id} (`expand_run_dir`): a scheduled
    deployment then trains a new run every time. A run directory that already has every round
    and evaluation trains nothing: the log says so, and the flow run ends in the Completed state
    named "AlreadyFinished" (a caller of the function still gets the summary)."""
    config = pick_config(config, config_file)
    run = RunDir(expand_run_dir(run_dir))
    with run.exclusive() as left:
        if left is not None:
            get_run_logger().warning(
                "took over %s from PID %s on host %s, which died holding it",
                run.root,
                left.get("pid"),
                left.get("host"),
            )
        run.init(config)
        before = (
            _progress(json.loads(run.summary_path.read_text()))
            if run.summary_path.is_file()
            else None
        )
        with Tracker(run, config, flow_run.get_id()).finishing() as tracker:
            if flow_run.get_id():
                tracker.link_flow_run(flow_run.get_id())
            summary = train_rounds(config, run, tracker)
            # rounds redone (`--redo-from`, markers removed) leave the counts as they were
            tracker.idle = before == _progress(summary) and tracker.redone_from is None
    summary["mlflow_ui"] = tracker.ui_hint()
    if tracker.idle:
        message = (
            f"{run.root} already has all {config.rounds} round(s) and evaluations: nothing was "
            "trained. Raise `rounds` to continue it, or give run_dir a {date} or "
            "{flow_run_name} placeholder so that each flow run trains a new one."
        )
        get_run_logger().warning(message)
        return Completed(name="AlreadyFinished", message=message, data=summary)
    return summary


def _progress(summary: dict[str, Any]) -> tuple[int, int]:
    """(rounds, evaluations) a run's summary lists."""
    return len(summary["rounds"]), len(summary.get("eval", []))


def crash_superseded(previous: list[str], current: str | None) -> int:
    """Mark as Crashed what a killed process left "Running" in Prefect: the run directory's
    earlier flow runs (`previous`: those summary.json and state.json list) and, under them and
    under `current` (a Retry reuses its flow run), every subflow run and task run still Running
    or Pending. Called before the current flow run starts any of its own rounds. Returns how
    many were marked."""
    message = f"superseded by flow run {current}, which resumed this run directory"
    return mark_crashed([*previous, *([current] if current else [])], message, keep=current)


def mark_crashed(flow_run_ids: list[str], message: str, keep: str | None = None) -> int:
    """Mark Crashed, with `message`, the flow runs `flow_run_ids` (except `keep`), their subflow
    runs and the task runs of both that are still Running or Pending. Returns how many."""
    live = {StateType.RUNNING, StateType.PENDING}
    current = keep
    ids = [UUID(i) for i in set(flow_run_ids)]
    if not ids:
        return 0
    marked = 0
    with get_client(sync_client=True) as client:
        tops = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=ids))
        )
        flows = [r for r in tops if str(r.id) != current] + children
        for run in flows:
            if run.state_type in live:
                client.set_flow_run_state(run.id, Crashed(message=message), force=True)
                marked += 1
        owners = [*ids, *(r.id for r in children)]
        for task_run in client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=owners))
        ):
            if task_run.state_type in live:
                client.set_task_run_state(task_run.id, Crashed(message=message), force=True)
                marked += 1
    return marked


def redo_rounds(run: RunDir, tracker: Tracker, summary: dict[str, Any], first: int) -> None:
    """Forget what the run recorded of rounds `first` on, whose stage markers are no longer
    all there (`rlanything resume --redo-from`, or removed by hand), so that they are trained
    again: their summary entries, the learning curve's later steps (evaluated on their
    checkpoints, so their eval/step_NNN/ too) and their MLflow runs (`Tracker.forget_rounds`)."""
    get_run_logger().info(
        "round %d lacks stage markers: redoing rounds %d to %d",
        first,
        first,
        len(summary["rounds"]) - 1,
    )
    summary["rounds"] = summary["rounds"][:first]
    if "eval" in summary:
        summary["eval"] = [p for p in summary["eval"] if p["step"] <= first]
    for step_dir in sorted((run.root / "eval").glob("step_*")):
        if int(step_dir.name.removeprefix("step_")) > first:
            shutil.rmtree(step_dir)
    tracker.forget_rounds(first)
    write_json(run.summary_path, summary)


def train_rounds(config: RunConfig, run: RunDir, tracker: Tracker) -> dict[str, Any]:
    """The initial task pool (unless one is there), the warm start, then the rounds that
    summary.json does not list yet, each the `rlanything-round` subflow logged by `tracker`.
    Used by `rlanything-train` and by each exploration of `rlanything-rloop`."""
    for path in run.sweep_partial():
        get_run_logger().info("removed %s, left half-written by a process that died", path)
    run.verify_all()
    # every flow run that works on the directory is recorded before it does any work, so that
    # the next one can mark it Crashed however early it was killed (summary.json lists only
    # those that finished a round)
    state, current = run.load_state(), flow_run.get_id()
    attempts = [*state.get("prefect_flow_run_ids", [])]
    if current and current not in attempts:
        run.save_state({**state, "prefect_flow_run_ids": [*attempts, current]})
    if not run.dataset(0, "tasks").is_file():
        pool = initial_pool(config.environment)
        write_dataset(pool, run.dataset(0, "tasks"), "tasks")
    if any(m.warm_start.enabled for m in (config.policy, config.reward_model, config.env_model)):
        tracker.log_warm_start(run_stage(warm_start, config, str(run.root), WARM_START).record)
    summary: dict[str, Any] = (
        json.loads(run.summary_path.read_text())
        if run.summary_path.is_file()
        else {"run_dir": str(run.root), "rounds": []}
    )
    summary["mlflow_run_id"] = tracker.parent_id
    summary["mlflow_tracking_uri"] = tracker.uri
    complete = run.complete_rounds(config.rounds)
    if len(summary["rounds"]) > complete:  # markers removed: redo from the first such round
        redo_rounds(run, tracker, summary, complete)
    marked = crash_superseded([*summary.get("prefect_flow_run_ids", []), *attempts], current)
    if marked:
        get_run_logger().info("marked %d flow/task run(s) of a killed process Crashed", marked)
    summary.setdefault("prefect_flow_run_ids", []).append(flow_run.get_id())
    learning_curve(config, run, tracker, summary)
    if summary["rounds"]:  # a process killed while it logged them leaves them partly logged
        tracker.log_plots(summary["rounds"])
    for r in range(len(summary["rounds"]), config.rounds):
        started = time.time()
        metrics = rlanything_round(config=config, run_dir=str(run.root), round_idx=r)
        previous = summary["rounds"][-1]["env/accepted_tasks_total"] if summary["rounds"] else 0
        metrics["env/accepted_tasks_total"] = previous + metrics["env/accepted_tasks"]
        tracker.log_round(r, metrics, started)
        summary["rounds"].append({"round": r, **metrics})
        summary["accepted_tasks_total"] = metrics["env/accepted_tasks_total"]
        write_json(run.summary_path, summary)
        tracker.log_plots(summary["rounds"])
        learning_curve(config, run, tracker, summary)
    run.verify_all()  # exit 0 only where every file a finished stage recorded is intact
    return summary


def eval_steps(every: int | None, rounds: int, completed: int) -> list[int]:
    """The learning curve's steps (rounds completed) due once `completed` rounds are done: 0,
    every multiple of `every`, and `rounds` (the last); none when `every` is None."""
    if every is None:
        return []
    return [s for s in range(completed + 1) if s % every == 0 or s == rounds]


def learning_curve(
    config: RunConfig, run: RunDir, tracker: Tracker, summary: dict[str, Any]
) -> None:
    """Evaluate each due step of the learning curve (`eval_steps`) that summary["eval"] does not
    list yet: the policy (and the reward model, in modes that use one) a round `step` would start
    from, with `rlanything-eval` nested under the run's MLflow run, into eval/step_NNN/ (skipped
    when its eval.json exists); then log its metrics with step = rounds completed, add it to
    summary["eval"] and redraw plots/learning_curve.png."""
    done = {point["step"] for point in summary.get("eval", [])}
    for step in eval_steps(config.evaluation.every, config.rounds, len(summary["rounds"])):
        if step in done:
            continue
        out = run.root / "eval" / f"step_{step:03d}"
        if (out / "eval.json").is_file():
            stored = json.loads((out / "eval.json").read_text())
            metrics = {k: float(v) for k, v in stored.items() if k.startswith("eval/")}
            if not tracker.evaluation_logged(out):  # killed while it was logged
                log_evaluation(
                    config,
                    metrics,
                    # an evaluation adopted from another run (ablations) may not name them
                    policy=str(stored.get("policy", out.name)),
                    reward_model=stored.get("reward_model"),
                    out_dir=out,
                    parent_run_id=tracker.parent_id,
                )
        else:
            metrics = rlanything_eval(
                config=config,
                policy=run.model_before("policy", step, config.policy.model.source),
                reward_model=run.model_before(
                    "reward_model", step, config.reward_model.model.source
                )
                if config.uses_reward_model
                else None,
                out_dir=str(out),
                parent_run_id=tracker.parent_id,
                splits=config.evaluation.curve_splits,
            )
        if step > 0:
            metrics |= paired_gains(run, step, config.evaluation.curve_splits)
        tracker.log_eval(step, metrics)
        summary.setdefault("eval", []).append({"step": step, **metrics})
        write_json(run.summary_path, summary)
        tracker.log_learning_curve(summary["eval"])


def paired_gain(root: Path, split: str, first: int, last: int) -> tuple[Estimate, int] | None:
    """The policy's held-out gain from learning-curve step `first` to `last` on `split`: D, the
    mean over the tasks both steps played of (a task's share of episodes won at `last` − at
    `first`), with its 95 % interval, tasks as units (`stats.paired_difference`); and the number
    of tasks. None where either step's episodes are not in the run directory `root`. The curve
    plays the same tasks at every step, so the pairing removes what makes one task easier than
    another."""
    files = [root / "eval" / f"step_{s:03d}" / f"{split}_rollouts.parquet" for s in (first, last)]
    if not all(f.is_file() for f in files):
        return None
    before, after = (success_rates(read_dataset(f, "rollouts")) for f in files)
    both = before.index.intersection(after.index)
    return paired_difference(after[both].to_numpy(float), before[both].to_numpy(float)), len(both)


def paired_gains(run: RunDir, step: int, splits: Sequence[str]) -> dict[str, float]:
    """`paired_gain` from step 0 to `step` for each split, as eval/<split>/policy_gain with
    _ci_low and _ci_high, and the tasks it rests on as eval/<split>/policy_gain_tasks."""
    found: dict[str, float] = {}
    for split in splits:
        paired = paired_gain(run.root, split, 0, step)
        if paired is None:
            continue
        (value, low, high), tasks = paired
        key = f"eval/{split}/policy_gain"
        found |= {key: value, f"{key}_ci_low": low, f"{key}_ci_high": high,
                  f"{key}_tasks": float(tasks)}  # fmt: skip
    return found
