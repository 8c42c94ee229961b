"""Updates spread over several processes: torch.distributed's DDP or FSDP2, launched by torchrun.

`rl_update` (training.py) starts `torchrun --standalone --nproc-per-node N -m
rlanything_core.models.training JOB` when `update.distributed.processes` > 1. Every process
loads the
checkpoint, wraps it (`Group.wrap`) and takes its share of each mini-batch (`Group.take`);
`modelling.ppo_update` weights the losses so that the all-reduced gradient equals the
single-process one. Rank 0 writes the checkpoint and the metrics.

Choices:
1. CPU runs use the gloo backend and CUDA runs NCCL, one process per GPU (`LOCAL_RANK`).
2. DDP keeps a whole replica per process; FSDP2 (`fully_shard` on every decoder layer, then on
   the model) shards parameters, gradients and optimizer state, for models too big for one
   device. The sharded model is gathered into rank 0's memory to be saved.
3. Every process runs the same number of forward and backward passes (a process short of samples
   runs one with weight 0), because both strategies communicate inside those passes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel


@dataclass(frozen=True)
class Group:
    """This process's place among the update's processes; `Group()` is a process alone."""

    rank: int = 0
    world_size: int = 1
    strategy: str = "ddp"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def take(self, indices: list[int]) -> list[int]:
        """This process's share of a mini-batch: every world_size-th sample from its rank on."""
        return indices[self.rank :: self.world_size]

    def wrap(self, model: Any) -> Any:
        """The model ready to train in the group (itself when alone)."""
        if self.world_size == 1:
            return model
        if self.strategy == "fsdp":
            for layer in _decoder_layers(model):
                fully_shard(layer)
            fully_shard(model)
            return model
        device = next(model.parameters()).device
        return DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )

    @contextlib.contextmanager
    def accumulating(self, model: Any, sync: bool) -> Iterator[None]:
        """Backward passes inside add to the gradients; only a `sync=True` one reduces them."""
        if self.world_size == 1 or sync:
            yield
        elif self.strategy == "fsdp":
            model.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                model.set_requires_gradient_sync(True)
        else:
            with model.no_sync():
                yield

    def all_sum(self, values: dict[str, float]) -> dict[str, float]:
        """The sum of each value over the processes."""
        if self.world_size == 1 or not values:
            return values
        keys = sorted(values)
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        total = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=device)
        dist.all_reduce(total)
        return dict(zip(keys, total.tolist(), strict=True))

    def full_state_dict(self, model: Any) -> dict[str, Any] | None:
        """The trained weights gathered on rank 0 (None elsewhere); every rank must call it."""
        if self.strategy != "fsdp" or self.world_size == 1:
            return None
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(model, options=options)
        return state if self.is_main else None


def _decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The transformer blocks of a (possibly PEFT-wrapped) Hugging Face causal LM."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(base, "model", None), "layers", None)
    if layers is None:
        raise ValueError(
            f"FSDP needs the decoder layers at model.model.layers; {type(base).__name__} has "
            "none. Set update.distributed.strategy: ddp for this model."
        )
    return list(layers)


def join_group(strategy: str, cuda: bool) -> tuple[Group, str]:
    """Join the process group torchrun set up: NCCL with one GPU per process (`LOCAL_RANK`) when
    `cuda`, else gloo on the CPU. Returns the group and this process's device."""
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    device = f"cuda:{torch.cuda.current_device()}" if cuda else "cpu"
    return Group(dist.get_rank(), dist.get_world_size(), strategy), device


def leave_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
