"""Atomic writes: a crash leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from rlanything_core import failpoints


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync it and rename it onto `path`.

    On an exception the temporary file is removed and `path` is left as it was.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    failpoints.after_write(final)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary directory beside `path`; on success rename it onto `path`.

    An existing `path` is replaced only after the new directory is complete and its files are
    on disk (fsync). Used for checkpoints.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = final.with_name(f".{final.name}.tmp-{tag}")
    old = final.with_name(f".{final.name}.old-{tag}")
    tmp.mkdir()
    try:
        yield tmp
        for f in sorted(tmp.rglob("*")):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    failpoints.after_write(final)
