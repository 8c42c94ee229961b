"""Probe: does balanced consistency feedback keep TextWorld's trained judge from learning the
class prior? +Reward (seed 0, 4 rounds) twice from one warm start, `reward_model.balance_verdicts`
false and true, side by side at one torch thread each; held out in-domain at rounds 0 and 4
(200 games × 1).

    python benchmarks/results/ablation-textworld/balance-probe/probe.py OUT_DIR
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rlanything_flows.ablate import warm_started
from rlanything_core.run.config import dump_config, load_config
from rlanything_core.run.rundir import RunDir


def main() -> None:
    out = Path(sys.argv[1]).resolve()
    base = load_config("configs/ablation-textworld.yaml")
    evaluation = base.evaluation.model_copy(update={"num_tasks": 200, "every": 4})
    off = base.env_model.warm_start.model_copy(update={"enabled": False})
    config = base.model_copy(
        update={
            "mode": "reward",
            "rounds": 4,
            "evaluation": evaluation,
            "env_model": base.env_model.model_copy(update={"warm_start": off}),
        }
    )
    started = warm_started(config, RunDir(out / "warm_start"))
    procs = []
    for balance in (False, True):
        name = "balanced" if balance else "plain"
        rm = started.reward_model.model_copy(update={"balance_verdicts": balance})
        path = out / f"{name}.yaml"
        path.write_text(dump_config(started.model_copy(update={"reward_model": rm})))
        log = (out / f"{name}.log").open("w")
        command = [sys.executable, "-m", "rlanything_flows.cli", "train", "--config", str(path)]
        command += ["--run-dir", str(out / name)]
        environment = {**os.environ, "OMP_NUM_THREADS": "1"}
        procs.append(
            subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
        )
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
