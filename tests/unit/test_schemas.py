"""Data contracts: every dataset is checked on write and on read; writes are atomic."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlanything_core.base.atomic import atomic_path
from rlanything_core.base.schemas import SCHEMAS, SchemaError, read_dataset, to_table, write_dataset

PROVENANCE = {"round", "task_id", "task_version", "rollout_idx", "step_idx", "seed", "checkpoint"}


def _policy_rows(n: int = 2) -> dict[str, list]:
    return {
        "round": [0] * n,
        "task_id": ["t0"] * n,
        "task_version": [1] * n,
        "rollout_idx": list(range(n)),
        "step_idx": [0] * n,
        "seed": [123] * n,
        "checkpoint": ["ckpt/policy/round_000"] * n,
        "outcome": [1, -1][:n],
        "mean_verdict": [1 / 3, None][:n],
        "reward": [4 / 3, -1.0][:n],
        "advantage": [1.0, -1.0][:n],
        "task_accuracy": [0.5] * n,
        "kept": [True] * n,
    }


def test_every_schema_declares_its_provenance() -> None:
    for name in ("rollouts", "judgments", "policy_samples", "rm_samples", "expert_set"):
        assert set(SCHEMAS[name].names) >= PROVENANCE, name
    assert {"round", "task_id", "task_version", "parent_task_id", "origin", "direction"} <= set(
        SCHEMAS["tasks"].names
    )
    for name in ("candidates", "acceptance"):
        assert {"round", "parent_task_id", "parent_task_version", "seed", "checkpoint"} <= set(
            SCHEMAS[name].names
        )


def test_round_trip(tmp_path: Path) -> None:
    path = write_dataset(_policy_rows(), tmp_path / "policy_samples.parquet", "policy_samples")
    df = read_dataset(path, "policy_samples")
    assert list(df.columns) == SCHEMAS["policy_samples"].names
    assert df["reward"].tolist() == pytest.approx([4 / 3, -1.0])
    assert pd.isna(df["mean_verdict"].iloc[1])


def test_write_rejects_missing_and_extra_columns(tmp_path: Path) -> None:
    rows = _policy_rows()
    del rows["seed"]
    rows["bonus"] = [1, 2]
    with pytest.raises(
        SchemaError, match=r"missing columns \['seed'\].*unexpected columns \['bonus'\]"
    ):
        write_dataset(rows, tmp_path / "x.parquet", "policy_samples")
    assert not list(tmp_path.iterdir())  # nothing written, not even a temp file


def test_write_rejects_nulls_and_bad_types(tmp_path: Path) -> None:
    rows = _policy_rows()
    rows["reward"] = [1.0, None]
    with pytest.raises(SchemaError, match=r"'reward'.*null"):
        write_dataset(rows, tmp_path / "x.parquet", "policy_samples")
    rows = _policy_rows()
    rows["advantage"] = ["high", "low"]
    with pytest.raises(SchemaError, match="policy_samples"):
        write_dataset(rows, tmp_path / "x.parquet", "policy_samples")


def test_read_rejects_a_file_of_another_dataset(tmp_path: Path) -> None:
    path = write_dataset(_policy_rows(), tmp_path / "p.parquet", "policy_samples")
    with pytest.raises(SchemaError, match=r"p\.parquet.*'rm_samples' schema: missing columns"):
        read_dataset(path, "rm_samples")


def test_read_rejects_a_wrong_column_type(tmp_path: Path) -> None:
    table = to_table(_policy_rows(), "policy_samples")
    i = table.schema.get_field_index("seed")
    table = table.set_column(i, "seed", pa.array(["1", "2"]))
    pq.write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(
        SchemaError, match=r"bad\.parquet: column 'seed'.*type string, expected int64"
    ):
        read_dataset(tmp_path / "bad.parquet", "policy_samples")


def test_read_names_a_truncated_file(tmp_path: Path) -> None:
    path = write_dataset(_policy_rows(), tmp_path / "t.parquet", "policy_samples")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SchemaError, match=r"t\.parquet: not a readable Parquet file.*Delete it"):
        read_dataset(path, "policy_samples")
    with pytest.raises(SchemaError, match=r"missing\.parquet: missing"):
        read_dataset(tmp_path / "missing.parquet", "policy_samples")


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half of the new")
        raise RuntimeError("crash mid-write")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]
