"""Seconds per training step at equal work: our outcome-only round against one step of TRL's
`GRPOTrainer`, with each side's seconds split into generation, scoring and update.

Equal work, asserted at run time (`EqualWorkError`) and recorded under `invariants`:
- the same number of completions through the loss: each timed round of ours trains on N samples
  (`policy/update_samples`), TRL's step on N completions (N / G prompts × G generations);
- the same model, weights' dtype (the config's `dtype`, resolved on this machine), LoRA rank and
  alpha, learning rate, weight decay, gradient clipping and PPO clip range;
- one optimizer step over all N (ours: `optimizer_steps: 1`, one epoch, zero-advantage samples
  kept as TRL keeps them; TRL: gradient accumulation over N / micro-batch micro-batches, and the
  trainer's step count is checked);
- the same objective: at one optimizer step our KL term, which is to π_old, is zero, so TRL runs
  with β = 0 (no reference model); neither side recomputes π_old (it equals π_θ at one step);
- the same sampling: G = rollouts_per_task generations per prompt, temperature, completion
  length (max_new_tokens), micro-batch size;
- the same prompts: TRL's are taken evenly from the prompts of our first timed round, and the
  mean prompt tokens per completion of the two sides must agree within `PROMPT_TOLERANCE`.

What differs, and is recorded rather than equalised: our round plays multi-step household
episodes (an episode's later prompts depend on its earlier answers) and runs under Prefect,
Parquet and MLflow, while TRL's step answers single prompts and scores them with a function
(the answer names an admissible action). Generated tokens differ by sampling; each side's
mean completion length is recorded. With `--samples N` below a round's completions our round
generates more than it trains on (its `generated_completions`), which only slows our side.

Ratio = our median seconds per timed round / TRL's median seconds per timed step (the first of
each is a warm-up). TRL is the optional `bench` extra: pip install -e '.[bench]'.

    python benchmarks/trl_grpo.py --config benchmarks/results/trl-grpo/smollm2.yaml \\
        --out benchmarks/results/trl-grpo/smollm2.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings
from collections import defaultdict
from typing import Any

import pandas as pd
from common import EqualWorkError, bench_config, isolated_workdir, save
from orchestration import TIMES, instrumented, round_seconds

import rlanything_flows.train
from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.parsing import parse_action
from rlanything_core.models.devices import resolve_dtype
from rlanything_core.models.loading import resolve_source
from rlanything_core.run.config import RunConfig
from rlanything_core.run.rundir import RunDir

PROMPT_TOLERANCE = 0.1
"""Largest relative difference of the two sides' mean prompt tokens per completion."""

# our round's stages by phase; what is left of the round is Prefect, Parquet and MLflow
PHASES = {
    "generation": ["rollout"],
    "scoring": ["reward_scoring", "advantage_computation"],
    "update": ["policy_update"],
}


def ours_config(config_path: str, rounds: int, samples: int | None) -> RunConfig:
    """The config as run for the comparison: outcome-only, one optimizer step over `samples`
    of each round's completions (all when None), zero-advantage ones kept."""
    base = bench_config(config_path)
    update = base.policy.update.model_copy(
        update={"optimizer_steps": 1, "epochs": 1, "max_samples": samples}
    )
    return base.model_copy(
        update={
            "mode": "outcome_only",
            "rounds": rounds,
            "policy": base.policy.model_copy(
                update={"update": update, "drop_zero_advantage": False}
            ),
        }
    )


def ours(config: RunConfig) -> tuple[dict[str, Any], pd.DataFrame]:
    """Per-round seconds and phases of the rounds, and the rollouts of the first timed round."""
    TIMES.clear()
    with isolated_workdir("trl-ours") as root, instrumented():
        rlanything_flows.train.rlanything_train(config=config, run_dir=str(root / "run"))
        run = RunDir(root / "run")
        rollouts = [
            read_dataset(run.dataset(r, "rollouts"), "rollouts") for r in range(config.rounds)
        ]
        summary = json.loads(run.summary_path.read_text())
    per_round = [round_seconds(r) for r in range(config.rounds)]
    phases = []
    for seconds, record in zip(per_round, summary["rounds"], strict=True):
        split = {
            phase: sum(float(record.get(f"timing/{stage}_s", 0.0)) for stage in stages)
            for phase, stages in PHASES.items()
        }
        split["other"] = seconds - sum(split.values())
        phases.append({k: round(v, 3) for k, v in split.items()})
    timed = slice(1, None)
    frames = rollouts[timed]
    pm, up = config.policy.model, config.policy.update
    return {
        "seconds_per_round": [round(s, 3) for s in per_round],
        "phases_per_round": phases,
        **_medians(per_round, phases),
        "generated_completions": [len(r) for r in rollouts],
        "update_samples": [int(r["policy/update_samples"]) for r in summary["rounds"]],
        "optimizer_steps_per_round": [int(r["policy/optimizer_steps"]) for r in summary["rounds"]],
        "mean_prompt_tokens": round(_mean_tokens(frames, "prompt_token_ids"), 2),
        "mean_completion_tokens": round(_mean_tokens(frames, "response_token_ids"), 2),
        "policy": pm.source,
        "old_logprobs": up.old_logprobs,
    }, rollouts[1]


def _medians(seconds: list[float], phases: list[dict[str, float]]) -> dict[str, Any]:
    """Medians of the timed rounds or steps (the first warms up): in all and by phase."""
    return {
        "median_s": round(statistics.median(seconds[1:]), 3),
        "median_phases_s": {
            phase: round(statistics.median(p[phase] for p in phases[1:]), 3) for phase in phases[0]
        },
    }


def _mean_tokens(frames: list[pd.DataFrame], column: str) -> float:
    return float(pd.concat([f[column].map(len) for f in frames]).mean())


def _listed_actions(prompt: str) -> tuple[list[str], str]:
    """The admissible actions a rendered policy prompt lists, and how the answer names one:
    "number" for a numbered list ("1. look"), "text" for a bulleted one ("- look")."""
    listed = prompt.rsplit("Admissible actions:", 1)[-1].split("<|im_end|>", 1)[0]
    numbered, bulleted = [], []
    for line in listed.strip().splitlines():
        number, dot, rest = line.partition(". ")
        if dot and number.strip().isdigit():
            numbered.append(rest.strip())
        elif line.startswith("- "):
            bulleted.append(line[2:].strip())
    return (bulleted, "text") if bulleted else (numbered, "number")


def trl_steps(
    config: RunConfig, rollouts: pd.DataFrame, completions: int, steps: int
) -> dict[str, Any]:
    """Per-step seconds and phases of GRPOTrainer on `completions` completions a step, from
    prompts taken evenly from `rollouts`, with the config's model and settings."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    pm, up = config.policy.model, config.policy.update
    group, micro = config.rollouts_per_task, up.micro_batch_size
    if completions % group or completions % micro:
        raise EqualWorkError(
            f"TRL trains on whole groups of G = {group} in micro-batches of {micro}: "
            f"{completions} completions is not a multiple of both; pass --samples N with N a "
            f"multiple of {math.lcm(group, micro)}"
        )
    prompts = rollouts["prompt"].tolist()
    n_prompts = completions // group
    picked = [prompts[i * len(prompts) // n_prompts] for i in range(n_prompts)]
    rows = []
    for prompt in picked:
        actions, action_format = _listed_actions(prompt)
        rows.append({"prompt": prompt, "actions": actions, "action_format": action_format})
    path = str(resolve_source(pm.source))
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompt_tokens = statistics.mean(len(tokenizer(text=p)["input_ids"]) for p in picked)

    # seconds of each timed part, per step: the callback opens a step's entry
    parts: list[defaultdict[str, float]] = []

    def admissible(
        completions: list[str], actions: list[list[str]], action_format: list[str], **_: Any
    ) -> list[float]:
        return [
            1.0 if parse_action(c, a, f) is not None else -1.0
            for c, a, f in zip(completions, actions, action_format, strict=True)
        ]

    class StepTimer(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            parts.append(defaultdict(float))
            self.start = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            parts[-1]["step"] = time.perf_counter() - self.start

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                parts[-1][name] += time.perf_counter() - start

        return wrapper

    dtype = resolve_dtype(pm.dtype, torch.device("cpu"))
    lora = (
        LoraConfig(
            r=up.lora_rank,
            lora_alpha=up.lora_alpha,
            lora_dropout=0.0,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
        if up.lora_rank
        else None
    )
    # transformers 5.25 renamed gradient_checkpointing to activation_checkpointing and warns on
    # the old name; earlier versions know only the old one
    checkpointing = (
        "activation_checkpointing"
        if "activation_checkpointing" in GRPOConfig.__dataclass_fields__
        else "gradient_checkpointing"
    )
    with isolated_workdir("trl") as root:
        args = GRPOConfig(
            output_dir=str(root / "out"),
            use_cpu=True,
            # TRL 1.x checkpoints activations by default; our updates do not
            **{checkpointing: False},
            bf16=False,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            max_steps=steps,
            learning_rate=up.lr,
            weight_decay=up.weight_decay,
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=completions // micro,
            num_generations=group,
            max_completion_length=pm.max_new_tokens,
            temperature=pm.temperature,
            max_grad_norm=up.max_grad_norm,
            epsilon=up.clip_eps,
            beta=0.0,
            num_iterations=1,
            seed=config.seed,
        )
        with warnings.catch_warnings():
            # TRL (at each generation) and PEFT read `is_gradient_checkpointing`, which
            # transformers 5.25 deprecates: the reads are theirs, not ours
            warnings.filterwarnings(
                "ignore", "`is_gradient_checkpointing` is deprecated", category=FutureWarning
            )
            trainer = GRPOTrainer(
                model=AutoModelForCausalLM.from_pretrained(path, dtype=dtype),
                reward_funcs=admissible,
                args=args,
                train_dataset=Dataset.from_list(rows),
                processing_class=tokenizer,
                callbacks=[StepTimer()],
                peft_config=lora,
            )
            trainer._generate = timed("generation", trainer._generate)
            trainer._calculate_rewards = timed("scoring", trainer._calculate_rewards)
            trainer.train()
        optimizer_steps = trainer.state.global_step
        lengths = [
            log["completions/mean_length"]
            for log in trainer.state.log_history
            if "completions/mean_length" in log
        ]
    per_step = [p["step"] for p in parts]
    phases = [
        {
            "generation": round(p["generation"], 3),
            "scoring": round(p["scoring"], 3),
            "update": round(p["step"] - p["generation"] - p["scoring"], 3),
        }
        for p in parts
    ]
    return {
        "trl_version": __import__("trl").__version__,
        "seconds_per_step": [round(s, 3) for s in per_step],
        "phases_per_step": phases,
        **_medians(per_step, phases),
        "completions_per_step": completions,
        "prompts_per_step": n_prompts,
        "optimizer_steps": optimizer_steps,
        "steps": steps,
        "mean_prompt_tokens": round(prompt_tokens, 2),
        "mean_completion_tokens": round(statistics.mean(lengths[1:] or lengths), 2),
        "beta": args.beta,
        "num_iterations": args.num_iterations,
        "gradient_checkpointing": getattr(args, checkpointing),
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "dtype": str(dtype).removeprefix("torch."),
    }


def settings(config: RunConfig) -> dict[str, Any]:
    """The settings both sides share, from the config as run."""
    import torch

    pm, up = config.policy.model, config.policy.update
    return {
        "model": pm.source,
        "dtype": str(resolve_dtype(pm.dtype, torch.device("cpu"))).removeprefix("torch."),
        "lora_rank": up.lora_rank,
        "lora_alpha": up.lora_alpha,
        "lr": up.lr,
        "weight_decay": up.weight_decay,
        "max_grad_norm": up.max_grad_norm,
        "clip_eps": up.clip_eps,
        "generations_per_prompt": config.rollouts_per_task,
        "temperature": pm.temperature,
        "max_new_tokens": pm.max_new_tokens,
        "micro_batch_size": up.micro_batch_size,
        "optimizer_steps": up.optimizer_steps,
        "epochs": up.epochs,
        "kl_to": "pi_old (zero at one optimizer step); TRL beta 0",
    }


def equal_work(ours_result: dict[str, Any], trl_result: dict[str, Any]) -> dict[str, Any]:
    """The invariants of a comparison, checked: raises EqualWorkError naming the first one that
    does not hold, else returns them for the JSON."""
    timed = ours_result["update_samples"][1:]
    n = trl_result["completions_per_step"]
    if any(s != n for s in timed):
        raise EqualWorkError(
            f"our timed rounds trained on {timed} samples and TRL's steps on {n} completions: "
            "not the same work"
        )
    if any(s != 1 for s in ours_result["optimizer_steps_per_round"][1:]):
        raise EqualWorkError(
            f"our rounds took {ours_result['optimizer_steps_per_round']} optimizer steps, not 1"
        )
    if trl_result["optimizer_steps"] != trl_result["steps"]:
        raise EqualWorkError(
            f"TRL took {trl_result['optimizer_steps']} optimizer steps in "
            f"{trl_result['steps']} steps, not one a step"
        )
    if trl_result["num_iterations"] != 1 or trl_result["beta"] != 0.0:
        raise EqualWorkError("TRL must take one iteration with beta 0, as our one-step round does")
    ours_prompt, trl_prompt = ours_result["mean_prompt_tokens"], trl_result["mean_prompt_tokens"]
    if abs(trl_prompt - ours_prompt) > PROMPT_TOLERANCE * ours_prompt:
        raise EqualWorkError(
            f"mean prompt tokens per completion differ: ours {ours_prompt}, TRL {trl_prompt} "
            f"(more than {PROMPT_TOLERANCE:.0%})"
        )
    return {
        "samples_through_the_loss": n,
        "optimizer_steps_each": 1,
        "mean_prompt_tokens": {"ours": ours_prompt, "trl": trl_prompt},
        "mean_completion_tokens": {
            "ours": ours_result["mean_completion_tokens"],
            "trl": trl_result["mean_completion_tokens"],
        },
        "generated_completions": {
            "ours": ours_result["generated_completions"][1:],
            "trl": n,
        },
    }


def compare(config_path: str, rounds: int, steps: int, samples: int | None) -> dict[str, Any]:
    """Run both sides and check the invariants."""
    config = ours_config(config_path, rounds, samples)
    ours_result, rollouts = ours(config)
    timed = ours_result["update_samples"][1:]
    if samples is None and len(set(timed)) > 1:
        raise EqualWorkError(
            f"our timed rounds trained on {timed} samples (every completion of each round): "
            "pass --samples N to train on N of each round's completions"
        )
    trl_result = trl_steps(config, rollouts, timed[0], steps)
    invariants = equal_work(ours_result, trl_result)
    return {
        "config": config_path,
        "settings": settings(config),
        "invariants": invariants,
        "ours": ours_result,
        "trl": trl_result,
        "ratio_per_step": round(ours_result["median_s"] / trl_result["median_s"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/tiny.yaml")
    parser.add_argument("--rounds", type=int, default=4, help="our rounds (the first warms up)")
    parser.add_argument("--steps", type=int, default=4, help="TRL steps (the first warms up)")
    parser.add_argument(
        "--samples",
        type=int,
        default=None,
        help="samples through the loss a round and a step (default: every completion of a "
        "round, which must then be the same in every timed round)",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    save(args.out, compare(args.config, args.rounds, args.steps, args.samples))


if __name__ == "__main__":
    main()
