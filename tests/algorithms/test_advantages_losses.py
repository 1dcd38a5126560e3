"""Advantages and per-token losses against hand-computed references."""

from __future__ import annotations

import math

import pytest
import torch

from arena_algorithms.cispo import CISPO
from arena_algorithms.grpo import GRPO
from arena_core.learn.algorithm import TokenBatch
from arena_core.learn.learner import Correction
from arena_core.learn.losses import aggregate, k3_kl, token_weights


def test_grpo_std_advantages_by_hand() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    adv = GRPO({"scale_rewards": "group", "adv_eps": 1e-4}).advantages(rewards)
    s = math.sqrt(1 / 3)  # sample std of {1,0,0,1}: sqrt(4 * 0.25 / 3)
    expect = 0.5 / (s + 1e-4)
    assert adv[0].tolist() == pytest.approx([expect, -expect, -expect, expect], rel=1e-6)
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # no signal: the collector drops this group


def test_dr_grpo_advantages_are_centred_only() -> None:
    rewards = torch.tensor([[2.0, 0.0, 1.0, 1.0]])
    adv = GRPO({"scale_rewards": "none"}).advantages(rewards)
    assert adv[0].tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0])


def _batch(logp, old, adv, behaviour=None, ref=None, isw=None) -> TokenBatch:
    logp = torch.tensor(logp, requires_grad=True)
    old = torch.tensor(old)
    return TokenBatch(
        logp=logp,
        old_logp=old,
        behaviour_logp=torch.tensor(behaviour) if behaviour else old.clone(),
        is_weight=torch.tensor(isw) if isw else torch.ones_like(old),
        advantages=torch.tensor(adv),
        ref_logp=torch.tensor(ref) if ref else None,
    )


def test_grpo_clipped_surrogate_by_hand() -> None:
    algo = GRPO({"eps_low": 0.2, "eps_high": 0.2, "beta": 0.0})
    # token 0: ratio e^0.2 = 1.221 > 1.2 with A=1 -> clipped to 1.2, no gradient
    # token 1: ratio 1, A=-1 -> loss +1, gradient d/dlogp = -A * ratio = 1
    # token 2: ratio e^-0.3 = 0.741 < 0.8 with A=-1 -> clipped: loss 0.8, no gradient
    b = _batch([-1.0, -0.5, -1.3], [-1.2, -0.5, -1.0], [1.0, -1.0, -1.0])
    loss, stats = algo.token_loss(b)
    assert loss.tolist() == pytest.approx([-1.2, 1.0, 0.8], rel=1e-5)
    assert stats["clip_frac"].tolist() == [1.0, 0.0, 1.0]
    loss.sum().backward()
    assert b.logp.grad.tolist() == pytest.approx([0.0, 1.0, 0.0], abs=1e-6)


def test_grpo_is_weight_and_kl_by_hand() -> None:
    algo = GRPO({"beta": 0.1})
    b = _batch([-1.0], [-1.0], [2.0], ref=[-2.0], isw=[0.5])
    loss, stats = algo.token_loss(b)
    kl = math.exp(-1.0) + 1.0 - 1.0  # k3 with ref - logp = -1
    assert stats["kl"].item() == pytest.approx(kl, rel=1e-6)
    assert loss.item() == pytest.approx(-2.0 * 0.5 + 0.1 * kl, rel=1e-6)


def test_cispo_loss_keeps_gradient_of_clipped_tokens() -> None:
    algo = CISPO({"eps_low": 1.0, "eps_high": 0.2})
    # ratio to the behaviour policy e^0.5 = 1.649 -> weight clipped to 1.2, detached
    b = _batch([-1.0, -2.0], [-1.0, -2.0], [2.0, -1.0], behaviour=[-1.5, -2.0])
    loss, stats = algo.token_loss(b)
    assert loss.tolist() == pytest.approx([-1.2 * 2.0 * -1.0, -1.0 * -1.0 * -2.0], rel=1e-6)
    assert stats["clip_frac"].tolist() == [1.0, 0.0]
    loss.sum().backward()
    assert b.logp.grad.tolist() == pytest.approx([-2.4, 1.0], rel=1e-6)  # -w * A, never zero


def test_cispo_lower_bound_off_by_default() -> None:
    algo = CISPO()
    b = _batch([-3.0], [-3.0], [1.0], behaviour=[-1.0])  # ratio e^-2 = 0.135: not clipped
    loss, stats = algo.token_loss(b)
    assert loss.item() == pytest.approx(-math.exp(-2.0) * 1.0 * -3.0, rel=1e-6)
    assert stats["clip_frac"].item() == 0.0


@pytest.mark.parametrize(
    ("mode", "expect"),
    [
        ("token-mean", 15 / 5),
        ("seq-mean-token-mean", (6 / 3 + 9 / 2) / 2),
        ("seq-mean-token-sum-norm", (6 / 4 + 9 / 4) / 2),
    ],
)
def test_aggregation_modes_by_hand(mode: str, expect: float) -> None:
    per_token = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    assert aggregate(per_token, [3, 2], mode, norm_len=4).item() == pytest.approx(expect)


def test_token_weights_skip_empty_sequences_and_reject_unknown_modes() -> None:
    w = token_weights([2, 0, 1], "seq-mean-token-mean")
    assert w.tolist() == pytest.approx([0.25, 0.25, 0.5])
    with pytest.raises(ValueError, match="token-mean"):
        token_weights([1], "mean")
    with pytest.raises(ValueError, match="norm_len"):
        token_weights([1], "seq-mean-token-sum-norm")


def test_token_tis_weight_and_k3() -> None:
    tis = Correction(mode="token_tis", tis_cap=2.0)
    w = tis.weight(torch.tensor([0.0, 0.0]), torch.tensor([-2.0, 0.5]), None)
    assert w.tolist() == pytest.approx([2.0, math.exp(-0.5)])
    off = Correction(mode="token_tis", tis_cap=None)
    assert off.weight(torch.tensor([0.0]), torch.tensor([-5.0]), None).item() == 1.0
    assert k3_kl(torch.tensor([-1.0]), torch.tensor([-1.0])).item() == 0.0
