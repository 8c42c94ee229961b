"""cProfile of play_dtype.py's work (float32 only, after one unprofiled pass), one thread.

usage: PYTHONPATH=.:benchmarks python play_prof.py CONFIG TASKS > play_prof.txt
"""

import cProfile
import io
import pstats
import sys

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
    env = config.environment.env
    specs = env.generate("id", int(sys.argv[2]), seed=7)
    tasks = [TaskRef(f"t{i:03d}", 1, s) for i, s in enumerate(specs)]
    policy = HFEngine(*load_model(config.policy.model.source, device="cpu", dtype="float32"))
    judge = HFEngine(*load_model(config.reward_model.model.source, device="cpu", dtype="float32"))

    def work() -> None:
        rows = play_tasks(config, policy, tasks, rollouts_per_task=config.rollouts_per_task,
                          round_idx=0, base_seed=0, checkpoint="probe", purpose="rollout",
                          description="play")  # fmt: skip
        judge_steps(config, judge, rows_frame(rows, "rollouts"), round_idx=0, base_seed=0,
                    checkpoint="probe", description="judge")  # fmt: skip

    work()
    profile = cProfile.Profile()
    profile.enable()
    work()
    profile.disable()
    for order, count in (("cumulative", 45), ("tottime", 30)):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(count)
        print(text.getvalue())


main()
