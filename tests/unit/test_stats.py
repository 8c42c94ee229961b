"""Clustered intervals, balanced accuracy and the majority baseline, against numbers worked out by
hand (rlanything_core/method/stats.py), and the ablation's intervals pooled over seeds."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rlanything_core.method.stats import (
    Z,
    accuracy,
    as_metrics,
    balanced_accuracy,
    balanced_accuracy_difference,
    majority_baseline,
    paired_difference,
    ratio,
)
from rlanything_flows.ablate import (
    ROWS,
    _markdown,
    _metrics,
    _paired_table,
    _summarize,
    paired_differences,
    pooled_curves,
    pooled_intervals,
)
from rlanything_flows.evaluate import SPLITS


def test_accuracy_interval_clustered_by_task_by_hand() -> None:
    # 3 tasks × 4 episodes; successes: A 3/4, B 2/4, C 1/4 → R = 6/12 = 0.5.
    # Residuals A_g − R·B_g: 3 − 2 = 1, 2 − 2 = 0, 1 − 2 = −1 → Σ² = 2; (Σ b)² = 12² = 144.
    # V = G/(G − 1) · 2/144 = 3/2 · 2/144 = 1/48; half-width 1.96/√48 = 0.28290163.
    correct = [1, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0]
    tasks = ["A"] * 4 + ["B"] * 4 + ["C"] * 4
    got = accuracy(correct, tasks)
    half = 1.96 * math.sqrt(1 / 48)
    assert half == pytest.approx(0.28290163)
    assert got == pytest.approx((0.5, 0.5 - half, 0.5 + half))
    assert as_metrics("acc", got) == {"acc": 0.5, "acc_ci_low": got.low, "acc_ci_high": got.high}


def test_ratio_with_weights_clips_and_counts_every_observed_cluster() -> None:
    # (a, b) per observation: X (1, 1), (0, 1); Y (1, 1), (1, 1); Z (0, 1), (0, 0).
    # R = 3/5 = 0.6. A_g = (1, 2, 0), B_g = (2, 2, 1); residuals −0.2, 0.8, −0.6 → Σ² = 1.04.
    # V = 3/2 · 1.04/25 = 0.0624; half = 1.96·√0.0624 = 0.48960; 0.6 + 0.4896 > 1 → clipped to 1.
    a = [1, 0, 1, 1, 0, 0]
    b = [1, 1, 1, 1, 1, 0]
    clusters = ["X", "X", "Y", "Y", "Z", "Z"]
    got = ratio(a, b, clusters)
    assert got.value == pytest.approx(0.6)
    assert got.low == pytest.approx(0.6 - 1.96 * math.sqrt(0.0624))
    assert got.high == 1.0
    # A cluster W with only b = 0 adds (0 − R·0)² = 0 but counts in G = 4: V = 4/3 · 1.04/25.
    got = ratio([*a, 0], [*b, 0], [*clusters, "W"])
    assert got.value == pytest.approx(0.6)
    assert got.low == pytest.approx(0.6 - 1.96 * math.sqrt(4 / 3 * 1.04 / 25))


def test_clustering_widens_the_interval_when_outcomes_are_constant_within_a_task() -> None:
    # 6 tasks × 2 episodes: 3 tasks succeed twice, 3 fail twice → R = 0.5.
    # Clustered: residuals 2 − 1 = ±1 per task → Σ² = 6; V = 6/5 · 6/144 = 0.05, half 0.43827.
    # iid (every episode its own cluster): residuals ±0.5 → Σ² = 3; V = 12/11 · 3/144 = 1/44,
    # half 0.29548.
    correct = [1, 1] * 3 + [0, 0] * 3
    tasks = np.repeat(np.arange(6), 2)
    clustered = accuracy(correct, tasks)
    iid = accuracy(correct, np.arange(12))
    assert clustered == pytest.approx((0.5, 0.5 - Z * math.sqrt(0.05), 0.5 + Z * math.sqrt(0.05)))
    assert iid == pytest.approx((0.5, 0.5 - Z * math.sqrt(1 / 44), 0.5 + Z * math.sqrt(1 / 44)))
    assert clustered.high - clustered.low > iid.high - iid.low


def test_balanced_accuracy_and_majority_baseline_by_hand() -> None:
    # T1: pos ✓, pos ✗, neg ✓; T2: pos ✓, neg ✓, neg ✓; T3: neg ✗, neg ✓.
    # Positives: 3, 2 right → R1 = 2/3; negatives: 5, 4 right → R0 = 4/5; BA = ½(2/3 + 4/5) = 11/15.
    # Residuals (A1_g − R1·B1_g)/3: T1 (1 − 4/3)/3 = −1/9, T2 (1 − 2/3)/3 = 1/9, T3 0;
    # (A0_g − R0·B0_g)/5: T1 (1 − 0.8)/5 = 1/25, T2 (2 − 1.6)/5 = 2/25, T3 (1 − 1.6)/5 = −3/25.
    # z_g = ½(…): −16/450, 43/450, −27/450 → Σ z² = (256 + 1849 + 729)/202500 = 2834/202500.
    # V = 3/2 · 2834/202500 = 0.0209926; half = 1.96·0.144888 = 0.283981 → high clipped to 1.
    correct = [1, 0, 1, 1, 1, 1, 0, 1]
    positive = [1, 1, 0, 1, 0, 0, 0, 0]
    tasks = ["T1"] * 3 + ["T2"] * 3 + ["T3"] * 2
    got = balanced_accuracy(correct, positive, tasks)
    assert got.value == pytest.approx(11 / 15)
    assert got.low == pytest.approx(11 / 15 - 1.96 * math.sqrt(1.5 * 2834 / 202500))
    assert got.low == pytest.approx(0.449352, abs=1e-6)
    assert got.high == 1.0
    # Plain accuracy 6/8; positives are 3/8, so always predicting "negative" scores 5/8.
    assert accuracy(correct, tasks).value == pytest.approx(0.75)
    assert majority_baseline(positive) == pytest.approx(5 / 8)
    assert majority_baseline([1, 1, 1, 0]) == pytest.approx(3 / 4)


def test_balanced_accuracy_difference_of_two_judges_on_the_same_steps_by_hand() -> None:
    # Judge a: the steps above (BA 11/15, z^a = (−16, 43, −27)/450). Judge b right on every
    # step: recalls 1 and 1, every residual A_g − 1·B_g = 0, so z^b = 0. D = 11/15 − 1 = −4/15
    # with z^a − z^b = z^a: half = 1.96·√(3/2 · 2834/202500) = 0.283981, not clipped.
    correct = [1, 0, 1, 1, 1, 1, 0, 1]
    positive = [1, 1, 0, 1, 0, 0, 0, 0]
    tasks = ["T1"] * 3 + ["T2"] * 3 + ["T3"] * 2
    got = balanced_accuracy_difference(correct, [1] * 8, positive, tasks)
    assert got.value == pytest.approx(-4 / 15)
    assert got.low == pytest.approx(-4 / 15 - 0.283981, abs=1e-6)
    assert got.high == pytest.approx(-4 / 15 + 0.283981, abs=1e-6)
    back = balanced_accuracy_difference([1] * 8, correct, positive, tasks)
    assert (back.value, back.low, back.high) == pytest.approx((4 / 15, -got.high, -got.low))
    # A judge against itself: 0, and nothing to vary.
    same = balanced_accuracy_difference(correct, correct, positive, tasks)
    assert (same.value, same.low, same.high) == (0.0, 0.0, 0.0)
    # Paired, the shared task effect cancels: b = a with one more right step in T3 (a negative,
    # R0 4/5 → 5/5): D = 1/10, residuals differ in the negatives' part only:
    # z^b − z^a per task = ½[(A0b_g − B0_g)/5 − (A0a_g − 0.8·B0_g)/5] = (−0.02, −0.04, +0.06),
    # half = 1.96·√(3/2 · 0.0056) = 0.179638.
    better = [1, 0, 1, 1, 1, 1, 1, 1]
    gain = balanced_accuracy_difference(better, correct, positive, tasks)
    assert gain.value == pytest.approx(0.1)
    assert gain.high - gain.value == pytest.approx(1.96 * math.sqrt(1.5 * 0.0056), abs=1e-9)
    assert math.isnan(balanced_accuracy_difference([1, 0], [1, 1], [1, 1], ["a", "b"]).value)


def test_a_constant_verdict_scores_the_base_rate_but_half_balanced() -> None:
    # Labels: 2 positives, 6 negatives; the verdict is always "negative".
    positive = [1, 1, 0, 0, 0, 0, 0, 0]
    correct = [not p for p in positive]
    tasks = ["a", "a", "b", "b", "c", "c", "d", "d"]
    assert accuracy(correct, tasks).value == pytest.approx(majority_baseline(positive)) == 0.75
    assert balanced_accuracy(correct, positive, tasks).value == pytest.approx(0.5)


def test_edge_cases_one_cluster_one_class_no_observation() -> None:
    one = accuracy([1, 0, 1], ["a", "a", "a"])
    assert one.value == pytest.approx(2 / 3) and math.isnan(one.low) and math.isnan(one.high)
    absent = balanced_accuracy([1, 0], [1, 1], ["a", "b"])  # no negative observation
    assert all(math.isnan(v) for v in absent)
    assert all(math.isnan(v) for v in ratio([0, 0], [0, 0], ["a", "b"]))  # Σ b = 0
    assert all(math.isnan(v) for v in accuracy([], []))
    assert math.isnan(majority_baseline([]))
    # every task right: V = 0, the interval is the point
    assert accuracy([1, 1, 1, 1], ["a", "a", "b", "b"]) == (1.0, 1.0, 1.0)


def _episodes(outcomes: dict[str, list[int]]) -> pd.DataFrame:
    """One-step episodes of an eval split: task → outcomes (+1 / −1) of its episodes."""
    rows = [
        {"round": 0, "task_id": task, "task_version": 1, "rollout_idx": g, "outcome": o,
         "action_valid": True, "done": True}
        for task, played in outcomes.items()
        for g, o in enumerate(played)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_ablation_pools_seeds_as_separate_clusters() -> None:
    # Seed 0: a (+1, −1), b (−1, −1) → 1/4; seed 1: a (+1, +1), b (+1, −1) → 3/4.
    # Pooled over (task, seed): clusters 1/2, 0/2, 2/2, 1/2 → R = 4/8; residuals 0, −1, 1, 0 →
    # Σ² = 2; V = 4/3 · 2/64 = 1/24, half = 1.96·√(1/24) = 0.40008 → [0.09992, 0.90008].
    # (Clustered by task alone, a 3/4 and b 1/4 would give V = 2 · 2/64 = 1/16.)
    seeds = {
        0: _episodes({"a": [1, -1], "b": [-1, -1]}),
        1: _episodes({"a": [1, 1], "b": [1, -1]}),
    }
    by_seed = {seed: {split: (r, None) for split in SPLITS} for seed, r in seeds.items()}
    pooled = pooled_intervals(by_seed, votes=1)
    half = 1.96 * math.sqrt(1 / 24)
    assert pooled["eval/id/policy_accuracy"] == pytest.approx([0.5, 0.5 - half, 0.5 + half])
    assert not any(key.startswith("eval/id/rm_") for key in pooled)  # nothing judged

    per_seed = [_metrics(cell, votes=1) for cell in by_seed.values()]
    summary = _summarize({"Policy": per_seed})
    assert summary["Policy"]["eval/id/policy_accuracy"] == pytest.approx([0.5, 0.25])
    assert "eval/id/policy_accuracy_ci_low" not in summary["Policy"]  # pooled instead
    rows = {row.name: summary["Policy"] if row.name == "Policy" else {} for row in ROWS}
    rows["Before"] = _summarize({"Before": per_seed[:1]})["Before"]  # evaluated once
    table = _markdown(rows, {name: pooled for name in rows}, seeds=2, rounds=1)
    assert "| Policy | 50.0 ± 25.0 [10.0, 90.0] | 50.0 ± 25.0 [10.0, 90.0] | – |" in table
    before = next(line for line in table.splitlines() if line.startswith("| Before |"))
    assert "±" not in before and "[10.0, 90.0]" in before


def test_a_step_shared_by_every_seed_is_pooled_once() -> None:
    """Step 0 of a row's curve is Before's evaluation in every seed: pooled once, its interval is
    that of its own episodes; step 1 pools both seeds; a step only one seed has is left out."""
    start = _episodes({"a": [1, -1], "b": [-1, -1], "c": [1, 1]})
    later = {0: _episodes({"a": [1, -1], "b": [-1, -1]}), 1: _episodes({"a": [1, 1], "b": [1, -1]})}
    heldout = {
        "Policy": {
            0: {0: {"id": (start, None)}},  # the copy in seed 1 was not added
            1: {seed: {"id": (frame, None)} for seed, frame in later.items()},
            2: {0: {"id": (later[0], None)}},
        }
    }
    curves = pooled_curves(heldout, {("Policy", 0)}, seeds=2, votes=1)["Policy"]
    assert [p["step"] for p in curves] == [0, 1]
    alone = pooled_intervals({0: {"id": (start, None)}}, votes=1)["eval/id/policy_accuracy"]
    assert curves[0]["eval/id/policy_accuracy"] == pytest.approx(alone)
    half = 1.96 * math.sqrt(1 / 24)  # as in test_ablation_pools_seeds_as_separate_clusters
    assert curves[1]["eval/id/policy_accuracy"] == pytest.approx([0.5, 0.5 - half, 0.5 + half])


def test_paired_difference_by_hand() -> None:
    # a = (1, 0.5, 0.5, 1), b = (0.5, 0.5, 0, 0.5) → d = (0.5, 0, 0.5, 0.5), D = 0.375;
    # d − D = (0.125, −0.375, 0.125, 0.125) → Σ² = 0.1875; V = 4/3 · 0.1875/16 = 1/64,
    # half = 1.96/8 = 0.245 → [0.13, 0.62]. Not clipped: the same with the rows swapped is negative.
    got = paired_difference([1, 0.5, 0.5, 1], [0.5, 0.5, 0, 0.5])
    assert got == pytest.approx((0.375, 0.13, 0.62))
    assert paired_difference([0.5, 0.5, 0, 0.5], [1, 0.5, 0.5, 1]) == pytest.approx(
        (-0.375, -0.62, -0.13)
    )
    one = paired_difference([1.0], [0.0])
    assert one.value == 1.0 and math.isnan(one.low) and math.isnan(one.high)
    assert all(math.isnan(v) for v in paired_difference([], []))


def test_ablation_pairs_rows_by_task_over_every_seed() -> None:
    """A task's accuracy pools every seed's episodes of it; rows are paired on the tasks."""
    # Policy seeds 0, 1 on a, b: a 1/2 + 2/2 → 3/4, b 0/2 + 1/2 → 1/4; Before: a 1/2, b 0/2.
    # d = (1/4, 1/4) → D = 0.25, V = 0 (the same gain on both tasks): [0.25, 0.25].
    policy = {
        0: _episodes({"a": [1, -1], "b": [-1, -1]}),
        1: _episodes({"a": [1, 1], "b": [1, -1]}),
    }
    before = {0: _episodes({"a": [1, -1], "b": [-1, -1]})}
    datasets = {
        name: {seed: {split: (r, None) for split in SPLITS} for seed, r in by_seed.items()}
        for name, by_seed in (("Before", before), ("Policy", policy))
    }
    paired = paired_differences(datasets)
    assert list(paired) == ["Policy − Before"]  # the other rows are absent
    assert paired["Policy − Before"]["eval/id/policy_accuracy"] == pytest.approx([0.25] * 3)
    assert paired["Policy − Before"]["eval/ood/tasks"] == 2
    table = _paired_table(paired)
    assert "| Policy − Before | +25.0 [+25.0, +25.0] (2) | +25.0 [+25.0, +25.0] (2) |" in table
