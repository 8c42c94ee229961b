"""Data contracts: one pyarrow schema per dataset a round produces, checked on write and on read.

Every row carries provenance: the round, the environment task (id and version), the rollout and
step it came from, the seed that produced it and the checkpoint that produced it. Users read these
files with pandas; the column names are part of the public interface (listed in
docs/reference/run-directory.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rlanything_core.base.atomic import atomic_path


class SchemaError(ValueError):
    """A dataset file or frame does not match its declared schema."""


SCHEMA_VERSION = 1
"""Version of the dataset schemas below, written into every file's Parquet metadata
(`rlanything.schema_version`, beside `rlanything.dataset`, its name). A reader refuses a file
of a newer version by name; a file without one (written before versions, or by hand) is
checked by its columns alone."""
_VERSION_KEY = b"rlanything.schema_version"
_DATASET_KEY = b"rlanything.dataset"


def _f(name: str, typ: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, typ, nullable=nullable)


_TOKENS = pa.list_(pa.int32())

# Identity of a rewrite candidate and its parent task.
_CANDIDATE_KEYS = [
    _f("round", pa.int32()),
    _f("candidate_id", pa.string()),
    _f("parent_task_id", pa.string()),
    _f("parent_task_version", pa.int32()),
    _f("direction", pa.string()),
    _f("acc_parent", pa.float64()),
]

STEP_KEY = ["task_id", "task_version", "rollout_idx", "step_idx"]
"""The columns that name one step of one rollout."""
PROVENANCE = ["round", *STEP_KEY, "seed", "checkpoint"]
"""Where a per-step row came from: its step, the seed it was sampled with, the checkpoint."""

# Provenance columns shared by the per-step datasets.
_STEP_KEYS = [
    _f("round", pa.int32()),
    _f("task_id", pa.string()),
    _f("task_version", pa.int32()),
    _f("rollout_idx", pa.int32()),
    _f("step_idx", pa.int32()),
    _f("seed", pa.int64()),
    _f("checkpoint", pa.string()),
]

# Identity and provenance of a unit test the reward model wrote (coding, unit-test mode).
_TEST_KEYS = [
    _f("round", pa.int32()),
    _f("task_id", pa.string()),
    _f("task_version", pa.int32()),
    _f("test_idx", pa.int32()),
    _f("seed", pa.int64()),
    _f("checkpoint", pa.string()),
]

SCHEMAS: dict[str, pa.Schema] = {
    # The active task pool at the start of a round. `spec` is the environment's JSON task spec.
    "tasks": pa.schema(
        [
            _f("round", pa.int32()),
            _f("task_id", pa.string()),
            _f("task_version", pa.int32()),
            _f("parent_task_id", pa.string(), nullable=True),
            _f("origin", pa.string()),  # "seed" | "rewritten"
            _f("direction", pa.string(), nullable=True),  # "harder" | "easier" for rewrites
            _f("created_round", pa.int32()),
            _f("acc_parent", pa.float64(), nullable=True),  # parent's accuracy when rewritten
            _f("acc_candidate", pa.float64(), nullable=True),  # this version's acceptance accuracy
            _f("env", pa.string()),
            _f("spec", pa.string()),
        ]
    ),
    # One row per environment step of one rollout.
    "rollouts": pa.schema(
        [
            *_STEP_KEYS,
            _f("goal", pa.string()),  # the task's goal text
            _f("observation", pa.string()),  # what the policy saw before acting
            _f("prompt", pa.string()),  # the chat-templated prompt text
            _f("response", pa.string()),
            _f(
                "action", pa.string(), nullable=True
            ),  # the chosen admissible action; null if invalid
            _f("action_valid", pa.bool_()),
            _f("next_observation", pa.string()),
            _f("progress", pa.bool_()),  # ground truth from the expert planner
            _f("done", pa.bool_()),
            _f("pass_fraction", pa.float64(), nullable=True),  # coding: tests passed; else null
            # gui: the screenshot of `observation` (a PNG path relative to the run directory)
            _f("screenshot", pa.string(), nullable=True),
            _f("outcome", pa.int8()),  # +1 success / −1 failure of the whole episode
            _f("num_steps", pa.int32()),  # length of the episode this step belongs to
            _f("finish_reason", pa.string()),  # "stop" (EOS) | "length" (max_new_tokens)
            _f("prompt_token_ids", _TOKENS),
            _f("response_token_ids", _TOKENS),
            _f("sampler_logprobs", pa.list_(pa.float32())),
        ]
    ),
    # One row per reward-model vote on one step.
    "judgments": pa.schema(
        [
            *_STEP_KEYS,
            _f("vote_idx", pa.int32()),
            _f("prompt", pa.string()),
            _f("reasoning", pa.string()),  # the reward model's whole answer
            _f("verdict", pa.int8(), nullable=True),  # +1 / −1; null when it could not be parsed
            _f("finish_reason", pa.string()),
            _f("prompt_token_ids", _TOKENS),
            _f("response_token_ids", _TOKENS),
        ]
    ),
    # Coding, reward model in unit-test mode: one row per test it wrote for a task.
    "unit_tests": pa.schema(
        [
            *_TEST_KEYS,
            _f("prompt", pa.string()),
            _f("response", pa.string()),  # the reward model's whole answer
            _f("test", pa.string(), nullable=True),  # the parsed test (JSON); null if invalid
            _f("valid", pa.bool_()),
            _f("error", pa.string(), nullable=True),  # why the test is invalid
            _f("finish_reason", pa.string()),
            _f("prompt_token_ids", _TOKENS),
            _f("response_token_ids", _TOKENS),
        ]
    ),
    # Coding, unit-test mode: the reward model's training signal, one row per generated test.
    "test_samples": pa.schema(
        [
            *_TEST_KEYS,
            _f("valid", pa.bool_()),
            _f("correct", pa.bool_(), nullable=True),  # every correct program passes it; null if
            # the test is invalid or no program of the task is correct
            _f("incorrect_failed", pa.int32()),  # incorrect programs it fails
            _f("incorrect_passed", pa.int32()),  # incorrect programs that pass it
            _f("reward", pa.float64()),
            _f("advantage", pa.float64()),
            _f("task_accuracy", pa.float64()),
            _f("kept", pa.bool_()),
        ]
    ),
    # One row per step: the policy's training signal. Filtered rows: kept=False, advantage 0.
    "policy_samples": pa.schema(
        [
            *_STEP_KEYS,
            _f("outcome", pa.int8()),
            _f("mean_verdict", pa.float64(), nullable=True),  # null in outcome-only mode
            _f("reward", pa.float64()),
            _f("advantage", pa.float64()),
            _f("task_accuracy", pa.float64()),
            _f("kept", pa.bool_()),
        ]
    ),
    # One row per vote: the reward model's training signal. Filtered rows: kept=False, advantage 0.
    "rm_samples": pa.schema(
        [
            *_STEP_KEYS,
            _f("vote_idx", pa.int32()),
            _f("verdict", pa.int8(), nullable=True),
            _f("step_reward", pa.float64()),  # the integrated reward R of the judged step
            _f("reward", pa.float64()),  # R · S, or the parse-failure penalty
            _f("advantage", pa.float64()),
            _f("task_accuracy", pa.float64()),
            _f("kept", pa.bool_()),
        ]
    ),
    # One row per rewrite the environment model proposed.
    "candidates": pa.schema(
        [
            *_CANDIDATE_KEYS,
            _f("critique", pa.string()),
            _f("response", pa.string()),  # the environment model's whole answer
            _f("spec", pa.string(), nullable=True),  # the proposed spec (JSON); null if none parsed
            _f("valid", pa.bool_()),
            _f("error", pa.string(), nullable=True),  # why the proposal was rejected as invalid
            _f("seed", pa.int64()),
            _f("checkpoint", pa.string()),
        ]
    ),
    # One row per valid candidate: the acceptance check.
    "acceptance": pa.schema(
        [
            *_CANDIDATE_KEYS,
            _f("acc_candidate", pa.float64()),
            _f("accepted", pa.bool_()),
            _f("bounds", pa.string()),
            _f("seed", pa.int64()),
            _f("checkpoint", pa.string()),
        ]
    ),
    # Supervised pairs of a fine-tuning step (warm start; RLoop's expert set).
    "sft_samples": pa.schema(
        [
            _f("role", pa.string()),  # "policy" | "reward_model"
            _f("task_id", pa.string()),
            _f("step_idx", pa.int32()),
            _f("seed", pa.int64()),
            _f("checkpoint", pa.string()),  # the model the pairs train
            _f("prompt", pa.string()),
            _f("response", pa.string()),
            _f("prompt_token_ids", _TOKENS),
            _f("response_token_ids", _TOKENS),
        ]
    ),
    # RLoop: the steps of successful episodes on hard tasks that a cycle's start policy is
    # fine-tuned on; `checkpoint` is the one that played the episode.
    "expert_set": pa.schema(
        [
            *_STEP_KEYS,
            _f("task_success_rate", pa.float64()),  # over the cycle's harvested episodes
            _f("prompt", pa.string()),
            _f("response", pa.string()),
            _f("prompt_token_ids", _TOKENS),
            _f("response_token_ids", _TOKENS),
        ]
    ),
}


def _check_table(table: pa.Table, dataset: str, where: str) -> None:
    schema = SCHEMAS[dataset]
    names = set(table.column_names)
    missing = [n for n in schema.names if n not in names]
    extra = sorted(names - set(schema.names))
    if missing or extra:
        raise SchemaError(
            f"{where}: does not match the '{dataset}' schema: missing columns {missing}, "
            f"unexpected columns {extra}. Expected exactly {schema.names} "
            "(rlanything_core/base/schemas.py)."
        )
    for field in schema:
        col = table.column(field.name)
        if not col.type.equals(field.type):
            raise SchemaError(
                f"{where}: column '{field.name}' of '{dataset}' has type {col.type}, expected "
                f"{field.type}."
            )
        if not field.nullable and col.null_count:
            raise SchemaError(
                f"{where}: column '{field.name}' of '{dataset}' has {col.null_count} null values "
                "but may not be null."
            )


def to_table(frame: pd.DataFrame | Mapping[str, list[object]], dataset: str) -> pa.Table:
    """Rows as an Arrow table of the declared schema, or a SchemaError naming the column."""
    if dataset not in SCHEMAS:
        raise SchemaError(f"unknown dataset {dataset!r}; known: {sorted(SCHEMAS)}")
    schema = SCHEMAS[dataset]
    df = frame if isinstance(frame, pd.DataFrame) else pd.DataFrame(dict(frame))
    names = set(df.columns)
    missing = [n for n in schema.names if n not in names]
    extra = sorted(names - set(schema.names))
    if missing or extra:
        raise SchemaError(
            f"rows for '{dataset}' do not match its schema: missing columns {missing}, "
            f"unexpected columns {extra}."
        )
    # Convert with every field nullable, so that nulls are reported by _check_table by name.
    relaxed = pa.schema([f.with_nullable(True) for f in schema])
    try:
        table = pa.Table.from_pandas(df[schema.names], schema=relaxed, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise SchemaError(f"rows for '{dataset}' do not fit its schema: {exc}") from exc
    _check_table(table, dataset, f"rows for '{dataset}'")
    return pa.Table.from_arrays(table.columns, schema=schema)


def rows_frame(rows: list[dict[str, object]], dataset: str) -> pd.DataFrame:
    """Row dicts as a frame with exactly the columns of `dataset` (also when there are no rows)."""
    return pd.DataFrame(rows, columns=SCHEMAS[dataset].names)


def write_dataset(
    frame: pd.DataFrame | Mapping[str, list[object]], path: str | os.PathLike[str], dataset: str
) -> Path:
    """Check rows against the schema of `dataset`, then write them to `path` atomically."""
    table = to_table(frame, dataset)
    table = table.replace_schema_metadata(
        {_DATASET_KEY: dataset.encode(), _VERSION_KEY: str(SCHEMA_VERSION).encode()}
    )
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def read_dataset(path: str | os.PathLike[str], dataset: str) -> pd.DataFrame:
    """Read a Parquet file and check it against the schema of `dataset`.

    Raises SchemaError naming the file when it is missing, unreadable (truncated or corrupt) or of
    the wrong shape.
    """
    p = Path(path)
    if not p.is_file():
        raise SchemaError(f"{p}: missing; rerun the stage that writes '{dataset}'.")
    try:
        table = pq.read_table(p)
    except (pa.ArrowException, OSError) as exc:
        raise SchemaError(
            f"{p}: not a readable Parquet file (truncated or corrupt?): {exc}. Delete it and rerun "
            f"the stage that writes '{dataset}'."
        ) from exc
    _check_version(table.schema.metadata or {}, dataset, p)
    _check_table(table, dataset, str(p))
    return table.to_pandas()


def _check_version(metadata: Mapping[bytes, bytes], dataset: str, path: Path) -> None:
    raw = metadata.get(_VERSION_KEY)
    if raw is None:
        return
    try:
        version = int(raw)
    except ValueError:
        version = -1
    if not 1 <= version <= SCHEMA_VERSION:
        raise SchemaError(
            f"{path}: schema version {raw.decode(errors='replace')!r} of '{dataset}', but this "
            f"rlanything reads versions 1 to {SCHEMA_VERSION}: upgrade rlanything to read it, or "
            f"rerun the stage that writes '{dataset}' (a task file: drop its "
            f"{_VERSION_KEY.decode()} metadata key, and its columns are checked alone)."
        )
