"""GRPO/CISPO per-token losses against numbers worked by hand, gradients included."""

from __future__ import annotations

import math

import pytest
import torch

from arena_core.learn.losses import cispo_token_loss, grpo_token_loss, k3_kl

LN2 = math.log(2.0)


def _ratios_as_logprobs(ratios):
    """logprobs with old_logprobs = 0, so exp(logp - old) is exactly the given ratio."""
    logp = torch.tensor([math.log(r) for r in ratios], dtype=torch.float64, requires_grad=True)
    return logp, torch.zeros_like(logp)


def test_grpo_clips_only_in_the_direction_of_the_advantage():
    # r=1.5, A=2: min(3.0, 1.2*2) = 2.4, clipped (gradient removed)
    # r=0.5, A=-1: min(-0.5, 0.8*-1) = -0.8, clipped
    # r=1.0, A=0.5: 0.5, not clipped
    # r=0.5, A=1: min(0.5, 0.8) = 0.5, not clipped: the clip never helps a bad-but-positive token
    logp, old = _ratios_as_logprobs([1.5, 0.5, 1.0, 0.5])
    adv = torch.tensor([2.0, -1.0, 0.5, 1.0], dtype=torch.float64)
    loss, clipped = grpo_token_loss(logp, old, adv, eps_low=0.2, eps_high=0.2)
    torch.testing.assert_close(loss, torch.tensor([-2.4, 0.8, -0.5, -0.5], dtype=torch.float64))
    assert clipped.tolist() == [True, True, False, False]
    loss.sum().backward()
    # d(-r*A)/dlogp = -r*A where unclipped, 0 where the clip is active
    torch.testing.assert_close(logp.grad, torch.tensor([0.0, 0.0, -0.5, -0.5], dtype=torch.float64))


def test_grpo_asymmetric_clip_higher():
    logp, old = _ratios_as_logprobs([1.25])
    adv = torch.tensor([1.0], dtype=torch.float64)
    symmetric, sym_clipped = grpo_token_loss(logp, old, adv, eps_low=0.2, eps_high=0.2)
    dapo, dapo_clipped = grpo_token_loss(logp, old, adv, eps_low=0.2, eps_high=0.28)
    assert symmetric.item() == pytest.approx(-1.2)
    assert sym_clipped.item()
    assert dapo.item() == pytest.approx(-1.25)
    assert not dapo_clipped.item()


def test_k3_kl_by_hand():
    # d = ref - logp = [ln 2, 0, -ln 2]: k3 = e^d - d - 1 = [1 - ln2, 0, ln2 - 0.5]
    logp = torch.tensor([-1.0, -2.0, -3.0], dtype=torch.float64)
    ref = logp + torch.tensor([LN2, 0.0, -LN2], dtype=torch.float64)
    expected = torch.tensor([1 - LN2, 0.0, LN2 - 0.5], dtype=torch.float64)
    torch.testing.assert_close(k3_kl(logp, ref), expected)


def test_cispo_keeps_gradient_of_clipped_tokens_with_detached_weight():
    # r=1.5, A=2, eps_high=0.2: w = 1.2, loss = -1.2 * 2 * ln(1.5), dloss/dlogp = -2.4
    # r=0.5, A=-1, eps_low=0.2: w = 0.8, loss = -0.8 * -1 * ln(0.5) = -0.8 ln 2, grad = +0.8
    # r=0.5, A=-1, eps_low=1e9 (lower bound off): w = 0.5, grad = +0.5
    logp, old = _ratios_as_logprobs([1.5, 0.5])
    adv = torch.tensor([2.0, -1.0], dtype=torch.float64)
    loss, clipped = cispo_token_loss(logp, old, adv, eps_low=0.2, eps_high=0.2)
    expected = torch.tensor([-2.4 * math.log(1.5), -0.8 * LN2], dtype=torch.float64)
    torch.testing.assert_close(loss, expected)
    assert clipped.tolist() == [True, True]
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([-2.4, 0.8], dtype=torch.float64))

    logp2, old2 = _ratios_as_logprobs([0.5])
    wide, wide_clipped = cispo_token_loss(logp2, old2, adv[1:], eps_low=1e9, eps_high=0.2)
    assert not wide_clipped.item()
    wide.sum().backward()
    assert logp2.grad.item() == pytest.approx(0.5)


def test_shape_mismatch_says_how_to_expand_advantages():
    with pytest.raises(ValueError, match=r"advantages\[seq_ids\]"):
        grpo_token_loss(
            torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), eps_low=0.2, eps_high=0.2
        )
    with pytest.raises(ValueError, match=r"advantages\[seq_ids\]"):
        cispo_token_loss(torch.zeros(3), torch.zeros(3), torch.zeros(2), eps_low=0.2, eps_high=0.2)
