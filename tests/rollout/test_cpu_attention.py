"""The CPU decode-attention kernel (rollout/cpu_attention.py, csrc/decode_attention.c): built
with the machine's compiler, it gives torch's attention over an fp32 cache to float rounding and
over a bf16 cache the attention of the same (rounded) keys and values; masks, GQA groups of 1 to
7 heads, head sizes 64 and 128, lengths around its 64-position blocks and strided cache views;
shapes it does not take answer None; a bf16 decode of a Llama with 64-wide heads stores its
cache in bf16 and runs the kernel every step, and `ARENA_CPU_KERNELS=0` keeps torch's path."""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from arena_core.rollout import cpu_attention, cpu_kernels
from arena_core.rollout.base import SamplingParams
from arena_core.rollout.decode_cache import GrowingLayer, decode_step_attention
from arena_core.rollout.torch_backend import TorchBackend
from tests.models import real_arch

if shutil.which("cc") is None and shutil.which("gcc") is None:
    pytest.skip(
        "no C compiler on this machine: the kernel cannot be built", allow_module_level=True
    )


def _cache(rows: int, kv: int, dim: int, length: int, room: int, dtype: torch.dtype, seed: int):
    """A cache in GrowingLayer's layout: K^T [rows, kv, dim, room] and V [rows, kv, room, dim],
    the first `length` positions filled."""
    g = torch.Generator().manual_seed(seed)
    kt = torch.full((rows, kv, dim, room), float("nan"), dtype=dtype)  # unused room: never read
    v = torch.full((rows, kv, room, dim), float("nan"), dtype=dtype)
    kt[..., :length] = torch.randn(rows, kv, dim, length, generator=g).to(dtype)
    v[:, :, :length] = torch.randn(rows, kv, length, dim, generator=g).to(dtype)
    return kt[..., :length], v[:, :, :length]


def _reference(q, kt, v, bias):
    """torch's decode attention (the engine's bmm path) on the fp32 values of the cache."""
    mask = None if bias is None else bias[:, None, None, :]
    out = decode_step_attention(q, kt.float().transpose(-1, -2), v.float(), mask, 1.0)
    return out.reshape(q.shape[0], -1)


def test_the_kernel_builds_here() -> None:
    assert cpu_attention.available()
    assert cpu_attention.runs(64) and cpu_attention.runs(128)
    assert not cpu_attention.runs(16) and not cpu_attention.runs(80)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("heads", "kv", "dim", "length"),
    [(9, 3, 64, 150), (6, 2, 128, 64), (4, 4, 64, 1), (7, 1, 64, 65), (10, 2, 64, 63)],
)
def test_the_kernel_attends_like_torch(dtype, heads, kv, dim, length) -> None:
    rows = 5
    kt, v = _cache(rows, kv, dim, length, room=length + 37, dtype=dtype, seed=length)
    q = torch.randn(rows, heads, 1, dim, generator=torch.Generator().manual_seed(1)) / math.sqrt(
        dim
    )
    bias = torch.zeros(rows, length)
    bias[1, : length // 2] = float("-inf")  # left padding of one row
    bias[3, : min(1, length - 1)] = float("-inf")  # never every position: a row sees itself
    for b in (None, bias):
        got = cpu_attention.attention(q, kt, v, b, 1.0)
        assert got is not None and got.shape == (rows, heads * dim)
        assert torch.isfinite(got).all()
        # fp32 math either way: only the summation order and the exp polynomial differ
        torch.testing.assert_close(got, _reference(q, kt, v, b), atol=2e-5, rtol=1e-4)


def test_scale_and_strided_views() -> None:
    """A cache cut at the front (`drop_front`) and a query not yet scaled."""
    kt, v = _cache(3, 3, 64, 200, room=256, dtype=torch.bfloat16, seed=2)
    kt, v = kt[..., 11:], v[:, :, 11:]  # views that start mid-buffer
    q = torch.randn(3, 9, 1, 64)
    got = cpu_attention.attention(q, kt, v, None, 0.125)
    torch.testing.assert_close(got, _reference(q * 0.125, kt, v, None), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("staged", [1, 17, 32])
def test_staged_keys_attend_like_the_rest(staged) -> None:
    """The newest keys, still in their natural layout (GrowingLayer's stage), count as the
    positions after the transposed ones."""
    kt, v = _cache(4, 2, 64, 150, room=200, dtype=torch.bfloat16, seed=staged)
    q = torch.randn(4, 6, 1, 64) / 8
    bias = torch.zeros(4, 150)
    bias[2, :40] = float("-inf")
    main = 150 - staged
    stage = kt[..., main:].transpose(-1, -2).contiguous()  # [rows, kv, staged, dim]
    got = cpu_attention.attention(q, kt[..., :main], v, bias, 1.0, stage)
    torch.testing.assert_close(got, _reference(q, kt, v, bias), atol=2e-5, rtol=1e-4)


def test_a_staged_layer_keeps_every_key_through_flushes_and_compaction() -> None:
    """70 one-position appends (two flushes of the 32-key stage), rows dropped mid-stage, the
    front cut: the kernel's parts and the plain views always hold every key appended."""
    from arena_core.rollout.decode_cache import STAGE

    layer = GrowingLayer(40, store_dtype=torch.bfloat16)
    keys = [torch.randn(3, 2, 6, 64)]
    layer.update(keys[0], torch.randn(3, 2, 6, 64))
    for step in range(70):
        k = torch.randn(layer.keys.shape[0] if step < 50 else 2, 2, 1, 64)
        if step == 50:  # compaction: rows 0 and 2 go on
            layer.batch_select_indices(torch.tensor([0, 2]))
            keys = [x[[0, 2]] for x in keys]
        keys.append(k)
        main_t, staged, values = layer.decode_parts(k, torch.randn_like(k))
        parts = (
            main_t.transpose(-1, -2)
            if staged is None
            else torch.cat([main_t.transpose(-1, -2), staged], dim=2)
        )
        want = torch.cat(keys, dim=2).bfloat16()
        assert torch.equal(parts, want) and values.shape[2] == want.shape[2]
        assert staged is None or staged.shape[2] <= STAGE
    assert layer.room >= layer.length  # grown past the first capacity
    all_keys, _ = layer.positions()
    assert torch.equal(all_keys, want)
    layer.drop_front(5)
    assert torch.equal(layer.positions()[0], want[:, :, 5:])


def test_what_the_kernel_does_not_take_answers_none() -> None:
    q = torch.randn(2, 4, 1, 32)
    kt, v = _cache(2, 2, 32, 10, room=10, dtype=torch.float32, seed=0)
    assert cpu_attention.attention(q, kt, v, None, 1.0) is None  # head size 32
    q = torch.randn(2, 4, 1, 64)
    kt, v = _cache(2, 2, 64, 10, room=10, dtype=torch.float16, seed=0)
    assert cpu_attention.attention(q, kt, v, None, 1.0) is None  # fp16 cache


def test_a_bf16_layer_gives_the_modules_their_dtype() -> None:
    layer = GrowingLayer(8, store_dtype=torch.bfloat16)
    k, v = torch.randn(2, 3, 5, 64), torch.randn(2, 3, 5, 64)
    keys, values = layer.update(k, v)  # the prefill: its own states back
    assert keys is k and values is v
    k1, v1 = torch.randn(2, 3, 1, 64), torch.randn(2, 3, 1, 64)
    keys, values = layer.update(k1, v1)  # later: every position, upcast
    assert keys.dtype == torch.float32 and keys.shape == (2, 3, 6, 64)
    torch.testing.assert_close(keys[:, :, -1:], k1.bfloat16().float())
    raw_k, raw_v = layer.append(k1, v1)  # Arena's step: the bf16 buffers themselves
    assert raw_k.dtype == raw_v.dtype == torch.bfloat16 and raw_k.shape == (2, 3, 7, 64)


def _wide_llama():
    """A random Llama with SmolLM2's head size (64) and GQA group (3 query heads per KV head)."""
    return real_arch.build(
        "llama", seed=0, hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=64
    )


def _generate(model, tok, monkeypatch, kernels: bool):
    monkeypatch.setenv("ARENA_CPU_KERNELS", "1" if kernels else "0")
    cpu_kernels.forget()
    engine = TorchBackend(model, tok, device="cpu", decode_dtype="bfloat16")
    calls = {"ran": 0, "stores": []}
    attend, store = cpu_attention.attention, engine._kv_store_dtype

    def counted(*args, **kwargs):
        out = attend(*args, **kwargs)
        calls["ran"] += out is not None
        return out

    def recorded(lora):
        calls["stores"].append(store(lora))
        return calls["stores"][-1]

    monkeypatch.setattr(cpu_attention, "attention", counted)
    monkeypatch.setattr(engine, "_kv_store_dtype", recorded)
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("12 + 7 =", "The capital of")]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=4)
    return engine.generate([prompts[0]] * 3 + [prompts[1]] * 3, params), calls


def test_a_bf16_decode_runs_the_kernel_over_a_bf16_cache(monkeypatch) -> None:
    model, tok = _wide_llama()
    with torch.no_grad():
        got, calls = _generate(model, tok, monkeypatch, kernels=True)
        want, off = _generate(model, tok, monkeypatch, kernels=False)
    monkeypatch.delenv("ARENA_CPU_KERNELS")
    cpu_kernels.forget()
    assert calls["stores"] == [torch.bfloat16] and off["stores"] == [None]
    layers = model.config.num_hidden_layers
    assert calls["ran"] >= 11 * layers  # every decode step of every layer, after the prefill
    assert off["ran"] == 0
    # the prefill is the same (it attends over its own fp32 states): so is each first token
    assert [c.token_ids[0] for c in got] == [c.token_ids[0] for c in want]
    assert [c.logprobs[0] for c in got] == pytest.approx([c.logprobs[0] for c in want], abs=1e-5)


def test_a_step_over_the_bf16_cache_gives_the_fp32_caches_logits() -> None:
    """One decode step of the whole model over the same prompt cache, stored fp32 (torch's
    path) and bf16 (the kernel): the same distribution up to the rounding of K and V."""
    from arena_core.rollout.decode_cache import growing_cache
    from arena_core.rollout.llama_decode import LlamaDecodeStep

    model, tok = _wide_llama()
    step = LlamaDecodeStep.for_model(model)
    ids = torch.tensor([tok.encode("How many clips did Natalia sell?", add_special_tokens=False)])
    rows, width = 4, ids.shape[1]
    logps = []
    for store in (None, torch.bfloat16):
        cache = growing_cache(model.config, width + 4, store)
        with torch.no_grad():
            model(ids.expand(rows, -1), past_key_values=cache, use_cache=True)
            mask = torch.ones(rows, width + 1, dtype=torch.long)
            mask[1, :3] = 0  # a row that does not see the first positions
            out = step.step(
                torch.tensor([5, 9, 17, 30]),
                torch.full((rows,), width),
                mask,
                cache,
                torch.bfloat16,
            )
        logps.append(torch.log_softmax(out, -1))
    fp32_cache, bf16_cache = logps
    probs = fp32_cache.exp()
    assert ((fp32_cache - bf16_cache).abs() * probs).sum(-1).max() < 2e-2  # expected |gap|
    assert (fp32_cache.argmax(-1) == bf16_cache.argmax(-1)).all()
