"""Fail points: where the fault-injection suite (tests/e2e/test_faults.py) stops a training process.

With RLANYTHING_FAILPOINT="<round>/<stage>" (e.g. "1/policy-update"), the process stops in the
middle of that stage: right after the stage's first output file (a dataset or a checkpoint) is
in place, before the rest of its outputs and its marker. "-1/warm-start/<role>" stops the warm
start once that role's checkpoint is written; "<round>/acceptance-check/next-pool" once the next
round's task pool is written; "<round>/mlflow-<what>" stops while a round is
logged to MLflow (`reached`: metrics, dataset, checkpoint, artifact). It writes its pid to the
file named by RLANYTHING_FAILPOINT_READY and waits there for the suite to kill it with SIGKILL
or SIGTERM (after `timeout_s` it kills itself). With RLANYTHING_FAILPOINT_FAULT="enospc" the
armed stage's first file write fails instead, as on a full disk, before the file is in place.
Unset, the hooks below do nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

FAILPOINT_ENV = "RLANYTHING_FAILPOINT"
READY_ENV = "RLANYTHING_FAILPOINT_READY"
FAULT_ENV = "RLANYTHING_FAILPOINT_FAULT"

_stage: contextvars.ContextVar[str | None] = contextvars.ContextVar("stage", default=None)


@contextlib.contextmanager
def in_stage(round_idx: int, stage: str) -> Iterator[None]:
    """Mark the code of one stage run, so that `after_write` knows where it is."""
    token = _stage.set(f"{round_idx}/{stage}")
    try:
        yield
    finally:
        _stage.reset(token)


@contextlib.contextmanager
def part(name: str) -> Iterator[None]:
    """Mark one part of the current stage ("-1/warm-start" → "-1/warm-start/reward_model"), so
    that a fail point can stop the process in that part rather than the stage's first."""
    token = _stage.set(f"{_stage.get()}/{name}")
    try:
        yield
    finally:
        _stage.reset(token)


def _armed() -> bool:
    armed = os.environ.get(FAILPOINT_ENV)
    return bool(armed) and _stage.get() == armed


def before_write(path: Path) -> None:
    """Called by the atomic writers before `path` is put in place: in the armed stage (or part
    of a stage) with the fault "enospc", the write fails as on a full disk."""
    if os.environ.get(FAULT_ENV) == "enospc" and _armed():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def after_write(path: Path, timeout_s: float = 600.0) -> None:
    """Called by the atomic writers once `path` is in place: stop here if this is the armed
    stage (or part of a stage)."""
    if os.environ.get(FAULT_ENV) != "enospc" and _armed():
        _hold(str(path), timeout_s)


def reached(point: str, what: str, timeout_s: float = 600.0) -> None:
    """Called where work that is not a file write can be interrupted, e.g. "1/mlflow-metrics"
    once a round's metrics are logged to MLflow: stop here if `point` is armed. `what` says
    what was done just before (for the suite's report)."""
    if os.environ.get(FAILPOINT_ENV) == point:
        _hold(what, timeout_s)


def _hold(what: str, timeout_s: float) -> None:
    """Tell the suite where the process stopped, wait for its SIGKILL, else kill itself."""
    ready = os.environ.get(READY_ENV)
    if ready:
        Path(ready).write_text(f"{os.getpid()} {what}\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)


def worker_joined(rank: int) -> None:
    """Called by each torchrun process of a distributed update once it has joined the group:
    with RLANYTHING_FAILPOINT="update-worker/<rank>", that process aborts (SIGABRT), once; the
    file named by RLANYTHING_FAILPOINT_READY records that it did and disarms the point."""
    if os.environ.get(FAILPOINT_ENV) != f"update-worker/{rank}":
        return
    ready = os.environ.get(READY_ENV)
    if not ready or Path(ready).exists():
        return
    Path(ready).write_text(f"{os.getpid()} aborted\n")
    os.abort()
