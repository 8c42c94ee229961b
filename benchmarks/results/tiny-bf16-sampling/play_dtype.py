"""A household rollout (choosing policy) and its RM judging (choosing verdicts) with the
ablation's warm-started tiny-128x4 models, in float32 and in bfloat16 weights, as a round calls
them (`play_tasks`, `judge_steps`); same tasks and seeds; arms alternate, one thread.

    PYTHONPATH=.:benchmarks python play_dtype.py CONFIG TASKS OUT.json
"""

import json
import sys
import time

import torch

from rlanything_core.base.schemas import rows_frame
from rlanything_core.envs.interface import TaskRef
from rlanything_core.models.engines import HFEngine
from rlanything_core.models.loading import load_model
from rlanything_core.run.config import load_config
from rlanything_tasks.playing import judge_steps, play_tasks


def main() -> None:
    torch.set_num_threads(1)
    config = load_config(sys.argv[1])
    n = int(sys.argv[2])
    env = config.environment.env
    specs = env.generate("id", n, seed=7)
    tasks = [TaskRef(f"t{i:03d}", 1, s) for i, s in enumerate(specs)]
    out: dict[str, object] = {"tasks": n, "rollouts_per_task": config.rollouts_per_task,
                              "votes": config.reward_model.votes}  # fmt: skip
    for dtype in ("float32", "bfloat16", "float32", "bfloat16"):
        policy = HFEngine(*load_model(config.policy.model.source, device="cpu", dtype=dtype))
        judge = HFEngine(*load_model(config.reward_model.model.source, device="cpu", dtype=dtype))
        start = time.perf_counter()
        rows = play_tasks(config, policy, tasks, rollouts_per_task=config.rollouts_per_task,
                          round_idx=0, base_seed=0, checkpoint="probe", purpose="rollout",
                          description=f"play {dtype}")  # fmt: skip
        play_s = time.perf_counter() - start
        frame = rows_frame(rows, "rollouts")
        start = time.perf_counter()
        votes = judge_steps(config, judge, frame, round_idx=0, base_seed=0, checkpoint="probe",
                            description=f"judge {dtype}")  # fmt: skip
        record = {"play_s": round(play_s, 2), "judge_s": round(time.perf_counter() - start, 2),
                  "steps": len(frame), "votes": len(votes)}  # fmt: skip
        out.setdefault(dtype, []).append(record)  # type: ignore[attr-defined]
        print(dtype, record, flush=True)
    with open(sys.argv[3], "w") as f:
        json.dump(out, f, indent=1)


main()
