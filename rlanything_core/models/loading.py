"""Load a model and its tokenizer from a source: a local checkpoint, the embedded default, a
tiny test model built on first use, or a hub id (`resolve_source`)."""

from __future__ import annotations

import contextlib
import functools
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from rlanything_core.models.decoding import AUTOCAST_ATTRIBUTE
from rlanything_core.models.default import (
    EMBEDDED_DEFAULT,
    ModelNotFoundError,
    ensure_default_model,
)
from rlanything_core.models.devices import (
    autocast_dtype,
    no_weight_bars,
    pick_device,
    resolve_dtype,
)


def resolve_source(source: str) -> str:
    """Turn a model source into something `from_pretrained` loads.

    - "embedded:smollm2-135m-instruct": the embedded default, converted on first use;
    - "tiny:<seed>": a tiny random local model built on first use (tests): 64 wide, 2 layers;
      "tiny-<width>x<layers>:<seed>" sets the size, e.g. "tiny-128x4:0", and
      "tiny-128x4-textworld:0" trains its tokenizer on TextWorld's games too;
    - "tiny-policy:<seed>", "tiny-judge:<seed>", "tiny-envmodel:<seed>": tiny models warm-started
      on expert-made data (tests, configs/tiny.yaml);
    - a local directory in Hugging Face format (a checkpoint written by `save_checkpoint`);
    - anything else is passed on as a hub id (needs network access).
    """
    if source == EMBEDDED_DEFAULT:
        return str(ensure_default_model())
    if source == "tiny" or source.startswith("tiny"):
        from rlanything_core.models.tiny import (
            VOCABULARIES,
            WARM_KINDS,
            ensure_tiny_model,
            ensure_warm_tiny_model,
        )

        name, _, seed = source.partition(":")
        kind = name.removeprefix("tiny").removeprefix("-")
        if not kind:
            return str(ensure_tiny_model(int(seed or 0)))
        if kind in WARM_KINDS:
            return str(ensure_warm_tiny_model(kind, int(seed or 0)))
        size, _, vocabulary = kind.partition("-")
        width, _, layers = size.partition("x")
        if (
            width.isdigit()
            and layers.isdigit()
            and int(width) % 4 == 0
            and int(layers) > 0
            and vocabulary in ("", *VOCABULARIES)
        ):
            words = vocabulary or "household"
            return str(ensure_tiny_model(int(seed or 0), int(width), int(layers), words))
        raise ModelNotFoundError(
            f"unknown tiny model {source!r}; use 'tiny:<seed>', 'tiny-<width>x<layers>:<seed>' "
            f"(width a multiple of 4), 'tiny-<width>x<layers>-<vocabulary>:<seed>' with "
            f"vocabulary in {VOCABULARIES}, or 'tiny-<kind>:<seed>' with kind in {WARM_KINDS}."
        )
    if source.startswith(("/", ".", "~")) and not Path(source).expanduser().is_dir():
        raise ModelNotFoundError(
            f"model path {source!r} does not exist; point it at a Hugging Face model directory "
            f"or use {EMBEDDED_DEFAULT!r}."
        )
    return str(Path(source).expanduser()) if Path(source).expanduser().is_dir() else source


def _autocast_forward(model: Any, device: torch.device, dtype: torch.dtype) -> None:
    """Run every forward pass of `model` under `torch.autocast(device, dtype)`; the backward
    pass follows the dtypes its forward chose."""
    forward = model.forward

    @functools.wraps(forward)
    def autocast_forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device.type, dtype=dtype):
            return forward(*args, **kwargs)

    model.forward = autocast_forward
    setattr(model, AUTOCAST_ATTRIBUTE, dtype)  # the lean decode step does not call forward


def contiguous_head_input(model: Any) -> None:
    """Hand the output layer (LM head) a contiguous input.

    With `logits_to_keep`, transformers slices the last positions of the hidden states
    (`hidden[:, -k:, :]`, not contiguous) before the LM head. Where autograd records that linear
    layer, torch 2.13 on CPU runs it as a batched matmul over the weight copied once per row:
    for SmolLM2 (vocabulary 49152) and 8 rows that is a 453 MB copy forward and another
    backward, 38 % of a warm-start step's CPU time (torch profiler, 8 pairs of 210 tokens,
    bfloat16). A contiguous copy of the few kept positions makes it one plain matmul; the
    logits are the same up to rounding (tested)."""
    head = model.get_output_embeddings()
    if head is not None:
        head.register_forward_pre_hook(lambda _module, args: (args[0].contiguous(), *args[1:]))


def load_tokenizer(source: str) -> PreTrainedTokenizerBase:
    """The tokenizer of `source`; an adapter saved without one uses its base model's."""
    path = resolve_source(source)
    adapter_cfg = Path(path) / "adapter_config.json"
    if adapter_cfg.is_file() and not (Path(path) / "tokenizer_config.json").is_file():
        path = resolve_source(json.loads(adapter_cfg.read_text())["base_model_name_or_path"])
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.chat_template is None:
        raise ValueError(
            f"the tokenizer of {source!r} has no chat template; use an instruct/chat model or add "
            "`chat_template` to its tokenizer_config.json."
        )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@contextlib.contextmanager
def _peft_wrapping() -> Iterator[None]:
    """PEFT's model wrapper reads `model.is_gradient_checkpointing`, which recent transformers
    (5.25 here) deprecates with a FutureWarning on every LoRA model built. The read is inside PEFT
    (`PeftModel.__init__`), not a call of ours, so only that one warning is silenced here."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


def load_model(
    source: str,
    *,
    device: str = "auto",
    dtype: str = "auto",
    trainable: bool = False,
    lora_rank: int = 0,
    lora_alpha: int = 32,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer.

    Args:
        source: see `resolve_source`. A LoRA checkpoint (adapter_config.json) loads its base model
            and the adapter on top.
        dtype: see `resolve_dtype` (the weights) and `autocast_dtype` (the forward passes).
        trainable: prepare for training (LoRA adapters stay separate and trainable).
        lora_rank: when > 0 and `source` has no adapter yet, add a fresh LoRA adapter of this rank
            to all linear layers (only with trainable=True).
    """
    path = resolve_source(source)
    dev = pick_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    adapter_cfg = Path(path) / "adapter_config.json"
    if adapter_cfg.is_file():
        base_source = json.loads(adapter_cfg.read_text())["base_model_name_or_path"]
        with no_weight_bars():
            base = AutoModelForCausalLM.from_pretrained(
                resolve_source(base_source), dtype=torch_dtype
            )
            with _peft_wrapping():
                peft_model = PeftModel.from_pretrained(base, path, is_trainable=trainable)
        model: Any = peft_model if trainable else peft_model.merge_and_unload()
    else:
        with no_weight_bars():
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        if trainable and lora_rank > 0:
            with _peft_wrapping():
                model = get_peft_model(
                    model,
                    LoraConfig(
                        r=lora_rank,
                        lora_alpha=lora_alpha,
                        lora_dropout=0.0,
                        target_modules="all-linear",
                        task_type="CAUSAL_LM",
                    ),
                )
    model.to(dev)
    model.train(trainable)
    contiguous_head_input(model)
    compute = autocast_dtype(dtype, dev)
    if compute is not None:
        _autocast_forward(model, dev, compute)
    return model, load_tokenizer(path)
