"""Stages 4 and 5: the PPO-clip updates of the policy and of the reward model."""

from __future__ import annotations

import pandas as pd

from rlanything_core.base.schemas import STEP_KEY
from rlanything_core.base.seeding import derive_seed
from rlanything_core.models.config import ModelConfig, UpdateConfig
from rlanything_core.models.training import rl_update, select_samples
from rlanything_core.run.config import RunConfig
from rlanything_core.run.rundir import Inputs, RunDir
from rlanything_tasks.common import progress, stage_task
from rlanything_tasks.playing import Metrics, Outputs


def _update(
    config: RunConfig,
    run: RunDir,
    r: int,
    role: str,
    model: ModelConfig,
    update: UpdateConfig,
    signals: pd.DataFrame,
    texts: pd.DataFrame,
    keys: list[str],
) -> tuple[Outputs, Metrics]:
    source = run.model_before(role, r, model.source)
    out = run.checkpoint(role, r)
    steps = update.optimizer_steps * update.epochs
    with progress(f"round {r} {role} update", total=steps) as advance:
        m = rl_update(
            source,
            out,
            lambda eos: select_samples(
                signals,
                texts,
                keys,
                eos_id=eos,
                max_samples=update.max_samples,
                seed=derive_seed(config.seed, role, "subset", r),
                with_sampler_logprobs=update.old_logprobs == "sampler",
            ),
            update,
            device=model.device,
            dtype=model.dtype,
            temperature=model.temperature,
            seed=derive_seed(config.seed, role, r),
            on_step=advance,
        )
    # loss, kl, policy_loss (the clipped surrogate), clip_fraction, ratio_mean, grad_norm
    renamed = {"samples": "update_samples", "skipped": "update_skipped", "policy_loss": "surrogate"}
    return {"checkpoint": str(out)}, {f"{role}/{renamed.get(k, k)}": v for k, v in m.items()}


@stage_task("policy-update")
def policy_update(
    config: RunConfig, run: RunDir, r: int, inputs: Inputs
) -> tuple[Outputs, Metrics]:
    """One PPO-clip update of the policy on the kept steps → checkpoints/policy/round_NNN."""
    return _update(
        config,
        run,
        r,
        "policy",
        config.policy.model,
        config.policy.update,
        inputs.read("policy_samples"),
        inputs.read("rollouts"),
        STEP_KEY,
    )


@stage_task("rm-update")
def rm_update(config: RunConfig, run: RunDir, r: int, inputs: Inputs) -> tuple[Outputs, Metrics]:
    """One PPO-clip update of the RM on its kept votes, or its kept generated tests (unit-test
    mode); modes "reward" and "env" only."""
    if not config.trains_reward_model:
        return {}, {"reward_model/update_skipped": 1.0}
    signals, texts, keys = (
        ("test_samples", "unit_tests", ["task_id", "task_version", "test_idx"])
        if config.writes_unit_tests
        else ("rm_samples", "judgments", [*STEP_KEY, "vote_idx"])
    )
    return _update(
        config,
        run,
        r,
        "reward_model",
        config.reward_model.model,
        config.reward_model.update,
        inputs.read(signals),
        inputs.read(texts),
        keys,
    )
