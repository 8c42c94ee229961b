"""Probe tw-rm-band (issue 20): a TextWorld reward model warm-started inside the issue's 60-75 %
band, then trained by consistency feedback. Does its balanced process accuracy rise?

`sweep OUT N [N ...]`: warm-start the RM on N episodes (probe tw-rm's recipe, fewer episodes;
nothing else changes) and judge with it the held-out in-domain steps that tw-rm's starting
models played (`tw-rm/weak/seed_0/run/eval/step_000`: 400 games, the warm-started policy): its
balanced process accuracy, with the outcome as judge on the same steps. Writes `sweep.json`.

`train OUT N`: +Reward runs of `rounds` rounds, seeds 0-2, two at a time at one torch thread
each, from that RM and tw-rm's warm-started policy (`rlanything train`); then
`benchmarks/rm_same_steps.py` on each run's last held-out point.

    python benchmarks/results/ablation-design/tw-rm-band/band.py sweep OUT 40 80 150
    python benchmarks/results/ablation-design/tw-rm-band/band.py train OUT 80
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

from rlanything_flows.ablate import warm_started
from rlanything_flows.evaluate import judge_held_out
from rlanything_core.base.atomic import atomic_path
from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.signals import judge_metrics, outcome_verdicts, verdict_matrix
from rlanything_core.run.config import RunConfig, load_config
from rlanything_core.run.rundir import RunDir, write_json

HERE = Path(__file__).resolve().parent
PY = sys.executable
# Probe tw-rm's run directory (not in the repo): its warm-started policy and held-out steps.
TW_RM = Path("/work/runs/tw-rm")
HELD_OUT = TW_RM / "weak/seed_0/run/eval/step_000"


def log(text: str) -> None:
    print(time.strftime("%H:%M:%S"), text, flush=True)


def dump(config: RunConfig, path: Path) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return path


def rm_warm_start_config(episodes: int) -> RunConfig:
    """tw-rm's ready config (warm-started policy, no env-model warm start) with the RM's warm
    start on `episodes` episodes from the untrained tiny model, as tw-rm-ws300.yaml has it."""
    ready = load_config(TW_RM / "weak-seed0.yaml")
    recipe = load_config(HERE.parent / "tw-rm" / "tw-rm-ws300.yaml").reward_model
    ws = recipe.warm_start.model_copy(update={"episodes": episodes})
    rm = recipe.model_copy(update={"warm_start": ws})
    return RunConfig.model_validate(ready.model_dump() | {"reward_model": rm.model_dump()})


def warm(out: Path, episodes: int) -> RunConfig:
    return warm_started(rm_warm_start_config(episodes), RunDir(out / f"ws{episodes}"))


def sweep(out: Path, counts: list[int]) -> None:
    rollouts = read_dataset(HELD_OUT / "id_rollouts.parquet", "rollouts")
    rows = []
    for n in counts:
        start = time.perf_counter()
        ready = warm(out, n)
        warm_seconds = time.perf_counter() - start
        source = ready.reward_model.model.source
        judged = judge_held_out(ready, source, rollouts, f"RM warm-started on {n} episodes")
        votes = ready.reward_model.votes
        rm = judge_metrics(rollouts, verdict_matrix(rollouts, judged, votes))
        outcome = judge_metrics(rollouts, outcome_verdicts(rollouts, votes))
        row = {
            "episodes": n,
            "warm_start_seconds": round(warm_seconds, 1),
            "seconds": round(time.perf_counter() - start, 1),
            "reward_model": source,
            "steps": len(rollouts),
            "rm": rm,
            "outcome_judge": outcome,
        }
        rows.append(row)
        log(
            f"{n} episodes: RM balanced {100 * rm['process_balanced_accuracy']:.1f} "
            f"[{100 * rm['process_balanced_accuracy_ci_low']:.1f}, "
            f"{100 * rm['process_balanced_accuracy_ci_high']:.1f}], outcome as judge "
            f"{100 * outcome['process_balanced_accuracy']:.1f}, {len(rollouts)} steps"
        )
        record = {"held_out": str(HELD_OUT), "threads": torch.get_num_threads(), "rows": rows}
        write_json(HERE / "sweep.json", record)


def train(out: Path, episodes: int, rounds: int = 8) -> None:
    ready = warm(out, episodes)
    procs: list[tuple[int, subprocess.Popen[bytes]]] = []
    runs = []
    for seed in (0, 1, 2):
        config = RunConfig.model_validate(
            ready.model_dump() | {"mode": "reward", "seed": seed, "rounds": rounds}
        )
        path = dump(config, out / f"ws{episodes}-seed{seed}.yaml")
        run_dir = out / f"ws{episodes}/seed_{seed}/run"
        runs.append(str(run_dir))
        while len([p for _, p in procs if p.poll() is None]) >= 2:
            time.sleep(10)
        log(f"start seed {seed}: {run_dir}")
        with (out / f"ws{episodes}-seed{seed}.log").open("wb") as sink:
            cmd = [PY, "-m", "rlanything_flows.cli", "train", "--config", str(path), "--run-dir", str(run_dir)]
            procs.append((seed, subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)))
    for seed, p in procs:
        if p.wait() != 0:
            raise SystemExit(f"seed {seed} failed: see {out}/ws{episodes}-seed{seed}.log")
    log("all seeds trained; judging the last held-out steps with the starting RM")
    bench = HERE.parents[2]
    subprocess.run(
        [PY, str(bench / "rm_same_steps.py"), *runs, "--step", str(rounds),
         "--out", str(HERE / f"same-steps-ws{episodes}-step{rounds}.json")],
        check=True,
    )  # fmt: skip


if __name__ == "__main__":
    torch.set_num_threads(1 if sys.argv[1] == "train" else 2)
    if sys.argv[1] == "sweep":
        sweep(Path(sys.argv[2]), [int(n) for n in sys.argv[3:]])
    elif sys.argv[1] == "train":
        train(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        raise SystemExit(__doc__)
