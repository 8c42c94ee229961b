"""The environment model's part of a round as rows (the paper's environment adaptation): rewrite
proposals for the round's tasks out of the accuracy band (the candidates schema), and the
decisions on the valid candidates once they are played (the acceptance schema)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from rlanything_core.base.generation import Engine, Messages
from rlanything_core.base.seeding import derive_seed
from rlanything_core.envs.interface import Environment, TaskRef, TaskSpec
from rlanything_core.method.adaptation import accept_candidate
from rlanything_core.run.config import AdaptationConfig, EnvModelConfig

Triggered = tuple[TaskRef, float, str]
"""A task out of the band: its reference, its accuracy this round and "harder" or "easier"."""


def propose_rewrites(
    env: Environment,
    engine: Engine,
    triggered: Sequence[Triggered],
    judgments: pd.DataFrame,
    rollouts: pd.DataFrame,
    *,
    em: EnvModelConfig,
    round_idx: int,
    base_seed: int,
    checkpoint: str,
    critiques: Sequence[str] | None = None,
) -> list[dict[str, object]]:
    """The environment model critiques each triggered task from its judged rollouts, then
    rewrites it in the triggered direction; `env` parses each answer into a valid spec or an
    error. One candidates row per triggered task, valid or not. `critiques`, one per triggered
    task, replace the ones the model would write (benchmarks/rewrite_validity.py)."""
    r = round_idx

    def ask(
        prompts: list[Messages], purpose: str, max_new_tokens: int, keys: list[str] | None = None
    ) -> list[str]:
        seeds = [
            derive_seed(base_seed, purpose, r, ref.task_id, ref.task_version)
            for ref, *_ in triggered
        ]
        # Asked only when set: an engine written before `json_keys` existed still serves.
        constrained: dict[str, Any] = {"json_keys": keys} if keys is not None else {}
        outs = engine.generate(
            prompts,
            seeds,
            max_new_tokens=max_new_tokens,
            temperature=em.model.temperature,
            batch_size=em.model.batch_size,
            **constrained,
        )
        return [o.text for o in outs]

    def of_task(frame: pd.DataFrame, ref: TaskRef) -> pd.DataFrame:
        return frame[(frame.task_id == ref.task_id) & (frame.task_version == ref.task_version)]

    critiques = (
        list(critiques)
        if critiques is not None
        else ask(
            [
                env.critique_messages(
                    ref.spec,
                    a,
                    of_task(judgments, ref),
                    of_task(rollouts, ref),
                    em.critique_source,
                    em.critique_examples,
                )
                for ref, a, _ in triggered
            ],
            "critique",
            em.critique_max_new_tokens,
        )
    )
    answers = ask(
        [
            env.rewrite_messages(ref.spec, d, a, c)
            for (ref, a, d), c in zip(triggered, critiques, strict=True)
        ],
        "rewrite",
        em.model.max_new_tokens,
        sorted({k for ref, *_ in triggered for k in env.rewrite_keys(ref.spec)})
        if em.constrain_keys and triggered
        else None,
    )
    rows: list[dict[str, object]] = []
    for (ref, a, d), critique, answer in zip(triggered, critiques, answers, strict=True):
        error, spec_json = _proposal(env, answer, ref.spec)
        rows.append(
            {
                "round": r,
                "candidate_id": f"{ref.task_id}.v{ref.task_version + 1}.r{r:03d}",
                "parent_task_id": ref.task_id,
                "parent_task_version": ref.task_version,
                "direction": d,
                "acc_parent": a,
                "critique": critique,
                "response": answer,
                "spec": spec_json,
                "valid": spec_json is not None,
                "error": error,
                "seed": derive_seed(base_seed, "rewrite", r, ref.task_id, ref.task_version),
                "checkpoint": checkpoint,
            }
        )
    return rows


def _proposal(env: Environment, answer: str, parent: TaskSpec) -> tuple[str | None, str | None]:
    """The environment's reading of one rewrite: why it is invalid, or the valid spec's JSON.

    An exception from the environment's own code (an overridden `parse_proposal`, a spec whose
    `to_json` fails or does not parse back) makes the proposal invalid, with the exception as
    the reason: a model's proposal is data, and never ends the round."""
    try:
        spec, error = env.parse_proposal(answer, parent)
        if spec is None:
            return error, None
        text = spec.to_json()
        env.parse_spec(text)  # the acceptance check reads the spec back from this JSON
        return None, text
    except Exception as exc:
        return f"{type(exc).__name__} while reading the proposal: {exc}", None


def candidate_refs(valid: pd.DataFrame, env: Environment) -> list[TaskRef]:
    """The valid candidates as tasks: version parent + 1, their specs parsed by `env`."""
    return [
        TaskRef(row.candidate_id, int(row.parent_task_version) + 1, env.parse_spec(row.spec))
        for row in valid.itertuples()
    ]


def acceptance_rows(
    valid: pd.DataFrame,
    accuracy: pd.Series,
    *,
    adaptation: AdaptationConfig,
    round_idx: int,
    base_seed: int,
    checkpoint: str,
) -> list[dict[str, object]]:
    """Accept or reject each valid candidate from `accuracy` (acc per (task_id, task_version) on
    the updated policy, candidates as `candidate_refs` names them; parents too with
    `adaptation.compare` "same_checkpoint", else this round's acc_parent). One acceptance row
    per candidate."""
    ad = adaptation
    rows: list[dict[str, object]] = []
    for row in valid.itertuples():
        parent_key = (row.parent_task_id, int(row.parent_task_version))
        acc_parent = (
            float(accuracy[parent_key])
            if ad.compare == "same_checkpoint"
            else float(row.acc_parent)
        )
        acc_cand = float(accuracy[(row.candidate_id, int(row.parent_task_version) + 1)])
        rows.append(
            {
                "round": round_idx,
                "candidate_id": row.candidate_id,
                "parent_task_id": row.parent_task_id,
                "parent_task_version": int(row.parent_task_version),
                "direction": row.direction,
                "acc_parent": acc_parent,
                "acc_candidate": acc_cand,
                "accepted": accept_candidate(
                    row.direction, acc_parent, acc_cand, ad.alpha_low, ad.alpha_high, ad.bounds
                ),
                "bounds": ad.bounds,
                "seed": derive_seed(base_seed, "acceptance", round_idx),
                "checkpoint": checkpoint,
            }
        )
    return rows
