"""AdapterBank: members are adapters on one shared base; clones copy adapter + optimizer only."""

from __future__ import annotations

import pytest
import torch

from arena_core.models import load_policy
from arena_core.population.adapters import AdapterBank, AdapterBankError


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


def _bank(r: int = 4) -> AdapterBank:
    policy = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": r}})
    return AdapterBank(policy.model)


def _train_step(bank: AdapterBank, name: str, seed: int = 0) -> None:
    model = bank.activate(name)
    model.train()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 200, (2, 12), generator=g)
    model(input_ids=ids, labels=ids).loss.backward()
    bank.optimizer(name).step()
    bank.optimizer(name).zero_grad(set_to_none=True)
    model.eval()


def _logits(bank: AdapterBank, name: str) -> torch.Tensor:
    ids = torch.arange(5, 25)[None]
    with torch.no_grad(), bank.using(name) as model:
        return model(input_ids=ids).logits


@pytest.fixture(scope="module")
def trained():
    """m0 trained two steps at a large lr; m1 fresh; m2 cloned from m0 (with lr overridden)."""
    torch.manual_seed(0)
    bank = _bank()
    base_ptrs = {n: p.data_ptr() for n, p in bank.model.named_parameters() if "lora_" not in n}
    bank.add("m0", hparams={"lr": 1e-2}, seed=0)
    bank.add("m1", hparams={"lr": 1e-2}, seed=1)
    before = bank.tensor_bytes()
    _train_step(bank, "m0", 0)
    _train_step(bank, "m0", 1)
    after_train = bank.tensor_bytes()
    bank.add("m2", from_member="m0", hparams={"lr": 3e-3})
    return bank, base_ptrs, before, after_train


def test_clone_shares_the_base_and_copies_only_adapter_and_optimizer(trained) -> None:
    bank, base_ptrs, before, after_train = trained
    # the base tensors are the very same storage: nothing of the base was copied
    now = {n: p.data_ptr() for n, p in bank.model.named_parameters() if "lora_" not in n}
    assert now == base_ptrs
    grown = bank.tensor_bytes()
    assert grown["base"] == before["base"]
    adapter = sum(p.numel() * p.element_size() for p in bank.parameters("m0"))
    assert grown["members"] == before["members"] + adapter  # exactly one more adapter
    assert adapter < before["base"] / 20  # and an adapter is small next to the base
    # AdamW moments copied into new storage (two moments per parameter, plus step counters)
    moments = grown["optimizer"] - after_train["optimizer"]
    assert 2 * adapter <= moments <= 2 * adapter + 64 * len(bank.parameters("m0"))
    base_ids = {id(p) for n, p in bank.model.named_parameters() if "lora_" not in n}
    assert not base_ids & {id(p) for p in bank.parameters("m2")}


def test_clone_equals_source_and_is_independent(trained) -> None:
    bank, *_ = trained
    for a, b in zip(bank.parameters("m0"), bank.parameters("m2"), strict=True):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    assert torch.allclose(_logits(bank, "m0"), _logits(bank, "m2"))
    s0, s2 = bank.optimizer("m0").state_dict(), bank.optimizer("m2").state_dict()
    for k, v in s0["state"].items():
        assert torch.equal(v["exp_avg"], s2["state"][k]["exp_avg"])
        assert int(v["step"]) == int(s2["state"][k]["step"]) == 2
    # hparams copied, then overridden; the optimizer follows the clone's own lr
    assert bank.hparams("m2") == {"lr": 3e-3}
    assert bank.optimizer("m2").param_groups[0]["lr"] == 3e-3
    assert bank.optimizer("m0").param_groups[0]["lr"] == 1e-2


def test_trained_member_differs_and_training_one_leaves_others(trained) -> None:
    bank, *_ = trained
    fresh = _logits(bank, "m1")
    with torch.no_grad(), bank.model.disable_adapter():
        base = bank.model(input_ids=torch.arange(5, 25)[None]).logits
    assert torch.allclose(fresh, base)  # a fresh adapter starts as the base (B = 0)
    assert not torch.allclose(_logits(bank, "m0"), fresh, atol=1e-4)
    m0_before = [p.detach().clone() for p in bank.parameters("m0")]
    _train_step(bank, "m2", 5)
    assert all(torch.equal(a, b) for a, b in zip(m0_before, bank.parameters("m0"), strict=True))
    assert not torch.allclose(_logits(bank, "m2"), _logits(bank, "m0"), atol=1e-5)
    # only the active member's adapter is trainable
    bank.activate("m1")
    trainable = {id(p) for p in bank.model.parameters() if p.requires_grad}
    assert trainable == {id(p) for p in bank.parameters("m1")}


def test_state_round_trip_restores_weights_optimizer_and_hparams(trained) -> None:
    bank, *_ = trained
    state = bank.state()
    other = _bank()
    other.load_state(state)
    assert other.names() == bank.names()
    for name in bank.names():
        assert torch.allclose(_logits(other, name), _logits(bank, name))
        assert other.hparams(name) == bank.hparams(name)
        assert other.optimizer(name).param_groups[0]["lr"] == bank.hparams(name)["lr"]
    assert int(other.optimizer("m0").state_dict()["state"][0]["step"]) == 2
    assert set(other.model.peft_config) == set(bank.names())  # peft's "default" was dropped


def test_remove_frees_the_adapter_and_names_are_checked(trained) -> None:
    bank = _bank()
    bank.add("ma")
    bank.add("mb", from_member="ma")
    bank.remove("ma")
    assert bank.names() == ["mb"] and set(bank.model.peft_config) == {"mb"}
    assert bank.active == "mb"
    with pytest.raises(AdapterBankError, match="no member named 'ma'"):
        bank.add("mc", from_member="ma")
    with pytest.raises(AdapterBankError, match="exists already"):
        bank.add("mb")
    for bad in ("has space", "weight", "a"):
        with pytest.raises(AdapterBankError, match="not valid"):
            bank.add(bad)


def test_full_fine_tuning_members_are_whole_copies() -> None:
    policy = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})
    bank = AdapterBank(policy.model)
    bank.add("f0", hparams={"lr": 1e-3})
    bank.add("f1")
    assert bank.module("f0") is policy.model  # the first member adopts the given module
    _train_step(bank, "f0")
    clone = bank.add("f2", from_member="f0")
    ptrs_a = {p.data_ptr() for p in bank.parameters("f0")}
    assert not ptrs_a & {p.data_ptr() for p in clone.params}
    assert torch.allclose(_logits(bank, "f0"), _logits(bank, "f2"))
    assert not torch.allclose(_logits(bank, "f0"), _logits(bank, "f1"))
    with pytest.raises(AdapterBankError, match="from_member"):
        bank.add("f3")  # the initial weights are gone once training started
