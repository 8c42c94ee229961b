"""Devices and dtypes: where a model runs and in which precision (`dtype: fastest` picks bfloat16
only where the CPU computes it natively)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def no_weight_bars() -> Iterator[None]:
    """transformers' "Loading weights" and "Writing model shards" bars off while a checkpoint is
    loaded or saved (a run's own progress lines report its stages), and back as they were after."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def pick_device(device: str = "auto") -> torch.device:
    """ "auto" → CUDA when available, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 in hardware (x86 AVX512-BF16 or AMX). Without it,
    PyTorch emulates bfloat16 on the CPU: a LoRA step of SmolLM2-135M on 8×256 tokens took 308 s
    in bfloat16 against 12 s in float32 on an AVX2-only 2-core machine."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


MIXED = "-mixed"
"""Suffix of the mixed-precision dtypes: float32 weights, bfloat16 forward passes."""


def autocast_dtype(dtype: str, device: torch.device) -> torch.dtype | None:
    """The dtype forward passes are autocast to for a config's `dtype`, or None (no autocast).

    "bfloat16-mixed": bfloat16 (`torch.autocast`): matrix products and attention run in
    bfloat16 while the weights, gradients and optimizer state stay float32, so small learning
    rates are not rounded away as they are in bfloat16 weights. "fastest-mixed": the same on
    CUDA and on CPUs with native bfloat16, None elsewhere.
    """
    if dtype == "bfloat16" + MIXED:
        _warn_if_emulated(torch.bfloat16, device)
        return torch.bfloat16
    if dtype == "fastest" + MIXED:
        return torch.bfloat16 if device.type == "cuda" or cpu_has_native_bf16() else None
    return None


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The torch dtype of the weights for a config's `dtype` on `device`.

    "auto": bfloat16 on CUDA, float32 on CPU (the same on every CPU, so results do not depend
    on the machine). "fastest": bfloat16 on CUDA and on CPUs with native bfloat16
    (`cpu_has_native_bf16`), else float32. "bfloat16-mixed" and "fastest-mixed": float32 (see
    `autocast_dtype`). Any other value is a torch dtype name, used as given; bfloat16 on a CPU
    without native support warns, since it is many times slower there.
    """
    if dtype.endswith(MIXED):
        return torch.float32
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype == "fastest":
        native = device.type == "cuda" or cpu_has_native_bf16()
        return torch.bfloat16 if native else torch.float32
    resolved = getattr(torch, dtype, None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(
            f'dtype "{dtype}" is not a torch dtype; use "auto", "fastest", "fastest-mixed", '
            '"float32", "bfloat16", "bfloat16-mixed" or "float16"'
        )
    _warn_if_emulated(resolved, device)
    return resolved


def _warn_if_emulated(dtype: torch.dtype, device: torch.device) -> None:
    if dtype == torch.bfloat16 and device.type == "cpu" and not cpu_has_native_bf16():
        warnings.warn(
            "dtype bfloat16 on a CPU without AVX512-BF16 or AMX: PyTorch emulates it, many times "
            'slower than float32. Set the model\'s dtype to "fastest" or "fastest-mixed" '
            '(bfloat16 only where the hardware has it) or "float32".',
            RuntimeWarning,
            stacklevel=3,
        )
