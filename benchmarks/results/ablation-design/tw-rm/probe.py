"""Probe tw-rm (issue 20): does consistency feedback raise a TextWorld reward model's balanced
process accuracy when its warm start leaves it inside the issue's 60-75 % band?

Two reward models judge one warm-started policy, on the same tasks: "weak" (300 warm-start
episodes, tw-rm-ws300.yaml) and "ablation" (the ablation's 1000). Each trains in +Reward runs
of 8 rounds (seeds 0-2; the weak ones first, so that a stopped probe has them), then
`benchmarks/rm_same_steps.py` judges each run's final held-out steps with the trained and the
starting RM. Two jobs at a time, one torch thread each.

    python benchmarks/results/ablation-design/tw-rm/probe.py OUT_DIR
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

from rlanything_flows.ablate import warm_started
from rlanything_flows.evaluate import eval_tasks
from rlanything_core.run.config import RunConfig, load_config
from rlanything_core.run.rundir import RunDir

HERE = Path(__file__).resolve().parent
PY = sys.executable


def log(text: str) -> None:
    print(time.strftime("%H:%M:%S"), text, flush=True)


def dump(config: RunConfig, path: Path) -> Path:
    path.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return path


def with_(config: RunConfig, **update: object) -> RunConfig:
    return RunConfig.model_validate(config.model_dump() | update)


def run_jobs(jobs: list[tuple[str, list[str], str | None]], out: Path, slots: int = 2) -> None:
    """Run (name, command, after) jobs, `slots` at a time, each after the job it names."""
    done: set[str] = set()
    running: dict[str, subprocess.Popen[bytes]] = {}
    queue = list(jobs)
    while queue or running:
        for name, proc in list(running.items()):
            if proc.poll() is not None:
                log(f"{name} ended with {proc.returncode}")
                if proc.returncode != 0:
                    raise SystemExit(f"{name} failed; see {out / (name + '.log')}")
                done.add(name)
                del running[name]
        for job in list(queue):
            name, command, after = job
            if len(running) < slots and (after is None or after in done):
                log(f"start {name}: {' '.join(command)}")
                with (out / f"{name}.log").open("wb") as sink:
                    running[name] = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
                queue.remove(job)
        time.sleep(5)


def main() -> None:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    weak = load_config(HERE / "tw-rm-ws300.yaml")
    log("games: the pool and the held-out in-domain set, side by side")
    env = weak.environment
    gen_pool = (
        "from rlanything_core.run.config import load_config as l; import sys; "
        "c = l(sys.argv[1]).environment; c.generate(c.split, c.num_tasks, c.seed)"
    )
    pool = subprocess.Popen([PY, "-c", gen_pool, str(HERE / "tw-rm-ws300.yaml")])
    eval_tasks(weak, "id")
    if pool.wait() != 0:
        raise SystemExit("generating the pool's games failed")
    log(f"games done ({env.num_tasks} pool, {weak.evaluation.num_tasks} held out)")
    ready = warm_started(weak, RunDir(out / "warm_start_weak"), workers=2)
    log("weak warm starts done (policy, RM on 300 episodes)")
    # The ablation's RM (1000 episodes) beside the same warm-started policy.
    rm_ws = weak.reward_model.warm_start.model_copy(update={"episodes": 1000})
    policy_ws = weak.policy.warm_start.model_copy(update={"enabled": False})
    strong = with_(
        weak,
        policy=ready.policy.model_copy(update={"warm_start": policy_ws}).model_dump(),
        reward_model=weak.reward_model.model_copy(update={"warm_start": rm_ws}).model_dump(),
    )
    dump(strong, out / "strong-warm-start.yaml")
    jobs: list[tuple[str, list[str], str | None]] = [
        (
            "warm_start_ablation_rm",
            [PY, str(Path(__file__)), "--warm", str(out / "strong-warm-start.yaml"), str(out)],
            None,
        )
    ]
    for seed in (0, 1, 2):
        config = dump(with_(ready, mode="reward", seed=seed), out / f"weak-seed{seed}.yaml")
        jobs.append(("weak_" + str(seed), _train(config, out / f"weak/seed_{seed}/run"), None))
    for seed in (0, 1, 2):
        jobs.append(
            (
                f"ablation_{seed}",
                [PY, str(Path(__file__)), "--train-strong", str(seed), str(out)],
                "warm_start_ablation_rm",
            )
        )
    order = ["warm_start_ablation_rm", "weak_0", "ablation_0", "weak_1", "weak_2"]
    jobs.sort(key=lambda j: order.index(j[0]) if j[0] in order else len(order))
    run_jobs(jobs, out)
    log("all runs trained")


def _train(config: Path, run_dir: Path) -> list[str]:
    return [PY, "-m", "rlanything_flows.cli", "train", "--config", str(config), "--run-dir", str(run_dir)]


def warm_only(config_path: str, out: str) -> None:
    torch.set_num_threads(1)
    ready = warm_started(load_config(config_path), RunDir(Path(out) / "warm_start_ablation"))
    dump(ready, Path(out) / "ablation-ready.yaml")


def train_strong(seed: int, out: str) -> None:
    ready = load_config(Path(out) / "ablation-ready.yaml")
    config = dump(with_(ready, mode="reward", seed=seed), Path(out) / f"ablation-seed{seed}.yaml")
    run_dir = Path(out) / f"ablation/seed_{seed}/run"
    os.execv(PY, _train(config, run_dir))


if __name__ == "__main__":
    if sys.argv[1] == "--warm":
        warm_only(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--train-strong":
        train_strong(int(sys.argv[2]), sys.argv[3])
    else:
        main()
