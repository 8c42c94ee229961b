"""Rollout time with and without prefix sharing, interleaved, on the demo's policy (lean decode)."""

import json
import sys
import time

sys.path.insert(0, "benchmarks")
import torch
from common import bench_config

from rlanything_core.envs.interface import TaskRef
from rlanything_core.models.engines import HFEngine
from rlanything_core.models.loading import load_model
from rlanything_core.run.rollout import Sampling, play

cfg = bench_config(sys.argv[1])
ntasks, reps = int(sys.argv[2]), int(sys.argv[3])
pm = cfg.policy.model
policy, tok = load_model(pm.source, device=pm.device, dtype=pm.dtype)
print("dtype", next(policy.parameters()).dtype, "threads", torch.get_num_threads(), flush=True)
env = cfg.environment.env
tasks = [TaskRef(f"b-{i}", 1, s) for i, s in enumerate(env.generate("id", ntasks, seed=7))]
s = Sampling(temperature=pm.temperature, max_new_tokens=pm.max_new_tokens, batch_size=pm.batch_size)
res: dict[str, list[float]] = {}
for k in range(reps + 1):
    for arm, (share, lean) in {"share": (True, True), "whole": (False, True)}.items():
        t = time.perf_counter()
        rows = play(
            HFEngine(policy, tok, share, lean), env, tasks, sampling=s,
            rollouts_per_task=cfg.rollouts_per_task, round_idx=0, base_seed=k, checkpoint="x",
        )  # fmt: skip
        dt = time.perf_counter() - t
        toks = sum(len(r["response_token_ids"]) for r in rows)
        print(k, arm, round(dt, 2), "s", toks, "tokens", len(rows), "steps", flush=True)
        if k:
            res.setdefault(arm, []).append(dt)
print(json.dumps({a: sum(v) for a, v in res.items()}))
