"""Shared fixtures. Tests never download anything: models are built locally into a temp cache."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlanything_core.models.loading import resolve_source
from rlanything_core.models.services import Service, free_port, serve_command


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs `-n 2`) each worker keeps to one torch thread, and so
    do the processes it starts: two workers at two threads each would share two cores at a
    fraction of the speed of one thread each."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


GOLDEN = Path(__file__).resolve().parents[1].parent / "shared" / "golden" / "method_vectors.json"
LOCAL_GOLDEN = Path(__file__).resolve().parent / "data" / "method_vectors.json"


@pytest.fixture(scope="session")
def golden() -> dict:
    """shared/golden/method_vectors.json (a copy in tests/data serves clones without shared/)."""
    path = GOLDEN if GOLDEN.is_file() else LOCAL_GOLDEN
    return json.loads(path.read_text())


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tiny models are built once per test session into a temporary cache."""
    os.environ["RLANYTHING_CACHE"] = str(tmp_path_factory.mktemp("rlanything-cache"))
    # MLflow artifacts of local stores go to the user's data directory: a temporary one here
    os.environ["RLANYTHING_DATA"] = str(tmp_path_factory.mktemp("rlanything-data"))


@pytest.fixture(scope="module")
def base() -> str:
    """The tiny judge that `served` serves (tests/test_engines.py, tests/test_serve.py)."""
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
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Prefect's test harness (a temporary server) and MLflow on a temporary SQLite store, for
    a test module's flows (tests/test_flows.py, tests/test_cuda.py)."""
    from prefect.testing.utilities import prefect_test_harness

    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("prefect-home")
    mp.setenv("PREFECT_HOME", str(home))
    mp.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{home / 'mlflow.db'}")
    with prefect_test_harness(server_startup_timeout=120):
        yield
    mp.undo()
