"""The torch engine's CPU decode: shared prefill, in-place KV cache, bulk row drops, sampling.

Each speed-up must leave the tokens a user gets unchanged: the tests compare against the plain
way (each prompt alone, HF's own cache) and look at what the engine actually ran (forward batch
sizes, buffer sizes).
"""

from __future__ import annotations

import pytest
import torch

from arena_core.engines.base import SamplingParams
from arena_core.engines.decode_cache import GrowingLayer, decode_step_attention, growing_cache
from arena_core.engines.sampling import BLOCK, draw, sample_next
from arena_core.engines.torch_backend import TorchBackend
from arena_core.models import load_policy


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def policy():
    return load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})


@pytest.fixture(params=["auto", "modules"])
def backend(policy, request):
    """The engine with Arena's own decode step (`llama_decode`, arena:tiny is a Qwen2) and with
    transformers' modules: every speed-up must hold on both."""
    return TorchBackend(policy.model, policy.tokenizer, decode_step=request.param)


def _prompt(backend: TorchBackend, text: str) -> list[int]:
    return backend.encode_chat([{"role": "user", "content": text}])


class _BatchSizes:
    """Records the batch size and token count of every forward of a module, and of every decode
    step the engine runs without the modules (`llama_decode`, one token per row)."""

    def __init__(self, model: torch.nn.Module, backend: TorchBackend | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self._handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)
        self._step = None if backend is None else backend.fast_step
        if self._step is not None:
            run = self._step.step

            def recorded(tokens, *args, **kwargs):
                self.calls.append((int(tokens.shape[0]), 1))
                return run(tokens, *args, **kwargs)

            self._step.step = recorded

    def _hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.calls.append((int(ids.shape[0]), int(ids.shape[1])))

    def close(self) -> None:
        self._handle.remove()
        if self._step is not None:
            del self._step.step


def test_a_group_prefills_its_prompt_once(policy, backend) -> None:
    a, b = _prompt(backend, "add 12 and 7"), _prompt(backend, "add 345 and 6789")
    greedy = SamplingParams(max_new_tokens=8, temperature=0)
    alone = backend.generate([a, b], greedy)
    sizes = _BatchSizes(policy.model, backend)
    try:
        grouped = backend.generate([a, a, a, b, b, b], greedy)
    finally:
        sizes.close()
    # the prefill ran on the 2 distinct prompts, the decode on all 6 rows
    assert sizes.calls[0] == (2, max(len(a), len(b)))
    assert sizes.calls[1][0] == 6
    assert [c.token_ids for c in grouped] == [alone[0].token_ids] * 3 + [alone[1].token_ids] * 3
    for c, ref in zip(grouped, [alone[0]] * 3 + [alone[1]] * 3, strict=True):
        assert c.logprobs == pytest.approx(ref.logprobs, abs=1e-5)
        assert c.prompt_ids == ref.prompt_ids


def test_sampled_group_rows_differ_and_are_seeded(backend) -> None:
    a = _prompt(backend, "add 12 and 7")
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=5)
    one = backend.generate([a] * 6, params)
    two = backend.generate([a] * 6, params)
    assert [c.token_ids for c in one] == [c.token_ids for c in two]
    assert len({tuple(c.token_ids) for c in one}) > 1  # shared prefill, independent samples


def test_finished_rows_leave_the_batch_in_bulk(policy, backend) -> None:
    prompts = [_prompt(backend, f"add {i} and {i + 1}") for i in range(16)]
    greedy = SamplingParams(max_new_tokens=16, temperature=0)
    full = backend.generate(prompts, greedy)

    def end_row(row: int, token: int, finished: bool) -> bool:
        return len(ended[row]) >= row + 1 if not ended[row].append(token) else False

    ended: list[list[int]] = [[] for _ in prompts]
    sizes = _BatchSizes(policy.model, backend)
    try:
        out = backend.generate(prompts, greedy, on_token=end_row)
    finally:
        sizes.close()
    for i, c in enumerate(out):  # row i ended after i + 1 tokens, each a prefix of the full run
        if full[i].finish_reason == "length" or len(full[i].token_ids) > i + 1:
            assert c.token_ids == full[i].token_ids[: i + 1]
    decode = [n for n, _ in sizes.calls[1:]]
    assert decode == sorted(decode, reverse=True) and decode[-1] < 16
    # compaction happens when a quarter of the rows are done, not after each of the 15 that end
    compactions = len(set(decode)) - 1
    assert 0 < compactions <= 8


def test_cache_is_sized_to_the_batch_not_the_model(policy) -> None:
    cache = growing_cache(policy.model.config, capacity=20)
    layer = cache.layers[0]
    assert isinstance(layer, GrowingLayer)
    k = torch.randn(3, 2, 5, 8)
    keys, _ = layer.update(k, k + 1)
    assert layer.room == 20 < policy.model.config.max_position_embeddings
    steps = [torch.randn(3, 2, 1, 8) for _ in range(30)]  # past the capacity: grows, stays exact
    for s in steps:
        keys, values = layer.update(s, s + 1)
    expected = torch.cat([k, *steps], dim=-2)
    assert torch.equal(keys, expected) and torch.equal(values, expected + 1)
    assert layer.get_seq_length() == 35
    layer.batch_select_indices(torch.tensor([2, 0, 0]))
    assert torch.equal(layer.keys, expected[[2, 0, 0]])
    # the keys are stored transposed: K^T of each row is row-major with the positions
    # contiguous, the operand a decode step's `q @ K^T` reads fastest
    assert layer.keys.transpose(-1, -2).stride(-1) == 1
    layer.drop_front(4)  # left padding no row attends to any more
    assert torch.equal(layer.keys, expected[[2, 0, 0], :, 4:]) and layer.get_seq_length() == 31
    assert torch.equal(layer.values, expected[[2, 0, 0], :, 4:] + 1)
    layer.set_buffers(expected.new_zeros(3, 2, 40, 8), expected.new_ones(3, 2, 40, 8), 10)
    keys, _ = layer.update(k[:, :, :1], k[:, :, :1])
    assert keys.shape == (3, 2, 11, 8) and torch.equal(keys[:, :, 10:], k[:, :, :1])
    assert not keys[:, :, :10].any()


def test_draw_follows_the_distribution_and_never_picks_a_filtered_token() -> None:
    logits = torch.tensor([[0.0, 1.0, float("-inf"), 2.0, -1.0]]).repeat(40_000, 1)
    weights = torch.softmax(logits, dim=-1) * 7.0  # not normalised: draw normalises itself
    tokens, total = draw(weights, torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens, minlength=5).double() / len(tokens)
    assert freq[2] == 0
    assert torch.allclose(freq, torch.softmax(logits[0], -1).double(), atol=0.01)
    assert torch.allclose(total, torch.full_like(total, 7.0))
    again, _ = draw(weights[:50], torch.Generator().manual_seed(0))
    assert torch.equal(again, tokens[:50])  # one uniform per row: seeded and batch-stable
    with pytest.raises(RuntimeError, match="inf"):
        draw(torch.full((1, 3), float("nan")), None)


def test_draw_over_a_real_vocabulary_crosses_blocks_exactly() -> None:
    """A vocabulary that is not a multiple of the block, most of it filtered out: every kept
    token is drawn at its rate, no filtered one ever, the last partial block included."""
    vocab = 3 * BLOCK + 77
    kept = torch.tensor([0, BLOCK - 1, BLOCK, 2 * BLOCK + 5, vocab - 1])
    weights = torch.zeros(60_000, vocab)
    weights[:, kept] = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    tokens, _ = draw(weights, torch.Generator().manual_seed(1))
    assert set(tokens.unique().tolist()) == set(kept.tolist())
    freq = torch.bincount(tokens, minlength=vocab)[kept].double() / len(tokens)
    assert torch.allclose(freq, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).double() / 15, atol=0.01)


def test_sampled_logprobs_are_the_log_softmax_of_what_was_sampled() -> None:
    logits = torch.randn(16, 1000) * 4
    for temperature in (1.0, 0.7):
        params = SamplingParams(max_new_tokens=1, temperature=temperature)
        tokens, logp = sample_next(logits, params, torch.Generator().manual_seed(0))
        expected = torch.log_softmax(logits / temperature, -1).gather(-1, tokens[:, None])
        assert torch.allclose(logp, expected.squeeze(-1), atol=1e-5)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
def test_a_decode_step_attention_equals_sdpa_with_repeated_kv_heads(mask_kind) -> None:
    """Left-padded rows (their first positions masked), 6 query heads over 2 KV heads, the KV
    cache a view into a larger buffer as the growing cache hands it over."""
    torch.manual_seed(0)
    rows, heads, kv_heads, dim, length = 5, 6, 2, 8, 11
    buffer = torch.randn(2, rows, kv_heads, length + 7, dim)
    key, value = buffer[0, :, :, :length], buffer[1, :, :, :length]
    query = torch.randn(rows, 1, heads, dim).transpose(1, 2)  # as the model hands it over
    attend = torch.ones(rows, 1, 1, length, dtype=torch.bool)
    attend[0, ..., :4] = False
    attend[3, ..., :1] = False
    mask = {
        "none": None,
        "bool": attend,
        "additive": torch.zeros(rows, 1, 1, length).masked_fill(~attend, float("-inf")),
    }[mask_kind]
    out = decode_step_attention(query, key, value, mask, None)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query,
        key.repeat_interleave(heads // kv_heads, dim=1),
        value.repeat_interleave(heads // kv_heads, dim=1),
        attn_mask=None if mask is None else mask,
    )
    assert out.shape == (rows, 1, heads, dim)
    torch.testing.assert_close(out, expected.transpose(1, 2), rtol=1e-5, atol=1e-5)
