"""Probe tw-rm-direction (issue 20): does weighing the reward model's update by the direction
each vote is pushed in (`reward_model.balance_directions`) make a TextWorld judge that starts
inside the issue's 60-75 % band rise when trained, where the plain update makes it fall
(probe tw-rm-band)?

`warm OUT`: the games (pool and held-out in-domain set) and the warm starts of tw-rm-band's
recipe (tw-rm-ws300.yaml with the RM warm-started on 150 episodes), two roles side by side;
writes OUT/ready.yaml. `warm OUT --household`: the same from household's tw-rm/hh-rm.yaml
as it is (the household ablation's models, whose RM rose +5.6 points in tw-rm).

`train OUT ARM:SEED [ARM:SEED ...] [--rounds R]`: +Reward runs of R rounds (default 8) from
OUT/ready.yaml, two at a time at one torch thread each, in the order given; ARM is `plain` or
`direction`. As each run ends, `benchmarks/rm_same_steps.py` judges its step-R held-out steps
with the trained and the starting RM and writes `same-steps-[hh-]ARM-seedSEED.json` here
(hh- for household).

    python benchmarks/results/ablation-design/tw-rm-direction/direction.py warm OUT
    python benchmarks/results/ablation-design/tw-rm-direction/direction.py train OUT \
        direction:0 plain:0 direction:1 direction:2
    python benchmarks/results/ablation-design/tw-rm-direction/direction.py warm HH --household
    python benchmarks/results/ablation-design/tw-rm-direction/direction.py train HH \
        direction:0 plain:0 --rounds 4
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch

from rlanything_flows.ablate import warm_started
from rlanything_flows.evaluate import eval_tasks
from rlanything_core.base.atomic import atomic_path
from rlanything_core.run.config import RunConfig, dump_config, load_config
from rlanything_core.run.rundir import RunDir

HERE = Path(__file__).resolve().parent
PY = sys.executable
RM_EPISODES = 150


def log(text: str) -> None:
    print(time.strftime("%H:%M:%S"), text, flush=True)


def dump(config: RunConfig, path: Path) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(dump_config(config))
    return path


def warm(out: Path, household: bool) -> None:
    if household:
        config = load_config(HERE.parent / "tw-rm" / "hh-rm.yaml")
        log("household: warm starts (policy, RM), two at a time")
    else:
        base = load_config(HERE.parent / "tw-rm" / "tw-rm-ws300.yaml")
        rm_ws = base.reward_model.warm_start.model_copy(update={"episodes": RM_EPISODES})
        rm = base.reward_model.model_copy(update={"warm_start": rm_ws})
        config = RunConfig.model_validate(base.model_dump() | {"reward_model": rm.model_dump()})
        log("games: the pool and the held-out in-domain set, side by side")
        gen_pool = (
            "from rlanything_core.run.config import load_config as l; import sys; "
            "c = l(sys.argv[1]).environment; c.generate(c.split, c.num_tasks, c.seed)"
        )
        recipe = str(HERE.parent / "tw-rm" / "tw-rm-ws300.yaml")
        pool = subprocess.Popen([PY, "-c", gen_pool, recipe])
        eval_tasks(config, "id")
        if pool.wait() != 0:
            raise SystemExit("generating the pool's games failed")
        log("games done; warm starts (policy, RM on 150 episodes), two at a time")
    ready = warm_started(config, RunDir(out / "warm"), workers=2)
    dump(ready, out / "ready.yaml")
    log(f"warm starts done: {out / 'ready.yaml'}")


def train(out: Path, jobs: list[str], rounds: int) -> None:
    ready = load_config(out / "ready.yaml")
    prefix = "hh-" if ready.environment.name == "household" else ""
    running: list[tuple[str, Path, subprocess.Popen[bytes]]] = []

    def reap(block: bool) -> None:
        for item in list(running):
            name, run_dir, proc = item
            if block:
                proc.wait()
            if proc.poll() is None:
                continue
            running.remove(item)
            if proc.returncode != 0:
                log(f"{name} failed ({proc.returncode}); see {out / (name + '.log')}")
                continue
            log(f"{name} trained; judging its step-{rounds} held-out steps with the starting RM")
            subprocess.run(
                [PY, str(HERE.parents[2] / "rm_same_steps.py"), str(run_dir), "--step",
                 str(rounds), "--out", str(HERE / f"same-steps-{name}.json")],
                check=False,
            )  # fmt: skip

    for job in jobs:
        arm, seed = job.split(":")
        if arm not in ("plain", "direction"):
            raise SystemExit(f"unknown arm {arm!r}: use plain or direction")
        rm = ready.reward_model.model_copy(update={"balance_directions": arm == "direction"})
        config = RunConfig.model_validate(
            ready.model_dump()
            | {
                "mode": "reward",
                "seed": int(seed),
                "rounds": rounds,
                "reward_model": rm.model_dump(),
            }
        )
        name = f"{prefix}{arm}-seed{seed}"
        path = dump(config, HERE / f"{name}.yaml")
        run_dir = out / arm / f"seed_{seed}" / "run"
        while len(running) >= 2:
            reap(block=False)
            time.sleep(10)
        log(f"start {name}: {run_dir}")
        with (out / f"{name}.log").open("wb") as sink:
            cmd = [PY, "-m", "rlanything_flows.cli", "train", "--config", str(path), "--run-dir", str(run_dir)]
            running.append(
                (name, run_dir, subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT))
            )
    while running:
        reap(block=True)
    log("all runs done")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["warm", "train"])
    parser.add_argument("out", type=Path)
    parser.add_argument("jobs", nargs="*", help="train: ARM:SEED, ARM plain or direction")
    parser.add_argument("--household", action="store_true", help="warm: household's hh-rm.yaml")
    parser.add_argument("--rounds", type=int, default=8, help="train: rounds a run")
    args = parser.parse_args()
    torch.set_num_threads(1 if args.command == "train" else 2)
    if args.command == "warm":
        warm(args.out, args.household)
    else:
        train(args.out, args.jobs, args.rounds)
