"""Probe: which out-of-domain split can the household ablation's policy be measured on?

Plays the warm-started policy (Before) and two trained ones (seed 0's Outcome-only and
Anchor-state after 4 rounds) of the v3 ablation on candidate ood splits, 100 tasks x 1 episode,
no reward model; each candidate is `evaluation.ood_options` over the ablation config's
environment options (put goals, one room, 0-1 distractors, in-domain receptacles):

    python benchmarks/results/ablation-design/ood-split/probe.py ABLATION_DIR OUT.json [MODEL ...]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from rlanything_flows.evaluate import rlanything_eval
from rlanything_core.envs.household.world import _ID_TARGETS
from rlanything_core.run.config import load_config

CANDIDATES = {
    "own-ood-split": None,  # cool / find-two goals, 3-4 rooms, 2-6 distractors, new receptacles
    "new-targets-1-room": {"num_rooms": [1, 1], "num_distractors": [0, 1]},
    "new-targets-2-rooms": {"num_rooms": [2, 2], "num_distractors": [0, 1]},
    "in-domain-targets-2-3-distractors": {
        "num_rooms": [1, 1],
        "num_distractors": [2, 3],
        "targets": list(_ID_TARGETS),
    },
    "in-domain-targets-2-rooms": {
        "num_rooms": [2, 2],
        "num_distractors": [0, 1],
        "targets": list(_ID_TARGETS),
    },
}


def main() -> None:
    root, out, *which = sys.argv[1:]
    models = {
        "before": "warm_start/checkpoints/policy/warm_start",
        "outcome-only-seed0": "outcome-only/seed_0/run/checkpoints/policy/round_003",
        "anchor-state-seed0": "anchor-state/seed_0/run/checkpoints/policy/round_003",
    }
    torch.set_num_threads(1)
    base = load_config("configs/ablation-household.yaml")
    results = {}
    for name, ood_options in CANDIDATES.items():
        evaluation = base.evaluation.model_dump() | {
            "num_tasks": 100,
            "rollouts_per_task": 1,
            "every": None,
            "ood_options": ood_options,
        }
        config = base.model_validate(base.model_dump() | {"evaluation": evaluation})
        for model in which or list(models):
            started = time.time()
            with tempfile.TemporaryDirectory() as tmp:
                metrics = rlanything_eval(
                    config=config, policy=str(Path(root) / models[model]), out_dir=tmp,
                    splits=["ood"],
                )  # fmt: skip
            results[f"{name}/{model}"] = {
                k.removeprefix("eval/ood/"): v
                for k, v in metrics.items()
                if k.startswith("eval/ood/policy_accuracy") or k == "eval/ood/episodes"
            } | {"ood_options": ood_options, "seconds": round(time.time() - started, 1)}
            print(name, model, results[f"{name}/{model}"], flush=True)
    Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
