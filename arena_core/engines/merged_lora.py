"""Decode through LoRA layers as one product: `x @ (W + s*B@A)^T` instead of peft's four.

Why: peft's LoRA `Linear.forward` computes the base product, then `lora_A`, `lora_B`, a scale and
an add, each a separate call with its own Python and dispatch overhead; with r16 adapters on
q, k, v and o that is 120 adapted linears and ~600 extra small ops per SmolLM2 decode step, and a
decode that generates through the unmerged adapter ran ~1.5x slower than the plain model. Merging
the adapter into the weights in place (peft's `merge_adapter`) is not an option while the trainer
owns the module: a learner thread may be computing with it at the same moment, and repeated
merge/unmerge drifts the fp32 weights.

So each adapted linear keeps a merged copy of its weight for decoding (`W + scale * B @ A`, the
adapter's own `get_delta_weight`), rebuilt only when the base weight, A, B or the scale changed
(the tensors' in-place version counters; an optimizer step bumps them), and only inside
`merged_lora_linears(model)`, only in the thread that entered it and only without autograd.
Everything else (a learner thread, autograd, disabled or several active adapters, DoRA and other
variants, a bias on B, per-row adapters) takes peft's own forward. The merged product is the
same sum in another order (relative differences ~1e-6).

Memory: one extra copy of each adapted weight (q, k, v, o of SmolLM2: ~106 MB in fp32, half in
a bf16 decode, `decode_dtype`, which keeps only the bf16 copy), freed when the model is.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

from arena_core.engines import decode_dtype
from arena_core.engines.onednn_linear import linear
from arena_core.engines.thread_forwards import ThreadForwards

_layers: weakref.WeakKeyDictionary[nn.Module, list[nn.Module]] = weakref.WeakKeyDictionary()


def _lora_linears(model: nn.Module) -> list[nn.Module]:
    """The model's peft LoRA `Linear` layers over a plain `nn.Linear` (found once per model)."""
    found = _layers.get(model)
    if found is None:
        from peft.tuners.lora.layer import Linear as LoraLinear  # on first use: ~1.5 s import

        lora = [m for m in model.modules() if type(m) is LoraLinear]
        found = _layers[model] = [m for m in lora if type(m.base_layer) is nn.Linear]
    return found


def _single_adapter(layer: Any) -> str | None:
    """The one plain LoRA adapter this layer applies now, or None when peft must run it."""
    if layer.disable_adapters or layer.merged or getattr(layer, "fan_in_fan_out", False):
        return None
    active = [a for a in layer.active_adapters if a in layer.lora_A]
    if len(active) != 1:
        return None
    name = active[0]
    if name in getattr(layer, "lora_variant", {}) or layer.use_dora.get(name, False):
        return None
    if getattr(layer.lora_B[name], "bias", None) is not None:
        return None
    return name


def merged_weight(layer: Any, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`W + scale * B @ A` of `layer`'s adapter `name` (cast to `dtype` for a bf16 decode,
    `decode_dtype`: only that copy is kept), rebuilt only when an input changed."""
    base = layer.base_layer.weight
    a, b = layer.lora_A[name].weight, layer.lora_B[name].weight
    # in-place updates bump _version; a replaced or moved tensor (`.data =`, `.to()`) has
    # another address
    key = (name, float(layer.scaling[name]), dtype)
    key += tuple((t._version, t.data_ptr(), t.device) for t in (base, a, b))
    slot = "_arena_merged" if dtype is None else "_arena_merged_lowp"
    cached = layer.__dict__.get(slot)
    if cached is not None and cached[0] == key:
        return cached[1]
    with torch.no_grad():
        weight = base + layer.get_delta_weight(name).to(base.dtype)
        weight = (weight if dtype is None else weight.to(dtype)).contiguous()
    layer.__dict__[slot] = (key, weight)
    return weight


def _forward(self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    if _FORWARDS.active() and not torch.is_grad_enabled() and not args and not kwargs:
        name = _single_adapter(self) if x.dtype is self.base_layer.weight.dtype else None
        if name is not None:
            dtype = decode_dtype.current()
            if dtype is not None and dtype is not x.dtype:
                weight = merged_weight(self, name, dtype)
                return decode_dtype.low_precision_linear(x, weight, self.base_layer.bias, dtype)
            return linear(x, merged_weight(self, name), self.base_layer.bias)
    return type(self).forward(self, x, *args, **kwargs)


_FORWARDS = ThreadForwards(_forward)


@contextmanager
def merged_lora_linears(model: nn.Module) -> Iterator[None]:
    """Inside the block, this thread's no-grad forwards of `model`'s LoRA linears use merged
    weights (see the module doc). Re-entrant and safe with several threads (`ThreadForwards`)."""
    layers = _lora_linears(model)
    with _FORWARDS.block(model, layers) if layers else nullcontext():
        yield
