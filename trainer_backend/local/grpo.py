"""GRPO maths as pure functions over tensors (paper §14: token-level clip-higher, token-mean loss).

Shapes: B = number of sampled responses in the batch, T = response length (padded). Nothing here
touches models, files or harness code.
"""

from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Return GRPO advantages (r - mean_g) / (std_g + eps), per sample.

    Args:
        rewards: `[B]` float rewards.
        group_ids: `[B]` int group index of each sample (samples of one prompt share an id).
        eps: added to the group standard deviation (unbiased, as in verl's GRPO).

    Returns:
        `[B]` advantages; a group whose rewards are all equal (or has one sample) gets zeros.
    """
    assert rewards.shape == group_ids.shape and rewards.dim() == 1, (rewards.shape, group_ids.shape)
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    for g in torch.unique(group_ids):
        sel = group_ids == g
        r = rewards[sel].float()
        if r.numel() < 2:
            continue
        adv[sel] = (r - r.mean()) / (r.std(unbiased=True) + eps)
    return adv


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Return the mean of `values[B, T]` over positions where `mask[B, T]` is 1 (0 when the mask is empty)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the clipped PPO surrogate loss (token-mean) and its statistics.

    Args:
        logp: `[B, T]` log-probabilities of the sampled tokens under the current policy (with grad).
        old_logp: `[B, T]` log-probabilities under the policy that sampled them (no grad).
        adv: `[B]` advantages, broadcast over tokens.
        mask: `[B, T]` 1 for response tokens that receive gradient.
        clip_low: ratio floor is 1 - clip_low.
        clip_high: ratio ceiling is 1 + clip_high (clip-higher: asymmetric, DAPO).

    Returns:
        `(loss, stats)`: scalar loss = token-mean of max(-A·ratio, -A·clip(ratio)); stats has `pg_clipfrac`
        (share of tokens where the clipped term was chosen) and `ppo_kl` (token-mean old_logp - logp).
    """
    assert logp.shape == old_logp.shape == mask.shape and adv.shape == logp.shape[:1]
    ratio = torch.exp(logp - old_logp)
    a = adv[:, None]
    unclipped = -a * ratio
    clipped = -a * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    stats = {
        "pg_clipfrac": float(masked_mean((clipped > unclipped).float(), mask)),
        "ppo_kl": float(masked_mean((old_logp - logp).detach(), mask)),
    }
    return loss, stats


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Return the token-mean k3 estimator of KL(policy || reference) (Schulman's low-variance form).

    Args:
        logp: `[B, T]` current log-probabilities (with grad).
        ref_logp: `[B, T]` reference-policy log-probabilities (no grad).
        mask: `[B, T]` response mask.

    Returns:
        Scalar exp(ref - logp) - (ref - logp) - 1, averaged over masked tokens (always >= 0).
    """
    delta = (ref_logp - logp).clamp(-20.0, 20.0)
    return masked_mean(torch.exp(delta) - delta - 1.0, mask)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """Return `[B, T]` log-probabilities of `targets[B, T]` under `logits[B, T, V] / temperature`."""
    scaled = logits.float() / max(temperature, 1e-6)
    return torch.gather(torch.log_softmax(scaled, dim=-1), -1, targets[..., None]).squeeze(-1)


def token_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Return `[B, T]` entropy of the temperature-scaled next-token distribution."""
    logp = torch.log_softmax(logits.float() / max(temperature, 1e-6), dim=-1)
    return -(logp.exp() * logp).sum(-1)
