"""What the benchmarks share: an isolated working directory, the config, the JSON output."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from rlanything_core.base.host import machine
from rlanything_core.run.config import RunConfig, load_config
from rlanything_core.run.rundir import write_json

REPO = Path(__file__).resolve().parent.parent


class EqualWorkError(AssertionError):
    """The two sides of a speed comparison were given different work: the ratio would not mean
    what it says, so the benchmark stops instead of recording it."""


@contextlib.contextmanager
def isolated_workdir(prefix: str) -> Iterator[Path]:
    """A fresh temporary directory as the working directory, with its own Prefect home and
    MLflow SQLite store, so a benchmark never touches the user's runs."""
    saved_cwd, saved_env = Path.cwd(), dict(os.environ)
    with tempfile.TemporaryDirectory(prefix=f"rlanything-bench-{prefix}-") as tmp:
        root = Path(tmp)
        os.environ["PREFECT_HOME"] = str(root / "prefect")
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlflow.db'}"
        os.chdir(root)
        try:
            yield root
        finally:
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)


def bench_config(path: str, **updates: Any) -> RunConfig:
    """The config at `path` (relative to the repository), with top-level fields replaced."""
    config = load_config(REPO / path if not Path(path).is_absolute() else path)
    return config.model_copy(update=updates) if updates else config


def percent(metrics: dict[str, float], name: str) -> str:
    """A metric and its 95 % interval (`name_ci_low`, `name_ci_high`) in %: "73.4 [71.2, 75.5]"."""
    low, high = metrics[f"{name}_ci_low"], metrics[f"{name}_ci_high"]
    return f"{100 * metrics[name]:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def save(out: str | Path, result: dict[str, Any]) -> None:
    """Write the result atomically as JSON (with the machine and the time) and print it."""
    record = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": git_commit(),
        "machine": machine(),
        **result,
    }
    write_json(Path(out), record)
    print(json.dumps(record, indent=2))
    print(f"wrote {out}")


def git_commit() -> str:
    """The repository's HEAD, short (the code a result was measured with). A copy of the tree
    without its git history (the GPU machine's) names it in RLANYTHING_COMMIT."""
    if named := os.environ.get("RLANYTHING_COMMIT"):
        return named
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except FileNotFoundError:  # no git installed
        return ""


PSS_EVERY = 10
"""PeakRss reads PSS at one sample in this many (every 2 s at 0.2 s a sample)."""


def _pss(pid: int) -> int:
    """Proportional set size in bytes from /proc/PID/smaps_rollup (0 where it cannot be read:
    not Linux, the process gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PeakRss:
    """Samples the resident memory of a process (default: this one) and its children in a
    thread: `peak` (bytes) while inside `with`, `now()` at any time. `parts` is the peak's
    breakdown, {process label: bytes} at the sample where the sum peaked, and `peak_pss` the
    largest sum of proportional set sizes (shared pages, such as torch's libraries mapped by
    every process, counted once in all rather than once per process; Linux only, else 0; read
    every `PSS_EVERY` samples).
    `samples` holds every sample's (time.time(), tree's resident bytes)."""

    def __init__(self, pid: int | None = None, interval: float = 0.2) -> None:
        self.process = psutil.Process(pid)
        self.interval, self._stop = interval, threading.Event()
        self.peak = self.peak_pss = 0
        self.parts: dict[str, int] = {}
        self.samples: list[tuple[float, int]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        return sum(rss for rss, _ in self._sample().values())

    def _sample(self, pss: bool = True) -> dict[str, tuple[int, int]]:
        """{label: (rss, pss)} of every process of the tree; a label is the process's pid and
        the first words of its command line that say what it is. PSS is read (from
        /proc/PID/smaps_rollup) only when `pss`, else 0: it costs far more than RSS."""
        out: dict[str, tuple[int, int]] = {}
        for proc in [self.process, *self.process.children(recursive=True)]:
            try:
                rss = proc.memory_info().rss
                words = [w.rsplit("/", 1)[-1] for w in proc.cmdline()[:6]]
            except psutil.Error:
                continue  # the process ended between listing and reading
            out[f"{proc.pid} {' '.join(words)[:90]}"] = (rss, _pss(proc.pid) if pss else 0)
        return out

    def _run(self) -> None:
        count = 0
        while not self._stop.is_set():
            # PSS once every PSS_EVERY samples: reading all of smaps every 0.2 s took CPU from
            # the process measured (one demo run took 570 s under it, one unmeasured 388 s)
            sample = self._sample(pss=count % PSS_EVERY == 0)
            count += 1
            total = sum(rss for rss, _ in sample.values())
            self.samples.append((time.time(), total))
            if total > self.peak:
                self.peak, self.parts = total, {k: rss for k, (rss, _) in sample.items()}
            self.peak_pss = max(self.peak_pss, sum(pss for _, pss in sample.values()))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
