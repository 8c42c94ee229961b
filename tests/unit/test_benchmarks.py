"""The benchmark scripts' own logic (benchmarks/ is not a package: its directory is put on the
path, as running a script there does)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import learning
import pandas as pd
import policy_signal
import pool_seeds
import report
import rm_same_steps
import rm_signal
import round_profile
import targets

from rlanything_core.base.schemas import rows_frame, write_dataset
from rlanything_core.models.modelling import CACHE_ARG, kv_cache


def _llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config)


def test_round_profile_tells_a_training_forward_with_a_cache_from_a_prefill() -> None:
    """Generation's prefill and decode, a log-prob pass, and a training pass that computes a
    shared prefix with a KV cache and the rest against it: the training forwards (gradients on)
    count as train_forward whatever their cache, and their backward gets their FLOPs × (1 +
    trainable share)."""
    model = _llama()
    total = sum(p.numel() for p in model.parameters())
    profile = round_profile.Profile()
    ids = torch.randint(0, 64, (2, 6))
    with round_profile.patched(profile):
        with torch.no_grad():
            cache = kv_cache(model(input_ids=ids, use_cache=True))
            model(input_ids=ids[:, -1:], **{CACHE_ARG: cache}, use_cache=True)
            model(input_ids=ids, use_cache=False)
        # as `modelling._shared_prefix`: the prefix once, on one row, its cache copied to both
        cache = kv_cache(model(input_ids=ids[:1, :4], use_cache=True))
        cache.reorder_cache(torch.zeros(2, dtype=torch.long))
        rest = model(input_ids=ids[:, 4:], **{CACHE_ARG: cache}, use_cache=False)
        rest.logits.sum().backward()
    key = "outside stages"
    assert profile.tokens[(key, "prefill")] == 12
    assert profile.tokens[(key, "decode")] == 2
    assert profile.tokens[(key, "logprob")] == 12
    assert profile.tokens[(key, "train_forward")] == 4 + 4
    train_flops = 2.0 * total * 8
    assert profile.flops[(key, "train_forward")] == pytest.approx(train_flops)
    # every weight trainable: the activations' gradients and the weights' (as many again)
    assert profile.flops[(key, "backward")] == pytest.approx(2 * train_flops)
    # A frozen model under gradients (nothing to train) is not a training forward
    frozen = _llama().requires_grad_(False)
    with round_profile.patched(profile):
        frozen(input_ids=ids, use_cache=True)
    assert profile.tokens[(key, "prefill")] == 24


def test_round_profile_times_lean_decode_steps_as_decode() -> None:
    """`generate`'s lean decode step calls no `forward`: its steps are timed as decode, with one
    token and 2 × parameters FLOPs per answer and step."""
    from rlanything_core.models.loading import load_model
    from rlanything_core.models.modelling import generate

    model, tok = load_model("tiny", device="cpu")
    total = sum(p.numel() for p in model.parameters())
    profile = round_profile.Profile()
    prompts = [[{"role": "user", "content": f"go to shelf {i}"}] for i in range(3)]
    with round_profile.patched(profile):
        generate(model, tok, prompts, [1, 2, 3], max_new_tokens=5, temperature=1.0,
                 ignore_eos=True)  # fmt: skip
    key = "outside stages"
    assert profile.tokens[(key, "decode")] == 3 * 4  # the first token comes from the prefill
    assert profile.flops[(key, "decode")] == pytest.approx(2.0 * total * 12)
    assert profile.tokens[(key, "prefill")] > 0


def test_round_profile_counts_the_updates_old_logprob_passes_as_logprob() -> None:
    """`response_logprobs` without gradients (an update's old log-probs) computes a shared prompt
    prefix with a KV cache and the rest against it: both forwards are log-prob passes, not a
    generation's prefill; the same call with gradients on stays a training forward, and the patch
    is gone after the block."""
    from rlanything_core.models import modelling

    model = _llama()
    profile = round_profile.Profile()
    shared = list(range(3, 3 + modelling.MIN_SHARED_PREFIX))
    prompts = [[*shared, 1, 2], [*shared, 5]]
    responses = [[7, 8], [9]]
    original = modelling.response_logprobs
    with round_profile.patched(profile):
        with torch.no_grad():
            modelling.response_logprobs(model, prompts, responses, temperature=1.0, pad_id=0)
        logp, _ = modelling.response_logprobs(model, prompts, responses, temperature=1.0, pad_id=0)
        logp.sum().backward()
    assert modelling.response_logprobs is original
    key = "outside stages"
    assert profile.tokens[(key, "prefill")] == 0
    assert profile.tokens[(key, "decode")] == 0
    # the shared prefix once (one row), then both rows' own tokens and responses
    assert profile.tokens[(key, "logprob")] == profile.tokens[(key, "train_forward")] > 0
    assert profile.tokens[(key, "logprob")] < 2 * (len(shared) + 4)
    # MFU on real tokens leaves out the padding: one prompt and one response position of 8
    for category in ("logprob", "train_forward"):
        assert profile.real_tokens[(key, category)] == profile.tokens[(key, category)] - 2
        assert profile.real_flops[(key, category)] < profile.flops[(key, category)]
    assert 0 < profile.real_flops[(key, "backward")] < profile.flops[(key, "backward")]


def test_learning_verdict_pairs_the_first_and_last_curve_points_by_task(tmp_path: Path) -> None:
    """Worked by hand: 4 held-out tasks, one episode each at step 0 and two at step 4. Per task
    (after − before): a 1 − 0, b 0.5 − 0, c 1 − 1, d 0 − 1 → d = (1, 0.5, 0, −1), mean 0.125;
    Σ((d − 0.125)/4)² = (0.875² + 0.375² + 0.125² + 1.125²)/16 = 2.1875/16, × 4/3 → √0.18229 =
    0.42696, × 1.96 = 0.83684: 12.5 [−71.2, +96.2] points on 4 tasks."""

    def step(task: str, rollout: int, outcome: int) -> dict[str, object]:
        return {
            "round": 0, "task_id": task, "task_version": 0, "rollout_idx": rollout,
            "step_idx": 0, "seed": rollout, "checkpoint": "c", "goal": "g", "observation": "o",
            "prompt": "p", "response": "r", "action": "a", "action_valid": True,
            "next_observation": "o2", "progress": True, "done": True, "pass_fraction": None,
            "screenshot": None, "outcome": outcome, "num_steps": 1, "finish_reason": "stop",
            "prompt_token_ids": [1], "response_token_ids": [2], "sampler_logprobs": [-0.5],
        }  # fmt: skip

    before = [step("a", 0, -1), step("b", 0, -1), step("c", 0, 1), step("d", 0, 1)]
    after = [step("a", 0, 1), step("a", 1, 1), step("b", 0, 1), step("b", 1, -1)]
    after += [step("c", 0, 1), step("c", 1, 1), step("d", 0, -1), step("d", 1, -1)]
    for at, rows in ((0, before), (4, after)):
        path = tmp_path / "eval" / f"step_{at:03d}" / "id_rollouts.parquet"
        path.parent.mkdir(parents=True)
        write_dataset(rows_frame(rows, "rollouts"), path, "rollouts")

    def point(at: int, acc: float) -> dict[str, float]:
        prefix = "eval/id/"
        return {"step": at, prefix + "policy_accuracy": acc, prefix + "policy_accuracy_ci_low": 0.0,
                prefix + "policy_accuracy_ci_high": 1.0, prefix + "episodes": 4.0,
                prefix + "tasks": 4.0, prefix + "invalid_actions": 0.0}  # fmt: skip

    found = learning.verdict([point(0, 0.5), point(4, 0.625)], "id", tmp_path)
    assert found["paired_tasks"] == 4
    value, low, high = found["paired_gain_points"]
    assert value == pytest.approx(12.5)
    assert low == pytest.approx(12.5 - 83.68, abs=0.01)
    assert high == pytest.approx(12.5 + 83.68, abs=0.01)
    # without the run directory (or the step's episodes) there is no pairing
    assert "paired_gain_points" not in learning.verdict([point(0, 0.5), point(4, 0.6)], "id")


def test_pool_seeds_pairs_each_task_averaged_over_the_seeds() -> None:
    """Worked by hand: two seeds; seed 0 played tasks a, b, c, seed 1 also d (dropped: not every
    seed played it). Per seed (after − before): seed 0 (1, 0, 0), seed 1 (1, 0, 0) → per task
    d = (1, 0, 0), mean 1/3; Σ((d − 1/3)/3)² = (4 + 1 + 1)/81, × 3/2 = 1/9 → √ = 1/3, × 1.96:
    0.333 [−0.320, +0.987]."""
    before = [pd.Series({"a": 0.0, "b": 1.0, "c": 0.0}),
              pd.Series({"a": 0.0, "b": 0.0, "c": 1.0, "d": 0.0})]  # fmt: skip
    after = [pd.Series({"c": 0.0, "a": 1.0, "b": 1.0}),
             pd.Series({"a": 1.0, "b": 0.0, "c": 1.0, "d": 1.0})]  # fmt: skip
    value, low, high = pool_seeds.paired_gain(before, after)
    assert value == pytest.approx(1 / 3)
    assert low == pytest.approx(1 / 3 - 1.96 / 3, abs=1e-3)
    assert high == pytest.approx(1 / 3 + 1.96 / 3, abs=1e-3)


def test_policy_signal_compares_advantage_signs_with_progress_labels(tmp_path: Path) -> None:
    """Worked by hand: five kept steps (two of them progress) and one dropped. Signs agree on
    3 of 5; recalls 1/2 (progress) and 2/3 (none), balanced 7/12; the mean advantage of the
    progress steps (0.25) minus the others' (−1.1/3)."""
    keys = {"task_id": ["t"] * 6, "task_version": [1] * 6, "rollout_idx": [0] * 6}
    keys["step_idx"] = list(range(6))
    pd.DataFrame(
        keys | {"advantage": [1.0, -0.5, -1.0, 0.2, -0.3, 2.0], "kept": [True] * 5 + [False]}
    ).to_parquet(tmp_path / "policy_samples.parquet")
    pd.DataFrame(keys | {"progress": [True, True, False, False, False, True]}).to_parquet(
        tmp_path / "rollouts.parquet"
    )
    signal = policy_signal.round_signal(tmp_path)
    assert signal["kept"] == 5 and signal["progress_share"] == pytest.approx(0.4)
    assert signal["sign_agreement"] == pytest.approx(0.6)
    assert signal["sign_agreement_balanced"] == pytest.approx(7 / 12)
    assert signal["advantage_gap"] == pytest.approx(0.25 + 1.1 / 3)


def test_rm_signal_counts_what_the_update_reinforces_and_unanimous_steps(tmp_path: Path) -> None:
    """Worked by hand: three steps × 3 votes. Step 0 makes progress, votes (+1, +1, −1), and the
    update reinforces the wrong −1 (advantages −0.5, −0.5, +1.0); step 1 makes none, votes all
    −1 (unanimous: advantage 0, not kept); step 2 makes none, votes (+1, −1, −1), the two right
    −1 reinforced. Votes right 7/9, "progress" verdicts 3/9 against a progress share of 3/9,
    unanimous steps 1/3; kept 6, reinforced 3 (right 2/3, none of them "progress"), pushed away
    3 (right 2/3)."""
    keys = {"task_id": ["t"] * 9, "task_version": [1] * 9, "rollout_idx": [0] * 9}
    keys["step_idx"] = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    pd.DataFrame(
        keys
        | {
            "vote_idx": [0, 1, 2] * 3,
            "verdict": [1, 1, -1, -1, -1, -1, 1, -1, -1],
            "advantage": [-0.5, -0.5, 1.0, 0.0, 0.0, 0.0, -0.8, 0.4, 0.4],
            "kept": [True] * 3 + [False] * 3 + [True] * 3,
        }
    ).to_parquet(tmp_path / "rm_samples.parquet")
    steps = {k: v[::3] for k, v in keys.items()}
    pd.DataFrame(steps | {"progress": [True, False, False]}).to_parquet(
        tmp_path / "rollouts.parquet"
    )
    signal = rm_signal.round_signal(tmp_path)
    assert signal["votes"] == 9 and signal["votes_right"] == pytest.approx(7 / 9)
    assert signal["progress_share"] == pytest.approx(1 / 3)
    assert signal["progress_verdicts"] == pytest.approx(1 / 3)
    assert signal["unanimous_steps"] == pytest.approx(1 / 3)
    assert (signal["kept"], signal["reinforced"], signal["pushed_away"]) == (6, 3, 3)
    assert signal["reinforced_right"] == pytest.approx(2 / 3)
    assert signal["reinforced_progress_verdicts"] == pytest.approx(0.0)
    assert signal["pushed_away_right"] == pytest.approx(2 / 3)


def test_rm_same_steps_pairs_two_judges_on_the_same_steps() -> None:
    """Worked by hand: tasks a (steps: progress, none) and b (progress, none, none), one vote
    each. The trained judge is right on all five; one starting judge always answers "progress"
    (recalls 1 and 0, balanced 1/2): gain +50 points, and as every task's right votes are R·B_g
    for both judges the residuals vanish and the interval has zero width. Another starting judge
    is wrong on b's first "none" step only: R0 = 2/3, balanced 5/6, gain 1/6; its negatives'
    residuals (A0_g − ⅔·B0_g)/3 are a +1/9, b −1/9, so z^trained − z^start = (−1/18, +1/18),
    V = 2/1 · 2/324 = 1/81 and the half-width 1.96/9: 16.7 [−5.1, +38.4] points."""
    keys = {"round": [0] * 5, "task_id": ["a", "a", "b", "b", "b"], "task_version": [0] * 5,
            "rollout_idx": [0] * 5, "step_idx": [0, 1, 0, 1, 2]}  # fmt: skip
    rollouts = pd.DataFrame(
        keys | {"progress": [True, False, True, False, False], "outcome": [1, 1, -1, -1, -1]}
    )
    right = pd.DataFrame(keys | {"vote_idx": [0] * 5, "verdict": [1, -1, 1, -1, -1]})
    always = pd.DataFrame(keys | {"vote_idx": [0] * 5, "verdict": [1] * 5})
    found = rm_same_steps.compare(rollouts, right, always, votes=1)
    assert (found["steps"], found["tasks"]) == (5, 2)
    assert found["trained"]["process_balanced_accuracy"] == pytest.approx(1.0)
    assert found["started"]["process_balanced_accuracy"] == pytest.approx(0.5)
    assert found["started"]["process_majority_baseline"] == pytest.approx(0.6)
    assert found["balanced_gain_points"] == pytest.approx([50.0, 50.0, 50.0])
    # Each step judged by its episode's outcome (a won, b lost): right on a's progress step and
    # b's two others, recalls 1/2 and 2/3, balanced 7/12.
    assert found["outcome_judge"]["process_balanced_accuracy"] == pytest.approx(7 / 12)
    # the other way round, and a judge against itself
    back = rm_same_steps.compare(rollouts, always, right, votes=1)
    assert back["balanced_gain_points"] == pytest.approx([-50.0, -50.0, -50.0])
    assert rm_same_steps.compare(rollouts, right, right, votes=1)["balanced_gain_points"] == [
        0.0,
        0.0,
        0.0,
    ]


def test_targets_read_another_machines_results_and_name_their_cpu(tmp_path: Path) -> None:
    """`targets.py --results DIR`: each budget read from DIR's file of that name, met or not,
    with the machine (model and flags) and commit the number came from; a missing file is not
    measured, never met."""
    import json

    machine = {"cpu_model": "Intel(R) Xeon(R)", "cpu_flags": ["avx2", "avx512f"]}
    run = {"wall_seconds": 760.0, "peak_rss_tree_mb": 4096.0, "commit": "abc1234"}
    (tmp_path / "demo-run.json").write_text(json.dumps(run | {"machine": machine}))
    rows = {row["target"]: row for row in targets.check(tmp_path)}
    wall = rows["make run wall seconds (after install, warm starts included)"]
    assert wall["measured"] == 760.0 and wall["met"] is False and wall["next_lever"]
    assert wall["cpu_flags"] == ["avx2", "avx512f"] and wall["commit"] == "abc1234"
    memory = rows["demo peak RSS, GB (process tree)"]
    assert memory["measured"] == 4.0 and memory["met"] is True and memory["next_lever"] is None
    missing = rows["policy and RM update MFU on real tokens (of the measured matmul peak)"]
    assert missing["measured"] is None and missing["met"] is None
    # a throughput result without its equal-work invariants is not measured; with them it is
    part = {
        "ours_tokens": 300,
        "ours_seconds": 1.0,
        "generate_tokens": 100,
        "generate_seconds": 1.0,
    }
    old = {"rollout": part, "reward_scoring": part, "commit": "0123abc"}
    (tmp_path / "throughput-demo.json").write_text(json.dumps(old | {"machine": machine}))
    speed = "rollout + RM scoring tokens/s over plain batched generate"
    assert {r["target"]: r for r in targets.check(tmp_path)}[speed]["measured"] is None
    checked = part | {"invariants": {"generations": [8, 8]}}
    new = {"rollout": checked, "reward_scoring": checked, "commit": "0123abc"}
    (tmp_path / "throughput-demo.json").write_text(json.dumps(new | {"machine": machine}))
    assert {r["target"]: r for r in targets.check(tmp_path)}[speed]["measured"] == 3.0
    rounds = {"ratio_without_acceptance": 1.566, "commit": "def5678"}
    (tmp_path / "equal-work-round.json").write_text(json.dumps(rounds | {"machine": machine}))
    rows = {row["target"]: row for row in targets.check(tmp_path)}
    equal = rows["SmolLM2 round at equal work, speed-up over b94463e"]
    assert equal["measured"] == 1.566 and equal["met"] is False and equal["goal"] == ">= 4.0"
    assert equal["commit"] == "def5678" and equal["next_lever"]
    # the levers written in targets.py read the default results; DIR may give its own
    assert wall["next_lever_from"] == str(targets._shown(targets.RESULTS))
    assert memory["next_lever_from"] is None  # met: no lever shown
    (tmp_path / "levers.json").write_text(json.dumps({wall["target"]: "this machine's lever"}))
    rows = {row["target"]: row for row in targets.check(tmp_path)}
    wall = rows[wall["target"]]
    assert wall["next_lever"] == "this machine's lever"
    assert wall["next_lever_from"] == str(tmp_path / "levers.json")
    (tmp_path / "levers.json").write_text(json.dumps({"make run seconds": "a misspelt target"}))
    with pytest.raises(ValueError, match="names no target"):
        targets.check(tmp_path)


def test_report_names_the_commit_that_added_a_file_that_records_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`report.measured`: the file's own CPU, day and commit; where it names no commit, the
    commit that added it from provenance.json, said as such; else "commit not recorded"."""
    import json

    monkeypatch.setattr(report, "RESULTS", tmp_path)
    machine = {"cpu_flags": ["avx2"]}
    (tmp_path / "a.json").write_text(
        json.dumps({"measured_at": "2026-11-22T05:40", "machine": machine})
    )
    (tmp_path / "b.json").write_text(
        json.dumps({"commit": "1234567", "machine": {"cpu_model": "EPYC"}})
    )
    assert report.measured("a.json") == "CPU not recorded (avx2), 2026-11-22, commit not recorded"
    (tmp_path / "provenance.json").write_text(
        json.dumps(
            {"files": {"a.json": {"committed_in": "abcdef0"}, "b.json": {"committed_in": "x"}}}
        )
    )
    assert report.measured("a.json") == "CPU not recorded (avx2), 2026-11-22, committed in abcdef0"
    assert report.measured("b.json") == "EPYC, date not recorded, 1234567"  # its own commit wins
