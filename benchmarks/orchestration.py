"""Orchestration overhead (Prefect + Parquet + MLflow) as a share of round time, and the peak
resident memory of the run.

Runs `rlanything-train` for a few rounds in an isolated directory (own Prefect home, own MLflow
SQLite store) and times, per round:
- the round: the `rlanything-round` subflow plus the MLflow logging of its metrics and plots;
- the model work: the stage bodies (their markers record it), less the Parquet reads and writes
  made inside them;
- Parquet: every `pyarrow.parquet` read and write; MLflow: the tracker's per-round calls.
Overhead = round − model work, and is split into Prefect (the rest), Parquet and MLflow.
Resident memory is the sum over the process tree (the Prefect ephemeral server included),
sampled every 0.2 s; the main process's own peak is reported beside it.

    python benchmarks/orchestration.py --config configs/tiny.yaml --out results.json
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow.parquet as pq
from common import PeakRss, bench_config, isolated_workdir, save

import rlanything_flows.train
from rlanything_core.run.rundir import RunDir
from rlanything_flows.tracking import Tracker

TIMES: defaultdict[str, list[float]] = defaultdict(list)


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[name].append(time.perf_counter() - start)

    return wrapper


@contextmanager
def instrumented() -> Iterator[None]:
    """Time Parquet I/O, the round subflows and the tracker's per-round calls."""
    patches = [
        (pq, "write_table", "parquet"),
        (pq, "read_table", "parquet"),
        (rlanything_flows.train, "rlanything_round", "round_flow"),
        (Tracker, "log_round", "mlflow"),
        (Tracker, "log_plots", "mlflow"),
    ]
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in patches]
    for owner, attr, name in patches:
        setattr(owner, attr, _timed(name, getattr(owner, attr)))
    try:
        yield
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)


def mlflow_seconds(r: int) -> float:
    """The tracker's calls after round `r`: log_round, then log_plots."""
    return TIMES["mlflow"][2 * r] + TIMES["mlflow"][2 * r + 1]


def round_seconds(r: int) -> float:
    """Round `r`'s wall time: its `rlanything-round` subflow plus its MLflow logging."""
    return TIMES["round_flow"][r] + mlflow_seconds(r)


def measure(config_path: str, rounds: int) -> dict[str, Any]:
    config = bench_config(config_path, rounds=rounds)
    with isolated_workdir("orchestration") as root, PeakRss() as rss, instrumented():
        # Each round's Parquet time, from the calls made between its start and its end.
        marks: list[int] = []
        original_round = rlanything_flows.train.rlanything_round

        def round_with_mark(**kwargs: Any) -> Any:
            marks.append(len(TIMES["parquet"]))
            return original_round(**kwargs)

        rlanything_flows.train.rlanything_round = round_with_mark
        start = time.perf_counter()
        try:
            rlanything_flows.train.rlanything_train(config=config, run_dir=str(root / "run"))
        finally:
            rlanything_flows.train.rlanything_round = original_round
        total_s = time.perf_counter() - start
        summary = json.loads(RunDir(root / "run").summary_path.read_text())
    per_round = []
    marks.append(len(TIMES["parquet"]))
    for r, record in enumerate(summary["rounds"]):
        stage_s = sum(v for k, v in record.items() if k.startswith("timing/"))
        parquet_s = sum(TIMES["parquet"][marks[r] : marks[r + 1]])
        mlflow_s, round_s = mlflow_seconds(r), round_seconds(r)
        model_s = stage_s - parquet_s  # stage bodies read and write their Parquet files
        overhead = round_s - model_s
        per_round.append(
            {
                "round": r,
                "round_s": round(round_s, 3),
                "model_work_s": round(model_s, 3),
                "overhead_s": round(overhead, 3),
                "overhead_pct": round(100 * overhead / round_s, 2),
                "prefect_s": round(overhead - parquet_s - mlflow_s, 3),
                "parquet_s": round(parquet_s, 3),
                "mlflow_s": round(mlflow_s, 3),
            }
        )
    rounds_s = sum(p["round_s"] for p in per_round)
    overhead_s = sum(p["overhead_s"] for p in per_round)
    return {
        "config": config_path,
        "rounds": rounds,
        "total_s": round(total_s, 1),
        "overhead_pct": round(100 * overhead_s / rounds_s, 2),
        "per_round": per_round,
        "peak_rss_tree_mb": round(rss.peak / 2**20, 1),
        # ru_maxrss is in KiB on Linux
        "peak_rss_main_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/tiny.yaml")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    save(args.out, measure(args.config, args.rounds))


if __name__ == "__main__":
    main()
