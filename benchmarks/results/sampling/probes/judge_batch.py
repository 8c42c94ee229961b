"""RM scoring of one demo rollout (throughput.py's setup: 2 household tasks, 4 rollouts each)
at several RM batch sizes: ours (`judging.judge`) against plain `model.generate` on the same
batches, seconds and tokens per second, after a warm-up.

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/results/sampling/probes/judge_batch.py
"""

import time

import pandas as pd
from common import bench_config
from throughput import generate_baseline, same_batches

from rlanything_core.base.schemas import rows_frame
from rlanything_core.envs.interface import TaskRef
from rlanything_core.models.engines import HFEngine
from rlanything_core.models.loading import load_model
from rlanything_core.run.judging import judge
from rlanything_core.run.rollout import Sampling, play

config = bench_config("configs/demo.yaml")
pm, rm = config.policy.model, config.reward_model.model
model, tok = load_model(pm.source, device=pm.device, dtype=pm.dtype)
env = config.environment.env
tasks = [TaskRef(f"bench-{i:03d}", 1, s) for i, s in enumerate(env.generate("id", 2, seed=7))]
sampling = Sampling(
    temperature=pm.temperature, max_new_tokens=pm.max_new_tokens, batch_size=pm.batch_size
)
rows = play(HFEngine(model, tok), env, tasks, sampling=sampling,
            rollouts_per_task=config.rollouts_per_task, round_idx=0, base_seed=1,
            checkpoint=pm.source)  # fmt: skip
frame = rows_frame(rows, "rollouts")
print(f"{len(frame)} steps to judge, {config.reward_model.votes} votes each")
for batch in (24, 24, 48, 72):
    kwargs = {"votes": config.reward_model.votes, "round_idx": 0, "checkpoint": rm.source,
              "temperature": rm.temperature, "max_new_tokens": rm.max_new_tokens,
              "batch_size": batch, "env": env}  # fmt: skip
    start = time.perf_counter()
    votes = pd.DataFrame(judge(HFEngine(model, tok), frame, base_seed=1, **kwargs))
    ours_s = time.perf_counter() - start
    ours_tokens = int(votes["response_token_ids"].map(len).sum())
    batches = same_batches(list(votes["prompt_token_ids"].map(list)), batch)
    gen_s, gen_tokens = generate_baseline(model, tok, batches, max_new_tokens=rm.max_new_tokens,
                                          temperature=rm.temperature)  # fmt: skip
    print(f"batch {batch}: ours {ours_s:.1f} s {ours_tokens / ours_s:.1f} tok/s, generate "
          f"{gen_s:.1f} s {gen_tokens / gen_s:.1f} tok/s, ratio "
          f"{(ours_tokens / ours_s) / (gen_tokens / gen_s):.2f}")  # fmt: skip
