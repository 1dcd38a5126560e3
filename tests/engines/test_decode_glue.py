"""The fused glue of a bf16 CPU decode step (engines/decode_glue.py, csrc/decode_glue.c): the
residual add + RMSNorm + bf16 cast and SwiGLU's silu(gate) * up give torch's values (the same
fp32 math on the same bf16 inputs; only the norm's sum order differs, so at most one bf16 step
where a value sits on a rounding boundary); the fused rotary gives torch's bits, in a whole
decode too; what they do not take answers None."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from arena_core.engines import decode_glue
from arena_core.engines.base import SamplingParams
from arena_core.engines.llama_decode import _rotate_half
from arena_core.engines.torch_backend import TorchBackend
from tests.models import real_arch

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


def _torch_rope(qkv, cos, sin, heads, kv, scale):
    """The decode step's torch ops (llama_decode's module-free path) for the same product."""
    rows, dim = qkv.shape[0], cos.shape[-1]
    x = qkv.float()
    qk = x[:, : (heads + kv) * dim].view(rows, 1, heads + kv, dim)
    c, s = cos[:, None, None, :], sin[:, None, None, :]
    qk = qk * c + _rotate_half(qk) * s
    q = (qk[:, :, :heads] * scale).transpose(1, 2)
    k = qk[:, :, heads:].transpose(1, 2).bfloat16()
    v = x[:, (heads + kv) * dim :].view(rows, kv, 1, dim).bfloat16()
    return q, k, v


@pytest.mark.parametrize(("heads", "kv", "dim"), [(9, 3, 64), (4, 2, 128), (2, 2, 32)])
def test_the_fused_rotary_gives_torchs_bits(heads, kv, dim) -> None:
    g = torch.Generator().manual_seed(dim)
    rows = 6
    qkv = (torch.randn(rows, (heads + 2 * kv) * dim, generator=g) * 3).bfloat16()
    angle = torch.randn(rows, dim // 2, generator=g) * 40  # far positions: large angles
    angle = torch.cat([angle, angle], dim=-1)
    cos, sin = angle.cos() * 1.1, angle.sin() * 1.1  # a model's attention scaling
    got = decode_glue.rope_qkv(qkv, cos, sin, heads, kv, dim**-0.5)
    assert got is not None
    want = _torch_rope(qkv, cos, sin, heads, kv, dim**-0.5)
    for name, a, b in zip("qkv", got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        assert torch.equal(a, b), f"{name}: max gap {(a.float() - b.float()).abs().max()}"


def test_what_the_fused_rotary_does_not_take_answers_none() -> None:
    cos = sin = torch.ones(2, 48)
    qkv = torch.randn(2, 5 * 48).bfloat16()  # heads of 48: halves not a multiple of 16
    assert decode_glue.rope_qkv(qkv, cos, sin, 3, 1, 1.0) is None
    cos = sin = torch.ones(2, 64)
    assert decode_glue.rope_qkv(torch.randn(2, 5 * 64), cos, sin, 3, 1, 1.0) is None  # fp32
    assert decode_glue.rope_qkv(torch.randn(2, 6 * 64).bfloat16(), cos, sin, 3, 1, 1.0) is None


def test_a_bf16_decode_rotates_in_the_glue_and_samples_what_torch_would(monkeypatch) -> None:
    """A bf16 decode of a Llama with 64-wide heads (the kernel's bf16 cache) runs every layer's
    norms, SwiGLU and rotary in the fused glue, and samples the same tokens with the same
    logprobs as with torch's rotary ops."""
    model, tok = real_arch.build(
        "llama", seed=0, hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=64
    )
    fused = decode_glue.rope_qkv
    calls = {"ran": 0, "add_rms_norm": 0, "silu_mul": 0}

    def counted(*args, **kwargs):
        out = fused(*args, **kwargs)
        calls["ran"] += out is not None
        return out

    for name in ("add_rms_norm", "silu_mul"):  # the rest of the glue, counted the same way

        def glue(*args, _fn=getattr(decode_glue, name), _name=name, **kwargs):
            out = _fn(*args, **kwargs)
            calls[_name] += out is not None
            return out

        monkeypatch.setattr(decode_glue, name, glue)

    prompts = [tok.encode(t, add_special_tokens=False) for t in ("12 + 7 =", "The capital of")]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=3)
    runs = []
    for rope in (counted, lambda *args, **kwargs: None):
        monkeypatch.setattr(decode_glue, "rope_qkv", rope)
        engine = TorchBackend(model, tok, device="cpu", decode_dtype="bfloat16")
        with torch.no_grad():
            runs.append(engine.generate([prompts[0]] * 3 + [prompts[1]] * 3, params))
    layers = model.config.num_hidden_layers
    assert calls["ran"] >= 11 * layers  # every step of every layer
    assert calls["silu_mul"] >= 2 * 11 * layers  # both runs: the rotary alone was toggled
    assert calls["add_rms_norm"] >= 2 * 11 * (2 * layers + 1)  # two a layer, and the last
    glue, ops = runs
    assert [c.token_ids for c in glue] == [c.token_ids for c in ops]
    assert [c.logprobs for c in glue] == [c.logprobs for c in ops]
