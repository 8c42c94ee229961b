"""Where a result was measured: the CPU (model and the flags that decide float32/bfloat16
speed), the cores, torch. Benchmarks and the ablation write it beside their numbers."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch

_WANTED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:  # not Linux
        return []


def cpu_flags() -> list[str]:
    """The CPU's vector-math flags that decide float32/bfloat16 speed (Linux /proc/cpuinfo)."""
    flags = next((line.split(":", 1)[1].split() for line in _cpuinfo()
                  if line.startswith("flags")), [])  # fmt: skip
    return [f for f in _WANTED_FLAGS if f in flags]


def cpu_model() -> str | None:
    """The CPU's model name (Linux /proc/cpuinfo). Hosts with the same flags and kernel, such as
    an AMD EPYC and an Intel Xeon that both have AVX512-BF16, differ here and in their timings."""
    return next((line.split(":", 1)[1].strip() for line in _cpuinfo()
                 if line.startswith("model name")), None)  # fmt: skip


def machine() -> dict[str, Any]:
    """Where the numbers were measured."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
    }
