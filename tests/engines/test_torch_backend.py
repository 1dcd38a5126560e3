"""TorchBackend: matches HF greedy, exact behaviour logprobs, stop strings, seeds, weight updates."""

from __future__ import annotations

import pytest
import torch

from arena_core.engines.base import GenerationBackend, SamplingParams
from arena_core.engines.torch_backend import TorchBackend, TorchBackendConfig
from arena_core.models import load_policy


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def policy():
    return load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})


@pytest.fixture(scope="module")
def backend(policy):
    return TorchBackend(policy.model, policy.tokenizer)


def _prompts(backend: TorchBackend, n: int = 6) -> list[list[int]]:
    # Different lengths, so left padding and per-row positions matter.
    return [
        backend.encode_chat([{"role": "user", "content": "add " + "7" * (i + 1)}]) for i in range(n)
    ]


def test_is_a_generation_backend(backend) -> None:
    assert isinstance(backend, GenerationBackend)


def test_greedy_equals_hf_generate(policy, backend) -> None:
    prompts = _prompts(backend)
    out = backend.generate(prompts, SamplingParams(max_new_tokens=12, temperature=0))
    enc = policy.tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
    with torch.no_grad():
        ref = policy.model.generate(**enc, max_new_tokens=12, do_sample=False)
    width = enc["input_ids"].shape[1]
    for i, c in enumerate(out):
        hf = ref[i, width:].tolist()
        assert c.token_ids == hf[: len(c.token_ids)]
        assert c.prompt_ids == prompts[i]
        assert len(c.logprobs) == len(c.token_ids) == len(c.versions)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_recomputed_log_softmax(policy, backend, temperature) -> None:
    prompts = _prompts(backend, 4)
    params = SamplingParams(max_new_tokens=10, temperature=temperature, seed=3)
    for c in backend.generate(prompts, params):
        ids = torch.tensor([c.prompt_ids + c.token_ids])
        with torch.no_grad():
            logits = policy.model(input_ids=ids).logits[0].float()
        start = len(c.prompt_ids) - 1
        logp = torch.log_softmax(logits[start : start + len(c.token_ids)] / temperature, dim=-1)
        ref = logp.gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-5)


def test_top_k_one_equals_greedy(backend) -> None:
    prompts = _prompts(backend, 3)
    greedy = backend.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0))
    top1 = backend.generate(prompts, SamplingParams(max_new_tokens=8, temperature=1.3, top_k=1))
    assert [c.token_ids for c in greedy] == [c.token_ids for c in top1]
    assert all(abs(lp) < 1e-6 for c in top1 for lp in c.logprobs)  # a one-token distribution


def test_top_p_keeps_logprobs_of_the_filtered_distribution(backend) -> None:
    out = backend.generate(
        _prompts(backend, 2), SamplingParams(max_new_tokens=6, top_p=0.5, seed=1)
    )
    assert all(lp <= 0 for c in out for lp in c.logprobs)


def test_seeded_sampling_is_reproducible(backend) -> None:
    prompts = _prompts(backend, 4)
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=7)
    a, b = backend.generate(prompts, params), backend.generate(prompts, params)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    c = backend.generate(prompts, SamplingParams(max_new_tokens=10, temperature=1.0, seed=8))
    assert [x.token_ids for x in a] != [x.token_ids for x in c]


def test_stop_string_truncates_and_is_kept(backend) -> None:
    prompts = _prompts(backend, 4)
    free = backend.generate(prompts, SamplingParams(max_new_tokens=12, temperature=0))
    # Pick a stop string from what greedy decoding actually produces: chars 2..4 of row 0.
    stop = free[0].text[2:4]
    assert len(stop) == 2
    out = backend.generate(prompts, SamplingParams(max_new_tokens=12, temperature=0, stop=[stop]))
    row = out[0]
    assert row.finish_reason == "stop" and row.text.endswith(stop)
    assert row.text == free[0].text[: free[0].text.find(stop) + len(stop)]
    assert row.token_ids == free[0].token_ids[: len(row.token_ids)]
    for a, b in zip(out[1:], free[1:], strict=True):  # other rows: same tokens up to their stop
        assert b.token_ids[: len(a.token_ids)] == a.token_ids


def test_eos_stops_a_row_and_is_included(policy) -> None:
    model, tok = policy.model, policy.tokenizer
    backend = TorchBackend(model, tok)
    prompt = backend.encode_chat([{"role": "user", "content": "hi"}])
    first = backend.generate([prompt], SamplingParams(max_new_tokens=1, temperature=0))[0]
    backend.eos_ids = {first.token_ids[0]}  # make the first greedy token count as EOS
    out = backend.generate([prompt, prompt], SamplingParams(max_new_tokens=8, temperature=0))
    assert all(c.token_ids == first.token_ids and c.finish_reason == "stop" for c in out)


def test_stop_token_ids_end_a_row_and_ignore_eos_lets_it_run(policy) -> None:
    backend = TorchBackend(policy.model, policy.tokenizer)
    prompt = backend.encode_chat([{"role": "user", "content": "hi"}])
    free = backend.generate([prompt], SamplingParams(max_new_tokens=8, temperature=0))[0]
    third = free.token_ids[2]
    stopped = backend.generate(
        [prompt], SamplingParams(max_new_tokens=8, temperature=0, stop_token_ids=[third])
    )[0]
    cut = free.token_ids.index(third) + 1  # the stop token is kept, as EOS is
    assert stopped.token_ids == free.token_ids[:cut] and stopped.finish_reason == "stop"
    backend.eos_ids = {free.token_ids[0]}  # the first greedy token now counts as EOS ...
    ended = backend.generate([prompt], SamplingParams(max_new_tokens=8, temperature=0))[0]
    assert ended.token_ids == free.token_ids[:1]
    ran = backend.generate(  # ... unless EOS ends nothing: only max_new_tokens does
        [prompt], SamplingParams(max_new_tokens=8, temperature=0, ignore_eos=True)
    )[0]
    assert ran.token_ids == free.token_ids and ran.finish_reason == free.finish_reason


def test_max_new_tokens_and_batching_chunks(policy) -> None:
    backend = TorchBackend(policy.model, policy.tokenizer, max_batch_size=2)
    out = backend.generate(_prompts(backend, 5), SamplingParams(max_new_tokens=5, temperature=0))
    whole = TorchBackend(policy.model, policy.tokenizer).generate(
        _prompts(backend, 5), SamplingParams(max_new_tokens=5, temperature=0)
    )
    assert [c.token_ids for c in out] == [c.token_ids for c in whole]
    assert all(len(c.token_ids) <= 5 for c in out)
    assert all(c.finish_reason == "length" for c in out if len(c.token_ids) == 5)
    assert backend.stats["generated_tokens"] > 0 and backend.stats["tokens_per_second"] > 0


def test_update_weights_versions_and_state_dict(policy) -> None:
    other = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})
    backend = TorchBackend(other.model, other.tokenizer)
    prompts = _prompts(backend, 2)
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    backend.update_weights(other.model, version=3)
    assert backend.policy_version == 3
    assert all(v == 3 for c in backend.generate(prompts, greedy) for v in c.versions)
    state = {k: v.clone() for k, v in other.model.state_dict().items()}
    with torch.no_grad():
        for p in other.model.parameters():
            p.add_(0.5)
    changed = backend.generate(prompts, greedy)
    backend.update_weights(state, version=4)
    restored = backend.generate(prompts, greedy)
    reference = TorchBackend(policy.model, policy.tokenizer).generate(prompts, greedy)
    assert [c.token_ids for c in restored] == [c.token_ids for c in reference]
    assert [c.token_ids for c in changed] != [c.token_ids for c in reference]
    assert backend.policy_version == 4


def test_generation_keeps_the_training_flag(policy) -> None:
    policy.model.train()
    try:
        TorchBackend(policy.model, policy.tokenizer).generate_text(
            ["abc"], SamplingParams(max_new_tokens=2)
        )
        assert policy.model.training
    finally:
        policy.model.eval()


def test_registered_backend_builds_from_policy(policy) -> None:
    from arena_core.plugin_loader import get_plugins

    entry = get_plugins().registries.backends.get("torch")
    assert entry.schema is TorchBackendConfig
    backend = entry.obj(policy, {"name": "torch", "max_batch_size": 4, "kv_cache": "dynamic"})
    assert isinstance(backend, TorchBackend) and backend.max_batch_size == 4
    assert backend.kv_cache == "dynamic"
