"""The CPU decode-attention kernel (engines/cpu_attention.py, csrc/decode_attention.c): built
with the machine's compiler, it gives torch's attention over an fp32 cache to float rounding and
over a bf16 cache the attention of the same (rounded) keys and values; masks, GQA groups of 1 to
7 heads, head sizes 64 and 128, lengths around its 64-position blocks and strided cache views;
shapes it does not take answer None; the cascade over a GRPO group's shared prompt gives the same
bits as attending each row alone, through compaction and a cut front; a bf16 decode of a Llama
with 64-wide heads stores its cache in bf16 and runs the kernel (cascaded) every step, and
`ARENA_CPU_KERNELS=0` keeps torch's path."""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from arena_core.engines import cpu_attention, cpu_kernels
from arena_core.engines.base import SamplingParams
from arena_core.engines.cpu_attention import KernelCacheLayer
from arena_core.engines.decode_cache import GrowingLayer, decode_step_attention
from arena_core.engines.torch_backend import TorchBackend
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
    layer = KernelCacheLayer(40)
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
        assert staged is None or staged.shape[2] <= cpu_attention.STAGE
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
    layer = KernelCacheLayer(8)
    k, v = torch.randn(2, 3, 5, 64), torch.randn(2, 3, 5, 64)
    keys, values = layer.update(k, v)  # the prefill: its own states back
    assert keys is k and values is v
    k1, v1 = torch.randn(2, 3, 1, 64), torch.randn(2, 3, 1, 64)
    keys, values = layer.update(k1, v1)  # later: every position, upcast
    assert keys.dtype == torch.float32 and keys.shape == (2, 3, 6, 64)
    torch.testing.assert_close(keys[:, :, -1:], k1.bfloat16().float())
    raw_kt, _, raw_v = layer.decode_parts(k1, v1)  # Arena's step: the bf16 buffers themselves
    assert raw_kt.dtype == raw_v.dtype == torch.bfloat16 and raw_v.shape == (2, 3, 7, 64)


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
    attend, layer = cpu_attention.attention, engine._cache_layer

    def counted(*args, **kwargs):
        out = attend(*args, **kwargs)
        calls["ran"] += out is not None
        calls["cascaded"] = calls.get("cascaded", 0) + (len(args) > 6 and args[6] is not None)
        return out

    def recorded(lora):
        calls["stores"].append(layer(lora))
        return calls["stores"][-1]

    monkeypatch.setattr(cpu_attention, "attention", counted)
    monkeypatch.setattr(engine, "_cache_layer", recorded)
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
    assert calls["stores"] == [KernelCacheLayer] and off["stores"] == [GrowingLayer]
    layers = model.config.num_hidden_layers
    assert calls["ran"] >= 11 * layers  # every decode step of every layer, after the prefill
    assert calls["cascaded"] == calls["ran"]  # 3 rows per prompt: each prompt read once
    assert off["ran"] == 0
    # the prefill is the same (it attends over its own fp32 states): so is each first token
    assert [c.token_ids[0] for c in got] == [c.token_ids[0] for c in want]
    assert [c.logprobs[0] for c in got] == pytest.approx([c.logprobs[0] for c in want], abs=1e-5)


def test_a_step_over_the_bf16_cache_gives_the_fp32_caches_logits() -> None:
    """One decode step of the whole model over the same prompt cache, stored fp32 (torch's
    path) and bf16 (the kernel): the same distribution up to the rounding of K and V."""
    from arena_core.engines.decode_cache import growing_cache
    from arena_core.engines.llama_decode import LlamaDecodeStep

    model, tok = _wide_llama()
    step = LlamaDecodeStep.for_model(model)
    ids = torch.tensor([tok.encode("How many clips did Natalia sell?", add_special_tokens=False)])
    rows, width = 4, ids.shape[1]
    logps = []
    for layer in (GrowingLayer, KernelCacheLayer):
        cache = growing_cache(model.config, width + 4, layer)
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


@pytest.mark.parametrize("room", [0, 5, 64])
def test_a_last_block_at_the_buffers_end_is_read_safely(room) -> None:
    """The last block of keys runs past T: read in place where the buffer goes on (what lies
    there only fills lanes that are masked), copied into a padded block where it ends."""
    for length in (1, 40, 64, 100):
        kt, v = _cache(3, 3, 64, length, room=length + room, dtype=torch.bfloat16, seed=length)
        kt = kt[..., :length]
        q = torch.randn(3, 9, 1, 64) / 8
        got = cpu_attention.attention(q, kt, v, None, 1.0)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, _reference(q, kt, v, None), atol=2e-5, rtol=1e-4)


def _shared_prompt_layer(dtype, kv, dim, width=70):
    """A GrowingLayer after the engine's prefix sharing: 3 prompts prefilled once (the second
    left-padded), their rows repeated into 8 (groups of unequal sizes, not contiguous)."""
    g = torch.Generator().manual_seed(dim + kv)
    layer = KernelCacheLayer(200, store_dtype=dtype)
    layer.update(torch.randn(3, kv, width, dim, generator=g), torch.randn(3, kv, width, dim))
    share = torch.tensor([2, 0, 0, 1, 2, 2, 0, 1])
    layer.batch_select_indices(share)
    mask = torch.zeros(3, width)
    mask[1, :9] = float("-inf")  # the second prompt's left padding
    return layer, mask[share]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv", "dim"), [(9, 3, 64), (4, 2, 128), (7, 1, 64)])
def test_the_cascade_over_a_shared_prompt_gives_the_same_bits(dtype, heads, kv, dim) -> None:
    """45 decode steps over a shared-prompt cache, rows dropped at step 30 (the engine's
    compaction): with the groups the kernel reads each prompt once per group, and its output
    is bit for bit what attending each row alone gives (the same dot products, the weighted
    sum of the values continued in the same order)."""
    layer, bias = _shared_prompt_layer(dtype, kv, dim)
    g = torch.Generator().manual_seed(7)
    for step in range(45):
        if step == 30:
            keep = torch.tensor([0, 1, 3, 4, 6])
            layer.batch_select_indices(keep)
            bias = bias[keep]
        rows = bias.shape[0]
        k, v = torch.randn(rows, kv, 1, dim, generator=g), torch.randn(rows, kv, 1, dim)
        bias = torch.cat([bias, torch.zeros(rows, 1)], dim=-1)
        q = torch.randn(rows, heads, 1, dim, generator=g) / 8
        if dtype == torch.float32:
            layer.update(k, v)
            kt, staged = layer._k[..., : layer.length], None
            values = layer._v[:, :, : layer.length]
        else:
            kt, staged, values = layer.decode_parts(k, v)
        groups = layer.prefix_groups()
        assert groups is not None and groups[2] == 70
        alone = cpu_attention.attention(q, kt, values, bias, 1.0, staged)
        cascade = cpu_attention.attention(q, kt, values, bias, 1.0, staged, groups)
        assert alone is not None and cascade is not None
        assert torch.equal(alone, cascade), f"step {step}"
    want = _reference(q, layer.positions()[0].transpose(-1, -2), layer.positions()[1], bias)
    torch.testing.assert_close(cascade, want, atol=2e-5, rtol=1e-4)


def test_a_layer_knows_which_rows_share_their_prompt() -> None:
    layer, _ = _shared_prompt_layer(torch.bfloat16, 3, 64)
    order, starts, shared = layer.prefix_groups()
    groups = [order[starts[i] : starts[i + 1]].tolist() for i in range(len(starts) - 1)]
    assert groups == [[1, 2, 6], [3, 7], [0, 4, 5]] and shared == 70
    layer.decode_parts(torch.randn(8, 3, 1, 64), torch.randn(8, 3, 1, 64))
    assert layer.prefix_groups()[2] == 70  # appends are each row's own
    layer.batch_select_indices(torch.tensor([0, 3, 6]))  # one row per prompt left: no sharing
    assert layer.prefix_groups() is None
    layer.batch_select_indices(torch.tensor([0, 0, 1]))
    layer.drop_front(10)  # a cut front shortens the shared part
    assert layer.prefix_groups()[2] == 60
    layer.set_buffers(torch.randn(2, 3, 80, 64), torch.randn(2, 3, 80, 64), 71)
    assert layer.prefix_groups() is None  # rows joined from elsewhere: nothing known shared
    fresh = KernelCacheLayer(8)
    fresh.update(torch.randn(4, 3, 5, 64), torch.randn(4, 3, 5, 64))
    assert fresh.prefix_groups() is None  # distinct prompts


def test_groups_the_kernel_cannot_trust_answer_none() -> None:
    kt, v = _cache(4, 3, 64, 20, room=20, dtype=torch.bfloat16, seed=0)
    q = torch.randn(4, 9, 1, 64)
    order, starts = torch.arange(4), torch.tensor([0, 2, 4])
    assert cpu_attention.attention(q, kt, v, None, 1.0, None, (order, starts, 21)) is None
    assert cpu_attention.attention(q, kt, v, None, 1.0, None, (order.int(), starts, 5)) is None
    bad = torch.tensor([0, 3, 4])  # a group that is not all rows
    assert cpu_attention.attention(q, kt, v, None, 1.0, None, (order, bad[:2], 5)) is None
    assert cpu_attention.attention(q, kt, v, None, 1.0, None, (order * 2, starts, 5)) is None
    twice = torch.tensor([0, 0, 1, 2])  # a row in two groups, another in none
    assert cpu_attention.attention(q, kt, v, None, 1.0, None, (twice, starts, 5)) is None


def test_the_engines_cascade_samples_what_each_row_alone_would(monkeypatch) -> None:
    """A bf16 decode of a GRPO-shaped batch (prompts repeated) samples the same tokens with the
    same logprobs whether the kernel reads each prompt once per group or once per row."""
    model, tok = _wide_llama()
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("12 + 7 =", "The capital of")]
    params = SamplingParams(max_new_tokens=16, temperature=1.0, seed=5)
    runs = []
    for groups in (KernelCacheLayer.prefix_groups, lambda self: None):
        monkeypatch.setattr(KernelCacheLayer, "prefix_groups", groups)
        engine = TorchBackend(model, tok, device="cpu", decode_dtype="bfloat16")
        with torch.no_grad():
            runs.append(engine.generate([prompts[0]] * 4 + [prompts[1]] * 3, params))
    cascade, alone = runs
    assert [c.token_ids for c in cascade] == [c.token_ids for c in alone]
    assert [c.logprobs for c in cascade] == [c.logprobs for c in alone]
