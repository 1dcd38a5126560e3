"""The torch engine's graph-ready decode step (static_decode), run eagerly on the CPU.

On CUDA the step is captured once per (batch, length) bucket and replayed; here the very same
fixed-buffer step function runs without capture, and must decode what the dynamic-cache path
decodes. Capture itself is chosen only on CUDA; `backend.cuda_graphs=on` elsewhere is an error.
"""

from __future__ import annotations

import pytest
import torch

from arena_core.engines.base import SamplingParams
from arena_core.engines.static_decode import batch_bucket, length_bucket, resolve_cuda_graphs
from arena_core.engines.torch_backend import TorchBackend, _factory
from arena_core.errors import ConfigError
from arena_core.models import load_policy


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def policy():
    return load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}}, device="cpu")


PROMPTS = [[5, 6, 7, 8, 9], [3, 4], [10, 11, 12], [7], [20, 21, 22, 23]]  # 5 rows: bucket 8


def _pair(policy) -> tuple[TorchBackend, TorchBackend]:
    dynamic = TorchBackend(policy.model, policy.tokenizer, kv_cache="dynamic")
    static = TorchBackend(policy.model, policy.tokenizer, kv_cache="static")
    return dynamic, static


def test_the_graph_ready_step_decodes_what_the_eager_path_does(policy) -> None:
    dynamic, static = _pair(policy)
    assert not static.cuda_graphs  # on the CPU the step runs eagerly, never captured
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    a, b = dynamic.generate(PROMPTS, greedy), static.generate(PROMPTS, greedy)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    flat = [[x for c in out for x in c.logprobs] for out in (a, b)]
    assert flat[0] == pytest.approx(flat[1], abs=1e-5)
    (decoder,) = static.decoders._decoders.values()
    assert (decoder.batch, decoder.cache_len) == (8, 64)  # 5 rows padded, 5+12 slots bucketed
    assert decoder.graph is None and static.decoders.captured == 0

    # seeded sampling: padded rows are never sampled, so the draws are the unpadded batch's
    for backend in (dynamic, static):
        backend.eos_ids = set()  # every row runs to the end in both paths
    sampled = SamplingParams(max_new_tokens=8, temperature=1.0, seed=3)
    a, b = dynamic.generate(PROMPTS[:3], sampled), static.generate(PROMPTS[:3], sampled)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    # a call with nearby shapes reuses a decoder (on CUDA: replays its graph)
    static.generate(PROMPTS[:4], greedy)
    assert sorted(static.decoders._decoders) == [(4, 64), (8, 64)]


def test_buckets() -> None:
    assert [batch_bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 64, 65)] == [
        1,
        2,
        4,
        4,
        8,
        8,
        16,
        64,
        72,
    ]
    assert [length_bucket(n) for n in (1, 64, 65, 200)] == [64, 64, 128, 256]


def test_capture_is_chosen_only_on_cuda(policy) -> None:
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_cuda_graphs("auto", cuda, "static")
    assert not resolve_cuda_graphs("auto", cuda, "dynamic")
    assert not resolve_cuda_graphs("auto", cpu, "static")
    assert not resolve_cuda_graphs("off", cuda, "static")
    with pytest.raises(ConfigError, match="kv_cache=dynamic"):
        resolve_cuda_graphs("on", cuda, "dynamic")
    # `on` on the CPU: a config error from the backend section, naming the key and the fix
    with pytest.raises(ConfigError, match=r"backend\.cuda_graphs=on.*cpu.*cuda_graphs=auto"):
        _factory(policy, {"name": "torch", "kv_cache": "static", "cuda_graphs": "on"})
