"""bf16 decode products through oneDNN-packed weights (engines/packed_linear.py): the same
product as `F.linear`, the packing rebuilt when its weight changes, and Arena's decode step
really multiplying by it in a bf16 engine."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from arena_core.engines import packed_linear
from arena_core.engines.base import SamplingParams
from arena_core.engines.torch_backend import TorchBackend
from tests.models import real_arch

needs_packing = pytest.mark.skipif(
    not packed_linear.AVAILABLE, reason="oneDNN has no bf16 kernels on this CPU"
)


@needs_packing
@pytest.mark.parametrize("rows", [1, 7, 64, 100])
def test_the_packed_product_is_the_bf16_product(rows) -> None:
    torch.manual_seed(0)
    owner = nn.Module()
    weight = torch.randn(384, 96).bfloat16()
    bias = torch.randn(384).bfloat16()
    x = torch.randn(rows, 96).bfloat16()
    packed = packed_linear.packed_copy(owner, weight)
    assert packed is not None
    got = packed_linear.linear(x, packed, bias).float()
    want = F.linear(x.float(), weight.float(), bias.float())
    # bf16 outputs of one product: within a couple of bf16 roundings of the exact sum
    assert torch.allclose(got, want, rtol=2e-2, atol=2e-2)
    assert torch.allclose(got, F.linear(x, weight, bias).float(), rtol=8e-3, atol=8e-3)


@needs_packing
def test_the_packing_follows_its_weight() -> None:
    owner = nn.Module()
    weight = torch.randn(64, 32).bfloat16()
    x = torch.randn(4, 32).bfloat16()
    first = packed_linear.packed_copy(owner, weight)
    assert packed_linear.packed_copy(owner, weight) is first  # cached
    weight.mul_(2)  # in place, as an optimizer step
    second = packed_linear.packed_copy(owner, weight)
    assert second is not first
    got = packed_linear.linear(x, second, None).float()
    assert torch.allclose(got, F.linear(x, weight).float(), rtol=8e-3, atol=8e-3)
    other = weight.clone()  # another tensor with the same values: packed again
    assert packed_linear.packed_copy(owner, other) is not second


def test_what_it_does_not_pack() -> None:
    owner = nn.Module()
    assert packed_linear.packed_copy(owner, torch.randn(8, 8)) is None  # fp32: MKL's product
    assert packed_linear.packed_copy(owner, torch.randn(8, 8).bfloat16().T) is None  # strided


@needs_packing
def test_a_bf16_engine_decodes_through_packed_weights(monkeypatch) -> None:
    """Through the real engine: every bf16 decode step's products (q/k/v, o, gate/up, down and
    the LM head of every layer) take the packed kernel, and greedy decoding still matches the
    unpacked step."""
    model, tok = real_arch.build("llama", seed=0)
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("2 + 2 =", "The sky is")]
    greedy = SamplingParams(max_new_tokens=8, temperature=0)
    calls = []
    real = packed_linear.linear
    monkeypatch.setattr(packed_linear, "linear", lambda *a: calls.append(1) or real(*a))
    engine = TorchBackend(model, tok, device="cpu", decode_dtype="bfloat16")
    packed = engine.generate(prompts, greedy)
    layers = model.config.num_hidden_layers
    assert len(calls) >= 7 * (4 * layers + 1)  # 7 decode steps after the prefill
    assert "_arena_packed" in model.lm_head.__dict__
    monkeypatch.setattr(packed_linear, "AVAILABLE", False)
    plain = TorchBackend(model, tok, device="cpu", decode_dtype="bfloat16").generate(
        prompts, greedy
    )
    assert [c.token_ids for c in packed] == [c.token_ids for c in plain]
    for a, b in zip(packed, plain, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-2)
