"""What every stage task shares: the resume marker, retries for transient errors only, progress."""

from __future__ import annotations

import contextlib
import errno
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger
from prefect.logging.handlers import APILogHandler
from prefect.runtime import task_run
from prefect.states import Completed, State
from prefect.utilities.annotations import quote
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rlanything_core.base import failpoints
from rlanything_core.run.config import RunConfig
from rlanything_core.run.rundir import EXPLOITATION, WARM_START, Inputs, RunDir, sha256_file

StageBody = Callable[[RunConfig, RunDir, int, Inputs], tuple[dict[str, str], dict[str, float]]]
"""A stage's body: (config, run directory, round, the datasets it reads) → (outputs, metrics)."""

_TRANSIENT_ERRNOS = {errno.EAGAIN, errno.EBUSY, errno.EIO, errno.ETIMEDOUT, errno.EINTR}


def is_transient(exc: BaseException | None) -> bool:
    """Errors worth a retry: lost connections, time-outs, busy or flaky I/O. Never bad data or
    deterministic failures (a retry would fail the same way)."""
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    return isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS


def retry_if_transient(_task: Any, _task_run: Any, state: Any) -> bool:
    """Prefect `retry_condition_fn`: retry a failed stage only when its error is transient."""
    data = state.data
    exc = data if isinstance(data, BaseException) else state.result(raise_on_failure=False)
    return is_transient(exc if isinstance(exc, BaseException) else None)


def stage_task(name: str) -> Callable[[StageBody], Any]:
    """Make a stage body into the Prefect task `name`.

    The task skips a stage whose marker says it finished (resume) once the files it wrote are
    checked against the marker, otherwise runs the body and writes the marker with the body's
    outputs, their digests and metrics. A skipped stage's task run ends in the Completed state
    named "Skipped", its message naming the marker and the marker's sha256, so the Prefect UI
    tells a resumed stage from one that ran. Retried twice on transient errors.

    `upstream` is the record of the stage before it (None for the first): its outputs are
    checked against that record before the body runs, and passing it makes Prefect draw the
    pipeline's edge from that stage's task run to this one. `inputs`: the datasets the body
    reads, name → path (`Inputs`), as the flow hands them over from the stages before.
    """

    def wrap(body: StageBody) -> Any:
        @task(
            name=name,
            description=(body.__doc__ or "").strip(),
            task_run_name=lambda: _run_name(name),
            retries=2,
            retry_delay_seconds=1,
            retry_condition_fn=retry_if_transient,
            cache_policy=NO_CACHE,
        )
        def run(
            config: RunConfig,
            run_dir: str,
            round_idx: int,
            upstream: dict[str, Any] | None = None,
            inputs: dict[str, str] | None = None,
        ) -> Any:
            run = RunDir(run_dir)
            if upstream is not None:
                run.verify(upstream["round"], upstream["stage"], upstream)
            done = run.finished(round_idx, name)
            if done is not None:
                run.verify(round_idx, name, done)
                marker = run.marker(round_idx, name)
                message = (
                    f"finished before: its outputs match {marker} (sha256 {sha256_file(marker)})"
                )
                get_run_logger().info("%s skipped, %s", _run_name(name), message)
                return Completed(name="Skipped", message=message, data=done)
            start = time.perf_counter()
            with failpoints.in_stage(round_idx, name):
                outputs, metrics = body(config, run, round_idx, Inputs(run, round_idx, inputs))
            return run.finish(round_idx, name, outputs, metrics, time.perf_counter() - start)

        return run

    return wrap


@dataclass(frozen=True)
class StageRun:
    """A stage task's outcome: its record (the marker's contents) and its final Prefect state."""

    record: dict[str, Any]
    state: State


def run_stage(
    stage: Any,
    config: RunConfig,
    run_dir: str,
    round_idx: int,
    upstream: StageRun | None = None,
    inputs: dict[str, str] | None = None,
) -> StageRun:
    """Call a `stage_task`, whether the stage runs or is skipped; an error in the stage is
    raised as it was. `upstream`: the stage before it, whose record the task receives and
    whose task run Prefect draws as its parent in the flow run's graph. `inputs`: the datasets
    the stage reads, name → path.

    Prefect links a task to earlier results by the `id()` of the objects it is handed, their
    components included, and keeps only the ids of plain dicts: an address that a freed result
    left and a new object took draws an edge from a stage that ran before. So the config and the
    record are handed over quoted (not looked at), and the caller keeps every StageRun of the
    flow alive until the flow ends, so that no result's address is reused while Prefect still
    maps it (the state handed to `wait_for` is looked into)."""
    state = stage(
        quote(config),
        run_dir,
        round_idx,
        upstream=None if upstream is None else quote(upstream.record),
        inputs=None if inputs is None else quote(inputs),
        wait_for=None if upstream is None else [upstream.state],
        return_state=True,
    )
    return StageRun(state.result(), state)


class StageChain:
    """Runs stage tasks one after the other (a round's seven, RLoop's three), handing each the
    record of the stage before it and every dataset the earlier ones wrote, by name (`Inputs`).
    Keeps every StageRun until the chain is dropped (`run_stage`: no recycled ids)."""

    def __init__(
        self, config: RunConfig, run_dir: str, round_idx: int, inputs: dict[str, str]
    ) -> None:
        self.config, self.run_dir, self.round_idx = config, run_dir, round_idx
        self.inputs = dict(inputs)
        self.done: list[StageRun] = []

    def __call__(self, stage: Any) -> dict[str, Any]:
        """Run (or skip, when finished before) `stage`; its record."""
        upstream = self.done[-1] if self.done else None
        ran = run_stage(
            stage, self.config, self.run_dir, self.round_idx, upstream, dict(self.inputs)
        )
        self.done.append(ran)
        outputs = ran.record["outputs"]
        self.inputs |= {k: v for k, v in outputs.items() if str(v).endswith(".parquet")}
        return ran.record


def _run_name(stage: str) -> str:
    """The task run's name in the Prefect UI: `rollout-round-3`, `warm-start`, or for an RLoop
    cycle's exploitation `sft-update-cycle_001`."""
    params = task_run.parameters
    r = params["round_idx"]
    if r == WARM_START:
        return stage
    if r == EXPLOITATION:
        return f"{stage}-{Path(params['run_dir']).name}"
    return f"{stage}-round-{r}"


def _run_log() -> Callable[[str], None]:
    """Send a line to the current Prefect run's logs only (the API, so the UI's log view shows
    it; not the console, where `progress` shows it already); outside a run, do nothing."""
    try:
        logger = get_run_logger()
    except MissingContextError:
        return lambda _line: None
    if not isinstance(logger, logging.LoggerAdapter):  # a run's logger is always an adapter
        return lambda _line: None
    handler = APILogHandler()

    def send(line: str) -> None:
        message, kwargs = logger.process(line, {})
        record = logger.logger.makeRecord(
            logger.logger.name, logging.INFO, __file__, 0, message, (), None,
            extra=kwargs.get("extra"),
        )  # fmt: skip
        handler.handle(record)

    return send


@contextlib.contextmanager
def progress(
    description: str, total: int, *, every_s: float = 60.0
) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on a terminal; yields `advance(n)`. Where output goes to a file (a
    background run's log), a rich bar draws only when it ends, so a plain line is printed at
    most every `every_s` seconds and at the end instead. Inside a Prefect run the same lines go
    to the run's logs, so the UI shows a stage's progress."""
    send = _run_log()
    start = last = time.monotonic()
    done = 0

    def tick(n: int, echo: bool) -> None:
        nonlocal done, last
        done += n
        now = time.monotonic()
        if now - last >= every_s or done >= total:
            last = now
            line = f"{description}: {done}/{total} in {now - start:.0f} s"
            if echo:
                print(line, flush=True)
            send(line)

    if Console().is_terminal:
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, transient=False) as bar:
            handle = bar.add_task(description, total=total)

            def advance(n: int) -> None:
                bar.advance(handle, n)
                tick(n, echo=False)

            yield advance
        return
    yield lambda n: tick(n, echo=True)
