"""GRPO maths of the local backend: advantages, clip-higher, token-mean, k3 KL."""

from __future__ import annotations

import pytest
import torch

from trainer_backend.local import grpo


def test_constant_groups_get_zero_advantage_and_varied_groups_are_normalised() -> None:
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.5, 0.5])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
    adv = grpo.group_advantages(rewards, groups, eps=1e-6)
    assert torch.equal(adv[:3], torch.zeros(3))
    assert torch.equal(adv[6:], torch.zeros(2))
    mid = adv[3:6]
    assert mid.sum().abs() < 1e-5  # zero mean within the group
    expected = (torch.tensor([0.0, 1.0, 0.0]) - 1 / 3) / (torch.tensor([0.0, 1.0, 0.0]).std() + 1e-6)
    assert torch.allclose(mid, expected, atol=1e-6)


def test_advantage_is_invariant_to_group_order() -> None:
    rewards = torch.tensor([0.2, 0.9, 0.4, 0.1])
    a = grpo.group_advantages(rewards, torch.tensor([0, 1, 0, 1]))
    b = grpo.group_advantages(rewards[[0, 2, 1, 3]], torch.tensor([0, 0, 1, 1]))
    assert torch.allclose(a[[0, 2, 1, 3]], b)


def test_ratio_one_gives_minus_token_mean_advantage_and_no_clipping() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.5, 0.5], [0.2, 0.2, 0.2]]))
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    adv = torch.tensor([2.0, -1.0])
    loss, stats = grpo.policy_loss(logp, logp.clone(), adv, mask)
    # token mean over 3 real tokens: (-2 - 2 + 1) / 3
    assert loss.item() == pytest.approx(-1.0)
    assert stats["pg_clipfrac"] == 0.0


def test_token_mean_weights_long_responses_more_than_sequence_mean_would() -> None:
    logp = torch.zeros(2, 4)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    loss, _ = grpo.policy_loss(logp, logp, torch.tensor([1.0, -1.0]), mask)
    assert loss.item() == pytest.approx(-(4 - 1) / 5)


def test_clip_higher_is_asymmetric() -> None:
    old = torch.zeros(1, 1)
    mask = torch.ones(1, 1)
    pos = torch.tensor([1.0])
    # ratio 1.25 is inside [0.8, 1.28]: unclipped, gradient flows
    up = torch.log(torch.tensor([[1.25]])).requires_grad_()
    loss, stats = grpo.policy_loss(up, old, pos, mask, clip_low=0.2, clip_high=0.28)
    loss.backward()
    assert stats["pg_clipfrac"] == 0.0 and up.grad is not None and up.grad.abs().item() > 0
    # ratio 1.35 exceeds 1.28 with positive advantage: clipped, no gradient
    far = torch.log(torch.tensor([[1.35]])).requires_grad_()
    loss, stats = grpo.policy_loss(far, old, pos, mask, clip_low=0.2, clip_high=0.28)
    loss.backward()
    assert stats["pg_clipfrac"] == 1.0 and far.grad is not None and far.grad.abs().item() == 0
    assert loss.item() == pytest.approx(-1.28)
    # ratio 0.75 below 1 - 0.2 with negative advantage: clipped at 0.8
    low = torch.log(torch.tensor([[0.75]]))
    loss, stats = grpo.policy_loss(low, old, torch.tensor([-1.0]), mask, clip_low=0.2, clip_high=0.28)
    assert stats["pg_clipfrac"] == 1.0 and loss.item() == pytest.approx(0.8)


def test_masked_tokens_do_not_affect_loss() -> None:
    old = torch.zeros(1, 3)
    mask = torch.tensor([[1, 1, 0]])
    a = torch.tensor([[0.1, -0.1, 5.0]])
    b = torch.tensor([[0.1, -0.1, -9.0]])
    la, _ = grpo.policy_loss(a, old, torch.tensor([1.0]), mask)
    lb, _ = grpo.policy_loss(b, old, torch.tensor([1.0]), mask)
    assert la.item() == pytest.approx(lb.item())


def test_k3_kl_is_zero_at_reference_and_positive_elsewhere() -> None:
    ref = torch.log(torch.tensor([[0.3, 0.6]]))
    mask = torch.ones(1, 2)
    assert grpo.kl_penalty(ref, ref, mask).item() == pytest.approx(0.0, abs=1e-7)
    assert grpo.kl_penalty(ref + 0.5, ref, mask).item() > 0


def test_token_logprobs_match_log_softmax() -> None:
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([[0, 4, 2], [1, 1, 3]])
    lp = grpo.token_logprobs(logits, targets, temperature=1.0)
    full = torch.log_softmax(logits, -1)
    assert torch.allclose(lp[1, 2], full[1, 2, 3])
    assert grpo.token_entropy(logits, 1.0).shape == (2, 3)
