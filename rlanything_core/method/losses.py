"""Token-level PPO-clip loss with the k3 KL estimator: the policy loss of RLAnything (arXiv
2602.02488) and its reference code.

GRPO-style, no critic. The same loss trains the policy and the reward model (on its own prompts
and responses). For a sample with advantage A and response tokens t:

    r_t   = exp(clamp(log π_new(t) − log π_old(t), −10, 10))
    L_t   = −min(r_t · A, clip(r_t, 1 − ε, 1 + ε) · A)
    k3_t  = exp(log π_ref(t) − log π_new(t)) − (log π_ref(t) − log π_new(t)) − 1
    loss  = mean_samples( mean_tokens(L_t) ) + β · mean_samples( mean_tokens(k3_t) )

Choices, as in the reference code unless noted:
1. Per-sample token mean, then mean over samples (not a global token mean).
2. ε = 0.2, β = 0.01.
3. π_ref is whatever the caller passes. The trainer passes the policy loaded at the start of the
   update (the same log-probs as π_old); the KL then keeps the update close to its starting
   point and needs no extra model in memory.
"""

from __future__ import annotations

import torch


def ppo_clip_k3_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    kl_beta: float = 0.01,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate plus β·KL(k3), masked to response tokens.

    Args:
        logp_new: (B, T) log-probs of the response tokens under the policy being updated.
        logp_old: (B, T) log-probs under the policy that collected the data (no gradient).
        logp_ref: (B, T) log-probs under the KL reference (no gradient).
        advantages: (B,) one advantage per sample.
        mask: (B, T) 1 for response tokens, 0 for padding.

    Returns:
        (loss, metrics) where metrics has policy_loss, kl, clip_fraction, ratio_mean as floats.
    """
    mask = mask.to(logp_new.dtype)
    tokens = mask.sum(dim=1).clamp(min=1.0)  # (B,)
    log_ratio = (logp_new - logp_old.detach()).clamp(-10.0, 10.0)  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    adv = advantages.to(logp_new.dtype)[:, None]  # (B, 1)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * adv)
    policy_loss = (-(surrogate * mask).sum(dim=1) / tokens).mean()

    delta = logp_ref.detach() - logp_new  # (B, T)
    k3 = torch.exp(delta) - delta - 1.0  # (B, T)
    kl = ((k3 * mask).sum(dim=1) / tokens).mean()

    loss = policy_loss + kl_beta * kl
    with torch.no_grad():
        clipped = ((ratio - 1.0).abs() > clip_eps).to(mask.dtype)
        metrics = {
            "policy_loss": float(policy_loss),
            "kl": float(kl),
            "clip_fraction": float((clipped * mask).sum() / mask.sum().clamp(min=1.0)),
            "ratio_mean": float((ratio * mask).sum() / mask.sum().clamp(min=1.0)),
        }
    return loss, metrics
