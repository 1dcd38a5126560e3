"""The torch engine's KV cache and attention on the CPU: nothing copied per token that need not be.

Why each piece exists (measured on SmolLM2-135M, 30 layers, 9 query / 3 KV heads, a GRPO batch of
64 rows and ~300 positions; `bench/real_model.py` reruns it):

- transformers' `DynamicCache` grows by `torch.cat`, so every decode step copies the whole cache of
  every layer: O(length^2) memory traffic over a completion, as much time as the matmuls late in a
  256-token decode. `GrowingLayer` keeps one buffer per layer with room for the batch's real
  length (prompt width + `max_new_tokens`, never `max_position_embeddings`), writes each new
  position in place and hands attention a view.
- HF's `sdpa` attention repeats the KV heads to the query heads (`repeat_kv`) whenever there is an
  attention mask, which a left-padded batch always has: another full copy of K and V per layer per
  step, 3x the cache for a 9/3 GQA model. `gqa_attention` asks SDPA for grouped-query attention
  with the mask instead (`enable_gqa=True`, torch >= 2.5), the same numbers without the copy.
- A decode step's attention (one query position) is two batched matmuls, not SDPA's kernel
  (`decode_step_attention`: ~1.4x faster at that shape), over keys stored transposed
  (`GrowingLayer`: `K^T` row-major, the positions contiguous; its scores ran 2-3x faster
  than over [.., positions, dim] keys).
- Prefix sharing: the rows of a GRPO group share one prompt, so the engine prefills each distinct
  prompt once and `DynamicCache.batch_select_indices` copies its cache into the group's rows
  (see `TorchBackend._generate_dynamic`).

`decode_attention(model)` switches the model to `gqa_attention` for the decode block only (the
learner keeps its own implementation); the function is exact SDPA with autograd, so a learner
thread that runs the shared module meanwhile computes the same values either way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

GQA_ATTENTION = "arena_gqa_sdpa"


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` with a preallocated buffer: appends write in place, no `torch.cat`.

    `keys`/`values` are views of the first `length` positions, so everything that reads a
    DynamicLayer (mask sizes, `get_seq_length`, attention) sees the same shapes as before. A write
    past the buffer grows it geometrically (a caller that underestimated the length stays correct).

    The keys are stored transposed, [batch, heads, dim, positions], and `keys` is a transposed
    view of them. Why: a decode step scores one query against every key, `q @ K^T`, and
    `K^T` laid out this way is a plain row-major operand with the positions contiguous. As the
    transposed view of [.., positions, dim] keys, CPU `bmm` ran 2-3x slower at SmolLM2's
    decode shapes (192 matrices of 3 query heads x 64 against 32-256 positions), most of a
    decode step's attention on a real model. The values stay [.., positions, dim], the layout
    `probs @ V` wants. The CPU kernel's bf16 cache builds on it (`cpu_attention.KernelCacheLayer`).
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = max(1, int(capacity))
        self.length = 0
        self._k: torch.Tensor | None = None  # [batch, heads, dim, capacity]: transposed
        self._v: torch.Tensor | None = None  # [batch, heads, capacity, dim]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self._write(key_states, value_states)
        return self.positions()

    def positions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every position's K (the transposed view) and V, in the buffers' dtype."""
        self._views()
        return self.keys, self.values

    def _write(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if self._k is None or end > self._k.shape[-1]:
            self._grow(key_states, value_states, end)
        assert self._k is not None and self._v is not None
        self._put_keys(key_states, end)
        self._v[:, :, self.length : end].copy_(value_states)
        self.length = end

    def _put_keys(self, key_states: torch.Tensor, end: int) -> None:
        assert self._k is not None
        self._k[..., self.length : end].copy_(key_states.transpose(-1, -2))

    def _views(self) -> None:
        assert self._k is not None and self._v is not None
        self.keys = self._k[..., : self.length].transpose(-1, -2)
        self.values = self._v[:, :, : self.length]

    def _grow(
        self, k: torch.Tensor, v: torch.Tensor, needed: int, dtype: torch.dtype | None = None
    ) -> None:
        size = max(needed, self.capacity if self._k is None else 2 * self._k.shape[-1])
        b, h, _, d = k.shape
        nk = k.new_empty((b, h, d, size), dtype=dtype or k.dtype)
        nv = v.new_empty((b, h, size, v.shape[-1]), dtype=dtype or v.dtype)
        if self._k is not None and self.length:
            nk[..., : self.length].copy_(self._k[..., : self.length])
            nv[:, :, : self.length].copy_(self._v[:, :, : self.length])
        self._k, self._v = nk, nv

    def get_seq_length(self) -> int:
        return self.length

    @property
    def room(self) -> int:
        """Positions the buffer holds before it must grow."""
        return 0 if self._k is None else int(self._k.shape[-1])

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep (or repeat) the rows `indices` of the batch: one copy of the live positions."""
        if self._k is None:
            return
        self._k, self._v = self._k[indices], self._v[indices]
        self._views()

    def set_buffers(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """Replace the buffers with `keys`/`values` ([batch, heads, room, dim], the first
        `length` positions in use), e.g. two batches' caches padded and stacked."""
        self._k, self._v, self.length = keys.transpose(-1, -2).contiguous(), values, length
        self._views()

    def drop_front(self, cut: int) -> None:
        """Forget the first `cut` positions of every row (left padding no row attends to)."""
        assert self._k is not None and self._v is not None
        self._k, self._v = self._k[..., cut:], self._v[:, :, cut:]
        self.length -= cut
        self._views()

    def reset(self) -> None:
        self._k = self._v = None
        self.length = 0
        super().reset()


def growing_cache(
    config: Any, capacity: int, layer: Callable[[int], GrowingLayer] = GrowingLayer
) -> DynamicCache:
    """A DynamicCache whose full-attention layers are `layer(capacity)`s (`GrowingLayer`s, or
    the CPU kernel's `KernelCacheLayer`) with room for `capacity` positions.

    Layers of another kind (sliding windows, linear attention) keep their own class: correct,
    only without the in-place appends.
    """
    cache = DynamicCache(config=config)
    cache.layers = [
        layer(capacity) if type(existing) is DynamicLayer else existing for existing in cache.layers
    ]
    return cache


def gqa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """SDPA with grouped-query attention done by the kernel, mask or not (see the module doc);
    a one-token decode step without autograd takes `decode_step_attention` instead."""
    groups = getattr(module, "num_key_value_groups", 1)
    if attention_mask is not None and attention_mask.dim() == 4:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
    if (
        query.shape[2] == 1
        and not torch.is_grad_enabled()
        and query.shape[1] == key.shape[1] * groups
        and (attention_mask is None or attention_mask.shape[1] == 1)
    ):
        return decode_step_attention(query, key, value, attention_mask, scaling), None
    causal = query.shape[2] > 1 and attention_mask is None and is_causal is not False
    causal = bool(causal and getattr(module, "is_causal", True))
    out = F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout if module.training else 0.0,
        scale=scaling,
        is_causal=causal,
        enable_gqa=groups > 1,
    )
    return out.transpose(1, 2).contiguous(), None


def decode_step_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
) -> torch.Tensor:
    """Attention of one new position per row, [batch, 1, heads, dim], as two batched matmuls.

    Why: SDPA's CPU kernel is built for many query positions; for one it ran ~1.4x slower than
    `bmm` (64 rows, 280 positions, SmolLM2's 9/3 heads: 4.2 vs 3.0 ms per layer, most of it
    reading the cache). The query heads that share a KV head are stacked as rows of one matmul
    against that head's keys (GQA without repeating K or V), and the mask (boolean: True attends,
    or additive) is applied to the scores in place.
    """
    rows, heads, _, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    q = query.reshape(rows * kv_heads, groups, dim)
    scores = torch.bmm(q, key.reshape(rows * kv_heads, length, dim).transpose(1, 2))
    scale = dim**-0.5 if scaling is None else scaling
    if scale != 1.0:  # 1.0: the caller scaled the query (fewer multiplies)
        scores.mul_(scale)
    if attention_mask is not None:
        mask = attention_mask[:, 0, -1:, :length]  # [rows, 1, length]: broadcast over heads
        flat = scores.view(rows, heads, length)
        if mask.dtype == torch.bool:
            flat.masked_fill_(~mask, float("-inf"))
        else:
            flat.add_(mask)
    probs = torch.softmax(scores, dim=-1)
    out = torch.bmm(probs, value.reshape(rows * kv_heads, length, value.shape[-1]))
    return out.view(rows, 1, heads, value.shape[-1])


AttentionInterface.register(GQA_ATTENTION, gqa_attention)
AttentionMaskInterface.register(GQA_ATTENTION, sdpa_mask)
_lock = threading.Lock()
_users: dict[int, list[Any]] = {}  # id(config) -> [users, the implementation to restore]


@contextmanager
def decode_attention(model: torch.nn.Module) -> Iterator[None]:
    """Inside the block, a CPU model whose attention is `sdpa` uses `gqa_attention` instead.

    Re-entrant and shared between threads (reference-counted per config); CUDA models, other
    implementations (eager, flash) and models without GQA are left alone.
    """
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    if device.type != "cpu" or (id(config) not in _users and current != "sdpa"):
        yield
        return
    with _lock:
        entry = _users.setdefault(id(config), [0, current])
        entry[0] += 1
        config._attn_implementation = GQA_ATTENTION
    try:
        yield
    finally:
        with _lock:
            entry[0] -= 1
            if entry[0] == 0:
                config._attn_implementation = entry[1]
                del _users[id(config)]
