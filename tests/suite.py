"""What the whole test session shares, across pytest-xdist workers: one directory, the model
cache in it, one Prefect server and one MLflow store, and reference runs trained once.

The process that starts the session (pytest's controller, or the only process without xdist)
makes the directory and names it in RLANYTHING_TEST_SESSION before the workers start, so they
inherit it. Whichever worker first needs the Prefect server or a reference run makes it, under
an `flock` (`entry_lock`), while the other waits for it and then finds it made. The process
that made the directory stops the server and removes the directory when the session ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rlanything_core.base.atomic import atomic_path, entry_lock
from rlanything_core.models.services import Service, free_port

SESSION = "RLANYTHING_TEST_SESSION"


def start_session() -> Path | None:
    """Make the session's directory, model cache and data directory, and name them in this
    process's environment; None where a session is already under way (an xdist worker)."""
    if os.environ.get(SESSION):
        return None
    root = Path(tempfile.mkdtemp(prefix="rlanything-tests-"))
    os.environ[SESSION] = str(root)
    # Tiny models and warm starts are built once for the session, by the first test that
    # needs each (the builders lock their cache entries), and every process of the suite
    # finds them there.
    os.environ["RLANYTHING_CACHE"] = str(root / "cache")
    # MLflow artifacts of local stores go to the user's data directory: a temporary one here.
    os.environ["RLANYTHING_DATA"] = str(root / "data")
    return root


def end_session(root: Path) -> None:
    """Stop what the session started (each recorded process group) and remove its directory;
    this process's Prefect logs and events are sent first, while the server still answers."""
    if "prefect" in sys.modules:
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=30)
        EventsWorker.drain_all(timeout=30)
    for pidfile in (root / "services").glob("*.pid"):
        pid = int(pidfile.read_text())
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)
    for name in (SESSION, "RLANYTHING_CACHE", "RLANYTHING_DATA"):
        os.environ.pop(name, None)


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def session_root() -> Path:
    return Path(os.environ[SESSION])


def prefect_server() -> str:
    """The session's Prefect server's API URL, starting it if no worker has yet."""
    root = session_root() / "services"
    url = root / "prefect.url"
    if not url.is_file():
        with entry_lock(url):
            if not url.is_file():
                _start_prefect(root, url)
    return url.read_text()


def _start_prefect(root: Path, url_file: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(root / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    command = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1"]
    with (root / "prefect-server.log").open("ab") as log:
        # a session of its own: it outlives the worker that started it, and the session's end
        # stops its whole group
        server = subprocess.Popen(
            [*command, "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (root / "prefect.pid").write_text(str(server.pid))
    Service(url=api, startup_timeout_s=180, log_path=root / "prefect-server.log").start()
    with atomic_path(url_file) as part:
        part.write_text(api)


def mlflow_store() -> str:
    """The session's MLflow store (SQLite): every in-process flow of the suite logs there."""
    return f"sqlite:///{session_root() / 'mlflow.db'}"


def reference_run(name: str, train: Callable[[Path], object]) -> Path:
    """The run directory `name`, trained once for the session by `train(directory)`; a test
    that changes it works on a copy (`copy_run`)."""
    root = session_root() / "reference-runs" / name
    done = root.with_name(f"{name}.done")
    if not done.is_file():
        with entry_lock(root):
            if not done.is_file():
                shutil.rmtree(root, ignore_errors=True)
                train(root)
                done.touch()
    return root


def copy_run(reference: Path, target: Path) -> Path:
    """A copy of a reference run directory at `target`, its lock file left behind."""
    shutil.copytree(reference, target, ignore=shutil.ignore_patterns(".lock"))
    return target
