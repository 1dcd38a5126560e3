"""Continuous batching on the torch engine: rows that join a running batch mid-decode, and rows
that leave it early, decode exactly the tokens each would alone (greedy), on the tiny model."""

from __future__ import annotations

import pytest

from arena_core.engines.base import SamplingParams
from arena_core.engines.continuous import ContinuousBatch, supports_continuous
from arena_core.engines.torch_backend import TorchBackend
from arena_core.models import load_policy

PROMPTS = [[5, 6, 7, 8, 9], [3, 4], [10, 11, 12, 13, 14, 15, 16, 17], [7]]
NEW = 12


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module", params=["auto", "modules"])
def backend(request) -> TorchBackend:
    """Decode steps through Arena's own step (`llama_decode`: arena:tiny is a Qwen2) and through
    transformers' modules."""
    policy = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}}, device="cpu")
    backend = TorchBackend(
        policy.model, policy.tokenizer, kv_cache="dynamic", decode_step=request.param
    )
    assert (backend.fast_step is not None) == (request.param == "auto")
    backend.eos_ids = set()  # every row decodes its full length
    return backend


def test_rows_joining_and_leaving_decode_what_they_would_alone(backend: TorchBackend) -> None:
    assert supports_continuous(backend)
    greedy = SamplingParams(max_new_tokens=NEW, temperature=0)
    alone = [backend.generate([p], greedy)[0].token_ids for p in PROMPTS]
    lengths = [NEW, 4, NEW, 7]  # rows 1 and 3 leave early
    joins = {0: [0], 2: [1, 2], 5: [3]}  # step -> rows that join before it
    batch = ContinuousBatch(backend)
    steps = []
    if backend.fast_step is not None:  # the batch's decode steps really take Arena's step
        run = backend.fast_step.step
        backend.fast_step.step = lambda *a, **k: steps.append(1) or run(*a, **k)
    out: dict[int, list[int]] = {i: [] for i in range(len(PROMPTS))}
    widths, step = [], 0
    while step in joins or len(batch):
        rows = joins.get(step, [])
        batch.join([PROMPTS[r] for r in rows], rows, greedy)
        tokens = batch.sample()
        keep = []
        for position, (row, token) in enumerate(zip(batch.owners, tokens, strict=True)):
            out[row].append(token)
            if len(out[row]) < lengths[row]:
                keep.append(position)
        batch.advance(keep)
        widths.append(batch.width)
        step += 1
    if backend.fast_step is not None:
        del backend.fast_step.step
        assert len(steps) >= NEW - 1
    for row, length in enumerate(lengths):
        assert out[row] == alone[row][:length], f"row {row}"
    # the padding of rows that left is cut: the cache tracks the live rows, not the history
    assert widths[-1] == 0 and max(widths) <= len(PROMPTS[2]) + NEW + 2
