"""Token-level PPO-clip loss with the k3 KL (METHOD.md §1, policy loss)."""

from __future__ import annotations

import math

import pytest
import torch

from rlanything_core.method.losses import ppo_clip_k3_loss


def _t(x: list) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def test_clip_by_hand() -> None:
    # One token with ratio 1.5 (log 1.5). A = +1: min(1.5, clip→1.2) = 1.2 → loss −1.2.
    # A = −1: min(−1.5, −1.2) = −1.5 → loss +1.5. Batch mean of per-sample means: (−1.2+1.5)/2.
    old = _t([[0.0], [0.0]])
    new = _t([[math.log(1.5)], [math.log(1.5)]])
    loss, m = ppo_clip_k3_loss(new, old, new, _t([1.0, -1.0]), _t([[1.0], [1.0]]), kl_beta=0.0)
    assert m["policy_loss"] == pytest.approx((-1.2 + 1.5) / 2)
    assert float(loss) == pytest.approx(0.15)
    assert m["kl"] == pytest.approx(0.0)  # reference = new → k3 = e⁰ − 0 − 1 = 0
    assert m["clip_fraction"] == pytest.approx(1.0)


def test_masking_and_per_sample_mean_by_hand() -> None:
    # ratio 1 everywhere → each token's surrogate is A. Sample 1 has 3 real tokens, sample 2 has 1:
    # per-sample means are A₁ = 2 and A₂ = −1 regardless of length → loss = −(2 − 1)/2 = −0.5.
    # The padded token of sample 2 holds garbage that must not count.
    new = _t([[0.0, 0.0, 0.0], [0.0, 5.0, 5.0]])
    old = _t([[0.0, 0.0, 0.0], [0.0, -5.0, -5.0]])
    mask = _t([[1, 1, 1], [1, 0, 0]])
    loss, m = ppo_clip_k3_loss(new, old, old, _t([2.0, -1.0]), mask, kl_beta=0.0)
    assert float(loss) == pytest.approx(-0.5)
    assert m["clip_fraction"] == pytest.approx(0.0)


def test_k3_by_hand() -> None:
    # k3 with log π_ref − log π_new = d: e^d − d − 1. d = 0.5 → 1.648721 − 1.5 = 0.148721.
    new = _t([[0.0]])
    ref = _t([[0.5]])
    loss, m = ppo_clip_k3_loss(new, new, ref, _t([0.0]), _t([[1.0]]), kl_beta=0.1)
    assert m["kl"] == pytest.approx(math.exp(0.5) - 1.5)
    assert float(loss) == pytest.approx(0.1 * (math.exp(0.5) - 1.5))


def test_golden_ppo_clip_k3(golden: dict) -> None:
    case = golden["ppo_clip_k3"]
    old = _t(case["logp_old"])
    loss, m = ppo_clip_k3_loss(
        _t(case["logp_new"]),
        old,
        old,
        _t(case["advantages"]),
        _t(case["mask"]),
        clip_eps=case["clip"],
        kl_beta=case["beta"],
    )
    assert m["policy_loss"] == pytest.approx(case["policy_loss"], abs=1e-6)
    assert m["kl"] == pytest.approx(case["kl"], abs=1e-6)
    assert float(loss) == pytest.approx(case["total_loss"], abs=1e-6)


def test_gradient_flows_only_through_new() -> None:
    new = _t([[-1.0, -2.0]]).requires_grad_()
    old = _t([[-1.2, -1.9]]).requires_grad_()
    loss, _ = ppo_clip_k3_loss(new, old, old, _t([1.0]), _t([[1.0, 1.0]]))
    loss.backward()
    assert new.grad is not None and new.grad.abs().sum() > 0
    assert old.grad is None
