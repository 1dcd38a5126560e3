"""`arena tinker serve --engine vllm`: the official SDK samples through Arena's vLLM engine.

The base is a tiny Llama with tied embeddings (SmolLM2's architecture; head_dim 64, which vLLM's
CPU attention needs), saved to a directory the SDK names as `base_model`. A client trains its LoRA (the
SDK's defaults: attention, MLP and the unembedding), and what vLLM samples through the saved
adapter must be what the learner computes for the same tokens: the adapter really is applied,
on every module it adapts. One engine for the module (start 20-70 s on 2 cores); skipped where
vLLM is not installed, except the check that says how to install it.
"""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tests.tinker.conftest import API_KEY

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(
    not HAS_VLLM, reason="vLLM not installed (pip install 'arena-rl[vllm]')"
)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Llama with tied embeddings (SmolLM2's architecture, vLLM's CPU head_dim 64)."""
    from tests.engines.test_vllm_backend import _tiny_model

    model, tok = _tiny_model(seed=3, arch="llama")
    out = tmp_path_factory.mktemp("vllm-tinker-base")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):
    from vllm.platforms import current_platform

    from arena_core.tinker.server import TinkerHost

    state = tmp_path_factory.mktemp("vllm-tinker-state")
    # on a CPU, the server says at start that vLLM's LoRA path is slow there
    cpu = current_platform.is_cpu()
    with pytest.warns(UserWarning, match="far slower") if cpu else contextlib.nullcontext():
        host = TinkerHost(port=0, api_key=API_KEY, state_dir=state, engine="vllm")
    host.start()
    yield host
    host.close()


@pytest.fixture(scope="module")
def vllm_service(vllm_server):
    import tinker

    client = tinker.ServiceClient(base_url=vllm_server.url, api_key=API_KEY)
    yield client
    client.close("success").result()


def _datum(prompt: list[int], tokens: list[int]):
    from tinker import types

    full = prompt + tokens
    return types.Datum(
        model_input=types.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={
            "target_tokens": np.array(full[1:], dtype=np.int64),
            "weights": np.ones(len(full) - 1, dtype=np.float32),
        },
    )


def _learner_logprobs(training, prompt: list[int], tokens: list[int]) -> np.ndarray:
    out = training.forward([_datum(prompt, tokens)], "cross_entropy").result()
    return np.asarray(out.loss_fn_outputs[0]["logprobs"].data, dtype=np.float32)[-len(tokens) :]


@needs_vllm
def test_vllm_samples_through_the_trained_adapter(vllm_service, vllm_server, base_dir) -> None:
    from tinker import types

    base = str(base_dir)
    training = vllm_service.create_lora_training_client(base_model=base, rank=8, seed=0).result()
    tok = training.get_tokenizer()
    prompt = tok.encode("1+2=", add_special_tokens=False)
    answer = tok.encode("<answer>", add_special_tokens=False)
    greedy = types.SamplingParams(max_tokens=6, temperature=0.0, stop=[])
    base_sampler = vllm_service.create_sampling_client(base_model=base).result()
    before = base_sampler.sample(types.ModelInput.from_ints(prompt), 1, greedy).result()
    # the base's greedy tokens and logprobs are an untrained adapter's (LoRA B starts at zero)
    seq = before.sequences[0]
    assert len(seq.tokens) == 6 and seq.stop_reason == "length"
    np.testing.assert_allclose(
        _learner_logprobs(training, prompt, seq.tokens), seq.logprobs, atol=1e-3
    )
    for _ in range(4):  # teach it an answer: its greedy continuation moves off the base's
        training.forward_backward([_datum(prompt, answer)], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    after = sampler.sample(types.ModelInput.from_ints(prompt), 1, greedy).result().sequences[0]
    assert after.tokens != seq.tokens  # the trained adapter, not the base, decoded these
    np.testing.assert_allclose(
        _learner_logprobs(training, prompt, after.tokens), after.logprobs, atol=1e-3
    )
    # topk_sample_logprobs: vLLM ranks each step itself, the greedy token first, with its logprob
    ranked = sampler.sample(
        types.ModelInput.from_ints(prompt), 1, greedy, topk_sample_logprobs=2
    ).result().sequences[0]  # fmt: skip
    assert ranked.tokens == after.tokens and len(ranked.topk_logprobs) == len(after.tokens)
    for row, token, logprob in zip(ranked.topk_logprobs, after.tokens, after.logprobs, strict=True):
        assert len(row) == 2 and row[0][0] == token and row[0][1] >= row[1][1]
        assert row[0][1] == pytest.approx(logprob, abs=1e-3)
    # sampled at temperature 1: each token's logprob is the learner's for that token
    drawn = sampler.sample(
        types.ModelInput.from_ints(prompt), 3, types.SamplingParams(max_tokens=5, seed=1)
    ).result()
    for s in drawn.sequences:
        np.testing.assert_allclose(
            _learner_logprobs(training, prompt, s.tokens), s.logprobs, atol=1e-3
        )
    # the base sampler still samples the base, beside the adapter now loaded in vLLM
    again = base_sampler.sample(types.ModelInput.from_ints(prompt), 1, greedy).result()
    assert again.sequences[0].tokens == seq.tokens
    # the engine that answered is vLLM's, and old snapshots' directories do not pile up
    samplers = vllm_server.service.hosts[base].engine
    assert samplers.backend.name == "vllm"
    for _ in range(6):
        snap = training.save_weights_and_get_sampling_client().result()
        snap.sample(types.ModelInput.from_ints(prompt), 1, greedy).result()
    assert len(list((samplers.root / "adapters").iterdir())) <= 4


@needs_vllm
def test_a_rank_past_the_engines_limit_is_refused_by_name(vllm_service, base_dir) -> None:
    from tinker import types

    big = vllm_service.create_lora_training_client(base_model=str(base_dir), rank=128).result()
    sampler = big.save_weights_and_get_sampling_client().result()
    with pytest.raises(Exception, match="rank-128 adapter is past the vLLM engine's limit of 64"):
        sampler.sample(
            types.ModelInput.from_ints([1, 2, 3]), 1, types.SamplingParams(max_tokens=2)
        ).result()


@needs_vllm
def test_which_bases_vllm_serves_an_unembedding_lora_for() -> None:
    """Read from vLLM's own model registry: an adapter it cannot load would kill its engine, so
    the server refuses one for Qwen2 with a 400 first (`VLLMSamplers.serve`)."""
    from arena_core.tinker.sampling import _vllm_adapts_unembedding

    assert _vllm_adapts_unembedding("LlamaForCausalLM")  # SmolLM2's architecture
    assert not _vllm_adapts_unembedding("Qwen2ForCausalLM")


def test_engine_vllm_without_vllm_says_how_to_install(monkeypatch, tmp_path: Path) -> None:
    import sys

    from arena_core.errors import ArenaError
    from arena_core.tinker.service import TinkerService
    from arena_core.tinker.store import Store

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ArenaError, match=r"pip install"):
        TinkerService(Store(tmp_path), engine="vllm")
    with pytest.raises(ArenaError, match="choose one of torch, vllm"):
        TinkerService(Store(tmp_path), engine="sglang")
