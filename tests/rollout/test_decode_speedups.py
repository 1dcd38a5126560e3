"""The torch engine's CPU decode: shared prefill, in-place KV cache, bulk row drops, sampling.

Each speed-up must leave the tokens a user gets unchanged: the tests compare against the plain
way (each prompt alone, HF's own cache) and look at what the engine actually ran (forward batch
sizes, buffer sizes).
"""

from __future__ import annotations

import pytest
import torch

from arena_core.models import load_policy
from arena_core.rollout.base import SamplingParams
from arena_core.rollout.decode_cache import GrowingLayer, growing_cache
from arena_core.rollout.sampling import draw
from arena_core.rollout.torch_backend import TorchBackend


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def policy():
    return load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})


@pytest.fixture()
def backend(policy):
    return TorchBackend(policy.model, policy.tokenizer)


def _prompt(backend: TorchBackend, text: str) -> list[int]:
    return backend.encode_chat([{"role": "user", "content": text}])


class _BatchSizes:
    """Records the batch size and token count of every forward of a module."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls: list[tuple[int, int]] = []
        self._handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.calls.append((int(ids.shape[0]), int(ids.shape[1])))

    def close(self) -> None:
        self._handle.remove()


def test_a_group_prefills_its_prompt_once(policy, backend) -> None:
    a, b = _prompt(backend, "add 12 and 7"), _prompt(backend, "add 345 and 6789")
    greedy = SamplingParams(max_new_tokens=8, temperature=0)
    alone = backend.generate([a, b], greedy)
    sizes = _BatchSizes(policy.model)
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
    sizes = _BatchSizes(policy.model)
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
    assert layer._k.shape[-2] == 20 < policy.model.config.max_position_embeddings
    steps = [torch.randn(3, 2, 1, 8) for _ in range(30)]  # past the capacity: grows, stays exact
    for s in steps:
        keys, values = layer.update(s, s + 1)
    expected = torch.cat([k, *steps], dim=-2)
    assert torch.equal(keys, expected) and torch.equal(values, expected + 1)
    assert layer.get_seq_length() == 35
    layer.batch_select_indices(torch.tensor([2, 0, 0]))
    assert torch.equal(layer.keys, expected[[2, 0, 0]])


def test_draw_follows_the_distribution_and_never_picks_a_filtered_token() -> None:
    logits = torch.tensor([[0.0, 1.0, float("-inf"), 2.0, -1.0]]).repeat(40_000, 1)
    logp = torch.log_softmax(logits, dim=-1)
    tokens = draw(logp, torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens, minlength=5).double() / len(tokens)
    assert freq[2] == 0
    assert torch.allclose(freq, logp[0].exp().double(), atol=0.01)
    again = draw(logp[:50], torch.Generator().manual_seed(0))
    assert torch.equal(again, tokens[:50])  # one uniform per row: seeded and batch-stable
    with pytest.raises(RuntimeError, match="inf"):
        draw(torch.full((1, 3), float("nan")), None)
