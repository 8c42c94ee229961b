"""Warm-start checkpoints kept in the user's cache directory, so that a second run with the same
warm start skips the training.

An entry is keyed by a hash of everything that decides what the warm start trains: the role, the
base model (its source, and for a local directory its files' sizes and times), the device and
the dtype it trains in, the LoRA rank, every warm-start setting, the run's seed, and the
demonstrations themselves (which capture the environment, its options and its code). Any change
gives another key, so the warm start is trained again; nothing is ever reused across a change.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rlanything_core.base.atomic import atomic_dir
from rlanything_core.base.paths import cache_root
from rlanything_core.envs.demos import Demo
from rlanything_core.models.devices import pick_device, resolve_dtype
from rlanything_core.run.config import RunConfig

CHECKPOINT = "checkpoint"
DATASET = "sft.parquet"
RECORD = "record.json"
FORMAT = 1
"""Bumped when what an entry holds, or what decides its key, changes."""


def _source_identity(source: str) -> Any:
    """The base model as far as it decides the result: the source string, and for a local
    directory or file every file's relative path, size and modification time."""
    path = Path(source).expanduser()
    if not path.exists():
        return source
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [str(path.resolve())] + [
        [str(f.relative_to(path)) if f != path else f.name, f.stat().st_size, f.stat().st_mtime_ns]
        for f in files
    ]


def _demos_digest(demos: Sequence[Demo]) -> str:
    digest = hashlib.sha256()
    for d in demos:
        digest.update(json.dumps([d.task_id, d.step_idx, str(d.prompt), d.answer]).encode())
    return digest.hexdigest()


def warm_start_key(config: RunConfig, role: str, demos: Sequence[Demo]) -> str:
    """The hash that names `role`'s cache entry (see the module's docstring)."""
    settings = getattr(config, role)
    model, ws = settings.model, settings.warm_start
    device = pick_device(model.device)
    parts = {
        "format": FORMAT,
        "role": role,
        "source": _source_identity(model.source),
        "device": device.type,
        "dtype": str(resolve_dtype(model.dtype, device)),
        "lora_rank": settings.lora_rank if role == "env_model" else settings.update.lora_rank,
        "warm_start": ws.model_dump(mode="json", exclude={"cache"}),
        "seed": config.seed,
        "demos": _demos_digest(demos),
        "torch": torch.__version__,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def entry(role: str, key: str) -> Path:
    """Where `role`'s warm start with `key` is kept: ~/.cache/rlanything/warm-starts/<role>-<key>
    ($RLANYTHING_CACHE replaces ~/.cache/rlanything)."""
    return cache_root() / "warm-starts" / f"{role}-{key}"


def _copy_tree(source: Path, target: Path) -> None:
    """Copy a directory, hard-linking files where the file system allows: checkpoint files are
    written once and replaced whole, never changed in place."""

    def link_or_copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link_or_copy)


def restore(role: str, key: str, checkpoint: Path, dataset: Path) -> dict[str, float] | None:
    """Put a cached warm start's checkpoint and SFT dataset at `checkpoint` and `dataset` and
    return its metrics; None (and nothing written) when there is no complete entry."""
    found = entry(role, key)
    record = found / RECORD
    if not record.is_file():
        return None
    metrics = json.loads(record.read_text())["metrics"]
    with atomic_dir(checkpoint) as tmp:
        tmp.rmdir()
        _copy_tree(found / CHECKPOINT, tmp)
    dataset.parent.mkdir(parents=True, exist_ok=True)
    part = dataset.with_name(f".{dataset.name}.tmp-{os.getpid()}")
    shutil.copy2(found / DATASET, part)
    os.replace(part, dataset)
    return {k: float(v) for k, v in metrics.items()}


def store(role: str, key: str, checkpoint: Path, dataset: Path, metrics: dict[str, float]) -> Path:
    """Keep a finished warm start under its key; the entry appears whole or not at all."""
    target = entry(role, key)
    with atomic_dir(target) as tmp:
        _copy_tree(checkpoint, tmp / CHECKPOINT)
        shutil.copy2(dataset, tmp / DATASET)
        (tmp / RECORD).write_text(json.dumps({"key": key, "role": role, "metrics": metrics}))
    return target
