"""The parts of a round on small hand-made tables: advantage stage, rewrites, next pool, config."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from rlanything_core.base.schemas import SCHEMAS, read_dataset, rows_frame, to_table, write_dataset
from rlanything_core.envs.household.world import build_world, parse_spec, plan
from rlanything_core.envs.interface import make_environment
from rlanything_core.method.feedback import EPS
from rlanything_core.run.config import (
    ConfigError,
    EnvironmentConfig,
    RunConfig,
    load_config,
    parse_config,
)
from rlanything_core.run.pool import batch_positions, initial_pool, next_pool, round_batch
from rlanything_core.run.rundir import RunDir
from rlanything_core.run.warm_start import warm_start_demos
from rlanything_flows.evaluate import policy_metrics, reward_model_metrics
from rlanything_tasks.common import progress as progress_bar
from rlanything_tasks.stages import advantage_computation

ROOT = Path(__file__).resolve().parents[2]

HOUSEHOLD = make_environment("household", {}, "id")[0]

SPEC = {
    "goal_type": "put",
    "object": "mug",
    "target": "cabinet",
    "num_rooms": 1,
    "num_distractors": 1,
    "max_steps": 12,
    "layout_seed": 3,
}


def _step(task: str, g: int, i: int, outcome: int, progress: bool = True) -> dict[str, object]:
    return {
        "round": 0, "task_id": task, "task_version": 1, "rollout_idx": g, "step_idx": i,
        "seed": 100 * g + i, "checkpoint": "ckpt", "goal": "put a mug in cabinet",
        "observation": "obs", "prompt": "p", "response": "\\boxed{1}", "action": "look",
        "action_valid": True, "next_observation": "obs2", "progress": progress, "done": False,
        "pass_fraction": None,
        "outcome": outcome, "num_steps": 2, "finish_reason": "stop", "prompt_token_ids": [1],
        "response_token_ids": [2], "sampler_logprobs": [-0.5],
    }  # fmt: skip


def _vote(task: str, g: int, i: int, j: int, verdict: int | None) -> dict[str, object]:
    return {
        "round": 0, "task_id": task, "task_version": 1, "rollout_idx": g, "step_idx": i,
        "seed": j, "checkpoint": "rm", "vote_idx": j, "prompt": "p", "reasoning": "r",
        "verdict": verdict, "finish_reason": "stop", "prompt_token_ids": [1],
        "response_token_ids": [2],
    }  # fmt: skip


def test_advantage_stage_on_a_hand_made_round(tmp_path: Path) -> None:
    # Task "a": rollout 0 succeeds in 2 steps, rollout 1 fails in 2 steps → acc 0.5 (in band).
    # Task "b": both fail → acc 0 → out of the policy band [1/8, 7/8]: kept=False, advantage 0.
    steps = [_step("a", 0, 0, 1), _step("a", 0, 1, 1), _step("a", 1, 0, -1), _step("a", 1, 1, -1)]
    steps += [_step("b", 0, 0, -1), _step("b", 1, 0, -1)]
    verdicts = {
        ("a", 0, 0): [1, 1, 1],
        ("a", 0, 1): [1, -1, None],
        ("a", 1, 0): [-1, -1, -1],
        ("a", 1, 1): [1, -1, -1],
        ("b", 0, 0): [1, 1, -1],
        ("b", 1, 0): [-1, -1, -1],
    }
    votes = [_vote(t, g, i, j, v) for (t, g, i), vs in verdicts.items() for j, v in enumerate(vs)]
    run = RunDir(tmp_path)
    write_dataset(rows_frame(steps, "rollouts"), run.dataset(0, "rollouts"), "rollouts")
    write_dataset(rows_frame(votes, "judgments"), run.dataset(0, "judgments"), "judgments")
    config = RunConfig(mode="reward")

    record = advantage_computation.fn(config, str(tmp_path), 0)

    policy = read_dataset(record["outputs"]["policy_samples"], "policy_samples")
    by_key = policy.set_index(["task_id", "rollout_idx", "step_idx"])
    # R = O + mean(S): a00 = 1 + 1 = 2; a10 = −1 − 1 = −2 → step-0 group (2, −2): A = ±1.
    # a01 = 1 + 0/3 = 1; a11 = −1 − 1/3 = −4/3 → mean −1/6, std 7/6 → A = ±(7/6)/(7/6 + ε).
    assert by_key.loc[("a", 0, 0), "reward"] == pytest.approx(2.0)
    assert by_key.loc[("a", 1, 1), "reward"] == pytest.approx(-4 / 3)
    assert by_key.loc[("a", 0, 0), "advantage"] == pytest.approx(2 / (2 + EPS))
    assert by_key.loc[("a", 1, 1), "advantage"] == pytest.approx(-(7 / 6) / (7 / 6 + EPS))
    assert by_key.loc[("a", 0, 0), "task_accuracy"] == 0.5
    assert not by_key.loc[("b", 0, 0), "kept"] and by_key.loc[("b", 0, 0), "advantage"] == 0.0

    rm = read_dataset(record["outputs"]["rm_samples"], "rm_samples")
    votes_a01 = rm[(rm.task_id == "a") & (rm.rollout_idx == 0) & (rm.step_idx == 1)].sort_values(
        "vote_idx"
    )
    # R = 1 → vote rewards (1, −1, −2 for the unparsed vote)
    assert votes_a01["reward"].tolist() == pytest.approx([1.0, -1.0, -2.0])
    mean, std = -2 / 3, math.sqrt(((5 / 3) ** 2 + (1 / 3) ** 2 + (4 / 3) ** 2) / 3)
    expected = [(x - mean) / (std + EPS) for x in (1.0, -1.0, -2.0)]
    assert votes_a01["advantage"].tolist() == pytest.approx(expected)
    # unanimous votes on a00 → no gradient; task b is outside the RM band [0.2, 0.8]
    assert (
        rm[(rm.task_id == "a") & (rm.rollout_idx == 0) & (rm.step_idx == 0)].advantage == 0
    ).all()
    assert not rm[rm.task_id == "b"]["kept"].any()
    # metrics: 1 unparsed vote. Majority verdicts against the labels (all "progress" here):
    # a00 +1 ✓, a01 tie (1 − 1 + unparsed) ✗, a10 −1 ✗, a11 −1 ✗, b00 +1 ✓, b10 −1 ✗ → 2/6
    metrics = record["metrics"]
    assert metrics["reward_model/parse_failures"] == 1.0
    assert metrics["reward_model/process_accuracy"] == pytest.approx(2 / 6)
    # Outcome accuracy: Σ_steps mean verdict per trajectory, > 0 predicts success.
    # a0: 1 + 0 = 1 → +1 ✓ (outcome +1); a1: −1 − 1/3 → −1 ✓; b0: 1/3 → +1 ✗; b1: −1 ✓ → 3/4
    assert metrics["reward_model/outcome_accuracy"] == pytest.approx(3 / 4)
    # Balanced: every step is labelled progress, so there is no recall on non-progress steps;
    # outcome: successes a0 ✓ (1/1), failures a1 ✓ b0 ✗ b1 ✓ (2/3) → ½(1 + 2/3) = 5/6.
    assert math.isnan(metrics["reward_model/process_balanced_accuracy"])
    assert metrics["reward_model/progress_label_rate"] == 1.0
    assert metrics["reward_model/outcome_balanced_accuracy"] == pytest.approx(5 / 6)
    assert metrics["policy/accuracy"] == pytest.approx(0.25)


def test_reward_model_eval_metrics_and_intervals_by_hand() -> None:
    # 3 tasks × 2 episodes × 2 steps, m = 2 votes. (progress label, votes) → majority verdict:
    layout = {
        ("a", 0): (1, [(True, [1, 1]), (True, [1, -1])]),  # ✓, tie ✗
        ("a", 1): (-1, [(False, [-1, -1]), (False, [1, None])]),  # ✓, +1 ✗
        ("b", 0): (-1, [(False, [-1, -1]), (False, [-1, None])]),  # ✓, ✓
        ("b", 1): (-1, [(True, [1, 1]), (False, [-1, -1])]),  # ✓, ✓
        ("c", 0): (-1, [(True, [1, 1]), (True, [-1, -1])]),  # ✓, ✗
        ("c", 1): (-1, [(True, [1, 1]), (True, [None, None])]),  # ✓, unparsed ✗
    }
    steps, votes = [], []
    for (task, g), (outcome, labelled) in layout.items():
        for i, (progress, verdicts) in enumerate(labelled):
            steps.append(_step(task, g, i, outcome, progress))
            votes += [_vote(task, g, i, j, v) for j, v in enumerate(verdicts)]
    got = reward_model_metrics(
        "id", rows_frame(steps, "rollouts"), rows_frame(votes, "judgments"), votes=2
    )
    z = 1.96
    # Process, 12 steps; right per task a 2/4, b 4/4, c 2/4 → R = 8/12 = 2/3.
    # Residuals 2 − 8/3 = −2/3, 4/3, −2/3 → Σ² = 8/3; V = 3/2 · (8/3)/144 = 1/36, √V = 1/6.
    assert got["eval/id/rm_steps"] == 12.0
    assert got["eval/id/rm_process_accuracy"] == pytest.approx(2 / 3)
    assert got["eval/id/rm_process_accuracy_ci_low"] == pytest.approx(2 / 3 - z / 6)
    assert got["eval/id/rm_process_accuracy_ci_high"] == pytest.approx(2 / 3 + z / 6)
    # Progress steps: a 1/2, b 1/1, c 2/4 → R1 = 4/7; others: a 1/2, b 3/3 → R0 = 4/5.
    # Balanced ½(4/7 + 4/5) = 24/35. Residuals/7: a (1 − 8/7)/7 = −1/49, b 3/49, c −2/49;
    # residuals/5: a (1 − 8/5)/5 = −3/25, b (3 − 12/5)/5 = 3/25, c 0.
    # z_g = ½(…) = −0.0702041, 0.0906122, −0.0204082 → Σ z² = 0.0135557; V = 3/2 · Σ z².
    zg = [(-1 / 49 - 3 / 25) / 2, (3 / 49 + 3 / 25) / 2, (-2 / 49) / 2]
    half = z * math.sqrt(1.5 * sum(v * v for v in zg))
    assert half == pytest.approx(0.2794874, abs=1e-6)
    assert got["eval/id/rm_process_balanced_accuracy"] == pytest.approx(24 / 35)
    assert got["eval/id/rm_process_balanced_accuracy_ci_low"] == pytest.approx(24 / 35 - half)
    assert got["eval/id/rm_process_balanced_accuracy_ci_high"] == pytest.approx(24 / 35 + half)
    assert got["eval/id/rm_progress_label_rate"] == pytest.approx(7 / 12)
    assert got["eval/id/rm_process_majority_baseline"] == pytest.approx(7 / 12)
    # Outcome: Σ_steps mean verdict (unparsed 0): a0 1 + 0 → success ✓; a1 −1 + ½ → fail ✓;
    # b0 −1 − ½ ✓; b1 1 − 1 = 0 → fail ✓; c0 1 − 1 = 0 → fail ✓; c1 1 + 0 → success ✗.
    # 5/6 right, and always predicting failure scores 5/6 too (one success in six).
    # Per task 2/2, 2/2, 1/2: residuals 1/3, 1/3, −2/3 → Σ² = 2/3; V = 3/2 · (2/3)/36 = 1/36.
    assert got["eval/id/rm_outcome_accuracy"] == pytest.approx(5 / 6)
    assert got["eval/id/rm_outcome_accuracy_ci_low"] == pytest.approx(5 / 6 - z / 6)
    assert got["eval/id/rm_outcome_accuracy_ci_high"] == 1.0  # 5/6 + 0.327, clipped
    assert got["eval/id/rm_outcome_majority_baseline"] == pytest.approx(5 / 6)
    # Successes: a0 ✓ → R1 = 1; failures: a 1/1, b 2/2, c 1/2 → R0 = 4/5; BA = 0.9.
    # Residuals: successes 0; failures/5: 0.2/5, 0.4/5, −0.6/5 → z_g = 0.02, 0.04, −0.06;
    # Σ z² = 0.0056, V = 3/2 · 0.0056 = 0.0084.
    assert got["eval/id/rm_outcome_balanced_accuracy"] == pytest.approx(0.9)
    assert got["eval/id/rm_outcome_balanced_accuracy_ci_low"] == pytest.approx(
        0.9 - z * math.sqrt(0.0084)
    )
    assert got["eval/id/rm_outcome_balanced_accuracy_ci_high"] == 1.0
    assert got["eval/id/rm_parse_failure_rate"] == pytest.approx(4 / 24)


def test_invalid_answer_share_and_its_interval_by_hand() -> None:
    # 3 tasks, one episode of 4 steps each; invalid answers: a 1, b 0, c 1 → R = 2/12 = 1/6.
    # Residuals Σ_task (invalid − R·steps): a 1 − 2/3 = 1/3, b −2/3, c 1/3 → Σ² = 2/3;
    # V = 3/2 · (2/3)/12² = 1/144, √V = 1/12.
    steps = [_step(t, 0, i, -1) for t in "abc" for i in range(4)]
    for t, i in (("a", 2), ("c", 0)):
        next(s for s in steps if s["task_id"] == t and s["step_idx"] == i)["action_valid"] = False
    got = policy_metrics("id", rows_frame(steps, "rollouts"))
    assert got["eval/id/invalid_actions"] == pytest.approx(1 / 6)
    assert got["eval/id/invalid_actions_ci_low"] == pytest.approx(1 / 6 - 1.96 / 12)
    assert got["eval/id/invalid_actions_ci_high"] == pytest.approx(1 / 6 + 1.96 / 12)
    assert (got["eval/id/steps"], got["eval/id/episodes"], got["eval/id/tasks"]) == (12, 3, 3)


def test_outcome_only_mode_uses_the_outcome_as_reward(tmp_path: Path) -> None:
    steps = [_step("a", 0, 0, 1), _step("a", 1, 0, -1), _step("a", 2, 0, -1), _step("a", 3, 0, -1)]
    run = RunDir(tmp_path)
    write_dataset(rows_frame(steps, "rollouts"), run.dataset(0, "rollouts"), "rollouts")
    record = advantage_computation.fn(RunConfig(mode="outcome_only"), str(tmp_path), 0)
    policy = read_dataset(record["outputs"]["policy_samples"], "policy_samples")
    # R = (1, −1, −1, −1): mean −0.5, std √0.75 → A = (1.5, −0.5, −0.5, −0.5)/√0.75
    assert policy["reward"].tolist() == [1.0, -1.0, -1.0, -1.0]
    std = math.sqrt(0.75) + EPS
    assert policy["advantage"].tolist() == pytest.approx(
        [1.5 / std, -0.5 / std, -0.5 / std, -0.5 / std]
    )
    assert policy["mean_verdict"].isna().all()
    assert len(read_dataset(record["outputs"]["rm_samples"], "rm_samples")) == 0


def test_parse_rewrite_counts_malformed_answers() -> None:
    parent = parse_spec(SPEC)
    spec, error = HOUSEHOLD.parse_proposal('Sure! {"num_distractors": 4}', parent)
    assert error is None and spec is not None and spec.num_distractors == 4
    whole = {**SPEC, "goal_type": "clean_put"}
    spec, error = HOUSEHOLD.parse_proposal(f"```json\n{pd.Series(whole).to_json()}\n```", parent)
    assert error is None and spec is not None and spec.goal_type == "clean_put"
    for text, reason in [
        ("make it harder", "no JSON object"),
        ('{"num_distractors": }', "malformed JSON"),
        ("{}", "empty"),
        ('{"num_distractors": 1}', "identical"),
        ('{"num_rooms": 9}', "num_rooms"),
        ('{"max_steps": 1}', "steps of the expert's plan for this layout"),
    ]:
        spec, error = HOUSEHOLD.parse_proposal(text, parent)
        assert spec is None and error is not None and reason in error, (text, error)


def test_next_pool_replaces_accepted_parents_and_keeps_history() -> None:
    pool = initial_pool(EnvironmentConfig(num_tasks=3, split="id", seed=0, step_slack=4))
    ids = pool["task_id"].tolist()
    harder = {**parse_spec(pool["spec"][0]).model_dump(), "num_distractors": 7}
    candidates = pd.DataFrame(
        {
            "candidate_id": ["c0", "c1"],
            "spec": [pd.Series(harder).to_json(), pool["spec"][1]],
        }
    )
    acceptance = pd.DataFrame(
        {
            "candidate_id": ["c0", "c1"],
            "parent_task_id": [ids[0], ids[1]],
            "parent_task_version": [1, 1],
            "direction": ["harder", "easier"],
            "acc_parent": [1.0, 0.0],
            "acc_candidate": [0.5, 0.0],
            "accepted": [True, False],
        }
    )
    nxt = next_pool(pool, candidates, acceptance, next_round=1)
    to_table(nxt, "tasks")  # matches the schema
    assert nxt["round"].tolist() == [1, 1, 1]
    first = nxt.iloc[0]
    assert (first.task_id, first.task_version, first.origin) == (ids[0], 2, "rewritten")
    assert (first.parent_task_id, first.direction, first.acc_parent, first.acc_candidate) == (
        ids[0],
        "harder",
        1.0,
        0.5,
    )
    assert parse_spec(first.spec).num_distractors == 7
    assert nxt.iloc[1].task_version == 1 and nxt.iloc[1].origin == "seed"  # rejected: unchanged
    assert set(nxt.columns) == set(SCHEMAS["tasks"].names)


def test_config_files_load_and_errors_name_the_field(tmp_path: Path) -> None:
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        assert isinstance(load_config(path), RunConfig), path
    with pytest.raises(ConfigError, match=r"rollouts_per_task must be at least 2.*You provided 1"):
        parse_config({"rollouts_per_task": 1})
    with pytest.raises(ConfigError, match=r"policy\.updat: Extra inputs are not permitted"):
        parse_config({"policy": {"updat": {}}})
    with pytest.raises(ConfigError, match=r"adaptation.alpha_low must be below"):
        parse_config({"adaptation": {"alpha_low": 0.9, "alpha_high": 0.5}})
    served = {"engine": {"kind": "vllm"}}
    with pytest.raises(ConfigError, match=r"rollout_workers > 1.*engine.concurrency"):
        parse_config({"policy": {"model": served, "rollout_workers": 2}})
    with pytest.raises(ConfigError, match=r"reward_model\.accuracy_band must satisfy"):
        parse_config({"reward_model": {"accuracy_band": [0.9, 0.1]}})
    with pytest.raises(ConfigError, match=r"old_logprobs: 'sampler'.*only the policy's rollouts"):
        parse_config({"reward_model": {"update": {"old_logprobs": "sampler"}}})
    with pytest.raises(ConfigError, match=r"environment: .*num_rooms range \[2, 1\] is invalid"):
        parse_config({"environment": {"num_rooms": [2, 1]}})
    bad = tmp_path / "bad.yaml"
    bad.write_text("mode: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_run_dir_refuses_a_different_config(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.init(RunConfig())
    run.init(RunConfig())  # the same config: fine (a resume)
    with pytest.raises(ConfigError, match=r"different config.*rlanything resume"):
        run.init(RunConfig(seed=1))
    # only `rounds` differs: the run continues (or stops sooner), never below what is done
    run.init(RunConfig(rounds=7))
    assert load_config(run.config_path) == RunConfig(rounds=7)
    run.summary_path.write_text(json.dumps({"rounds": [{"round": r} for r in range(5)]}))
    run.init(RunConfig(rounds=5))
    with pytest.raises(ConfigError, match=r"5 round\(s\) done; rounds: 4"):
        run.init(RunConfig(rounds=4))
    assert load_config(run.config_path) == RunConfig(rounds=5)
    # other held-out sets do not change what a round trains: the run continues
    held_out = RunConfig(
        rounds=5, evaluation={"num_tasks": 40, "ood_options": {"num_rooms": [2, 2]}}
    )
    run.init(held_out)
    assert load_config(run.config_path) == held_out


def test_environment_ranges_shape_the_configured_split_only() -> None:
    env = EnvironmentConfig(goals=["put"], num_rooms=(1, 1), num_distractors=(0, 2))
    specs = env.generate("id", 30, seed=3)
    assert {s.goal_type for s in specs} == {"put"}
    assert {s.num_rooms for s in specs} == {1}
    assert max(s.num_distractors for s in specs) <= 2
    assert all(s.max_steps == len(plan(build_world(s))) + env.options["step_slack"] for s in specs)
    ood = env.generate("ood", 10, seed=3)  # the other split keeps its own definition
    assert {s.goal_type for s in ood} <= {"cool_put", "find_two"}
    assert min(s.num_rooms for s in ood) >= 3
    # the initial pool and warm starts draw from the same ranges
    pool = initial_pool(env.model_copy(update={"num_tasks": 5}))
    assert {parse_spec(s).num_rooms for s in pool["spec"]} == {1}


def test_ood_options_draw_the_out_of_domain_held_out_set() -> None:
    """`evaluation.ood_options` narrow the ood split as environment options narrow the pool's
    (here: in-domain targets, put goals, two rooms); the in-domain set is unchanged; an option
    the environment lacks, or a receptacle it has not, is an error naming the field."""
    options = {"goals": ["put"], "num_rooms": [1, 1], "num_distractors": [0, 1]}
    plain = parse_config({"environment": {"options": options}})
    shifted = parse_config(
        {
            "environment": {"options": options},
            "evaluation": {
                "ood_options": {
                    "num_rooms": [2, 2],
                    "targets": ["countertop", "cabinet", "shelf"],
                }
            },
        }
    )
    ood = shifted.held_out_environment("ood").generate("ood", 30, 5)
    assert {s.goal_type for s in ood} == {"put"}  # the pool's goals, from environment.options
    assert {s.num_rooms for s in ood} == {2}
    assert {s.target for s in ood} <= {"countertop", "cabinet", "shelf"}
    assert max(s.num_distractors for s in ood) <= 1
    default = plain.held_out_environment("ood").generate("ood", 30, 5)
    assert {s.goal_type for s in default} <= {"cool_put", "find_two"}
    assert min(s.num_rooms for s in default) >= 3
    assert {s.target for s in default}.isdisjoint({"countertop", "cabinet", "shelf"})
    for split in ("id",):
        assert shifted.held_out_environment(split).generate(split, 10, 5) == (
            plain.held_out_environment(split).generate(split, 10, 5)
        )
    with pytest.raises(ConfigError, match=r"evaluation.ood_options: .*rooms: Extra inputs"):
        parse_config({"evaluation": {"ood_options": {"rooms": [2, 2]}}})
    with pytest.raises(ConfigError, match=r"evaluation.ood_options: .*unknown target .*'moon'"):
        parse_config({"evaluation": {"ood_options": {"targets": ["moon"]}}})


def test_warm_start_demos_box_alone_without_explain() -> None:
    config = parse_config({"policy": {"warm_start": {"enabled": True, "explain": False}}})
    ws = config.policy.warm_start
    answers = {d.answer for d in warm_start_demos(config, "policy", ws)}
    assert answers and all(re.fullmatch(r"\\boxed\{\d+\}", a) for a in answers)
    explained = ws.model_copy(update={"explain": True})
    demos = warm_start_demos(config, "policy", explained)
    assert all(d.answer.startswith("I will ") for d in demos)


def test_round_batches_play_every_task_once_per_pass_in_a_new_order() -> None:
    """10 tasks, 3 a round: 3 batches a pass (one task sits each pass out), disjoint within a
    pass, seeded, and the next pass in another order."""
    size, k = 10, 3
    rounds = [batch_positions(size, k, seed=7, round_idx=r) for r in range(6)]
    assert all(len(b) == k == len(set(b)) and b == sorted(b) for b in rounds)
    for first in (0, 3):  # each pass: three disjoint batches
        in_pass = [i for b in rounds[first : first + 3] for i in b]
        assert len(in_pass) == len(set(in_pass)) == 9
    assert rounds[:3] != rounds[3:]
    assert rounds == [batch_positions(size, k, seed=7, round_idx=r) for r in range(6)]
    assert [batch_positions(size, k, seed=8, round_idx=r) for r in range(3)] != rounds[:3]
    assert batch_positions(size, None, seed=7, round_idx=4) == list(range(size))
    # Over many passes every task is played about equally often.
    counts = np.bincount(
        [i for r in range(300) for i in batch_positions(size, k, seed=7, round_idx=r)],
        minlength=size,
    )
    assert counts.sum() == 900 and counts.min() >= 80


def test_round_batch_takes_the_pool_rows_with_their_current_versions() -> None:
    env = EnvironmentConfig(num_tasks=6, tasks_per_round=2, split="id", seed=0, step_slack=4)
    pool = initial_pool(env)
    pool.loc[pool.index[1:], "task_version"] = 2  # as after accepted rewrites
    played = {(t.task_id, t.task_version) for r in range(3) for t in round_batch(pool, env, 0, r)}
    assert played == {(row.task_id, row.task_version) for row in pool.itertuples()}
    with pytest.raises(ValidationError, match=r"tasks_per_round \(7\) exceeds"):
        EnvironmentConfig(num_tasks=6, tasks_per_round=7)


def test_rewrites_accepted_in_a_round_are_played_first_in_the_next() -> None:
    """12 tasks, 4 a round: the two rewrites accepted in round 1 lead round 2's batch, which keeps
    4 tasks (2 of its own); a rewrite accepted earlier, or none, leaves the batch as it was; the
    cap is the batch size. Without replay the batch is the pass's own."""
    env = EnvironmentConfig(num_tasks=12, tasks_per_round=4, split="id", seed=0, step_slack=4)
    pool = initial_pool(env)
    own = batch_positions(12, 4, seed=0, round_idx=2)
    outside = [i for i in range(12) if i not in own]
    accepted, older = outside[:2], outside[2]
    rewritten = ["origin", "created_round", "task_version"]
    pool.loc[pool.index[accepted], rewritten] = ["rewritten", 1, 2]
    pool.loc[pool.index[older], rewritten] = ["rewritten", 0, 2]
    ids = list(pool["task_id"])
    played = [t.task_id for t in round_batch(pool, env, 0, 2, replay_accepted=True)]
    assert played == [ids[i] for i in sorted(accepted + own[:2])]
    assert [t.task_version for t in round_batch(pool, env, 0, 2, replay_accepted=True)] == [
        2 if i in accepted else 1 for i in sorted(accepted + own[:2])
    ]
    assert [t.task_id for t in round_batch(pool, env, 0, 2)] == [ids[i] for i in own]
    assert [t.task_id for t in round_batch(pool, env, 0, 3, replay_accepted=True)] == [
        ids[i] for i in batch_positions(12, 4, seed=0, round_idx=3)
    ]
    pool.loc[pool.index[outside], ["origin", "created_round"]] = ["rewritten", 1]
    capped = [t.task_id for t in round_batch(pool, env, 0, 2, replay_accepted=True)]
    assert capped == [ids[i] for i in outside[:4]]


def test_progress_prints_plain_lines_where_output_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A background run's log shows how far a long stage is, not only its end."""
    with progress_bar("warm start policy", total=3, every_s=0.0) as advance:
        advance(1)
        advance(2)
    assert (
        capsys.readouterr().out == "warm start policy: 1/3 in 0 s\nwarm start policy: 3/3 in 0 s\n"
    )
    with progress_bar("rollout", total=4, every_s=3600.0) as advance:
        for _ in range(4):
            advance(1)
    assert capsys.readouterr().out == "rollout: 4/4 in 0 s\n"
