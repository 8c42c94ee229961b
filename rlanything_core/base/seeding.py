"""Seeds. One seeding function for a process; per-sample seeds derived with hashlib.

Python's `hash()` of a string differs per process, so it must never feed a seed.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from its parts: derive_seed(base_seed, "rollout", round, task_id, rollout_idx).

    Stable across processes, machines and Python versions: sha256 of the parts' `repr`s.
    """
    digest = hashlib.sha256("\x1f".join(repr(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (CPU and CUDA) for one process."""
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)
