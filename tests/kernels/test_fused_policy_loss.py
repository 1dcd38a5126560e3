"""fused_policy_loss: one pass (gradients in the forward) == two passes == naive."""

from __future__ import annotations

import pytest
import torch

from arena_core.kernels import KernelInputError, fused_policy_loss

from ._reference import assert_rel_close


def _batch(weight_grad, packed, seed=0, B=3, L=6, h=16, V=97):
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(B, L, h, generator=g) * 0.5).requires_grad_()
    weight = torch.randn(V, h, generator=g).requires_grad_(weight_grad)
    targets = torch.randint(0, V, (B, L), generator=g)
    old = -torch.rand(B, L, generator=g) * 5 - 2
    ref = -torch.rand(B, L, generator=g) * 5 - 2
    adv = torch.randn(B, 1, generator=g).expand(B, L).contiguous()
    mask = torch.rand(B, L, generator=g) > 0.25
    extra = {"mask": mask}
    if packed:  # drop the padding: 1-D tokens with their sequence index
        keep = mask.reshape(-1)
        seq = torch.arange(B)[:, None].expand(B, L).reshape(-1)[keep]
        hidden = hidden.detach().reshape(B * L, h)[keep].requires_grad_()
        targets, old, ref, adv = (x.reshape(-1)[keep] for x in (targets, old, ref, adv))
        extra = {"seq_ids": seq}
    return hidden, weight, targets, old, adv, ref, extra


def _loss_and_grads(hidden, weight, targets, old, adv, ref, extra, **kwargs):
    hidden.grad = weight.grad = None
    out = fused_policy_loss(hidden, weight, targets, old, adv, ref_logprobs=ref, **extra, **kwargs)
    out.loss.backward()
    grad_w = weight.grad.clone() if weight.requires_grad else None
    return out, hidden.grad.clone(), grad_w


@pytest.mark.parametrize("algo", ["grpo", "cispo"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("weight_grad", [False, True])
@pytest.mark.parametrize("packed", [False, True])
def test_one_pass_matches_two_pass_and_naive(algo, mode, weight_grad, packed):
    batch = _batch(weight_grad, packed)
    kwargs = dict(
        algo=algo,
        mode=mode,
        max_len=6,
        eps_low=0.2,
        eps_high=0.28,
        beta=0.05 if algo == "grpo" else 0.0,
        entropy_coef=0.01,
        temperature=0.9,
        chunk_size=5,
    )
    naive, gh_naive, gw_naive = _loss_and_grads(*batch, impl="naive", **kwargs)
    for one_pass in (True, False):
        out, gh, gw = _loss_and_grads(*batch, impl="torch", one_pass=one_pass, **kwargs)
        assert out.loss.item() == pytest.approx(naive.loss.item(), rel=1e-5, abs=1e-6)
        assert_rel_close(out.logprobs, naive.logprobs.detach(), 1e-5, "logprobs")
        assert_rel_close(gh, gh_naive, 1e-5, f"grad_hidden one_pass={one_pass}")
        if weight_grad:
            assert_rel_close(gw, gw_naive, 1e-5, f"grad_weight one_pass={one_pass}")
        assert out.clip_fraction.item() == pytest.approx(naive.clip_fraction.item())
        if algo == "grpo":
            assert out.kl.item() == pytest.approx(naive.kl.item(), rel=1e-5)


def test_upstream_gradient_scales_the_one_pass_gradients():
    hidden, weight, targets, old, adv, ref, extra = _batch(True, packed=True)
    out = fused_policy_loss(hidden, weight, targets, old, adv, **extra, chunk_size=4)
    (3.0 * out.loss).backward()
    gh3, gw3 = hidden.grad.clone(), weight.grad.clone()
    _, gh1, gw1 = _loss_and_grads(hidden, weight, targets, old, adv, None, extra, chunk_size=4)
    assert_rel_close(gh3, 3.0 * gh1, 1e-6, "grad_hidden")
    assert_rel_close(gw3, 3.0 * gw1, 1e-6, "grad_weight")


def test_second_backward_through_one_pass_says_what_to_do():
    hidden, weight, targets, old, adv, _, extra = _batch(False, packed=True)
    out = fused_policy_loss(hidden, weight, targets, old, adv, **extra)
    out.loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="one_pass=False"):
        out.loss.backward()


def test_without_grad_no_gradient_work_and_same_loss():
    hidden, weight, targets, old, adv, _, extra = _batch(True, packed=False)
    with torch.no_grad():
        out = fused_policy_loss(hidden, weight, targets, old, adv, **extra, return_entropy=True)
    ref = fused_policy_loss(hidden, weight, targets, old, adv, **extra, impl="naive")
    assert not out.loss.requires_grad
    assert out.entropy is not None and out.entropy.shape == targets.shape
    assert out.loss.item() == pytest.approx(ref.loss.item(), rel=1e-5)


def test_unknown_algo_is_rejected():
    hidden, weight, targets, old, adv, _, extra = _batch(False, packed=True)
    with pytest.raises(KernelInputError, match="'grpo' or 'cispo'"):
        fused_policy_loss(hidden, weight, targets, old, adv, algo="ppo", **extra)
