"""Triton kernels on CPU under TRITON_INTERPRET=1 (run by test_triton_interpret.py in a child).

Not collected by the main run (no test_ prefix): the interpreter must be switched on before triton
is imported, which a shared pytest process cannot guarantee. Shapes stay tiny (~1000x slower).
"""

from __future__ import annotations

import os

import pytest
import torch

from arena_core.kernels import fused_linear_logprob, naive_linear_logprob
from arena_core.kernels.fused_logprob import TorchRowOps

from ._reference import assert_rel_close, reference

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 before triton is imported", allow_module_level=True)
triton_row_ops = pytest.importorskip("arena_core.kernels.triton_row_ops")  # imports triton
TritonRowOps = triton_row_ops.TritonRowOps

T, H, V = 7, 16, 100


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 32 over V=100: four blocks, the last partial, so the online rescaling runs."""
    monkeypatch.setattr(triton_row_ops, "MAX_BLOCK_V", 32)


def _logits(seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(T, V, generator=g) * 3
    z[1, 90] += 40.0  # the row max sits in the last, partial block
    z[2, 3] += 40.0  # ... or in the first
    targets = torch.randint(0, V, (T,), generator=g)
    targets[1] = 90
    return z, targets


@pytest.mark.parametrize("with_entropy", [False, True])
def test_stats_match_torch(with_entropy):
    z, targets = _logits()
    z_t, z_r = z.clone(), z.clone()
    got = TritonRowOps().stats(z_t, targets, with_entropy, torch.empty_like(z))
    want = TorchRowOps().stats(z_r, targets, with_entropy, torch.empty_like(z))
    for a, b, what in zip(got, want, ("lse", "target_logit", "entropy"), strict=True):
        if b is None:
            assert a is None
        else:
            assert_rel_close(a, b, 1e-5, what)
    assert_rel_close(z_t, z_r, 1e-5, "logp written back")


@pytest.mark.parametrize("with_entropy", [False, True])
@pytest.mark.parametrize("in_place", [False, True])
def test_softmax_grad_matches_torch(with_entropy, in_place):
    z, targets = _logits(1)
    logp = torch.log_softmax(z, -1)
    ent = -(logp.exp() * logp).sum(-1)
    g = torch.randn(T, generator=torch.Generator().manual_seed(2))
    g_h = -g if with_entropy else None
    want = torch.empty_like(z)
    TorchRowOps().softmax_grad(logp.clone(), want, targets, ent, g, g_h, torch.empty_like(z))
    src = logp.clone()
    out = src if in_place else torch.empty_like(z)
    TritonRowOps().softmax_grad(src, out, targets, ent, g, g_h, torch.empty_like(z))
    assert_rel_close(out, want, 1e-5, "grad_logits")


@pytest.mark.parametrize(
    "weight_grad,entropy,dtype,rel",
    [(w, e, torch.float32, 1e-5) for w in (False, True) for e in (False, True)]
    + [(True, True, torch.bfloat16, 1e-2)],
)
def test_fused_logprob_triton_matches_reference(weight_grad, entropy, dtype, rel):
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(T, H, generator=g).to(dtype).requires_grad_()
    weight = (torch.randn(V, H, generator=g) / 2).to(dtype).requires_grad_(weight_grad)
    targets = torch.randint(0, V, (T,), generator=g)
    g_lp, g_ent = torch.randn(T, generator=g), torch.randn(T, generator=g)
    out = fused_linear_logprob(
        hidden,
        weight,
        targets,
        temperature=0.8,
        chunk_size=4,
        return_entropy=entropy,
        impl="triton",
    )
    logp, ent = out if entropy else (out, None)
    ((logp * g_lp).sum() + ((ent * g_ent).sum() if entropy else 0)).backward()
    ref = reference(hidden, weight, targets, g_lp, g_ent if entropy else None, temperature=0.8)
    assert_rel_close(logp, ref["logprobs"], rel, "logprobs")
    assert_rel_close(hidden.grad, ref["grad_hidden"], rel, "grad_hidden")
    if entropy:
        assert_rel_close(ent, ref["entropy"], rel, "entropy")
    if weight_grad:
        assert_rel_close(weight.grad, ref["grad_weight"], rel, "grad_weight")


@pytest.mark.parametrize("weight_grad", [False, True])
def test_filtered_logprob_triton_matches_naive(weight_grad):
    """top-k/top-p: -inf logits outside the kept set go through the Triton row ops unharmed."""

    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(T, H, generator=g).requires_grad_()
    weight = (torch.randn(V, H, generator=g) / 2).requires_grad_(weight_grad)
    targets = torch.randint(0, V, (T,), generator=g)
    grads = []
    kw = {"temperature": 0.8, "top_k": 20, "top_p": 0.8}
    for run in (
        lambda: fused_linear_logprob(hidden, weight, targets, chunk_size=8, impl="triton", **kw),
        lambda: naive_linear_logprob(hidden, weight, targets, **kw),
    ):
        hidden.grad = weight.grad = None
        out = run()
        out.sum().backward()
        grads.append((out.detach(), hidden.grad.clone(), weight.grad if weight_grad else None))
    (lp_t, gh_t, gw_t), (lp_n, gh_n, gw_n) = grads
    assert torch.isfinite(lp_t).all()
    assert_rel_close(lp_t, lp_n, 1e-5, "logprobs")
    assert_rel_close(gh_t, gh_n, 1e-5, "grad_hidden")
    if weight_grad:
        assert_rel_close(gw_t, gw_n, 1e-5, "grad_weight")
