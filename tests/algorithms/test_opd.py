"""On-policy distillation's loss against a hand-written reference on a fixed batch."""

from __future__ import annotations

import math

import pytest
import torch

from arena_algorithms.grpo import GRPO
from arena_algorithms.opd import OPD
from arena_core.errors import ConfigError
from arena_core.learn.algorithm import TokenBatch


def _batch(logp, old, teacher, adv, isw=None) -> TokenBatch:
    old_t = torch.tensor(old)
    return TokenBatch(
        logp=torch.tensor(logp, requires_grad=True),
        old_logp=old_t,
        behaviour_logp=old_t.clone(),
        is_weight=torch.tensor(isw) if isw else torch.ones_like(old_t),
        advantages=torch.tensor(adv),
        teacher_logp=torch.tensor(teacher) if teacher is not None else None,
    )


def _reference(logp, old, teacher, adv, kl_coef, eps=0.2, isw=None):
    """The formula of the module docstring, written out token by token (no torch kernels)."""
    losses, grads = [], []
    for i, (lp, o, t, a) in enumerate(zip(logp, old, teacher, adv, strict=True)):
        w = isw[i] if isw else 1.0
        adv_t = a - kl_coef * (o - t)  # reward advantage minus the stopped reverse KL
        r = math.exp(lp - o)
        unclipped, clipped = r * adv_t, min(max(r, 1 - eps), 1 + eps) * adv_t
        losses.append(-min(unclipped, clipped) * w)
        # d/dlogp of -r*A is -r*A; the clipped branch is constant in logp
        grads.append(-r * adv_t * w if unclipped <= clipped else 0.0)
    return losses, grads


def test_pure_distillation_loss_and_gradient_by_hand() -> None:
    algo = OPD({"teacher": "arena:tiny", "kl_coef": 0.5})
    logp = [-1.0, -2.0, -0.5, -0.7]
    old = [-1.0, -2.0, -0.5, -1.0]  # token 3: ratio e^0.3 > 1.2 with A > 0 (a second pass)
    teacher = [-1.5, -1.0, -0.5, -0.2]
    adv = [0.0, 0.0, 0.0, 0.0]  # reward_coef = 0: the collector hands zero reward advantages
    b = _batch(logp, old, teacher, adv)
    loss, stats = algo.token_loss(b)
    want_loss, want_grad = _reference(logp, old, teacher, adv, kl_coef=0.5)
    # tokens 0-2 at ratio 1: loss = kl_coef * (old - teacher) = [0.25, -0.5, 0]
    assert loss.tolist() == pytest.approx(want_loss, rel=1e-6)
    assert loss[:3].tolist() == pytest.approx([0.25, -0.5, 0.0])
    # the reverse KL the learner logs is the per-token log ratio student/teacher
    assert stats["opd/reverse_kl"].tolist() == pytest.approx([0.5, -1.0, 0.0, -0.8])
    loss.sum().backward()
    # a token the teacher finds likelier than the student (token 1) is pushed up (negative
    # gradient of the loss); token 0 is pushed down; token 3's ratio is clipped: no gradient
    assert b.logp.grad.tolist() == pytest.approx(want_grad, abs=1e-6)
    assert b.logp.grad[3] == 0.0 and stats["clip_frac"].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_reward_term_and_importance_weight_compose_by_hand() -> None:
    algo = OPD({"teacher": "arena:tiny", "kl_coef": 2.0, "reward_coef": 1.0})
    logp, old, teacher, adv, isw = [-1.0, -0.2], [-1.0, -0.2], [-0.5, -0.2], [1.0, -1.0], [0.5, 1]
    b = _batch(logp, old, teacher, adv, isw=isw)
    loss, _ = algo.token_loss(b)
    want_loss, want_grad = _reference(logp, old, teacher, adv, kl_coef=2.0, isw=isw)
    # token 0: A = 1 - 2 * (-0.5) = 2, weighted 0.5 -> loss -1; token 1: A = -1 -> loss +1
    assert loss.tolist() == pytest.approx([-1.0, 1.0]) == want_loss
    loss.sum().backward()
    assert b.logp.grad.tolist() == pytest.approx(want_grad)


def test_advantages_pure_distillation_ignores_the_reward() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    pure = OPD({"teacher": "t"}).advantages(rewards)
    assert pure.tolist() == [[0.0, 0.0, 0.0, 0.0]]
    mixed = OPD({"teacher": "t", "reward_coef": 0.5}).advantages(rewards)
    assert mixed[0].tolist() == pytest.approx((0.5 * GRPO({}).advantages(rewards))[0].tolist())
    assert OPD.keeps_flat_groups and not getattr(GRPO, "keeps_flat_groups", False)


def test_a_missing_teacher_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"algo\.teacher=RUN:best"):
        OPD({})
    b = _batch([-1.0], [-1.0], None, [0.0])
    with pytest.raises(ValueError, match="no teacher logprobs"):
        OPD({"teacher": "t"}).token_loss(b)
