"""cProfile of one rollout (`rollout.play`) and one RM scoring (`judging.judge`) on the demo's
work (throughput.py's setup: 2 household tasks, the demo config's models), after a warm-up.

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/results/sampling/probes/play_profile.py \
        [tottime|cumulative] [lines]
"""

import cProfile
import pstats
import sys
import time

import pandas as pd
from common import bench_config

from rlanything_core.base.schemas import rows_frame
from rlanything_core.envs.interface import TaskRef
from rlanything_core.models.engines import HFEngine
from rlanything_core.models.loading import load_model
from rlanything_core.run.judging import judge
from rlanything_core.run.rollout import Sampling, play

config = bench_config("configs/demo.yaml")
pm, rm = config.policy.model, config.reward_model.model
policy, tok = load_model(pm.source, device=pm.device, dtype=pm.dtype)
env = config.environment.env
specs = env.generate("id", 2, seed=7)
tasks = [TaskRef(f"bench-{i:03d}", 1, s) for i, s in enumerate(specs)]
sampling = Sampling(
    temperature=pm.temperature, max_new_tokens=pm.max_new_tokens, batch_size=pm.batch_size
)
rm_kwargs = {
    "votes": config.reward_model.votes,
    "round_idx": 0,
    "checkpoint": rm.source,
    "temperature": rm.temperature,
    "max_new_tokens": rm.max_new_tokens,
    "batch_size": rm.batch_size,
    "env": env,
}


def once(k: int) -> tuple[float, float, pd.DataFrame]:
    t = time.perf_counter()
    rows = play(HFEngine(policy, tok), env, tasks, sampling=sampling,
                rollouts_per_task=config.rollouts_per_task, round_idx=0, base_seed=k,
                checkpoint=pm.source)  # fmt: skip
    frame = rows_frame(rows, "rollouts")
    t1 = time.perf_counter()
    judge(HFEngine(policy, tok), frame, base_seed=k, **rm_kwargs)
    return t1 - t, time.perf_counter() - t1, frame


once(0)
profiler = cProfile.Profile()
profiler.enable()
roll_s, judge_s, frame = once(1)
profiler.disable()
print(f"rollout {roll_s:.2f} s ({len(frame)} steps), scoring {judge_s:.2f} s")
order = sys.argv[1] if len(sys.argv) > 1 else "tottime"  # or "cumulative"
lines = int(sys.argv[2]) if len(sys.argv) > 2 else 25
pstats.Stats(profiler, stream=sys.stdout).sort_stats(order).print_stats(lines)
