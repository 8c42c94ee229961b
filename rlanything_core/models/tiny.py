"""Tiny models built locally from a config: a few layers and a byte-level BPE tokenizer trained on
the environment's own vocabulary, with a ChatML chat template. Nothing is downloaded.

Tests and `configs/tiny.yaml` use them: a round takes seconds on a CPU.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from rlanything_core.base.atomic import atomic_dir, entry_lock
from rlanything_core.base.paths import cache_root
from rlanything_core.base.seeding import derive_seed, seed_everything
from rlanything_core.envs.demos import Demo
from rlanything_core.envs.household import world as household
from rlanything_core.envs.household.environment import (
    HOUSE_INTRO,
    HouseholdEnvironment,
    HouseholdOptions,
)
from rlanything_core.envs.interface import Role, WarmStart
from rlanything_core.envs.textworld import game as textworld_env
from rlanything_core.method.prompts import JUDGE_SYSTEM, policy_system
from rlanything_core.models.default import CHATML_TEMPLATE
from rlanything_core.models.devices import no_weight_bars
from rlanything_core.models.sft import finetune_and_save, tokenize_demos

SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>"]


VOCABULARIES = ("household", "textworld")
"""Whose text a tiny tokenizer is trained on: the household's alone, or TextWorld's games too
(whose prompts it spells out in about half the household tokenizer's tokens)."""
TINY_VOCAB_SIZE = {"household": 512, "textworld": 1024}


def _corpus(vocabulary: str = "household") -> list[str]:
    """Text the tokenizer is trained on: prompts, goals, observations and actions of the env."""
    texts = [
        policy_system("number", HOUSE_INTRO),
        JUDGE_SYSTEM,
        "system user assistant \\boxed{1} \\boxed{-1}",
    ]
    texts += [" ".join(str(i) for i in range(100))]
    for split in ("id", "ood"):
        for spec in household.generate_specs(split, 8, seed=0):
            texts += _played(household.HouseholdEpisode(spec), spec.to_json())
    if vocabulary == "textworld":
        games = textworld_env.generate_textworld_specs("id", 12, seed=0)
        games += textworld_env.generate_textworld_specs("ood", 4, seed=0)
        for tw in games:
            texts += _played(textworld_env.TextWorldEpisode(tw), tw.to_json())
    return texts


def _played(
    episode: household.HouseholdEpisode | textworld_env.GameEpisode, spec_json: str
) -> list[str]:
    """The goal, observations and action lists of an episode played by its expert."""
    texts = [episode.goal_text, episode.observation, spec_json]
    while not episode.done:
        actions = episode.actions
        texts.append("\n".join(actions))
        result = episode.step(actions.index(episode.expert_action()))
        texts.append(result.observation)
    return texts


def build_tiny_tokenizer(
    vocab_size: int = 512, vocabulary: str = "household"
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (any text encodes) with ChatML special tokens and template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(vocabulary), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_tiny_model(
    path: str | Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    vocab_size: int = 512,
    vocabulary: str = "household",
) -> Path:
    """Write a randomly initialized tiny Llama and its tokenizer to `path` (Hugging Face format)."""
    tokenizer = build_tiny_tokenizer(vocab_size, vocabulary)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with atomic_dir(path) as tmp, no_weight_bars():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return Path(path)


def ensure_tiny_model(
    seed: int = 0, hidden_size: int = 64, num_layers: int = 2, vocabulary: str = "household"
) -> Path:
    """The tiny model for `seed`, size and tokenizer vocabulary, built once into the cache."""
    if vocabulary not in VOCABULARIES:
        raise ValueError(f"unknown tiny vocabulary {vocabulary!r}; use one of {VOCABULARIES}")
    size = "" if (hidden_size, num_layers) == (64, 2) else f"-{hidden_size}x{num_layers}"
    words = "" if vocabulary == "household" else f"-{vocabulary}"
    target = cache_root() / f"tiny-llama{size}{words}-seed{seed}"
    if not (target / "model.safetensors").is_file():
        with entry_lock(target):
            if not (target / "model.safetensors").is_file():  # not built while this one waited
                build_tiny_model(
                    target,
                    seed=seed,
                    hidden_size=hidden_size,
                    num_layers=num_layers,
                    vocab_size=TINY_VOCAB_SIZE[vocabulary],
                    vocabulary=vocabulary,
                )
    return target


WARM_KINDS = ("policy", "judge", "envmodel")
WARM_EPOCHS = {"policy": 4, "judge": 4, "envmodel": 12}
# Bumped when a kind's warm-start data change, so that a cache built from older data is not used.
WARM_DATA_VERSION = {"policy": 1, "judge": 2, "envmodel": 1}


def warm_start_demos(kind: str, seed: int) -> list[Demo]:
    """The supervised pairs a warm-started tiny model of `kind` is trained on: the household's
    in-domain demonstrations, answers as boxes alone."""
    env = HouseholdEnvironment("household", HouseholdOptions(), "id")
    role: Role
    if kind == "policy":
        role, episodes, noise = "policy", 48, 0.3
    elif kind == "judge":  # judging tiny-policy's answers: boxes alone
        role, episodes, noise = "reward_model", 48, 0.5
    elif kind == "envmodel":
        role, episodes, noise = "env_model", 200, 0.0
    else:
        raise ValueError(f"unknown tiny model kind {kind!r}; use one of {WARM_KINDS}")
    request = WarmStart(role, episodes, noise, 0.2, False, specs_seed=seed, seed=seed)
    return env.demonstrations(request)


def ensure_warm_tiny_model(kind: str, seed: int = 0) -> Path:
    """The tiny model of `kind` warm-started by supervised fine-tuning (full fine-tuning at lr 3e-3)
    on expert-made pairs, built once into the cache.

    It loads the tiny model itself, not through `training.sft_finetune`, which loads its source
    through `loading.resolve_source`: that resolves "tiny-policy:0" by calling this function."""
    version = WARM_DATA_VERSION[kind]
    target = cache_root() / f"tiny-{kind}{'' if version == 1 else f'-v{version}'}-seed{seed}"
    if not (target / "model.safetensors").is_file():
        with entry_lock(target):
            if not (target / "model.safetensors").is_file():  # not built while this one waited
                _build_warm_tiny_model(kind, seed, target)
    return target


def _build_warm_tiny_model(kind: str, seed: int, target: Path) -> None:
    demos = warm_start_demos(kind, seed)
    source = ensure_tiny_model(seed)
    seed_everything(derive_seed(seed, "sft") % (1 << 32))
    with no_weight_bars():
        model = LlamaForCausalLM.from_pretrained(source, dtype=torch.float32)
    model.train()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(source)
    finetune_and_save(
        model,
        tokenizer,
        tokenize_demos(tokenizer, demos),
        target,
        lr=3e-3,
        epochs=WARM_EPOCHS[kind],
        micro_batch_size=16,
        seed=seed,
    )
