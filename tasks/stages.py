"""The seven stages of one RLAnything round, as Prefect tasks (METHOD.md, "One round, in order").

Each is thin: read the round's Parquet files, call `rlanything_core`, write Parquet (atomically,
schema-checked), return paths and metrics. Stages switched off by the config's `mode` still run
and write their (empty) datasets, so every round has the same files.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path

import pandas as pd
import torch
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect_dask import DaskTaskRunner

from rlanything_core.adaptation import accept_candidate, adaptation_direction
from rlanything_core.config import ModelConfig, RunConfig, UpdateConfig, WarmStartConfig
from rlanything_core.demos import Demo
from rlanything_core.engines import Engine, open_engine
from rlanything_core.environment import WarmStart, WritesUnitTests
from rlanything_core.judging import judge
from rlanything_core.pool import next_pool, round_batch, task_refs
from rlanything_core.prompts import Messages
from rlanything_core.rollout import Sampling, Screens, TaskRef, play
from rlanything_core.rundir import RunDir
from rlanything_core.schemas import read_dataset, rows_frame, write_dataset
from rlanything_core.seeding import derive_seed
from rlanything_core.signals import (
    STEP_KEY,
    policy_samples,
    rm_samples,
    task_accuracies,
    test_samples,
)
from rlanything_core.training import rl_update, select_samples, sft_finetune, tokenize_demos
from tasks.common import progress, retry_if_transient, stage_task

Outputs = dict[str, str]
Metrics = dict[str, float]


def _sampling(model: ModelConfig) -> Sampling:
    return Sampling(
        temperature=model.temperature,
        max_new_tokens=model.max_new_tokens,
        batch_size=model.batch_size,
    )


def play_tasks(
    config: RunConfig,
    engine: Engine,
    tasks: list[TaskRef],
    *,
    rollouts_per_task: int,
    round_idx: int,
    base_seed: int,
    checkpoint: str,
    purpose: str,
    description: str,
    screens: Path | None = None,
    root: Path | None = None,
) -> list[dict[str, object]]:
    """A loaded policy plays every task, sampling as `config.policy.model` says; progress bar.
    Gui episodes save screenshots under `screens`, recorded relative to `root`."""
    with progress(description, total=len(tasks) * rollouts_per_task) as advance:
        return play(
            engine,
            config.environment.env,
            tasks,
            rollouts_per_task=rollouts_per_task,
            round_idx=round_idx,
            base_seed=base_seed,
            checkpoint=checkpoint,
            sampling=_sampling(config.policy.model),
            purpose=purpose,
            screens=Screens(screens, root),
            on_episodes=advance,
        )


def judge_steps(
    config: RunConfig,
    engine: Engine,
    rollouts: pd.DataFrame,
    *,
    round_idx: int,
    base_seed: int,
    checkpoint: str,
    description: str,
) -> list[dict[str, object]]:
    """A loaded reward model votes m times on every step, as `config.reward_model` says."""
    rm = config.reward_model
    with progress(description, total=len(rollouts) * rm.votes) as advance:
        return judge(
            engine,
            rollouts,
            votes=rm.votes,
            round_idx=round_idx,
            base_seed=base_seed,
            checkpoint=checkpoint,
            temperature=rm.model.temperature,
            max_new_tokens=rm.model.max_new_tokens,
            batch_size=rm.model.batch_size,
            env=config.environment.env,
            on_batch=advance,
        )


def _play(
    config: RunConfig, run: RunDir, r: int, source: str, tasks: list[TaskRef], purpose: str
) -> list[dict[str, object]]:
    """The policy `source` plays every task G times: here, or sharded over
    `policy.rollout_workers` Dask worker processes (prefect-dask) in task order, so that the rows
    come out as one process would write them."""
    workers = min(config.policy.rollout_workers, len(tasks))
    screens = run.round_dir(r) / "screenshots" / purpose
    if not tasks or (workers <= 1 and not config.policy.rollout_cluster):
        engine = open_engine(config.policy.model, source, "policy", config.policy.update.lora_rank)
        return play_tasks(
            config,
            engine,
            tasks,
            rollouts_per_task=config.rollouts_per_task,
            round_idx=r,
            base_seed=config.seed,
            checkpoint=run.label(source),
            purpose=purpose,
            description=f"round {r} {purpose}",
            screens=screens,
            root=run.root,
        )
    bounds = [len(tasks) * k // workers for k in range(workers + 1)]
    shards = [tasks[a:b] for a, b in itertools.pairwise(bounds)]
    if config.policy.rollout_cluster:
        runner = DaskTaskRunner(address=config.policy.rollout_cluster)
        threads = None  # the remote workers' own machines decide
    else:
        runner = DaskTaskRunner(
            cluster_kwargs={"n_workers": len(shards), "threads_per_worker": 1, "processes": True}
        )
        threads = max(1, (os.cpu_count() or 1) // len(shards))  # the cores, shared out
    total = len(tasks) * config.rollouts_per_task
    description = f"round {r} {purpose} ({len(shards)} workers)"
    with progress(description, total=total) as advance, runner:
        futures = [
            runner.submit(
                play_shard,
                parameters={
                    "config": config,
                    "source": source,
                    "tasks": shard,
                    "shard": k,
                    "round_idx": r,
                    "checkpoint": run.label(source),
                    "purpose": purpose,
                    "threads": threads,
                    "screens": screens,
                    "root": run.root,
                },
            )
            for k, shard in enumerate(shards)
        ]
        rows: list[dict[str, object]] = []
        for future, shard in zip(futures, shards, strict=True):
            rows += future.result()
            advance(len(shard) * config.rollouts_per_task)
    return rows


@task(
    name="rollout-shard",
    task_run_name="{purpose}-shard-{shard}-round-{round_idx}",
    cache_policy=NO_CACHE,
    retries=2,
    retry_condition_fn=retry_if_transient,
)
def play_shard(
    config: RunConfig,
    source: str,
    tasks: list[TaskRef],
    shard: int,
    round_idx: int,
    checkpoint: str,
    purpose: str,
    threads: int | None,
    screens: Path | None = None,
    root: Path | None = None,
) -> list[dict[str, object]]:
    """One worker's share of `_play`: its own copy of the policy plays its tasks G times."""
    if threads is not None:
        torch.set_num_threads(threads)
    engine = open_engine(config.policy.model, source, "policy", config.policy.update.lora_rank)
    return play(
        engine,
        config.environment.env,
        tasks,
        rollouts_per_task=config.rollouts_per_task,
        round_idx=round_idx,
        base_seed=config.seed,
        checkpoint=checkpoint,
        sampling=_sampling(config.policy.model),
        purpose=purpose,
        screens=Screens(screens, root),
    )


def _write(rows: list[dict[str, object]] | pd.DataFrame, run: RunDir, r: int, name: str) -> str:
    frame = rows if isinstance(rows, pd.DataFrame) else rows_frame(rows, name)
    return str(write_dataset(frame, run.dataset(r, name), name))


@stage_task("warm-start")
def warm_start(config: RunConfig, run: RunDir, r: int) -> tuple[Outputs, Metrics]:
    """Supervised fine-tuning of the policy, the reward model and the environment model on
    expert-made pairs, once, before round 0 (only those whose warm_start is enabled)."""
    outputs: Outputs = {}
    metrics: Metrics = {}
    roles = (
        ("policy", config.policy.model, config.policy.warm_start, config.policy.update.lora_rank),
        (
            "reward_model",
            config.reward_model.model,
            config.reward_model.warm_start,
            config.reward_model.update.lora_rank,
        ),
        (
            "env_model",
            config.env_model.model,
            config.env_model.warm_start,
            config.env_model.lora_rank,
        ),
    )
    for role, model, ws, lora_rank in roles:
        if not ws.enabled or (role == "reward_model" and not config.uses_reward_model):
            continue
        demos = _warm_start_demos(config, role, ws)
        out = run.warm_start_checkpoint(role)
        steps = ws.epochs * math.ceil(len(demos) / ws.micro_batch_size)
        with progress(f"warm start {role}", total=steps) as advance:
            m, pairs = sft_finetune(
                model.source,
                out,
                lambda tokenizer, demos=demos: tokenize_demos(tokenizer, demos),
                device=model.device,
                dtype=model.dtype,
                lora_rank=lora_rank,
                lr=ws.lr,
                epochs=ws.epochs,
                micro_batch_size=ws.micro_batch_size,
                seed=config.seed,
                lr_schedule=ws.lr_schedule,
                on_step=advance,
            )
        rows = [
            {
                "role": role,
                "task_id": d.task_id,
                "step_idx": d.step_idx,
                "seed": config.seed,
                "checkpoint": run.label(str(out)),
                "prompt": str(d.prompt),
                "response": d.answer,
                "prompt_token_ids": p,
                "response_token_ids": a,
            }
            for d, (p, a) in zip(demos, pairs, strict=True)
        ]
        path = run.root / "warm_start" / f"{role}_sft.parquet"
        outputs[f"{role}_sft"] = str(
            write_dataset(rows_frame(rows, "sft_samples"), path, "sft_samples")
        )
        outputs[f"{role}_checkpoint"] = str(out)
        metrics[f"{role}/warm_start_loss"] = m["sft_loss"]
        metrics[f"{role}/warm_start_pairs"] = float(len(demos))
    return outputs, metrics


def _warm_start_demos(config: RunConfig, role: str, ws: WarmStartConfig) -> list[Demo]:
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
    )
    return list(config.environment.env.demonstrations(request))


def _round_tasks(config: RunConfig, run: RunDir, r: int) -> list[TaskRef]:
    """The tasks round r plays: its batch of the pool (`environment.tasks_per_round`)."""
    pool = read_dataset(run.dataset(r, "tasks"), "tasks")
    return round_batch(pool, config.environment, config.seed, r)


@stage_task("rollout")
def rollout(config: RunConfig, run: RunDir, r: int) -> tuple[Outputs, Metrics]:
    """The policy plays every task of the round's batch (the whole pool by default) G times."""
    tasks = _round_tasks(config, run, r)
    source = run.model_before("policy", r, config.policy.model.source)
    rows = _play(config, run, r, source, tasks, "rollout")
    return {"rollouts": _write(rows, run, r, "rollouts")}, {"rollout/steps": float(len(rows))}


@stage_task("reward-scoring")
def reward_scoring(config: RunConfig, run: RunDir, r: int) -> tuple[Outputs, Metrics]:
    """The reward model judges every step m times, or (unit-test mode) writes tests for every
    task that every program then runs on; nothing in outcome-only mode."""
    rows: list[dict[str, object]] = []
    tests: list[dict[str, object]] = []
    if config.uses_reward_model:
        rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
        rm = config.reward_model
        source = run.model_before("reward_model", r, rm.model.source)
        engine = open_engine(rm.model, source, "reward_model", rm.update.lora_rank)
        if config.writes_unit_tests:
            pool = _round_tasks(config, run, r)
            tests, rows = unit_test_votes(
                config, engine, rollouts, pool, run.label(source), r, f"round {r}"
            )
        else:
            rows = judge_steps(
                config,
                engine,
                rollouts,
                round_idx=r,
                base_seed=config.seed,
                checkpoint=run.label(source),
                description=f"round {r} reward scoring",
            )
    outputs = {
        "judgments": _write(rows, run, r, "judgments"),
        "unit_tests": _write(tests, run, r, "unit_tests"),
    }
    return outputs, {"reward_model/votes": float(len(rows))}


def unit_test_votes(
    config: RunConfig,
    engine: Engine,
    rollouts: pd.DataFrame,
    tasks: list[TaskRef],
    checkpoint: str,
    round_idx: int,
    description: str,
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The RM writes tests for every coding task in `tasks`; every program of `rollouts` runs on
    its task's tests. Returns the unit_tests rows and the judgments rows (one vote per program
    and test)."""
    rm = config.reward_model
    env = config.environment.env
    assert isinstance(env, WritesUnitTests)  # RunConfig checks it
    with progress(f"{description} unit tests", total=len(tasks) * rm.tests_per_task) as advance:
        tests = env.write_tests(
            engine,
            tasks,
            tests_per_task=rm.tests_per_task,
            round_idx=round_idx,
            base_seed=config.seed,
            checkpoint=checkpoint,
            temperature=rm.model.temperature,
            max_new_tokens=rm.model.max_new_tokens,
            batch_size=rm.model.batch_size,
            on_batch=advance,
        )
    frame = pd.DataFrame(tests)
    with progress(f"{description} programs on tests", total=len(rollouts)) as advance:
        votes = env.run_generated_tests(rollouts, frame, tasks, on_program=advance)
    return tests, votes


@stage_task("advantage-computation")
def advantage_computation(config: RunConfig, run: RunDir, r: int) -> tuple[Outputs, Metrics]:
    """Integrated feedback and advantages for the policy; consistency feedback for the RM."""
    rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
    judgments = (
        read_dataset(run.dataset(r, "judgments"), "judgments") if config.uses_reward_model else None
    )
    adv = config.advantage
    policy, metrics = policy_samples(
        rollouts,
        judgments,
        votes=config.rm_votes,
        lam=adv.lam,
        estimator=adv.estimator,
        singleton=adv.singleton,
        eps=adv.eps,
        band=config.policy.accuracy_band,
        drop_zero_advantage=config.policy.drop_zero_advantage,
        invalid_action_penalty=adv.invalid_action_penalty,
        grouping=adv.grouping,
        outcome_weight=adv.outcome_weight,
    )
    outputs = {"policy_samples": _write(policy, run, r, "policy_samples")}
    rm_rows: pd.DataFrame | list[dict[str, object]] = []
    test_rows: pd.DataFrame | list[dict[str, object]] = []
    if judgments is not None and config.writes_unit_tests:
        test_rows, rm_metrics = test_samples(
            rollouts,
            read_dataset(run.dataset(r, "unit_tests"), "unit_tests"),
            judgments,
            invalid_penalty=config.reward_model.parse_failure_penalty,
            eps=adv.eps,
            band=config.reward_model.accuracy_band,
        )
        metrics |= rm_metrics
    elif judgments is not None:
        rm_rows, rm_metrics = rm_samples(
            rollouts,
            judgments,
            policy,
            votes=config.reward_model.votes,
            parse_failure_penalty=config.reward_model.parse_failure_penalty,
            eps=adv.eps,
            band=config.reward_model.accuracy_band,
            outcome_weight=adv.outcome_weight,
        )
        metrics |= rm_metrics
    outputs["rm_samples"] = _write(rm_rows, run, r, "rm_samples")
    outputs["test_samples"] = _write(test_rows, run, r, "test_samples")
    return outputs, metrics


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
def policy_update(config: RunConfig, run: RunDir, r: int) -> tuple[Outputs, Metrics]:
    """One PPO-clip update of the policy on the kept steps → checkpoints/policy/round_NNN."""
    return _update(
        config,
        run,
        r,
        "policy",
        config.policy.model,
        config.policy.update,
        read_dataset(run.dataset(r, "policy_samples"), "policy_samples"),
        read_dataset(run.dataset(r, "rollouts"), "rollouts"),
        STEP_KEY,
    )


@stage_task("rm-update")
def rm_update(config: RunConfig, run: RunDir, r: int) -> tuple[Outputs, Metrics]:
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
        read_dataset(run.dataset(r, signals), signals),
        read_dataset(run.dataset(r, texts), texts),
        keys,
    )


@stage_task("task-rewriting")
def task_rewriting(config: RunConfig, run: RunDir, r: int) -> tuple[Outputs, Metrics]:
    """The environment model proposes a harder or easier version of every task out of band."""
    rows: list[dict[str, object]] = []
    triggered: list[tuple[TaskRef, float, str]] = []
    if config.adapts_tasks:
        ad = config.adaptation
        pool = _round_tasks(config, run, r)
        rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
        acc = task_accuracies(rollouts)
        for ref in pool:
            a = float(acc[(ref.task_id, ref.task_version)])
            direction = adaptation_direction(a, ad.alpha_low, ad.alpha_high)
            if direction is not None:
                triggered.append((ref, a, direction))
        triggered = triggered[: ad.max_rewrites]
    if triggered:
        rows = _propose(config, run, r, triggered)
    metrics = {
        "env/candidates": float(len(rows)),
        "env/invalid_candidates": float(sum(not row["valid"] for row in rows)),
        "env/triggered_harder": float(sum(d == "harder" for *_, d in triggered)),
        "env/triggered_easier": float(sum(d == "easier" for *_, d in triggered)),
    }
    return {"candidates": _write(rows, run, r, "candidates")}, metrics


def _propose(
    config: RunConfig, run: RunDir, r: int, triggered: list[tuple[TaskRef, float, str]]
) -> list[dict[str, object]]:
    em = config.env_model
    judgments = read_dataset(run.dataset(r, "judgments"), "judgments")
    rollouts = read_dataset(run.dataset(r, "rollouts"), "rollouts")
    source = run.model_before("env_model", r, em.model.source)
    engine = open_engine(em.model, source, "env_model", em.lora_rank)

    def ask(prompts: list[Messages], purpose: str, max_new_tokens: int) -> list[str]:
        seeds = [
            derive_seed(config.seed, purpose, r, ref.task_id, ref.task_version)
            for ref, *_ in triggered
        ]
        outs = engine.generate(
            prompts,
            seeds,
            max_new_tokens=max_new_tokens,
            temperature=em.model.temperature,
            batch_size=em.model.batch_size,
        )
        return [o.text for o in outs]

    def of_task(frame: pd.DataFrame, ref: TaskRef) -> pd.DataFrame:
        return frame[(frame.task_id == ref.task_id) & (frame.task_version == ref.task_version)]

    env = config.environment.env
    critiques = ask(
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
    answers = ask(
        [
            env.rewrite_messages(ref.spec, d, a, c)
            for (ref, a, d), c in zip(triggered, critiques, strict=True)
        ],
        "rewrite",
        em.model.max_new_tokens,
    )
    rows = []
    for (ref, a, d), critique, answer in zip(triggered, critiques, answers, strict=True):
        spec, error = env.parse_proposal(answer, ref.spec)
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
                "spec": spec.to_json() if spec is not None else None,
                "valid": spec is not None,
                "error": error,
                "seed": derive_seed(config.seed, "rewrite", r, ref.task_id, ref.task_version),
                "checkpoint": run.label(source),
            }
        )
    return rows


@stage_task("acceptance-check")
def acceptance_check(config: RunConfig, run: RunDir, r: int) -> tuple[Outputs, Metrics]:
    """Roll out every valid candidate (and its parent, on the same checkpoint), accept or reject,
    and write the next round's task pool."""
    pool = read_dataset(run.dataset(r, "tasks"), "tasks")
    candidates = read_dataset(run.dataset(r, "candidates"), "candidates")
    valid = candidates[candidates["valid"]]
    rows: list[dict[str, object]] = []
    if len(valid):
        rows = _accept(config, run, r, pool, valid)
    outputs = {"acceptance": _write(rows, run, r, "acceptance")}
    acceptance = read_dataset(outputs["acceptance"], "acceptance")
    nxt = next_pool(pool, candidates, acceptance, r + 1)
    outputs["next_tasks"] = _write(nxt, run, r + 1, "tasks")
    metrics = {
        "env/accepted_tasks": float(acceptance["accepted"].sum()),
        "env/pool_size": float(len(nxt)),
    }
    return outputs, metrics


def _accept(
    config: RunConfig, run: RunDir, r: int, pool: pd.DataFrame, valid: pd.DataFrame
) -> list[dict[str, object]]:
    ad = config.adaptation
    env = config.environment.env
    refs = task_refs(pool, env)
    parents = {(t.task_id, t.task_version): t for t in refs}
    candidates = [
        TaskRef(row.candidate_id, int(row.parent_task_version) + 1, env.parse_spec(row.spec))
        for row in valid.itertuples()
    ]
    to_play = list(candidates)
    if ad.compare == "same_checkpoint":
        to_play += [
            parents[(p, int(v))]
            for p, v in valid[["parent_task_id", "parent_task_version"]].itertuples(index=False)
        ]
    source = str(run.checkpoint("policy", r))
    played = _play(config, run, r, source, to_play, "acceptance")
    acc = task_accuracies(pd.DataFrame(played))
    rows = []
    for row, cand in zip(valid.itertuples(), candidates, strict=True):
        parent_key = (row.parent_task_id, int(row.parent_task_version))
        acc_parent = (
            float(acc[parent_key]) if ad.compare == "same_checkpoint" else float(row.acc_parent)
        )
        acc_cand = float(acc[(cand.task_id, cand.task_version)])
        rows.append(
            {
                "round": r,
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
                "seed": derive_seed(config.seed, "acceptance", r),
                "checkpoint": run.label(source),
            }
        )
    return rows


STAGES = (
    rollout,
    reward_scoring,
    advantage_computation,
    policy_update,
    rm_update,
    task_rewriting,
    acceptance_check,
)
