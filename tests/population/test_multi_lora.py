"""Multi-LoRA decoding: one batch whose rows use different members' adapters equals, row by row,
generating each member alone (greedy), through the torch backend's KV-cached decode loop."""

from __future__ import annotations

import pytest
import torch

from arena_core.engines.base import SamplingParams
from arena_core.engines.multi_lora import BASE, MultiLoraError, RowAdapters, generate_population
from arena_core.engines.torch_backend import TorchBackend
from arena_core.models import load_policy
from arena_core.population.adapters import AdapterBank, members_as_adapters

MEMBERS = ["m0", "m1", "m2"]


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def population():
    """Three members whose adapters are far apart (random B), so their greedy outputs differ."""
    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 8}})
    bank = AdapterBank(policy.model)
    g = torch.Generator().manual_seed(0)
    for i, name in enumerate(MEMBERS):
        bank.add(name, seed=i)
        with torch.no_grad():
            for n, p in bank.model.named_parameters():
                if f"lora_B.{name}." in n:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return bank, TorchBackend(policy.model, policy.tokenizer, device="cpu")


def _prompts(backend: TorchBackend) -> list[list[int]]:
    texts = ["Q: 12 + 30 =", "Q: what is 7 times 8?", "Q: 100 - 1", "hello"]
    return [backend.tokenizer.encode(t, add_special_tokens=False) for t in texts]


def _alone(bank: AdapterBank, backend: TorchBackend, name: str, prompts, params):
    """The reference: the member active, the plain single-adapter forward (no adapter_names)."""
    with bank.using(name):
        return backend.generate(prompts, params)


@pytest.mark.parametrize("eos_stop", [False, True])
def test_mixed_batch_equals_each_member_alone(population, eos_stop) -> None:
    bank, backend = population
    prompts = _prompts(backend)
    params = SamplingParams(max_new_tokens=10, temperature=0)
    saved = set(backend.eos_ids)
    if eos_stop:  # rows then finish at different steps and leave the batch and its KV cache
        alone0 = _alone(bank, backend, "m0", prompts, params)
        backend.eos_ids = saved | {alone0[0].token_ids[2], alone0[2].token_ids[4]}
    try:
        # rows interleave members, with different prompt lengths (left padding per row)
        rows = [(m, p) for p in prompts for m in MEMBERS]
        mixed = backend.generate([p for _, p in rows], params, adapters=[m for m, _ in rows])
        alone = {m: _alone(bank, backend, m, prompts, params) for m in MEMBERS}
    finally:
        backend.eos_ids = saved
    for k, (member, _) in enumerate(rows):
        ref = alone[member][k // len(MEMBERS)]
        assert mixed[k].token_ids == ref.token_ids, (member, k)
        assert mixed[k].finish_reason == ref.finish_reason
        assert mixed[k].logprobs == pytest.approx(ref.logprobs, abs=1e-4)
    # the members really differ, so the equality above says each row used its own adapter
    outs = {m: [c.token_ids for c in alone[m]] for m in MEMBERS}
    assert outs["m0"] != outs["m1"] != outs["m2"] != outs["m0"]
    if eos_stop:
        assert {c.finish_reason for c in mixed} == {"stop", "length"}


def test_population_helper_and_base_rows(population) -> None:
    bank, backend = population
    prompts = _prompts(backend)[:2]
    params = SamplingParams(max_new_tokens=6, temperature=0)
    out = generate_population(backend, {"m2": prompts, BASE: prompts}, params)
    assert [c.token_ids for c in out["m2"]] == [
        c.token_ids for c in _alone(bank, backend, "m2", prompts, params)
    ]
    with bank.model.disable_adapter():
        base = backend.generate(prompts, params)
    assert [c.token_ids for c in out[BASE]] == [c.token_ids for c in base]


def test_bad_adapter_lists_are_explained(population) -> None:
    bank, backend = population
    prompts = _prompts(backend)[:2]
    params = SamplingParams(max_new_tokens=2, temperature=0)
    with pytest.raises(MultiLoraError, match=r"unknown adapter\(s\) \['m9'\].*'m0'"):
        backend.generate(prompts, params, adapters=["m0", "m9"])
    with pytest.raises(MultiLoraError, match="one adapter name per prompt"):
        backend.generate(prompts, params, adapters=["m0"])


def test_hook_path_equals_peft_per_row_path(population) -> None:
    """The fast hook (slices for contiguous rows, an index otherwise) computes what peft's own
    `adapter_names` forward computes, which is the fallback for LoRA variants."""
    bank, backend = population
    names = ["m0", "m0", "m1", BASE, "m2", "m1"]
    ids = torch.randint(3, 200, (len(names), 7), generator=torch.Generator().manual_seed(1))
    fast = RowAdapters(bank.model, names)
    assert fast.fast
    slow = RowAdapters(bank.model, names)
    slow.fast = False
    out = {}
    for key, ra in (("fast", fast), ("peft", slow)):
        with torch.no_grad(), ra.rows(range(len(names))) as extra:
            out[key] = bank.model(input_ids=ids, **extra).logits
    assert torch.allclose(out["fast"], out["peft"], atol=1e-4)
    # and the adapters are restored afterwards: the active member's plain forward is unchanged
    with torch.no_grad(), bank.using("m2"):
        alone = bank.model(input_ids=ids[4:5]).logits
    assert torch.allclose(out["fast"][4:5], alone, atol=1e-4)


def test_swapped_member_tensors_serve_as_one_multi_lora_batch() -> None:
    """A population kept as tensors swapped into one adapter (members.MemberStore's layout) is
    decoded in one batch through `members_as_adapters`: each row equals that member swapped in."""
    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 8}})
    model = policy.model
    params = [p for p in model.parameters() if p.requires_grad]
    g = torch.Generator().manual_seed(4)
    members = {
        f"m{i}": [
            torch.randn(p.shape, generator=g) * 0.3 if "lora_B" in n else p.detach().clone()
            for n, p in model.named_parameters()
            if p.requires_grad
        ]
        for i in range(2)
    }
    backend = TorchBackend(model, policy.tokenizer, device="cpu")
    prompts = _prompts(backend)[:2]
    sp = SamplingParams(max_new_tokens=8, temperature=0)
    alone = {}
    for name, tensors in members.items():  # the swap: point the adapter at the member's tensors
        for p, t in zip(params, tensors, strict=True):
            p.data = t
        alone[name] = [c.token_ids for c in backend.generate(prompts, sp)]
    assert alone["m0"] != alone["m1"]
    ptrs = {n: [t.data_ptr() for t in ts] for n, ts in members.items()}
    with members_as_adapters(model, members) as names:
        out = generate_population(backend, {n: prompts for n in names}, sp)
        shared = {n: p.data_ptr() for n, p in model.named_parameters() if ".m0." in n}
        assert set(shared.values()) <= set(ptrs["m0"])  # the member's own storage, not a copy
    assert {n: [c.token_ids for c in out[n]] for n in names} == alone
    assert set(model.peft_config) == {"default"}  # the temporary adapters are gone
    assert [p for p in model.parameters() if p.requires_grad] == params
