"""Decoding through merged LoRA weights (rollout.merged_lora): the same tokens and logprobs as
peft's own forward, new adapter weights picked up at once, and only in the decoding thread."""

from __future__ import annotations

import threading
from contextlib import nullcontext

import pytest
import torch

from arena_core.engines import merged_lora, torch_backend
from arena_core.engines.base import SamplingParams
from arena_core.engines.merged_lora import merged_lora_linears
from arena_core.engines.torch_backend import TorchBackend
from arena_core.models import load_policy


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture()
def policy():
    pol = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 4, "alpha": 8}})
    torch.manual_seed(0)
    with torch.no_grad():  # a trained-looking adapter: B is zero at init, which hides mistakes
        for name, p in pol.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    return pol


def _adapter_calls(model: torch.nn.Module) -> list[int]:
    """A counter of peft's own adapter products (lora_A forwards) while the hooks are on."""
    calls = [0]

    def hook(*_):
        calls[0] += 1

    for name, m in model.named_modules():
        if name.endswith("lora_A.default"):
            m.register_forward_hook(hook)
    return calls


def _generate(backend: TorchBackend, merged: bool, monkeypatch) -> list:
    prompts = [backend.tokenizer.encode(t, add_special_tokens=False) for t in ["1+1=", "hi", "ab"]]
    if not merged:
        monkeypatch.setattr(torch_backend, "merged_lora_linears", lambda _m: nullcontext())
    out = backend.generate(prompts, SamplingParams(max_new_tokens=12, temperature=0))
    monkeypatch.setattr(torch_backend, "merged_lora_linears", merged_lora_linears)
    return out


def test_merged_decode_equals_peft_and_skips_its_adapter_products(policy, monkeypatch) -> None:
    backend = TorchBackend(policy.model, policy.tokenizer, device="cpu")
    calls = _adapter_calls(policy.model)
    plain = _generate(backend, False, monkeypatch)
    assert calls[0] > 0
    calls[0] = 0
    fast = _generate(backend, True, monkeypatch)
    assert calls[0] == 0, "the decode still ran peft's adapter products"
    for a, b in zip(fast, plain, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    lora_layers = merged_lora._lora_linears(policy.model)
    assert lora_layers and all("forward" not in m.__dict__ for m in lora_layers)  # restored


def test_an_optimizer_step_on_the_adapter_is_decoded_at_once(policy, monkeypatch) -> None:
    backend = TorchBackend(policy.model, policy.tokenizer, device="cpu")
    before = _generate(backend, True, monkeypatch)
    with torch.no_grad():  # in place, as an optimizer step updates the trainer's module
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.mul_(-3.0)
    after = _generate(backend, True, monkeypatch)
    reference = _generate(backend, False, monkeypatch)
    assert [c.token_ids for c in after] == [c.token_ids for c in reference]
    assert [c.logprobs for c in after] != [c.logprobs for c in before]
    for a, b in zip(after, reference, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_autograd_another_thread_and_a_disabled_adapter_take_peft(policy) -> None:
    model = policy.model
    calls = _adapter_calls(model)
    ids = torch.tensor([[1, 2, 3, 4]])
    seen: dict[str, int] = {}
    entered, done = threading.Event(), threading.Event()

    def learner() -> None:  # the trainer's thread, meanwhile, on the same module
        entered.wait()
        before = calls[0]
        with torch.no_grad():
            model(input_ids=ids)
        seen["learner"] = calls[0] - before
        done.set()

    thread = threading.Thread(target=learner)
    thread.start()
    with merged_lora_linears(model):
        entered.set()
        done.wait(30)
        before = calls[0]
        with torch.no_grad():
            fast = model(input_ids=ids).logits
        seen["decode"] = calls[0] - before
        before = calls[0]
        grad = model(input_ids=ids).logits
        seen["grad"] = calls[0] - before
        with torch.no_grad(), model.disable_adapter():
            base = model(input_ids=ids).logits
    thread.join()
    assert seen["decode"] == 0 and seen["learner"] > 0 and seen["grad"] > 0
    assert grad.requires_grad
    torch.testing.assert_close(fast, grad.detach(), rtol=1e-4, atol=1e-4)
    with torch.no_grad(), model.disable_adapter():
        torch.testing.assert_close(base, model(input_ids=ids).logits)
    assert not torch.allclose(base, fast, atol=1e-3)  # the adapter did matter
