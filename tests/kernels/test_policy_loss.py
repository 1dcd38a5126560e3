"""GRPO/CISPO token losses and aggregation against numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from arena_core.kernels import (
    KernelInputError,
    aggregate_loss,
    cispo_token_loss,
    grpo_token_loss,
    k3_kl,
    token_weights,
)

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
    out = grpo_token_loss(logp, old, adv, eps_low=0.2, eps_high=0.2)
    torch.testing.assert_close(out.loss, torch.tensor([-2.4, 0.8, -0.5, -0.5], dtype=torch.float64))
    assert out.clipped.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert out.kl is None
    out.loss.sum().backward()
    # d(-r*A)/dlogp = -r*A where unclipped, 0 where the clip is active
    torch.testing.assert_close(logp.grad, torch.tensor([0.0, 0.0, -0.5, -0.5], dtype=torch.float64))


def test_grpo_asymmetric_clip_higher():
    logp, old = _ratios_as_logprobs([1.25])
    adv = torch.tensor([1.0], dtype=torch.float64)
    symmetric = grpo_token_loss(logp, old, adv, eps_low=0.2, eps_high=0.2)
    dapo = grpo_token_loss(logp, old, adv, eps_low=0.2, eps_high=0.28)
    assert symmetric.loss.item() == pytest.approx(-1.2)
    assert symmetric.clipped.item() == 1.0
    assert dapo.loss.item() == pytest.approx(-1.25)
    assert dapo.clipped.item() == 0.0


def test_grpo_k3_kl_penalty():
    # d = ref - logp = [ln 2, 0, -ln 2]: k3 = e^d - d - 1 = [1 - ln2, 0, ln2 - 0.5]
    logp = torch.tensor([-1.0, -2.0, -3.0], dtype=torch.float64)
    ref = logp + torch.tensor([LN2, 0.0, -LN2], dtype=torch.float64)
    expected_kl = torch.tensor([1 - LN2, 0.0, LN2 - 0.5], dtype=torch.float64)
    torch.testing.assert_close(k3_kl(logp, ref), expected_kl)
    adv = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    out = grpo_token_loss(logp, logp.clone(), adv, 0.2, 0.2, ref_logprobs=ref, beta=0.1)
    torch.testing.assert_close(out.kl, expected_kl)
    torch.testing.assert_close(out.loss, -1.0 + 0.1 * expected_kl)  # r = 1: -A + beta*k3


def test_grpo_beta_without_reference_is_an_error():
    logp = torch.zeros(2)
    with pytest.raises(KernelInputError, match="ref_logprobs"):
        grpo_token_loss(logp, logp, logp, 0.2, 0.2, beta=0.1)


def test_cispo_keeps_gradient_of_clipped_tokens_with_detached_weight():
    # r=1.5, A=2, eps_high=0.2: w = 1.2, loss = -1.2 * 2 * ln(1.5), dloss/dlogp = -2.4
    # r=0.5, A=-1, eps_low=0.2: w = 0.8, loss = -0.8 * -1 * ln(0.5) = -0.8 ln 2, grad = +0.8
    # r=0.5, A=-1, eps_low=1e9 (lower bound off): w = 0.5, grad = +0.5
    logp, old = _ratios_as_logprobs([1.5, 0.5])
    adv = torch.tensor([2.0, -1.0], dtype=torch.float64)
    out = cispo_token_loss(logp, old, adv, eps_low=0.2, eps_high=0.2)
    expected = torch.tensor([-2.4 * math.log(1.5), -0.8 * LN2], dtype=torch.float64)
    torch.testing.assert_close(out.loss, expected)
    assert out.clipped.tolist() == [1.0, 1.0]
    out.loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([-2.4, 0.8], dtype=torch.float64))

    logp2, old2 = _ratios_as_logprobs([0.5])
    wide = cispo_token_loss(logp2, old2, adv[1:], eps_low=1e9, eps_high=0.2)
    assert wide.clipped.item() == 0.0
    wide.loss.sum().backward()
    assert logp2.grad.item() == pytest.approx(0.5)


def test_shape_mismatch_says_how_to_expand_advantages():
    with pytest.raises(KernelInputError, match=r"advantages\[seq_ids\]"):
        grpo_token_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), 0.2, 0.2)
    with pytest.raises(KernelInputError, match="clip ranges"):
        cispo_token_loss(torch.zeros(2), torch.zeros(2), torch.zeros(2), -0.1, 0.2)


# padded: row 0 has tokens 1, 2, 3 (then padding), row 1 has token 4; padding holds nan/inf
PADDED = torch.tensor([[1.0, 2.0, 3.0, float("nan")], [4.0, float("inf"), 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),  # 2.5
        ("seq-mean-token-mean", (6 / 3 + 4 / 1) / 2),  # 3.0
        ("seq-mean-token-sum-norm", (6 / 4 + 4 / 4) / 2),  # 1.25 with max_len 4
    ],
)
def test_aggregate_padded(mode, expected):
    got = aggregate_loss(PADDED, MASK, mode, max_len=4)
    assert got.item() == pytest.approx(expected)


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("token-mean", 15 / 5),
        ("seq-mean-token-mean", (3 / 2 + 12 / 3) / 2),  # 2.75
        ("seq-mean-token-sum-norm", (3 / 4 + 12 / 4) / 2),  # 1.875
    ],
)
def test_aggregate_packed_with_seq_ids(mode, expected):
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    seq_ids = torch.tensor([0, 0, 1, 1, 1])
    got = aggregate_loss(values, None, mode, seq_ids=seq_ids, max_len=4)
    assert got.item() == pytest.approx(expected)


def test_packed_and_padded_agree_and_empty_sequences_do_not_count():
    packed = torch.tensor([1.0, 2.0, 3.0, 4.0])
    seq_ids = torch.tensor([0, 0, 0, 2])  # sequence 1 has no token
    mask = torch.ones(4)
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        a = aggregate_loss(packed, mask, mode, seq_ids=seq_ids, max_len=4)
        b = aggregate_loss(PADDED, MASK, mode, max_len=4)
        assert a.item() == pytest.approx(b.item()), mode


def test_token_weights_sum_to_one_for_means():
    w = token_weights(MASK, "seq-mean-token-mean")
    assert w.sum().item() == pytest.approx(1.0)
    assert w[0, 3].item() == 0.0


def test_aggregate_errors_say_the_fix():
    with pytest.raises(KernelInputError, match="max_len"):
        aggregate_loss(PADDED, MASK, "seq-mean-token-sum-norm")
    with pytest.raises(KernelInputError, match="token-mean"):
        aggregate_loss(PADDED, MASK, "mean")
    with pytest.raises(KernelInputError, match="seq_ids"):
        aggregate_loss(torch.ones(4), torch.ones(4), "seq-mean-token-mean")
