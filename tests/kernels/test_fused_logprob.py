"""The chunked torch implementation against a float64 reference, and its input checks."""

from __future__ import annotations

import pytest
import torch

from arena_core.kernels import KernelInputError, fused_linear_logprob, naive_linear_logprob

from ._reference import assert_rel_close, reference

# (T, h, V, chunk): T not divisible by the chunk, V odd and prime, a chunk of 1, one chunk of all
SHAPES = [(37, 16, 101, 8), (5, 8, 7, 1), (64, 32, 257, 64), (33, 24, 1000, 16), (9, 16, 97, None)]


def _inputs(T, h, V, dtype, weight_grad, seed=0, lead=None):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(T, h, generator=g).to(dtype)
    weight = (torch.randn(V, h, generator=g) / h**0.25).to(dtype)
    targets = torch.randint(0, V, (T,), generator=g)
    g_lp, g_ent = torch.randn(T, generator=g), torch.randn(T, generator=g)
    if lead is not None:
        hidden, targets = hidden.reshape(*lead, h), targets.reshape(lead)
        g_lp, g_ent = g_lp.reshape(lead), g_ent.reshape(lead)
    return hidden.requires_grad_(), weight.requires_grad_(weight_grad), targets, g_lp, g_ent


def _run(hidden, weight, targets, g_lp, g_ent, entropy, **kwargs):
    hidden.grad = weight.grad = None
    out = fused_linear_logprob(hidden, weight, targets, return_entropy=entropy, **kwargs)
    logp, ent = out if entropy else (out, None)
    obj = (logp * g_lp).sum() + ((ent * g_ent).sum() if entropy else 0)
    obj.backward()
    return logp, ent


@pytest.mark.parametrize("T,h,V,chunk", SHAPES)
@pytest.mark.parametrize("weight_grad", [False, True])
@pytest.mark.parametrize("entropy", [False, True])
def test_fp32_matches_reference(T, h, V, chunk, weight_grad, entropy):
    hidden, weight, targets, g_lp, g_ent = _inputs(T, h, V, torch.float32, weight_grad)
    logp, ent = _run(hidden, weight, targets, g_lp, g_ent, entropy, chunk_size=chunk, impl="torch")
    ref = reference(hidden, weight, targets, g_lp, g_ent if entropy else None)
    assert logp.dtype == torch.float32
    assert_rel_close(logp, ref["logprobs"], 1e-5, "logprobs")
    assert_rel_close(hidden.grad, ref["grad_hidden"], 1e-5, "grad_hidden")
    if entropy:
        assert_rel_close(ent, ref["entropy"], 1e-5, "entropy")
    if weight_grad:
        assert_rel_close(weight.grad, ref["grad_weight"], 1e-5, "grad_weight")
    else:
        assert weight.grad is None


@pytest.mark.parametrize("temperature", [0.6, 1.7])
@pytest.mark.parametrize("weight_grad", [False, True])
def test_temperature_divides_the_logits(temperature, weight_grad):
    hidden, weight, targets, g_lp, g_ent = _inputs(23, 16, 131, torch.float32, weight_grad)
    logp, ent = _run(
        hidden, weight, targets, g_lp, g_ent, True, chunk_size=5, temperature=temperature
    )
    ref = reference(hidden, weight, targets, g_lp, g_ent, temperature=temperature)
    assert_rel_close(logp, ref["logprobs"], 1e-5, "logprobs")
    assert_rel_close(ent, ref["entropy"], 1e-5, "entropy")
    assert_rel_close(hidden.grad, ref["grad_hidden"], 1e-5, "grad_hidden")
    if weight_grad:
        assert_rel_close(weight.grad, ref["grad_weight"], 1e-5, "grad_weight")


@pytest.mark.parametrize("weight_grad", [False, True])
@pytest.mark.parametrize("entropy", [False, True])
def test_bf16_computes_in_fp32_and_matches_within_1e_2(weight_grad, entropy):
    hidden, weight, targets, g_lp, g_ent = _inputs(41, 32, 301, torch.bfloat16, weight_grad)
    logp, ent = _run(hidden, weight, targets, g_lp, g_ent, entropy, chunk_size=16)
    ref = reference(hidden, weight, targets, g_lp, g_ent if entropy else None)
    assert logp.dtype == torch.float32  # logprobs always fp32 (ratios need it)
    assert hidden.grad.dtype == torch.bfloat16
    assert_rel_close(logp, ref["logprobs"], 1e-2, "logprobs")
    assert_rel_close(hidden.grad, ref["grad_hidden"], 1e-2, "grad_hidden")
    if entropy:
        assert_rel_close(ent, ref["entropy"], 1e-2, "entropy")
    if weight_grad:
        assert weight.grad.dtype == torch.bfloat16
        assert_rel_close(weight.grad, ref["grad_weight"], 1e-2, "grad_weight")


def test_padded_leading_dims_are_kept():
    hidden, weight, targets, g_lp, g_ent = _inputs(12, 8, 50, torch.float32, True, lead=(3, 4))
    logp, ent = _run(hidden, weight, targets, g_lp, g_ent, True, chunk_size=5)
    assert logp.shape == ent.shape == (3, 4)
    ref = reference(hidden, weight, targets, g_lp, g_ent)
    assert_rel_close(logp, ref["logprobs"], 1e-5, "logprobs")
    assert_rel_close(weight.grad, ref["grad_weight"], 1e-5, "grad_weight")


def test_unused_entropy_output_does_not_break_backward():
    hidden, weight, targets, *_ = _inputs(10, 8, 30, torch.float32, True)
    logp, _ent = fused_linear_logprob(hidden, weight, targets, return_entropy=True, chunk_size=3)
    logp.sum().backward()
    ref = reference(hidden, weight, targets, torch.ones(10), None)
    assert_rel_close(weight.grad, ref["grad_weight"], 1e-5, "grad_weight")


def test_no_grad_forward_matches_and_saves_nothing_to_backprop():
    hidden, weight, targets, *_ = _inputs(10, 8, 30, torch.float32, True)
    with torch.no_grad():
        logp = fused_linear_logprob(hidden, weight, targets, chunk_size=4)
    assert not logp.requires_grad
    assert_rel_close(logp, naive_linear_logprob(hidden, weight, targets).detach(), 1e-5, "lp")


def test_an_unknown_impl_names_the_choices():
    hidden, weight, targets, *_ = _inputs(10, 8, 30, torch.float32, True)
    with pytest.raises(KernelInputError, match="auto.*torch.*triton"):
        fused_linear_logprob(hidden, weight, targets, impl="naive")


def test_empty_batch_returns_empty():
    hidden, weight, _, *_ = _inputs(4, 8, 30, torch.float32, True)
    out = fused_linear_logprob(hidden[:0], weight, torch.zeros(0, dtype=torch.long))
    assert out.shape == (0,)


def test_auto_picks_torch_on_cpu_and_triton_needs_cuda(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    hidden, weight, targets, *_ = _inputs(6, 8, 30, torch.float32, False)
    auto = fused_linear_logprob(hidden, weight, targets, impl="auto")
    torch_out = fused_linear_logprob(hidden, weight, targets, impl="torch")
    assert torch.equal(auto, torch_out)
    with pytest.raises(KernelInputError, match="impl='torch'"):
        fused_linear_logprob(hidden, weight, targets, impl="triton")


@pytest.mark.parametrize(
    "case,match",
    [
        ("weight_1d", r"LM head \[V, h\]"),
        ("hidden_size", r"hidden \(6, 9\) must end in .* h=8"),
        ("targets_shape", r"targets \(5,\) must match hidden's leading dims \(6,\)"),
        ("target_range", r"V=30"),
        ("dtype_mix", "cast one"),
        ("float_targets", "int64"),
        ("temperature", "temperature"),
        ("impl", "impl must be one of"),
    ],
)
def test_bad_inputs_name_shapes_and_fix(case, match):
    hidden, weight, targets, *_ = _inputs(6, 8, 30, torch.float32, False)
    kwargs = {}
    if case == "weight_1d":
        weight = weight[0]
    elif case == "hidden_size":
        hidden = torch.randn(6, 9)
    elif case == "targets_shape":
        targets = targets[:5]
    elif case == "target_range":
        targets = targets.clone()
        targets[0] = 30
    elif case == "dtype_mix":
        hidden = hidden.double()
    elif case == "float_targets":
        targets = targets.float()
    elif case == "temperature":
        kwargs["temperature"] = 0.0
    elif case == "impl":
        kwargs["impl"] = "cuda"
    with pytest.raises(KernelInputError, match=match):
        fused_linear_logprob(hidden, weight, targets, **kwargs)


def _count_calls(monkeypatch, name):
    from arena_core.kernels import fused_logprob

    calls = []
    real = getattr(fused_logprob, name)
    monkeypatch.setattr(fused_logprob, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_frozen_weight_does_no_weight_gradient_work(monkeypatch):
    weight_grad_calls = _count_calls(monkeypatch, "accumulate_weight_grad")
    hidden, weight, targets, g_lp, g_ent = _inputs(20, 8, 30, torch.float32, False)
    _run(hidden, weight, targets, g_lp, g_ent, True, chunk_size=6)
    assert weight_grad_calls == []
    hidden, weight, targets, g_lp, g_ent = _inputs(20, 8, 30, torch.float32, True)
    _run(hidden, weight, targets, g_lp, g_ent, True, chunk_size=6)
    assert len(weight_grad_calls) == 4  # one per chunk: ceil(20 / 6)


def test_no_grad_mode_skips_the_gradient_rows(monkeypatch):
    grad_gemm_calls = _count_calls(monkeypatch, "rows_times_weight")
    hidden, weight, targets, *_ = _inputs(20, 8, 30, torch.float32, False)
    with torch.no_grad():
        fused_linear_logprob(hidden, weight, targets, chunk_size=6, return_entropy=True)
    assert grad_gemm_calls == []
    fused_linear_logprob(hidden, weight, targets, chunk_size=6)  # frozen: rows formed in forward
    assert len(grad_gemm_calls) == 4


def test_unchecked_call_gives_the_same_logprobs_and_checked_one_still_names_the_fix():
    hidden, weight, targets, *_ = _inputs(20, 8, 30, torch.float32, True)
    checked = fused_linear_logprob(hidden, weight, targets, chunk_size=6)
    unchecked = fused_linear_logprob(hidden, weight, targets, chunk_size=6, check=False)
    torch.testing.assert_close(unchecked, checked, rtol=0, atol=0)
    with pytest.raises(KernelInputError, match="vocabulary has V=30"):
        fused_linear_logprob(hidden, weight, targets + 30, chunk_size=6)
