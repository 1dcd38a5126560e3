"""Decode through bf16 copies of the linears' weights while the trainer keeps fp32
(`backend.decode_dtype=bfloat16`, CPU torch engine).

Why: a CPU decode step streams every weight from memory for a few rows of math, and this work is
bound by bytes and by the matmul units. bf16 halves the bytes, and a CPU with AMX or AVX-512 bf16
runs the bf16 matmul 2-4x faster than fp32 (SmolLM2's shapes at 64 rows on an Intel Xeon: the
576 x 49152 LM head 64 -> 16 ms, a 576 x 1536 stack 2x; `bench/real_model.py` measures the whole
engine). It is what vLLM does on a GPU: the sampler is bf16, the learner fp32, and the learner's
truncated importance weight (`algo.is_correction`, on by default) corrects the small difference
between the logprobs the engine sampled from and the learner's.

How: like `merged_lora`, only in the thread that entered `decode_dtype_linears(model, dtype)`
and only without autograd, each `nn.Linear` (and each LoRA linear, through its merged weight)
multiplies `x` cast to `dtype` by a cached `dtype` copy of its weight and hands back the input's
dtype, so norms, rotary, attention, the KV cache and the sampler stay fp32. A copy is rebuilt
when its weight changed (in-place version counter, address, device): after an optimizer step,
only the weights the step touched. Memory: one bf16 copy of the model's linears (SmolLM2: 270 MB).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from arena_core.engines.thread_forwards import ThreadForwards

DTYPES = {"float32": None, "bfloat16": torch.bfloat16}
_LOCAL = threading.local()


def current() -> torch.dtype | None:
    """The decode dtype of the calling thread's block, or None outside one (or fp32)."""
    return getattr(_LOCAL, "dtype", None)


def cast_copy(
    owner: nn.Module, slot: str, tensor: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """`tensor` in `dtype`, cached on `owner` under `slot` until `tensor` changes."""
    key = (tensor._version, tensor.data_ptr(), tensor.device, dtype)
    cached = owner.__dict__.get(slot)
    if cached is not None and cached[0] == key:
        return cached[1]
    with torch.no_grad():
        copy = tensor.detach().to(dtype).contiguous()
    owner.__dict__[slot] = (key, copy)
    return copy


def low_precision_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype
) -> torch.Tensor:
    """`x @ weight.T + bias` in `dtype` (weight already cast), returned in `x`'s dtype."""
    out = F.linear(x.to(dtype), weight, None if bias is None else bias.to(dtype))
    return out.to(x.dtype)


def _forward(self: nn.Linear, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    dtype = current()
    if (
        dtype is not None
        and _FORWARDS.active()
        and not torch.is_grad_enabled()
        and not args
        and not kwargs
        and x.dtype is self.weight.dtype
        and x.dtype is not dtype
    ):
        weight = cast_copy(self, "_arena_decode_weight", self.weight, dtype)
        return low_precision_linear(x, weight, self.bias, dtype)
    return type(self).forward(self, x, *args, **kwargs)


_FORWARDS = ThreadForwards(_forward)


@contextmanager
def decode_dtype_linears(model: nn.Module, dtype: torch.dtype | None) -> Iterator[None]:
    """Inside the block, this thread's no-grad forwards of `model`'s linears run in `dtype`
    (see the module doc); None (fp32) changes nothing. Re-entrant, per thread."""
    if dtype is None:
        yield
        return
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    previous = current()
    _LOCAL.dtype = dtype
    try:
        with _FORWARDS.block(model, linears):
            yield
    finally:
        _LOCAL.dtype = previous
