"""Shared fixtures. Tests never download anything: models are built locally into the session's
cache (suite.py)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from example_envs import BROKEN, OPENENV_SERVER
from suite import end_session, mlflow_store, prefect_server, session_root, start_session

from rlanything_core.envs.openenv.client import LocalServer
from rlanything_core.models.loading import resolve_source
from rlanything_core.models.services import Service, free_port, serve_command


def pytest_configure(config: pytest.Config) -> None:
    """The process that starts the session makes the directory its workers share (suite.py).
    Under pytest-xdist (`make test` runs `-n 2`) each worker keeps to one torch thread, and so
    do the processes it starts: two workers at two threads each would share two cores at a
    fraction of the speed of one thread each."""
    root = start_session()
    if root is not None:
        config.stash[_SESSION_ROOT] = root
    # Prefect's files (and the temporary server of a command run without PREFECT_API_URL) in a
    # home of this process's own, never the user's; its settings are read when Prefect is first
    # imported, after this.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    os.environ["PREFECT_HOME"] = str(session_root() / f"prefect-home-{worker}")
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the temporary Prefect servers that commands run in this process started, while the
    streams they log to are open: Prefect would stop them at exit, after pytest closed them."""
    if "prefect.server.api.server" in sys.modules:
        from prefect.server.api.server import SubprocessASGIServer

        for server in list(SubprocessASGIServer._instances.values()):
            server.stop()


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(_SESSION_ROOT, None)
    if root is not None:
        end_session(root)


_SESSION_ROOT = pytest.StashKey[Path]()


TIERS = ("e2e", "flows", "gpu", "unit")
"""The suite's tiers, one directory each, in the order they run: the slowest first."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test is marked with its directory's tier, and the tiers run slowest first, each
    module's tests together: a worker whose queue runs out takes half of the other's (`--dist
    worksteal`), so the quick tests at the end even out the two."""
    here = Path(__file__).parent
    for item in items:
        tier = item.path.relative_to(here).parts[0]
        assert tier in TIERS, f"{item.path}: a test file belongs in one of tests/{TIERS}"
        item.add_marker(tier)
    items.sort(key=lambda item: TIERS.index(item.path.relative_to(here).parts[0]))


GOLDEN = Path(__file__).resolve().parents[1].parent / "shared" / "golden" / "method_vectors.json"
LOCAL_GOLDEN = Path(__file__).resolve().parent / "data" / "method_vectors.json"


@pytest.fixture(scope="session")
def golden() -> dict:
    """shared/golden/method_vectors.json (a copy in tests/data serves clones without shared/)."""
    path = GOLDEN if GOLDEN.is_file() else LOCAL_GOLDEN
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def base() -> str:
    """The tiny judge that `served` serves (tests/e2e/test_engines.py, tests/e2e/test_serve.py)."""
    return resolve_source("tiny-judge:0")


@pytest.fixture(scope="module")
def served(base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """`rlanything serve` of `base` as model "judge", a real server process on loopback."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with Service(
        serve_command(base, port, name="judge", device="cpu"), port=port, log_path=log
    ) as s:
        yield s


@pytest.fixture(scope="module")
def broken_envs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file of corridor environments that break the contract one way each (example_envs.py)."""
    path = tmp_path_factory.mktemp("envs") / "broken.py"
    path.write_text(textwrap.dedent(BROKEN))
    return path


@pytest.fixture(scope="module")
def openenv_server() -> Iterator[LocalServer]:
    """The OpenEnv example server on a free loopback port, for the module."""
    import openenv  # noqa: F401  (the `openenv` extra: `make test` installs it)

    local = LocalServer(OPENENV_SERVER, start_timeout=60)
    yield local
    local.stop()


@pytest.fixture(scope="module")
def prefect_harness() -> Iterator[None]:
    """The session's Prefect server and MLflow store (suite.py) for a test module's flows
    run in this process (tests/flows/test_flows.py and others)."""
    import prefect.context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    url = prefect_server()
    mp = pytest.MonkeyPatch()
    mp.setenv("PREFECT_API_URL", url)  # for the processes the flows start
    mp.setenv("MLFLOW_TRACKING_URI", mlflow_store())
    with (
        temporary_settings({PREFECT_API_URL: url}),
        # also for the contexts copied before this one (Prefect's own test harness does so)
        prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()),
    ):
        yield
    mp.undo()
