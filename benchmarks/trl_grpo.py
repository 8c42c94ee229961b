"""Time per training step: our outcome-only round against TRL's `GRPOTrainer`, side by side.

Same model (the config's policy: configs/tiny.yaml's tiny model, or configs/demo.yaml's
SmolLM2-135M), same weights' dtype (the config's `dtype`, resolved on this machine) and LoRA
rank and alpha where the config trains an adapter, same prompts (the step prompts our rounds
decoded), same number of generations per prompt (G = rollouts_per_task), same completion length
(max_new_tokens), same temperature, same learning rate, one optimizer step over about as many
completions as one of our rounds makes, on this CPU.

- Ours: `rlanything-train` in outcome-only mode (GRPO advantages), with one optimizer step per
  round over every completion (zero-advantage ones kept, as TRL's loss keeps them); a round =
  rollout (multi-step household episodes) → advantages → policy update, with Prefect, Parquet
  and MLflow. Timed per round; the first round is a warm-up.
- TRL: one `GRPOTrainer` step = generate G completions for each prompt, score them (reward: the
  answer names an admissible action), one optimizer step. Timed per step with a callback; the
  first step is a warm-up; numbered or text answers, whichever the prompts ask for. TRL is the
  optional `bench` extra: pip install -e '.[bench]'.

Ratio = our seconds per round / TRL's seconds per step, also per 1000 completions.

    python benchmarks/trl_grpo.py --out benchmarks/results/trl-grpo.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any

import pandas as pd
from common import bench_config, isolated_workdir, save
from orchestration import TIMES, instrumented, round_seconds

import flows.train
from rlanything_core.base.schemas import read_dataset
from rlanything_core.method.parsing import parse_action
from rlanything_core.models.devices import resolve_dtype
from rlanything_core.models.loading import resolve_source
from rlanything_core.run.rundir import RunDir


def ours(config_path: str, rounds: int) -> tuple[dict[str, Any], pd.DataFrame]:
    """Per-round seconds of outcome-only rounds, and the rollouts of the first round."""
    base = bench_config(config_path)
    update = base.policy.update.model_copy(update={"optimizer_steps": 1})
    config = base.model_copy(
        update={
            "mode": "outcome_only",
            "rounds": rounds,
            # TRL computes the loss on every completion, zero advantage or not: so do we here
            "policy": base.policy.model_copy(
                update={"update": update, "drop_zero_advantage": False}
            ),
        }
    )
    TIMES.clear()
    with isolated_workdir("trl-ours") as root, instrumented():
        flows.train.rlanything_train(config=config, run_dir=str(root / "run"))
        run = RunDir(root / "run")
        rollouts = [read_dataset(run.dataset(r, "rollouts"), "rollouts") for r in range(rounds)]
        summary = json.loads(run.summary_path.read_text())
    per_round = [round_seconds(r) for r in range(rounds)]
    completions = [len(r) for r in rollouts]
    timed = per_round[1:]
    return {
        "seconds_per_round": [round(s, 3) for s in per_round],
        "completions_per_round": completions,
        "update_samples_per_round": [int(r["policy/update_samples"]) for r in summary["rounds"]],
        "median_s": round(statistics.median(timed), 3),
        "s_per_1000_completions": round(1000 * sum(timed) / sum(completions[1:]), 3),
        "policy": config.policy.model.source,
        "rollouts_per_task": config.rollouts_per_task,
        "max_new_tokens": config.policy.model.max_new_tokens,
        "temperature": config.policy.model.temperature,
        "lr": update.lr,
        "micro_batch_size": update.micro_batch_size,
    }, rollouts[0]


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


def trl_steps(config_path: str, rollouts: pd.DataFrame, steps: int) -> dict[str, Any]:
    """Per-step seconds of GRPOTrainer on the same model, prompts, G and lengths."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    config = bench_config(config_path)
    pm, up = config.policy.model, config.policy.update
    group = config.rollouts_per_task
    micro = up.micro_batch_size
    # As many completions per step as our round made, rounded to whole micro-batches of groups.
    unit = math.lcm(micro, group)
    completions = max(unit, round(len(rollouts) / unit) * unit)
    prompts = rollouts["prompt"].tolist()
    n_prompts = completions // group
    picked = [prompts[i * len(prompts) // n_prompts] for i in range(n_prompts)]
    rows = []
    for prompt in picked:
        actions, action_format = _listed_actions(prompt)
        rows.append({"prompt": prompt, "actions": actions, "action_format": action_format})
    data = Dataset.from_list(rows)

    def admissible(
        completions: list[str], actions: list[list[str]], action_format: list[str], **_: Any
    ) -> list[float]:
        return [
            1.0 if parse_action(c, a, f) is not None else -1.0
            for c, a, f in zip(completions, actions, action_format, strict=True)
        ]

    seconds: list[float] = []

    class StepTimer(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            seconds.append(time.perf_counter() - self.start)

    path = str(resolve_source(pm.source))
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
    with isolated_workdir("trl") as root:
        args = GRPOConfig(
            output_dir=str(root / "out"),
            use_cpu=True,
            # TRL 1.x checkpoints activations by default; our updates do not (equal work)
            gradient_checkpointing=False,
            bf16=False,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            max_steps=steps,
            learning_rate=up.lr,
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=completions // micro,
            num_generations=group,
            max_completion_length=pm.max_new_tokens,
            temperature=pm.temperature,
            max_grad_norm=up.max_grad_norm,
            epsilon=up.clip_eps,
            beta=up.kl_beta,
            seed=config.seed,
        )
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(path, dtype=dtype),
            reward_funcs=admissible,
            args=args,
            train_dataset=data,
            processing_class=AutoTokenizer.from_pretrained(path),
            callbacks=[StepTimer()],
            peft_config=lora,
        )
        trainer.train()
    timed = seconds[1:]
    return {
        "trl_version": __import__("trl").__version__,
        "seconds_per_step": [round(s, 3) for s in seconds],
        "completions_per_step": completions,
        "prompts_per_step": completions // group,
        "median_s": round(statistics.median(timed), 3),
        "s_per_1000_completions": round(1000 * statistics.mean(timed) / completions, 3),
        "beta": up.kl_beta,
        "gradient_checkpointing": args.gradient_checkpointing,
        "dtype": str(dtype).removeprefix("torch."),
        "lora_rank": up.lora_rank,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/tiny.yaml")
    parser.add_argument("--rounds", type=int, default=4, help="our rounds (the first warms up)")
    parser.add_argument("--steps", type=int, default=4, help="TRL steps (the first warms up)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ours_result, rollouts = ours(args.config, args.rounds)
    trl_result = trl_steps(args.config, rollouts, args.steps)
    save(
        args.out,
        {
            "config": args.config,
            "ours": ours_result,
            "trl": trl_result,
            "ratio_per_step": round(ours_result["median_s"] / trl_result["median_s"], 3),
            "ratio_per_1000_completions": round(
                ours_result["s_per_1000_completions"] / trl_result["s_per_1000_completions"], 3
            ),
        },
    )


if __name__ == "__main__":
    main()
