"""MLflow tracking of a training run: every MLflow call of the project lives here.

One parent run per training run (tagged with the Prefect flow-run id), one nested run per round.
Parameters are logged once; metrics are floats with step = round, on the round's run and on the
parent (for curves). Every Parquet dataset of a round is logged on the round's run with its
source path, its sha256 and its role ("input": the round's task pool; "output": what its stages
wrote, the next pool included, tagged with the stage; lineage). Each round's checkpoints are
MLflow Logged Models (their files as the model's artifacts, or with `tracking.checkpoints:
reference` external models that record the path), registered as versions of
`<experiment>-policy` and `<experiment>-reward-model`. The learning curve's held-out metrics
(`evaluation.every`) go to the parent with step = rounds completed, and move each registered
model's alias `best` to the version with the best held-out score (`BEST_BY`). MLflow reserves
the alias `latest`: `models:/<name>/latest` is its newest version.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import sqlite3
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import mlflow
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator
from mlflow.data.pandas_dataset import from_pandas
from mlflow.entities import (
    DatasetInput,
    InputTag,
    LoggedModelOutput,
    LoggedModelStatus,
    Metric,
    Param,
    RunStatus,
)
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT, MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

from rlanything_core.base import failpoints
from rlanything_core.base.atomic import atomic_path
from rlanything_core.base.paths import data_root
from rlanything_core.base.schemas import read_dataset
from rlanything_core.run.config import RunConfig
from rlanything_core.run.rundir import ROLES, RunDir, RunDirError, sha256_file

ROUND_OUTPUTS = (
    ("rollouts", "rollout"),
    ("judgments", "reward-scoring"),
    ("unit_tests", "reward-scoring"),
    ("policy_samples", "advantage-computation"),
    ("rm_samples", "advantage-computation"),
    ("test_samples", "advantage-computation"),
    ("candidates", "task-rewriting"),
    ("acceptance", "acceptance-check"),
)
"""A round's datasets that its stages write, with the stage that writes each."""


def produced(config: RunConfig) -> set[str]:
    """The round datasets that hold rows in `config`'s mode: the others are written empty (so
    that every stage reads the same files) and not logged. The reward model's judgments in
    every mode that uses one, its unit tests in unit-test mode only, the rewrites where tasks
    are adapted."""
    names = {"rollouts", "policy_samples"}
    if config.uses_reward_model:
        names |= {"judgments", "rm_samples"}
    if config.writes_unit_tests:
        names |= {"unit_tests", "test_samples"}
    if config.adapts_tasks:
        names |= {"candidates", "acceptance"}
    return names


BEST_BY = {"policy": "policy_accuracy", "reward_model": "rm_process_balanced_accuracy"}
"""The held-out metric (`eval/<split>/<name>`, higher is better) that picks each role's `best`."""
BEST_COUNT = {"policy": ("episodes", "episodes"), "reward_model": ("rm_steps", "steps")}
"""What each role's score was measured on: its metric (`eval/<split>/<name>`) and unit."""
BEST_ALIAS = "best"
# MLflow 3's UI opens an experiment without a kind in its GenAI view ("Evaluation runs"), which
# hides the metric charts and run table of a training run; this kind opens the training view.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
TRAINING_VIEW = "workflowType=machine_learning"
"""The query that makes MLflow 3.17's UI show the model-training view (its default is GenAI)."""


def tracking_uri() -> str:
    """$MLFLOW_TRACKING_URI, else a SQLite store `mlflow.db` in the working directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def artifact_location(uri: str, name: str, configured: str | None) -> str | None:
    """Where a new experiment `name` in the store `uri` keeps its artifacts: `configured` if set;
    for a local store, the user's data directory (MLflow's own default, ./mlruns, would follow
    whatever directory the process runs in); for a tracking server, None (its default root)."""
    if configured is not None:
        return configured
    if uri.startswith(("sqlite:", "file:")) or "://" not in uri:
        folder = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        return (data_root() / "mlartifacts" / folder).resolve().as_uri()
    return None


def store_problem(uri: str) -> str | None:
    """Why the local SQLite store `uri` cannot be used (a corrupt or foreign file), naming the
    file and how to start a fresh store; None when it can, or is not a local SQLite store."""
    database = Path(uri.removeprefix("sqlite:///").split("?")[0])
    if not uri.startswith("sqlite:///") or not database.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            db.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.DatabaseError as exc:
        return (
            f"the MLflow store {database} is not a readable SQLite database ({exc}). Move it "
            f"aside (mv {database} {database}.broken) to start a fresh store; run directories "
            "keep every file (a run started with the old store resumes only with it). Nothing "
            "was trained."
        )
    return None


def open_experiment(uri: str, name: str, location: str | None = None) -> str:
    """Point MLflow at `uri` and return the id of experiment `name`, creating either if missing;
    a new experiment keeps its artifacts at `artifact_location(uri, name, location)`.

    A new SQLite store is created by running MLflow's schema migrations, and two processes that do
    this at once break each other's migrations (alembic errors, then an exit); an experiment made
    by two processes at once fails on its unique name. So for a SQLite store both happen under an
    exclusive lock on `<database>.lock`, held only for this call."""
    mlflow.set_tracking_uri(uri)
    database = uri.removeprefix("sqlite:///").split("?")[0]
    with contextlib.ExitStack() as stack:
        if uri.startswith("sqlite:///") and database not in ("", ":memory:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
            lock = stack.enter_context(open(f"{database}.lock", "a"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        if mlflow.get_experiment_by_name(name) is None:
            with contextlib.suppress(MlflowException):  # made meanwhile by another client
                mlflow.create_experiment(
                    name,
                    artifact_location=artifact_location(uri, name, location),
                    tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
                )
        experiment = mlflow.set_experiment(name)
        if EXPERIMENT_KIND_TAG not in experiment.tags:  # made before, or by someone else
            MlflowClient().set_experiment_tag(
                experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND
            )
        return experiment.experiment_id


def registered_model_name(experiment: str, role: str) -> str:
    """The registered model that holds `role`'s checkpoints of the experiment's runs:
    `rlanything-tiny-policy`, `rlanything-tiny-reward-model`."""
    return f"{experiment}-{role.replace('_', '-')}"


def eval_signature(config: RunConfig) -> str:
    """A digest of what held-out scores depend on besides the model (the evaluation and
    environment settings): `best` compares only versions with the same signature."""
    fields = config.evaluation.model_dump(mode="json", exclude={"every", "curve_splits"})
    scope = {"evaluation": fields, "environment": config.environment.model_dump(mode="json")}
    return hashlib.sha256(json.dumps(scope, sort_keys=True).encode()).hexdigest()[:16]


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat |= _flatten(value, f"{name}.")
        else:
            flat[name] = str(value)
    return flat


class Tracker:
    """The MLflow side of one training run; safe to recreate on resume."""

    def __init__(
        self,
        run: RunDir,
        config: RunConfig,
        flow_run_id: str | None,
        parent_run_id: str | None = None,
    ) -> None:
        """`parent_run_id` nests this run's MLflow run (an RLoop cycle under its RLoop run)."""
        self.run = run
        self.config = config
        self.uri = tracking_uri()
        self.experiment_id = open_experiment(
            self.uri, config.tracking.experiment, config.tracking.artifact_location
        )
        self.client = MlflowClient(self.uri)
        self.started = time.time()
        self.redone_from: int | None = None
        """The first redone round (`forget_rounds`): its and later steps' parent points are
        compared by value before they are logged again."""
        self.idle = False
        """Set when this attempt trained nothing (`finish` then leaves the run as it was)."""
        self.previous: tuple[str, int | None] | None = None
        state = run.load_state()
        if "mlflow_run_id" in state:
            self.parent_id: str = state["mlflow_run_id"]
            info = self._resumed_run(state).info
            self.previous = (info.status, info.end_time)
            self.client.update_run(self.parent_id, status="RUNNING")
            self.kill_leftovers(flow_run_id)
        else:
            parent = self.client.create_run(
                self.experiment_id,
                run_name=run.root.name,
                tags={
                    "prefect.flow_run_id": flow_run_id or "",
                    "rlanything.run_dir": str(run.root),
                    "rlanything.mode": config.mode,
                    **config.environment.env.tracking_tags(),
                    **({MLFLOW_PARENT_RUN_ID: parent_run_id} if parent_run_id else {}),
                },
            )
            self.parent_id = parent.info.run_id
            self._log_params(self.parent_id, {})
            run.save_state(
                {**state, "mlflow_run_id": self.parent_id, "mlflow_tracking_uri": self.uri}
            )
        if flow_run_id:  # the latest flow run that worked on this run (resumes add new ones)
            self.client.set_tag(self.parent_id, "prefect.last_flow_run_id", flow_run_id)

    def _resumed_run(self, state: dict[str, Any]) -> Any:
        """The MLflow run that a resumed run directory was started with, or a clear error when
        this tracking store does not have it (the run was started with another store)."""
        try:
            return self.client.get_run(self.parent_id)
        except MlflowException as err:
            if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            started = state.get("mlflow_tracking_uri", "a store this run directory did not record")
            raise RunDirError(
                f"{self.run.root} was started with MLflow run {self.parent_id}, which the "
                f"tracking store {self.uri} does not have; it was started with {started}. "
                "Resume with MLFLOW_TRACKING_URI set to that store, or train into a new run "
                "directory. Nothing in the run directory was changed."
            ) from err

    def kill_leftovers(self, flow_run_id: str | None) -> list[str]:
        """Mark KILLED (MLflow's word for Prefect's Crashed) the nested runs that a killed
        process left RUNNING under this run: a round run it was logging, an evaluation. They
        stay in the run list, tagged with the flow run that superseded them; a round's next
        attempt logs a new run. The run of a nested training run (an RLoop cycle, tagged
        with its run directory) is left alone: its own Tracker resumes it. Returns their ids."""
        running = self.client.search_runs(
            [self.experiment_id],
            filter_string=(
                f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{self.parent_id}' "
                "and attributes.status = 'RUNNING'"
            ),
        )
        left = [r for r in running if "rlanything.run_dir" not in r.data.tags]
        for stale in left:
            self.client.set_tag(
                stale.info.run_id, "rlanything.superseded_by", flow_run_id or "a resume"
            )
            retire(self.client, self.experiment_id, stale.info.run_id)
        return [stale.info.run_id for stale in left]

    def _log_params(self, run_id: str, extra: dict[str, str]) -> None:
        """The config, flattened (`policy.update.lr`), and `extra` as params of `run_id`."""
        params = _flatten(self.config.model_dump(mode="json")) | extra
        items = [Param(k, v[:6000]) for k, v in params.items()]
        for start in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[start : start + 100])

    def log_warm_start(self, record: dict[str, Any]) -> None:
        """Warm-start metrics (step 0) and its SFT datasets as inputs of the parent run, once."""
        state = self.run.load_state()
        if state.get("warm_start_logged"):
            return
        stamp = int(pd.Timestamp.now().timestamp() * 1000)
        points = [Metric(k, float(v), stamp, 0) for k, v in sorted(record["metrics"].items())]
        self.client.log_batch(self.parent_id, metrics=points)
        for key, path in sorted(record["outputs"].items()):
            if key.endswith("_sft"):
                self._log_input(self.parent_id, Path(path), "sft_samples", key, "warm_start")
        self.run.save_state({**state, "warm_start_logged": True})

    def _log_input(
        self,
        run_id: str,
        path: Path,
        dataset: str,
        name: str,
        context: str,
        tags: dict[str, str] | None = None,
    ) -> None:
        """Log a Parquet file as an MLflow dataset input of `run_id`, its source path and its
        sha256: the digest field holds the first 16 hex digits (MLflow's column is short), the
        tag `sha256` the whole. Through the client, not `mlflow.start_run(run_id=…)`: leaving
        that context ends the run (FINISHED), so a process killed later would leave a half-logged
        round marked finished, and the parent run finished while it trains."""
        full = sha256_file(path)
        frame = read_dataset(path, dataset)
        frame = frame[[c for c in frame.columns if not c.endswith(("_ids", "logprobs"))]]
        with warnings.catch_warnings():
            # Two MLflow notices per dataset that say nothing about our data: a local path
            # matches its local source type twice (from_pandas), and integer columns could not
            # hold NaN (raised where the dataset's schema is inferred, for its entity). Our
            # integer columns never hold NaN (the schemas in rlanything_core/base/schemas.py).
            warnings.filterwarnings("ignore", "The specified dataset source can be interpreted")
            warnings.filterwarnings("ignore", "Hint: Inferred schema contains integer column")
            data = from_pandas(frame, source=str(path), name=name, digest=full[:16])
            entity = data._to_mlflow_entity()  # infers the schema, where the hint is raised
        labels = {"sha256": full, **(tags or {}), MLFLOW_DATASET_CONTEXT: context}
        entry = DatasetInput(entity, [InputTag(k, v) for k, v in labels.items()])
        try:
            self.client.log_inputs(run_id, datasets=[entry])
        except MlflowException as exc:
            # Two runs sharing a store may insert the same dataset (equal name and digest) at
            # once; MLflow's look-up-then-insert lets the second fail on the unique key. The
            # dataset exists by then, so logging again links it instead of inserting it.
            if "UNIQUE constraint failed: datasets" not in str(exc):
                raise
            self.client.log_inputs(run_id, datasets=[entry])

    def _round_run(self, round_idx: int, started: float | None) -> tuple[str, bool]:
        """(run id, already finished) of the round's nested run, creating it when missing, with
        its start at `started` (epoch seconds; None: now) and the config and round as params."""
        found = self.client.search_runs(
            [self.experiment_id],
            filter_string=(
                f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{self.parent_id}' "
                f"and tags.`rlanything.round` = '{round_idx}'"
            ),
        )
        for existing in found:
            if existing.info.status == RunStatus.to_string(RunStatus.FINISHED):
                return existing.info.run_id, True
        # none finished: attempts of killed processes stay KILLED (`kill_leftovers`)
        child = self.client.create_run(
            self.experiment_id,
            start_time=None if started is None else int(started * 1000),
            tags={
                MLFLOW_PARENT_RUN_ID: self.parent_id,
                MLFLOW_RUN_NAME: f"round_{round_idx:03d}",
                "rlanything.round": str(round_idx),
            },
        )
        self._log_params(child.info.run_id, {"round": str(round_idx)})
        return child.info.run_id, False

    def log_round(
        self, round_idx: int, metrics: dict[str, float], started: float | None = None
    ) -> None:
        """Metrics, dataset inputs and checkpoints of one finished round (idempotent). The
        round's run spans the round: from `started` (epoch seconds, when the round began) to
        now."""
        child_id, done = self._round_run(round_idx, started)
        if done:
            return
        stamp = int(pd.Timestamp.now().timestamp() * 1000)
        points = [Metric(k, float(v), stamp, round_idx) for k, v in sorted(metrics.items())]
        # A process killed after logging the parent's points but before finishing the child run
        # leaves them there: resume logs each batch to the parent only if its first point isn't.
        for start in range(0, len(points), 500):
            batch = points[start : start + 500]
            self.client.log_batch(child_id, metrics=batch)
            self._log_parent_points(batch, round_idx)
        failpoints.reached(f"{round_idx}/mlflow-metrics", f"the metrics of round {round_idx}")
        self._log_round_datasets(child_id, round_idx)
        for role in ROLES:
            ckpt = self.run.checkpoint(role, round_idx)
            if ckpt.is_dir():
                self.client.set_tag(child_id, f"checkpoint.{role}", str(ckpt))
                self._register_checkpoint(child_id, role, round_idx, ckpt)
                failpoints.reached(f"{round_idx}/mlflow-checkpoint", f"the {role} checkpoint")
        self.client.set_terminated(child_id, "FINISHED", end_time=int(time.time() * 1000))

    def _versions(self, role: str, round_idx: int | None = None) -> list[Any]:
        """This run's registered versions of `role` (of one round, given `round_idx`)."""
        name = registered_model_name(self.config.tracking.experiment, role)
        found = []
        for version in self.client.search_model_versions(f"name = '{name}'"):
            tags = version.tags
            if tags.get("rlanything.parent_run_id") == self.parent_id and (
                round_idx is None or tags.get("rlanything.round") == str(round_idx)
            ):
                found.append(version)
        return found

    def _register_checkpoint(self, child_id: str, role: str, round_idx: int, ckpt: Path) -> None:
        """`role`'s checkpoint after round `round_idx` as a Logged Model of the round's run
        (its files uploaded, or with checkpoints: reference an external model naming the path),
        registered as a new version of `registered_model_name`. (What a killed process
        registered before its round run was finished, `kill_leftovers` removes.)"""
        name = registered_model_name(self.config.tracking.experiment, role)
        model_name = f"{role.replace('_', '-')}-round-{round_idx:03d}"
        tags = {
            "rlanything.parent_run_id": self.parent_id,
            "rlanything.run_dir": str(self.run.root),
            "rlanything.role": role,
            "rlanything.round": str(round_idx),
            "checkpoint": str(ckpt),
        }
        if self.config.tracking.checkpoints == "artifact":
            model = mlflow.initialize_logged_model(
                name=model_name, source_run_id=child_id, experiment_id=self.experiment_id,
                tags=tags,
            )  # fmt: skip
            self.client.log_model_artifacts(model.model_id, str(ckpt))
            mlflow.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
        else:
            model = mlflow.create_external_model(
                name=model_name, source_run_id=child_id, experiment_id=self.experiment_id,
                tags=tags,
            )  # fmt: skip
        # the round's run lists it under "Logged models" (source_run_id alone does not)
        self.client.log_outputs(child_id, [LoggedModelOutput(model.model_id, round_idx)])
        with contextlib.suppress(MlflowException):  # it exists (the usual case)
            self.client.create_registered_model(
                name, description=f"{role} checkpoints of rlanything runs, one version a round"
            )
        self.client.create_model_version(
            name, model.model_uri, run_id=child_id, tags=tags, model_id=model.model_id
        )

    def _move_best(self, step: int, metrics: dict[str, float]) -> None:
        """After the learning curve's evaluation at `step` (of the checkpoints of round
        step - 1): tag each role's version with its held-out score (`BEST_BY`, the first split of
        `evaluation.curve_splits`) and on how many episodes (steps, for the reward model), and
        point the alias `best` at the highest-scoring version evaluated the same way
        (`eval_signature`); among equal scores the earliest keeps it, so `best` moves only on a
        strictly better score. A holder evaluated otherwise is replaced. An undefined score
        (nan) is tagged but ranks no version; while no version has a defined score the alias is
        left as it is."""
        if step == 0:
            return  # the starting models are not versions of the run
        signature = eval_signature(self.config)
        split = self.config.evaluation.curve_splits[0]
        for role, metric in BEST_BY.items():
            key = f"eval/{split}/{metric}"
            if key not in metrics:
                continue
            name = registered_model_name(self.config.tracking.experiment, role)
            count_key, unit = BEST_COUNT[role]
            count = int(metrics.get(f"eval/{split}/{count_key}", 0))
            said = f"{key} = {metrics[key]:.4f} on {count} held-out {unit}"
            for version in self._versions(role, step - 1):
                self.client.set_model_version_tag(name, version.version, "heldout", said)
                self.client.set_model_version_tag(name, version.version, "heldout.metric", key)
                self.client.set_model_version_tag(
                    name, version.version, "heldout.score", str(metrics[key])
                )
                self.client.set_model_version_tag(
                    name, version.version, "heldout.signature", signature
                )
            wanted = {"heldout.signature": signature, "heldout.metric": key}
            # an undefined score (nan: a balanced accuracy whose held-out steps had one class
            # only) ranks no version: max() over nan comparisons depends on the order
            scored = [
                v
                for v in self.client.search_model_versions(f"name = '{name}'")
                if all(v.tags.get(k) == want for k, want in wanted.items())
                and not math.isnan(float(v.tags["heldout.score"]))
            ]
            if not scored:
                continue
            top = max(scored, key=lambda v: (float(v.tags["heldout.score"]), -int(v.version)))
            self.client.set_registered_model_alias(name, BEST_ALIAS, top.version)

    def _log_round_datasets(self, child_id: str, round_idx: int) -> None:
        """Every Parquet dataset of the round, with its role in the round (MLflow has dataset
        inputs only, so the role is the context: "input" for the round's task pool, "output"
        for what its stages wrote, the next round's pool included) and the stage that wrote it."""
        suffix = f"round_{round_idx:03d}"
        pool = self.run.dataset(round_idx, "tasks")
        self._log_input(child_id, pool, "tasks", f"tasks_{suffix}", "input")
        failpoints.reached(f"{round_idx}/mlflow-dataset", f"the dataset tasks_{suffix}")
        wanted = produced(self.config)
        for name, stage in ROUND_OUTPUTS:
            path = self.run.dataset(round_idx, name)
            if name in wanted and path.is_file():
                tags = {"stage": stage}
                self._log_input(child_id, path, name, f"{name}_{suffix}", "output", tags)
        following = self.run.dataset(round_idx + 1, "tasks")
        if following.is_file():
            name = f"tasks_round_{round_idx + 1:03d}"
            tags = {"stage": "acceptance-check"}
            self._log_input(child_id, following, "tasks", name, "output", tags)

    def log_plots(self, rounds: list[dict[str, float]]) -> list[Path]:
        """PNG plots of accuracy and accepted tasks per round, saved in the run dir and logged."""
        frame = pd.DataFrame(rounds)
        out = []
        for column, title, file in (
            ("policy/accuracy", "Policy accuracy per round", "accuracy.png"),
            ("env/accepted_tasks", "Accepted tasks per round", "accepted_tasks.png"),
        ):
            fig, ax = plt.subplots(figsize=(5, 3.2))
            if column in frame:
                ax.plot(frame["round"], frame[column], marker="o", label=column)
            if column == "env/accepted_tasks" and "env/accepted_tasks_total" in frame:
                ax.plot(
                    frame["round"],
                    frame["env/accepted_tasks_total"],
                    marker="s",
                    label="env/accepted_tasks_total",
                )
            ax.set_xlabel("round")
            ax.set_title(title)
            ax.legend()
            ax.grid(alpha=0.3)
            fig.tight_layout()
            path = self.run.root / "plots" / file
            with atomic_path(path) as tmp:
                fig.savefig(tmp, dpi=100, format="png")
            plt.close(fig)
            self.client.log_artifact(self.parent_id, str(path), "plots")
            failpoints.reached(f"{int(frame['round'].max())}/mlflow-artifact", f"plots/{file}")
            out.append(path)
        return out

    def log_eval(self, step: int, metrics: dict[str, float]) -> None:
        """Held-out metrics of the models after `step` rounds on the parent run, step = rounds
        completed, and the registered models' `best` aliases (`_move_best`). Idempotent: a batch
        whose first metric has a point at `step` is not logged again (a resume after a crash
        between logging and summary.json)."""
        stamp = int(pd.Timestamp.now().timestamp() * 1000)
        points = [Metric(k, float(v), stamp, step) for k, v in sorted(metrics.items())]
        for start in range(0, len(points), 500):
            self._log_parent_points(points[start : start + 500], step)
        self._move_best(step, metrics)

    def _log_parent_points(self, batch: list[Metric], step: int) -> None:
        """Log `batch` (points at `step`) to the parent run unless it is there already: a
        resume after a crash between logging and summary.json checks the batch's first point.
        For a redone round (`forget_rounds`) each point is compared by value, and only those
        that changed are logged (MLflow keeps history: the new point becomes the latest)."""
        if self.redone_from is not None and step >= self.redone_from:
            changed = [
                point
                for point in batch
                if not any(
                    m.step == step and m.value == point.value
                    for m in self.client.get_metric_history(self.parent_id, point.key)
                )
            ]
            if changed:
                self.client.log_batch(self.parent_id, metrics=changed)
            return
        logged = self.client.get_metric_history(self.parent_id, batch[0].key)
        if not any(m.step == step for m in logged):
            self.client.log_batch(self.parent_id, metrics=batch)

    def forget_rounds(self, first: int) -> list[str]:
        """Retire the MLflow runs of rounds `first` on and of the evaluations after them
        (learning-curve steps above `first`), which are being trained again: each is marked
        KILLED and tagged `rlanything.redone`, and what it registered is removed (`retire`).
        Returns their ids."""
        self.redone_from = first
        nested = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{self.parent_id}'",
        )
        retired = []
        for child in nested:
            tags = child.data.tags
            if "rlanything.run_dir" in tags:  # an RLoop cycle's own training run
                continue
            out = Path(tags.get("rlanything.out_dir", ""))
            later_round = "rlanything.round" in tags and int(tags["rlanything.round"]) >= first
            later_eval = out.name.startswith("step_") and int(out.name[5:]) > first
            if later_round or later_eval:
                self.client.set_tag(child.info.run_id, "rlanything.redone", "true")
                retire(self.client, self.experiment_id, child.info.run_id)
                retired.append(child.info.run_id)
        return retired

    def log_learning_curve(self, curve: list[dict[str, float]]) -> Path:
        """PNG of held-out policy accuracy (in-domain and OOD) per rounds completed, with the 95 %
        intervals as bands, saved as plots/learning_curve.png and logged to the parent run."""
        frame = pd.DataFrame(curve).sort_values("step")
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for split, label in (("id", "in-domain"), ("ood", "out-of-domain")):
            key = f"eval/{split}/policy_accuracy"
            if key not in frame:
                continue
            (line,) = ax.plot(frame["step"], frame[key], marker="o", label=label)
            ax.fill_between(
                frame["step"],
                frame[f"{key}_ci_low"],
                frame[f"{key}_ci_high"],
                color=line.get_color(),
                alpha=0.2,
            )
        ax.set_xlabel("rounds completed")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(-0.02, 1.02)
        ax.set_title("Held-out policy accuracy (95 % interval)")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = self.run.root / "plots" / "learning_curve.png"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=100)
        plt.close(fig)
        self.client.log_artifact(self.parent_id, str(path), "plots")
        return path

    def log_cycle(
        self, cycle: int, metrics: dict[str, float], expert_set: Path, refined: Path, rloop_id: str
    ) -> None:
        """An RLoop cycle's exploitation, once: metrics (step = cycle) on this cycle's run and on
        the RLoop run `rloop_id`; the expert set as the dataset input of the SFT step (context
        "sft", sha256 digest); the refined policy as artifacts `policy/cycle-<n>` (or, with
        checkpoints: reference, its path), tagged with that alias."""
        state = self.run.load_state()
        if state.get("cycle_logged"):
            return
        stamp = int(pd.Timestamp.now().timestamp() * 1000)
        points = [Metric(k, float(v), stamp, cycle) for k, v in sorted(metrics.items())]
        for run_id in (self.parent_id, rloop_id):
            self.client.log_batch(run_id, metrics=points)
        name = f"expert_set_cycle_{cycle:03d}"
        self._log_input(self.parent_id, expert_set, "expert_set", name, "sft")
        alias = f"cycle-{cycle}"
        self.client.set_tag(self.parent_id, "rloop.alias", alias)
        self.client.set_tag(self.parent_id, "checkpoint.refined_policy", str(refined))
        if self.config.tracking.checkpoints == "artifact":
            self.client.log_artifacts(self.parent_id, str(refined), f"policy/{alias}")
        self.run.save_state({**state, "cycle_logged": True})

    @contextlib.contextmanager
    def finishing(self) -> Iterator[Tracker]:
        """The MLflow run ends FINISHED when the block does, FAILED when it raises, KILLED when
        a signal or Ctrl-C stops it (an exception that is not an Exception)."""
        try:
            yield self
        except BaseException as exc:
            self.finish("FAILED" if isinstance(exc, Exception) else "KILLED")
            raise
        self.finish()

    def finish(self, status: str = "FINISHED") -> None:
        """End the parent run with `status` now, and log `timing/active_s`: the seconds the
        processes that worked on the run spent on it, summed over attempts (resumes), which
        leaves out the time between a crash and its resume that the run's duration includes.
        An `idle` attempt (a finished run started again) gets the status and end time the run
        had, so that its duration does not grow."""
        if self.idle and self.previous is not None and self.previous[0] != "RUNNING":
            previous_status, previous_end = self.previous
            self.client.set_terminated(self.parent_id, previous_status, end_time=previous_end)
            return
        state = self.run.load_state()
        active = float(state.get("active_seconds", 0.0)) + time.time() - self.started
        attempts = int(state.get("attempts", 0)) + 1
        self.run.save_state({**state, "active_seconds": active, "attempts": attempts})
        self.client.log_metric(self.parent_id, "timing/active_s", active, step=attempts)
        self.client.set_terminated(self.parent_id, status)

    def evaluation_logged(self, out_dir: Path) -> bool:
        """Whether an evaluation into `out_dir` has a FINISHED MLflow run under the parent run
        (one killed while it was logged has not, and is logged again)."""
        found = self.client.search_runs(
            [self.experiment_id],
            filter_string=(
                f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{self.parent_id}' "
                f"and tags.`rlanything.out_dir` = '{out_dir.resolve()}' "
                "and attributes.status = 'FINISHED'"
            ),
        )
        return bool(found)

    def run_url(self) -> str:
        """The parent run's page in the MLflow UI, in its model-training view: MLflow 3.17's UI
        opens the GenAI view unless the link says `workflowType=machine_learning` (it then
        remembers the choice in the browser); the experiment's kind tag alone does not do it.
        On a tracking server, the server's own page; on a local store, that of `mlflow ui`."""
        served = self.uri.startswith(("http://", "https://"))
        base = self.uri.rstrip("/") if served else "http://127.0.0.1:5000"
        return f"{base}/#/experiments/{self.experiment_id}/runs/{self.parent_id}?{TRAINING_VIEW}"

    def ui_hint(self) -> str:
        """How to open the parent run in the MLflow UI (`run_url`)."""
        if self.uri.startswith(("http://", "https://")):
            return self.run_url()
        return f"mlflow ui --backend-store-uri {self.uri}  → {self.run_url()}"

    def link_flow_run(self, flow_run_id: str) -> None:
        """Point the flow run and the MLflow run at each other: a markdown artifact of the flow
        run links the MLflow run (with the command that serves a local store), and the MLflow
        run's tag `prefect.flow_run_url` holds the flow run's page."""
        from prefect.artifacts import create_markdown_artifact

        self.client.set_tag(
            self.parent_id, "prefect.flow_run_url", prefect_flow_run_url(flow_run_id)
        )
        lines = [f"[MLflow run {self.parent_id}]({self.run_url()})", ""]
        if not self.uri.startswith(("http://", "https://")):
            lines.append(f"Serve the local store first: `mlflow ui --backend-store-uri {self.uri}`")
        create_markdown_artifact(
            key=f"rlanything-mlflow-{artifact_slug(self.run.root.name)}",
            markdown="\n".join(lines),
            description=f"The MLflow run of {self.run.root}",
        )


def retire(client: MlflowClient, experiment_id: str, run_id: str) -> None:
    """Mark KILLED a nested run that a dead process left RUNNING, and remove what it registered
    (model versions, Logged Models): the round's next attempt registers its own."""
    client.set_terminated(run_id, "KILLED")
    for version in client.search_model_versions(f"run_id = '{run_id}'"):
        client.delete_model_version(version.name, version.version)
    for model in mlflow.search_logged_models(
        experiment_ids=[experiment_id],
        filter_string=f"source_run_id = '{run_id}'",
        output_format="list",
    ):
        client.delete_logged_model(model.model_id)


def record_crash(run: RunDir, reason: str) -> list[str]:
    """What a crashed flow run left RUNNING in MLflow, ended now: the run directory's parent
    run KILLED with the reason as its tag `rlanything.crash`, and each nested run still
    RUNNING (a round's, an evaluation's) retired (`retire`), tagged the same. The store is the
    one the run directory recorded. Returns the ids ended; none when the run directory has no
    MLflow run yet."""
    state = run.load_state()
    if "mlflow_run_id" not in state or "mlflow_tracking_uri" not in state:
        return []
    client = MlflowClient(state["mlflow_tracking_uri"])
    parent = client.get_run(state["mlflow_run_id"])
    ended = []
    nested = client.search_runs(
        [parent.info.experiment_id],
        filter_string=(
            f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent.info.run_id}' "
            "and attributes.status = 'RUNNING'"
        ),
    )
    for child in nested:
        if "rlanything.run_dir" in child.data.tags:  # an RLoop cycle's own training run
            continue
        client.set_tag(child.info.run_id, "rlanything.crash", reason)
        retire(client, parent.info.experiment_id, child.info.run_id)
        ended.append(child.info.run_id)
    if parent.info.status == "RUNNING":
        client.set_tag(parent.info.run_id, "rlanything.crash", reason)
        client.set_terminated(parent.info.run_id, "KILLED")
        ended.append(parent.info.run_id)
    return ended


def prefect_flow_run_url(flow_run_id: str) -> str:
    """The flow run's page in the Prefect UI: on the server of PREFECT_API_URL when one is set,
    else on a `prefect server start` of this machine (PREFECT_SERVER_API_HOST and _PORT), which
    shows a run that used a throwaway server from PREFECT_HOME's database."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_API_HOST, PREFECT_SERVER_API_PORT

    api = PREFECT_API_URL.value()
    if api:
        return f"{api.rstrip('/').removesuffix('/api')}/runs/flow-run/{flow_run_id}"
    host, port = PREFECT_SERVER_API_HOST.value(), PREFECT_SERVER_API_PORT.value()
    return f"http://{host}:{port}/runs/flow-run/{flow_run_id}"


def artifact_slug(name: str) -> str:
    """`name` as Prefect allows in an artifact key: lowercase letters, digits and dashes."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug[:40].strip("-") or "run"


def log_evaluation(
    config: RunConfig,
    metrics: dict[str, float],
    *,
    policy: str,
    reward_model: str | None,
    out_dir: Path,
    parent_run_id: str | None = None,
) -> str:
    """One MLflow run per evaluation, in the config's experiment (nested under `parent_run_id`
    when given); returns its id."""
    open_experiment(tracking_uri(), config.tracking.experiment, config.tracking.artifact_location)
    tags = {} if parent_run_id is None else {MLFLOW_PARENT_RUN_ID: parent_run_id}
    with mlflow.start_run(run_name=f"eval-{Path(policy).name}", tags=tags) as run:
        mlflow.set_tags({"rlanything.kind": "eval", "rlanything.out_dir": str(out_dir.resolve())})
        mlflow.log_params({"policy": policy, "reward_model": str(reward_model)})
        mlflow.log_metrics(metrics, step=0)
        mlflow.log_artifact(str(out_dir / "eval.json"))
        return run.info.run_id


def plot_rows(curves: dict[str, list[list[dict[str, float]]]], out: Path) -> list[Path]:
    """Ablation plots: policy accuracy per round for each row, and accepted tasks per round
    (means over seeds), as PNG files in `out`."""
    paths = []
    colours = _row_colours(curves)
    for key, title, file in (
        ("policy/accuracy", "Policy accuracy per round (training tasks)", "ablation_accuracy.png"),
        ("env/accepted_tasks_total", "Accepted tasks (cumulative)", "ablation_accepted.png"),
    ):
        fig, ax = plt.subplots(figsize=(5.5, 3.5))
        for name, runs in curves.items():
            frame = pd.DataFrame(
                [{"round": r["round"], key: r.get(key, 0.0)} for run in runs for r in run]
            )
            mean = frame.groupby("round")[key].mean()
            ax.plot(mean.index, mean.to_numpy(), marker="o", label=name, color=colours[name])
        paths.append(_save_rows_figure(fig, ax, "round", title, out / file))
    return paths


def _row_colours(rows: dict[str, Any]) -> dict[str, str]:
    """Each row's colour, from matplotlib's cycle in the rows' order: the same in every ablation
    plot, also in one that leaves a row out (the RM plots have no Outcome-only)."""
    return {name: f"C{i % 10}" for i, name in enumerate(rows)}


def _save_rows_figure(fig: Any, ax: Any, xlabel: str, title: str, path: Path) -> Path:
    """Label, lay out, save as PNG and close an ablation plot (one line per row)."""
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_heldout(curves: dict[str, list[dict[str, Any]]], out: Path) -> list[Path]:
    """Ablation plots of the held-out learning curves (`evaluation.every`): per row, in-domain
    policy accuracy and the RM's balanced process accuracy per rounds completed, all seeds
    pooled, with their 95 % intervals as bands. None without a curve."""
    paths = []
    colours = _row_colours(curves)
    for key, title, file in (
        ("eval/id/policy_accuracy", "Held-out policy accuracy (in-domain)", "ablation_heldout.png"),
        (
            "eval/id/rm_process_balanced_accuracy",
            "RM balanced process accuracy (held out)",
            "ablation_rm_process.png",
        ),
    ):
        rows = {
            name: [(p["step"], *p[key]) for p in points if key in p]
            for name, points in curves.items()
        }
        rows = {name: points for name, points in rows.items() if points}
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(5.5, 3.5))
        for name, points in rows.items():
            step, value, low, high = np.array(points, dtype=float).T
            ax.plot(step, value, marker="o", label=name, color=colours[name])
            ax.fill_between(step, low, high, color=colours[name], alpha=0.15)
        paths.append(_save_rows_figure(fig, ax, "rounds done", title, out / file))
    return paths
