"""The reference policy of a LoRA run: what KL penalties and DPO compare the policy with.

A fresh adapter starts at zero, so the reference is the base with the adapter disabled (peft's
`disable_adapter`): no second model in memory. A run that continues another run's adapter
(`model.init_from=RUN model.init_adapter=continue`) starts from base + that adapter, so
disabling the adapter would give the wrong reference (the original base, not the starting
point). For it `keep_start_as_reference` stores a frozen copy of the adapter's starting
tensors (the size of the adapter, nothing of the base), and `reference_forward` swaps them into
the adapter's parameters for the duration of a no-grad forward and back again. Swapping
`.data` moves no memory; the autograd graph of the policy is untouched because the original
tensors are back before any backward pass runs. This is cheaper than a second peft adapter
(which every checkpoint would then save) and exactly the starting point, unlike merging the
adapter into the base (which would no longer leave one adapter on the original base to export,
serve beside others, or continue again).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

_ATTR = "_arena_reference_adapter"


def keep_start_as_reference(model: nn.Module) -> None:
    """Freeze a copy of `model`'s trainable (adapter) tensors as its reference."""
    start = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    setattr(model, _ATTR, start)


def has_start_reference(model: nn.Module) -> bool:
    return getattr(model, _ATTR, None) is not None


@contextlib.contextmanager
def reference_forward(model: nn.Module) -> Iterator[nn.Module]:
    """`model` computing the reference policy, without gradient: the starting adapter when one
    is kept (see the module docstring), else the base with the adapter disabled."""
    start = getattr(model, _ATTR, None)
    if start is None:
        if not hasattr(model, "disable_adapter"):
            raise ValueError("a reference forward needs a LoRA model (or a frozen copy)")
        with torch.no_grad(), model.disable_adapter():  # type: ignore[operator]
            yield model
        return
    params = dict(model.named_parameters())
    swapped: list[tuple[nn.Parameter, str]] = []
    try:
        for name, ref in start.items():
            p = params[name]
            if ref.device != p.device or ref.dtype != p.dtype:  # the model moved since
                ref = start[name] = ref.to(device=p.device, dtype=p.dtype)
            p.data, start[name] = ref, p.data
            swapped.append((p, name))
        with torch.no_grad():
            yield model
    finally:
        for p, name in swapped:
            p.data, start[name] = start[name], p.data
