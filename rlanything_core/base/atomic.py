"""Atomic writes: a crash leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from rlanything_core.base import failpoints


def fsync_dir(path: Path) -> None:
    """Make a directory's entries durable (a rename in it survives a power loss)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""Write failures that free space (or a higher file-size limit) cures."""


class WriteError(OSError):
    """A file could not be written for want of space; what was at its path is unchanged."""

    def __str__(self) -> str:  # the message alone, without OSError's "[Errno 28]"
        return str(self.strerror)


def space_error(exc: OSError, final: Path, written: int) -> WriteError:
    """`exc` (out of space) as a WriteError naming the file, the bytes it took before failing
    and the space left where the operating system tells it."""
    try:
        free = f"{shutil.disk_usage(final.parent).free} bytes are free there"
    except OSError:
        free = "the free space is unknown"
    return WriteError(
        exc.errno,
        f"could not write {final} ({exc.strerror or exc}): it needs more than the {written} "
        f"bytes written before the failure, and {free}; free disk space (or raise the "
        "file-size limit) and resume: what was at that path is unchanged",
    )


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync it, rename it onto `path` and
    fsync the directory, so the rename too is on disk.

    On an exception the temporary file is removed and `path` is left as it was; a full disk
    (or file-size limit) becomes a WriteError that names the file and the space left.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        failpoints.before_write(final)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        fsync_dir(final.parent)
    except OSError as exc:
        if exc.errno in OUT_OF_SPACE and not isinstance(exc, WriteError):
            written = tmp.stat().st_size if tmp.exists() else 0
            raise space_error(exc, final, written) from exc
        raise
    finally:
        tmp.unlink(missing_ok=True)
    failpoints.after_write(final)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary directory beside `path`; on success rename it onto `path`.

    An existing `path` is replaced only after the new directory is complete: its files and its
    directories' entries on disk (fsync), so a reader sees a whole checkpoint or none. The
    rename is made durable by an fsync of the parent. Used for checkpoints.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = final.with_name(f".{final.name}.tmp-{tag}")
    old = final.with_name(f".{final.name}.old-{tag}")
    tmp.mkdir()
    try:
        yield tmp
        failpoints.before_write(final)
        for f in sorted(tmp.rglob("*")):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        for d in sorted((p for p in tmp.rglob("*") if p.is_dir()), reverse=True):
            fsync_dir(d)
        fsync_dir(tmp)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        fsync_dir(final.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    failpoints.after_write(final)


@contextlib.contextmanager
def entry_lock(entry: Path, wait: bool = True) -> Iterator[bool]:
    """Hold an `flock` on a hidden file beside the cache entry `entry` while the body builds it:
    processes that want the same entry take turns, and the later ones find it built (check for
    it again inside). Yields False, holding nothing, when `wait` is False and another process
    holds the lock. The kernel drops the lock when its holder dies; safety still comes from
    writing the entry atomically, the lock only spares duplicate work."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    lock = entry.with_name(f".{entry.name}.lock")
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            lock.unlink(missing_ok=True)
