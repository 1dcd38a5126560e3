"""The fused glue of a bf16 CPU decode step (rollout/decode_glue.py, csrc/decode_glue.c): the
residual add + RMSNorm + bf16 cast and SwiGLU's silu(gate) * up give torch's values (the same
fp32 math on the same bf16 inputs; only the norm's sum order differs, so at most one bf16 step
where a value sits on a rounding boundary); what they do not take answers None."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from arena_core.rollout import decode_glue

if shutil.which("cc") is None and shutil.which("gcc") is None:
    pytest.skip(
        "no C compiler on this machine: the kernels cannot be built", allow_module_level=True
    )


def _within_a_bf16_step(got: torch.Tensor, want: torch.Tensor) -> None:
    """At most one bf16 rounding step apart (2^-7 relative), tiny values aside."""
    torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=1e-30)


@pytest.mark.parametrize("with_delta", [False, True])
def test_add_rms_norm_is_torchs(with_delta) -> None:
    g = torch.Generator().manual_seed(0)
    h = torch.randn(7, 576, generator=g) * 3
    delta = (torch.randn(7, 576, generator=g) * 2).bfloat16() if with_delta else None
    weight = 1 + torch.randn(576, generator=g) * 0.1
    want_h = h + delta.float() if with_delta else h.clone()
    want = F.rms_norm(want_h, (576,), weight, 1e-5).bfloat16()
    got = decode_glue.add_rms_norm(h, delta, weight, 1e-5)
    assert got is not None and got.dtype == torch.bfloat16
    torch.testing.assert_close(h, want_h)  # the residual stream, updated in place
    _within_a_bf16_step(got, want)
    assert (got == want).float().mean() > 0.99


def test_silu_mul_is_torchs() -> None:
    g = torch.Generator().manual_seed(1)
    gate_up = (torch.randn(5, 2 * 1536, generator=g) * 4).bfloat16()
    gate_up[0, :4] = torch.tensor([-100.0, 100.0, 0.0, -0.0])  # both saturations, zero
    want = (F.silu(gate_up[:, :1536].float()) * gate_up[:, 1536:].float()).bfloat16()
    got = decode_glue.silu_mul(gate_up)
    assert got is not None and torch.isfinite(got.float()).all()
    _within_a_bf16_step(got, want)


def test_what_the_glue_does_not_take_answers_none() -> None:
    assert decode_glue.runs(576, 1536) and not decode_glue.runs(576, 1000)
    h = torch.randn(2, 24)  # a width that is not a multiple of 16
    assert decode_glue.add_rms_norm(h, None, torch.ones(24), 1e-5) is None
    assert decode_glue.silu_mul(torch.randn(2, 48).bfloat16()) is None
    assert decode_glue.add_rms_norm(torch.randn(2, 32).double(), None, torch.ones(32), 1e-5) is None
