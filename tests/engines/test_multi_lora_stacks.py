"""The batched multi-LoRA forward (stacked adapters, two bmm per layer) against peft's own per-row
forward: adapters of different ranks and target modules, rows in any order (rows leaving the
batch: tests/population/test_multi_lora.py), and adapter weights changed in place between decode
steps."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from arena_core.engines.multi_lora import BASE, RowAdapters
from arena_core.models import load_policy


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def model():
    """m0: r=8 on q,k,v,o (the policy's LoRA); m1: r=4 on q and v only; both with random B."""
    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 8}})
    peft_model = policy.model
    peft_model.add_adapter(
        "m1", LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"])
    )
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return peft_model.eval(), policy.tokenizer


def _logits(model, names: list[str], ids: torch.Tensor, fast: bool) -> torch.Tensor:
    ra = RowAdapters(model, names)
    assert ra.fast
    ra.fast = fast
    with torch.no_grad(), ra.rows(range(len(names))) as extra:
        return model(input_ids=ids, **extra).logits


@pytest.mark.parametrize(
    "names",
    [
        ["default", "default", "m1", "m1"],  # one run of equal groups: reshaped, no gather
        ["m1", "default", BASE, "m1", "default"],  # interleaved, unequal: gathered and padded
        ["m1", BASE],  # a subset of the stacked adapters
    ],
)
def test_stacked_forward_equals_peft_per_row(model, names) -> None:
    peft_model, _ = model
    ids = torch.randint(3, 200, (len(names), 6), generator=torch.Generator().manual_seed(1))
    fast = _logits(peft_model, names, ids, fast=True)
    assert torch.allclose(fast, _logits(peft_model, names, ids, fast=False), atol=1e-4)
    assert not any("forward" in m.__dict__ for m in peft_model.modules())  # restored


def test_weights_changed_in_place_are_used_at_the_next_forward(model) -> None:
    """The stacks are built once per batch; an in-place update between decode steps (the async
    runtime loads weights there) must still reach the next forward."""
    peft_model, _ = model
    names = ["m1", "default", "m1", BASE]
    ids = torch.randint(3, 200, (len(names), 5), generator=torch.Generator().manual_seed(2))
    ra = RowAdapters(peft_model, names)
    b = [p for n, p in peft_model.named_parameters() if "lora_B.m1." in n]
    saved = [p.detach().clone() for p in b]
    try:
        with torch.no_grad(), ra.rows(range(len(names))):
            before = peft_model(input_ids=ids).logits
        with torch.no_grad():
            for p in b:
                p.mul_(-2.0)
        with torch.no_grad(), ra.rows(range(len(names))):  # the same RowAdapters, next step
            after = peft_model(input_ids=ids).logits
        want = _logits(peft_model, names, ids, fast=False)
    finally:
        with torch.no_grad():
            for p, s in zip(b, saved, strict=True):
                p.copy_(s)
    assert not torch.allclose(before[0], after[0], atol=1e-3)  # m1's rows changed
    assert torch.allclose(before[1], after[1], atol=1e-5)  # the others did not
    assert torch.allclose(after, want, atol=1e-4)
