"""Members on one shared model: LoRA members own only their adapter tensors (never the base),
activating one re-points the model at its tensors, and a clone copies tensors and optimizer."""

from __future__ import annotations

import pytest
import torch

from arena_core.models import load_policy
from arena_core.population.members import MemberStore
from arena_core.run_parts.build import build_algorithm

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _store(lora_r: int) -> tuple[MemberStore, torch.nn.Module]:
    torch.manual_seed(0)
    policy = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": lora_r, "alpha": 8}})
    base = {"name": "grpo", "group_size": 2, "lr": 1e-3, "beta": 0.0}
    return MemberStore(policy.model, lambda hp: build_algorithm({**base, **hp})), policy.model


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([[1, 2, 3, 4]])).logits


def test_lora_members_hold_adapters_only_and_share_the_base() -> None:
    store, model = _store(lora_r=4)
    base = {n: p.data_ptr() for n, p in model.named_parameters() if not p.requires_grad}
    a = store.new(0, {"lr": 1e-3})
    assert store.names and all("lora_" in n for n in store.names)
    adapter_numel = sum(w.numel() for w in a.weights)
    total = sum(p.numel() for p in model.parameters())
    assert adapter_numel < 0.1 * total  # a member is its adapter, not a model
    with torch.no_grad():
        for w in a.weights:
            w.normal_(0, 0.5)  # a trained adapter (lora_B starts at 0: no effect)
    b = store.clone(a, 1, {"lr": 2e-3})
    assert b.parent == 0 and b.algorithm.lr == 2e-3
    assert b.optimizer.param_groups[0]["lr"] == 2e-3
    assert all(x.data_ptr() != y.data_ptr() for x, y in zip(a.weights, b.weights, strict=True))
    store.activate(a)
    out_a = _logits(model)
    with torch.no_grad():
        b.weights[-1].add_(1.0)  # the clone diverges
    store.activate(b)
    out_b = _logits(model)
    store.activate(a)
    assert torch.equal(_logits(model), out_a) and not torch.equal(out_a, out_b)
    # the frozen base was never copied or moved
    assert base == {n: p.data_ptr() for n, p in model.named_parameters() if not p.requires_grad}


def test_full_members_are_whole_copies_with_their_own_optimizer_state() -> None:
    store, model = _store(lora_r=0)
    a = store.new(0, {"lr": 1e-3})
    assert sum(w.numel() for w in a.weights) == sum(p.numel() for p in store.params)
    store.activate(a)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    a.optimizer.step()  # creates a's Adam moments
    b = store.clone(a, 1, {"lr": 1e-4})
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert torch.equal(sa[0]["exp_avg"], sb[0]["exp_avg"])
    assert sa[0]["exp_avg"].data_ptr() != sb[0]["exp_avg"].data_ptr()  # copied, not shared


def test_lora_fitness_generation_is_one_multi_lora_batch_equal_to_each_member_alone() -> None:
    from arena_core.engines.base import SamplingParams
    from arena_core.engines.torch_backend import TorchBackend
    from arena_core.population.fitness import _generate_all, batched_possible

    torch.manual_seed(0)
    policy = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 4, "alpha": 8}})
    base = {"name": "grpo", "group_size": 2, "lr": 1e-3, "beta": 0.0}
    store = MemberStore(policy.model, lambda hp: build_algorithm({**base, **hp}))
    members = [store.new(i, {"lr": 1e-3}) for i in range(3)]
    with torch.no_grad():
        for m in members:
            for w in m.weights:
                w.normal_(0, 0.3)
    backend = TorchBackend(policy.model, policy.tokenizer)
    assert batched_possible(policy.model, backend)
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    calls = []
    real_generate = backend.generate

    def counting(*args, **kwargs):  # count the engine calls (the real engine answers them)
        calls.append(kwargs.get("adapters"))
        return real_generate(*args, **kwargs)

    backend.generate = counting
    batched = _generate_all(
        members, store, backend, lambda p: p, prompts, max_new_tokens=6, stop=[]
    )
    assert len(calls) == 1 and len(calls[0]) == 9  # one call, one row per member per prompt
    backend.generate = real_generate
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    for m in members:
        store.activate(m)
        alone = backend.generate(prompts, params)
        assert [c.token_ids for c in batched[m.id]] == [c.token_ids for c in alone]
    assert list(policy.model.peft_config) == ["default"]  # the temporary adapters are gone
    assert all(p.requires_grad for p in store.params)
