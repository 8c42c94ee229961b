"""The ratio benchmarks compare equal work and say so: each runs here at tiny scale, records its
invariants, and its check trips when one side is given less work (benchmarks/ is not a package:
its directory is put on the path, as running a script there does)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import commit_speedup
import throughput
import trl_grpo
from common import REPO, EqualWorkError

from rlanything_core.models.loading import load_model


def test_trl_comparison_trains_both_sides_on_the_same_completions() -> None:
    """Our rounds and TRL's steps put the same 32 completions through the loss, one optimizer
    step each, with each side's seconds split by phase; TRL given 16 trips the check."""
    config = trl_grpo.ours_config("configs/tiny.yaml", rounds=2, samples=32)
    ours, rollouts = trl_grpo.ours(config)
    assert ours["update_samples"] == [32, 32] and ours["optimizer_steps_per_round"] == [1, 1]
    assert all(n >= 32 for n in ours["generated_completions"])
    trl = trl_grpo.trl_steps(config, rollouts, 32, steps=2)
    invariants = trl_grpo.equal_work(ours, trl)
    assert invariants["samples_through_the_loss"] == 32
    assert trl["optimizer_steps"] == 2 and trl["prompts_per_step"] == 8
    for side, parts in (("ours", ours["median_phases_s"]), ("trl", trl["median_phases_s"])):
        assert parts["generation"] > 0 and parts["update"] > 0, side
    assert sum(ours["median_phases_s"].values()) == pytest.approx(ours["median_s"], abs=0.01)
    less = trl_grpo.trl_steps(config, rollouts, 16, steps=2)
    with pytest.raises(EqualWorkError, match="not the same work"):
        trl_grpo.equal_work(ours, less)
    with pytest.raises(EqualWorkError, match="multiple of 16"):
        trl_grpo.trl_steps(config, rollouts, 36, steps=1)


def test_throughput_against_generate_decodes_the_same_prompts_and_tokens() -> None:
    """Every side decodes the same prompts as often, and generates within 10 % of our tokens;
    `generate` held to 2 new tokens a prompt trips the check."""
    result = throughput.measure("configs/tiny.yaml", num_tasks=2, repeats=1)
    for part in ("rollout", "reward_scoring"):
        invariants = result[part]["invariants"]
        assert invariants["generations"] > 0 and set(invariants["tokens"]) == {
            "ours",
            "generate",
            "hf_step",
            "whole_prompts",
        }
    summary = result["rollout"]
    model, tokenizer = load_model("tiny-policy:0", device="cpu")
    prompts = [tokenizer.encode("look around")] * summary["generations"]
    batches = throughput.same_batches(prompts, summary["batch_size"])
    _, tokens = throughput.generate_baseline(
        model, tokenizer, batches, max_new_tokens=2, temperature=1.0
    )
    assert tokens <= 2 * summary["generations"] < summary["ours_tokens"] * 0.9
    with pytest.raises(EqualWorkError, match="not the same work"):
        throughput.equal_work(summary | {"generate_tokens": tokens})


def test_a_round_against_an_older_commit_checks_the_same_steps_were_played(
    tmp_path: Path,
) -> None:
    """Two one-round tiny runs of the same config played and judged the same steps and trained
    on as many samples; a run of fewer tasks trips the check."""
    config = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text()) | {"rounds": 1}
    path = tmp_path / "one-round.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir, wall, _ = commit_speedup.train(REPO, path, tmp_path, "full")
    full = commit_speedup.one_run(run_dir)
    invariants = commit_speedup.equal_work(full, full)
    assert invariants["same"]["rollouts_rows"] > 0 and invariants["same"]["judgments_rows"] > 0
    assert "policy/update_samples" in invariants["same"] and wall > 0
    config["environment"]["num_tasks"] = 2
    path.write_text(yaml.safe_dump(config))
    run_dir, _, _ = commit_speedup.train(REPO, path, tmp_path, "fewer-tasks")
    with pytest.raises(EqualWorkError, match="rollouts_rows"):
        commit_speedup.equal_work(full, commit_speedup.one_run(run_dir))
