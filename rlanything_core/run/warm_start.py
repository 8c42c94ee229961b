"""The warm start's data as the loop needs it: the environment's demonstrations for a role,
asked for as the run's config says, and the rows that record what each model was fine-tuned on
(the sft_samples schema)."""

from __future__ import annotations

from collections.abc import Sequence

from rlanything_core.base.seeding import derive_seed
from rlanything_core.envs.demos import Demo
from rlanything_core.envs.interface import WarmStart
from rlanything_core.run.config import RunConfig, WarmStartConfig

ROLES = ("policy", "reward_model", "env_model")


def warm_start_roles(config: RunConfig) -> list[str]:
    """The roles the warm start trains, in its order: those whose warm_start is enabled (the
    reward model only where the mode uses one)."""
    return [
        role
        for role in ROLES
        if getattr(config, role).warm_start.enabled
        and (role != "reward_model" or config.uses_reward_model)
    ]


def warm_start_demos(config: RunConfig, role: str, ws: WarmStartConfig) -> list[Demo]:
    """The environment's demonstrations for `role`, judged in the policy's warm-started format."""
    request = WarmStart(
        role=role,  # type: ignore[arg-type]
        episodes=ws.episodes,
        noise=ws.noise,
        label_noise=ws.label_noise,
        explain=(ws if role == "policy" else config.policy.warm_start).explain,
        specs_seed=derive_seed(config.seed, "warm-start", role) % 2**31,
        seed=config.seed,
        judge_mode="unit_tests" if config.writes_unit_tests else "judge",
        episodes_per_task=ws.episodes_per_task,
        answer_noise=ws.answer_noise,
    )
    return list(config.environment.env.demonstrations(request))


def sft_rows(
    role: str,
    demos: Sequence[Demo],
    pairs: Sequence[tuple[list[int], list[int]]],
    *,
    seed: int,
    checkpoint: str,
) -> list[dict[str, object]]:
    """One sft_samples row per demonstration: its prompt and answer, as text and as the token
    ids trained on (`pairs`, in the order of `demos`)."""
    return [
        {
            "role": role,
            "task_id": d.task_id,
            "step_idx": d.step_idx,
            "seed": seed,
            "checkpoint": checkpoint,
            "prompt": str(d.prompt),
            "response": d.answer,
            "prompt_token_ids": p,
            "response_token_ids": a,
        }
        for d, (p, a) in zip(demos, pairs, strict=True)
    ]
