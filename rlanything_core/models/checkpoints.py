"""Checkpoints in Hugging Face format, written atomically with the optimizer's state, and the
AdamW that continues from that state (one optimizer per model for the whole run)."""

from __future__ import annotations

import errno
import json
import re
import shutil
from pathlib import Path

import torch
from peft import PeftModel
from safetensors import SafetensorError
from transformers import PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from rlanything_core.base.atomic import atomic_dir
from rlanything_core.models.devices import no_weight_bars

CHECKPOINT_META = "rlanything_checkpoint.json"


OPTIMIZER_STATE = "optimizer.pt"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (most often a full disk); what was at its path before
    is unchanged."""

    def __str__(self) -> str:  # the message alone, without OSError's "[Errno 28]"
        return str(self.strerror)


def save_checkpoint(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    path: str | Path,
    optimizer: torch.optim.Optimizer | None = None,
) -> Path:
    """Write a Hugging Face checkpoint atomically: the LoRA adapter for a PEFT model, else the
    full model; the tokenizer beside it, and the optimizer's state (`optimizer.pt`) when given,
    all or nothing. A failed write (safetensors reports I/O errors as its own exception) raises
    CheckpointWriteError with the operating system's error number."""
    try:
        with atomic_dir(path) as tmp, no_weight_bars():
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            if optimizer is not None:
                torch.save(optimizer.state_dict(), tmp / OPTIMIZER_STATE)
            kind = "lora" if isinstance(model, PeftModel) else "full"
            (tmp / CHECKPOINT_META).write_text(json.dumps({"kind": kind}) + "\n")
    except (OSError, SafetensorError) as exc:
        code = getattr(exc, "errno", None)
        found = re.search(r"os error (\d+)", str(exc))
        number = code if code is not None else int(found.group(1)) if found else errno.EIO
        needed = sum(p.numel() * p.element_size() for p in model.parameters())
        if optimizer is not None:  # AdamW keeps two moments per trainable weight
            needed += 2 * sum(
                p.numel() * p.element_size() for p in model.parameters() if p.requires_grad
            )
        try:
            free = f", {shutil.disk_usage(Path(path).parent).free} bytes are free there"
        except OSError:
            free = ""
        raise CheckpointWriteError(
            number,
            f"could not write the checkpoint {path} ({exc}); it needs about {needed} bytes"
            f"{free}. Free disk space (or raise the file size limit) and resume: what was at "
            "that path before is unchanged",
        ) from exc
    return Path(path)


def make_optimizer(
    model: PreTrainedModel,
    lr: float,
    weight_decay: float = 0.0,
    resume_from: str | Path | None = None,
) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (reference: lr 1e-6 for 7B models, weight decay 0).

    With `resume_from`, a checkpoint directory holding `optimizer.pt` (written by
    `save_checkpoint`), the moments and step counts saved there are restored; `lr` and
    `weight_decay` stay the ones given here, so the config governs a resumed run. A checkpoint
    without that file (a warm start, a base model) gives a fresh optimizer.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    state_file = None if resume_from is None else Path(resume_from) / OPTIMIZER_STATE
    if state_file is not None and state_file.is_file():
        state = torch.load(state_file, map_location="cpu", weights_only=True)
        saved = [len(g["params"]) for g in state["param_groups"]]
        shapes_differ = saved == [len(params)] and any(
            tuple(entry["exp_avg"].shape) != tuple(params[i].shape)
            for i, entry in state["state"].items()
        )
        if saved != [len(params)] or shapes_differ:
            raise ValueError(
                f"{state_file} holds optimizer state for {saved} parameters of other shapes or "
                f"number than the model's {len(params)} trainable ones (a different model or "
                "LoRA rank?); delete that file to start a fresh optimizer, or set "
                "update.keep_optimizer: false"
            )
        optimizer.load_state_dict(state)
        for group in optimizer.param_groups:
            group["lr"], group["weight_decay"] = lr, weight_decay
    return optimizer
