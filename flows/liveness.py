"""A training process stops within a minute when the Prefect API or the MLflow store it uses is
lost mid-run, with one line naming which and what to do, instead of retrying for minutes.

Both clients retry a lost connection with growing waits (Prefect's API client, MLflow's HTTP
client), which kept a run whose Prefect server was stopped alive for 4 to 6 minutes before it
failed with a bare `ConnectError`. A watcher thread checks both every `CHECK_EVERY_S` seconds:
the Prefect API's `/health` (the configured PREFECT_API_URL, or the temporary server Prefect
started), and the MLflow store: a tracking server's `/health`, a SQLite store's file. Once one
has failed for `LOST_AFTER_S` seconds without a break, the watcher ends the run directory's
MLflow runs KILLED (when the store is the one still there), prints the line and exits 2. What
the stage in progress half wrote is swept by `rlanything resume`, as after a kill."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

CHECK_EVERY_S = 5.0
LOST_AFTER_S = 30.0
ANSWER_WITHIN_S = 10.0  # what a healthy but busy server is given to answer /health
EXIT_LOST = 2


def prefect_api_url() -> tuple[str, bool] | None:
    """The Prefect API this process talks to and whether it is configured (PREFECT_API_URL)
    rather than the temporary server Prefect started for this process; None before one runs."""
    from prefect.settings import PREFECT_API_URL

    configured = PREFECT_API_URL.value()
    if configured:
        return str(configured).rstrip("/"), True
    from prefect.server.api.server import SubprocessASGIServer

    # Prefect keeps its temporary server per port in this class attribute (Prefect 3)
    for server in list(SubprocessASGIServer._instances.values()):
        if server.running and server.port is not None:
            return server.api_url, False
    return None


Problem = tuple[str, str]
"""What was lost, and what to do before resuming ("" when resuming is enough)."""


def prefect_problem(api: str, configured: bool) -> Problem | None:
    """Why the Prefect API at `api` is lost, or None while it answers."""
    try:
        httpx.get(f"{api}/health", timeout=ANSWER_WITHIN_S).raise_for_status()
    except httpx.HTTPError as exc:
        fix = "start its server again (`prefect server start`)" if configured else ""
        return f"the Prefect API at {api} stopped answering ({type(exc).__name__})", fix
    return None


def mlflow_problem(
    uri: str, seen: dict[str, tuple[int, int]], used: bool = False
) -> Problem | None:
    """Why the MLflow store `uri` is lost, or None while it is there: a tracking server that
    does not answer, or a SQLite file that is gone or was replaced (SQLite makes an empty file
    where a lost one was). `seen` keeps the file's identity from the first look; `used` says
    the run has logged to the store already, so that a missing file is not one to be made."""
    if uri.startswith(("http://", "https://")):
        try:
            httpx.get(f"{uri.rstrip('/')}/health", timeout=ANSWER_WITHIN_S).raise_for_status()
        except httpx.HTTPError as exc:
            what = f"the MLflow tracking server at {uri} stopped answering ({type(exc).__name__})"
            return what, "start that server again"
        return None
    if not uri.startswith("sqlite:///"):
        return None
    database = Path(uri.removeprefix("sqlite:///").split("?")[0])
    try:
        found = database.stat()
    except FileNotFoundError:
        found = None
    identity = (found.st_dev, found.st_ino) if found else None
    if identity is not None and seen.setdefault(uri, identity) == identity:
        return None
    if identity is None and uri not in seen and not used:
        return None  # not made yet: the run makes it
    what = f"the MLflow store {database} is gone (deleted, moved or replaced)"
    return what, f"put it back at {database}"


class ServiceWatch:
    """Watch the Prefect API and the MLflow store while a run trains (`watching`). `check` is
    also asked by the main thread when the run fails, so that a lost service's line replaces
    the client's own error (a `ConnectError`, an SQLAlchemy error)."""

    def __init__(
        self, run_dir: str, resume: str, mlflow_uri: str, say: Callable[[str], None]
    ) -> None:
        self.run_dir, self.resume, self.mlflow_uri, self.say = run_dir, resume, mlflow_uri, say
        self._done = threading.Event()
        self._seen: dict[str, tuple[int, int]] = {}
        mlflow_problem(mlflow_uri, self._seen)  # the store's file as the run starts

    def check(self) -> Problem | None:
        """The first lost service's problem now, or None."""
        api = prefect_api_url()
        lost = prefect_problem(*api) if api else None
        return lost or mlflow_problem(self.mlflow_uri, self._seen, self._logged())

    def _logged(self) -> bool:
        """Whether the run directory records an MLflow run in this store."""
        from rlanything_core.run.rundir import RunDir

        with contextlib.suppress(OSError, ValueError):
            state = RunDir(self.run_dir).load_state()
            return state.get("mlflow_tracking_uri") == self.mlflow_uri
        return False

    def line(self, problem: Problem) -> str:
        what, fix = problem
        then = f"{fix[0].upper()}{fix[1:]}, then `{self.resume}`" if fix else f"`{self.resume}`"
        return f"{what}; the run stopped. {then} continues the run."

    def _watch(self) -> None:
        since: float | None = None
        while not self._done.wait(CHECK_EVERY_S):
            problem = self.check()
            if problem is None:
                since = None
                continue
            since = since if since is not None else time.monotonic()
            if time.monotonic() - since >= LOST_AFTER_S and not self._done.is_set():
                self._exit(problem)

    def _exit(self, problem: Problem) -> None:
        """End the run's MLflow runs KILLED (unless the store is what was lost), say the line,
        exit."""
        from rlanything_core.run.rundir import RunDir
        from rlanything_flows.tracking import record_crash

        if "MLflow" not in problem[0]:
            with contextlib.suppress(Exception):
                record_crash(RunDir(self.run_dir), problem[0])
        self.say(self.line(problem))
        sys.stdout.flush()
        os._exit(EXIT_LOST)

    @contextlib.contextmanager
    def watching(self) -> Iterator[ServiceWatch]:
        threading.Thread(target=self._watch, daemon=True, name="rlanything-watch").start()
        try:
            yield self
        finally:
            self._done.set()
