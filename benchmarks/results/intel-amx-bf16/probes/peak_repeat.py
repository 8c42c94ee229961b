"""Probe: the spread of `round_profile.matmul_peak` (2048², the best of 2 s of timings) on
this host, 4 times for each dtype, alternated.

    PYTHONPATH=. python benchmarks/results/intel-amx-bf16/probes/peak_repeat.py OUT
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
from common import save
from round_profile import matmul_peak

torch.set_num_threads(2)
out = {"bfloat16": [], "float32": []}
for _ in range(4):
    for name, dt in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        out[name].append(round(matmul_peak(2048, dt) / 1e9, 1))
save(sys.argv[1], {"probe": "peak_repeat", "gflop_per_s": out})
