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
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

GQA_ATTENTION = "arena_gqa_sdpa"
STAGE = 32  # keys staged before they move into a low-precision cache's transposed buffer


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
    `probs @ V` wants.
    """

    def __init__(self, capacity: int, store_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.capacity = max(1, int(capacity))
        # the buffers' dtype (None: the states'); bf16 halves the bytes a decode step reads,
        # for the CPU kernel that attends over it in fp32 (cpu_attention.py)
        self.store_dtype = store_dtype
        self.length = 0
        self.base = 0  # positions written into _k; the rest (length - base) are staged
        self._k: torch.Tensor | None = None  # [batch, heads, dim, capacity]: transposed
        self._v: torch.Tensor | None = None  # [batch, heads, capacity, dim]
        self._stage: torch.Tensor | None = None  # [batch, heads, STAGE, dim]: newest keys
        # rows with equal `groups` ids hold equal first `shared` positions: the prefill's rows
        # are distinct, `batch_select_indices` repeating a row (prefix sharing) makes copies
        self.groups: torch.Tensor | None = None
        self.shared = 0
        self._plan: tuple[torch.Tensor, torch.Tensor, int] | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append, and return every position's K and V in the states' dtype (the modules'
        attention reads them). With a narrower `store_dtype`, the prefill (an empty cache)
        gets its own states back, later steps an upcast copy: correct, but the decode meant for
        such a cache (Arena's step) reads the buffers through `decode_parts` instead."""
        first = self.length == 0
        keys, values = self.append(key_states, value_states)
        if keys.dtype == key_states.dtype:
            return keys, values
        if first:
            return key_states, value_states
        return keys.to(key_states.dtype), values.to(value_states.dtype)

    def append(
        self, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new positions in place; the views of every position, in the buffers'
        dtype (keys as the transposed view, [batch, heads, positions, dim])."""
        self._write(key_states, value_states)
        self._views()
        return self.keys, self.values

    def positions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every position's K (the transposed view) and V, in the buffers' dtype."""
        self._views()
        return self.keys, self.values

    def decode_parts(
        self, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Append one step's K/V and hand the CPU kernel the cache as it lies: (K^T of the
        first `base` positions [batch, heads, dim, base], the staged keys of the rest
        [batch, heads, length - base, dim] or None, every position's values)."""
        self._write(key_states, value_states)
        assert self._k is not None and self._v is not None
        staged = None
        if self._stage is not None and self.length > self.base:
            staged = self._stage[:, :, : self.length - self.base]
        return self._k[..., : self.base], staged, self._v[:, :, : self.length]

    def prefix_groups(self) -> tuple[torch.Tensor, torch.Tensor, int] | None:
        """The rows that share their first positions, for the kernel's cascade
        (`cpu_attention.attention(groups=)`): (rows ordered by group, each group's start in
        that order, the shared length), or None when no two rows share any."""
        if self.groups is None or self.shared <= 0:
            return None
        if self._plan is None:
            order = torch.argsort(self.groups, stable=True)
            counts = torch.unique_consecutive(self.groups[order], return_counts=True)[1]
            if counts.numel() == order.numel():
                return None
            starts = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
            self._plan = (order.contiguous(), starts.contiguous(), self.shared)
        order, starts, shared = self._plan
        return order, starts, min(shared, self.base)

    def _regroup(self, groups: torch.Tensor | None, shared: int) -> None:
        self.groups, self.shared, self._plan = groups, max(0, shared), None

    def _write(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Why a stage: a key appended to the transposed buffer writes one element into each of
        `dim` rows, `dim` cache lines per row and head (~0.3 ms a layer per step at 64 rows,
        ~7% of a bf16 SmolLM2 decode). A one-position append to a cache the kernel reads
        (`store_dtype` set) goes to a small block in the keys' natural layout instead, moved into
        the transposed buffer `STAGE` positions at a time (whole cache lines)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        new = key_states.shape[-2]
        end = self.length + new
        if self.length == 0:  # the prefill: every row its own group, its positions shared
            self._regroup(torch.arange(key_states.shape[0]), new)
        if self._k is None or end > self._k.shape[-1]:
            self._grow(key_states, value_states, end)
        assert self._k is not None and self._v is not None
        if self.store_dtype is not None and new == 1:
            if self._stage is None:  # dropped, with nothing staged, when the batch's rows change
                b, h, _, d = key_states.shape
                self._stage = self._k.new_empty((b, h, STAGE, d))
            if self.length - self.base == STAGE:
                self._flush()
            self._stage[:, :, self.length - self.base].copy_(key_states[:, :, 0])
        else:
            self._flush()
            self._k[..., self.length : end].copy_(key_states.transpose(-1, -2))
            self.base = end
        self._v[:, :, self.length : end].copy_(value_states)
        self.length = end

    def _flush(self) -> None:
        """Move the staged keys into the transposed buffer."""
        staged = self.length - self.base
        if staged and self._stage is not None and self._k is not None:
            self._k[..., self.base : self.length].copy_(
                self._stage[:, :, :staged].transpose(-1, -2)
            )
        self.base = self.length

    def _views(self) -> None:
        assert self._k is not None and self._v is not None
        self._flush()
        self.keys = self._k[..., : self.length].transpose(-1, -2)
        self.values = self._v[:, :, : self.length]

    def _grow(self, k: torch.Tensor, v: torch.Tensor, needed: int) -> None:
        size = max(needed, self.capacity if self._k is None else 2 * self._k.shape[-1])
        b, h, _, d = k.shape
        nk = k.new_empty((b, h, d, size), dtype=self.store_dtype or k.dtype)
        nv = v.new_empty((b, h, size, v.shape[-1]), dtype=self.store_dtype or v.dtype)
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
        self._flush()
        self._stage = None
        self._k, self._v = self._k[indices], self._v[indices]
        groups = None if self.groups is None else self.groups[indices.to(self.groups.device)]
        self._regroup(groups, self.shared)
        self._views()

    def set_buffers(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """Replace the buffers with `keys`/`values` ([batch, heads, room, dim], the first
        `length` positions in use), e.g. two batches' caches padded and stacked."""
        if self.store_dtype is not None:
            keys, values = keys.to(self.store_dtype), values.to(self.store_dtype)
        self._k, self._v, self.length = keys.transpose(-1, -2).contiguous(), values, length
        self.base, self._stage = length, None
        self._regroup(None, 0)
        self._views()

    def drop_front(self, cut: int) -> None:
        """Forget the first `cut` positions of every row (left padding no row attends to)."""
        assert self._k is not None and self._v is not None
        self._flush()
        self._k, self._v = self._k[..., cut:], self._v[:, :, cut:]
        self._regroup(self.groups, self.shared - cut)
        self.length -= cut
        self.base = self.length
        self._views()

    def reset(self) -> None:
        self._k = self._v = self._stage = None
        self.length = self.base = 0
        self._regroup(None, 0)
        super().reset()


def growing_cache(
    config: Any, capacity: int, store_dtype: torch.dtype | None = None
) -> DynamicCache:
    """A DynamicCache whose full-attention layers are `GrowingLayer`s with room for `capacity`
    (buffers in `store_dtype`, None: the states' dtype).

    Layers of another kind (sliding windows, linear attention) keep their own class: correct,
    only without the in-place appends.
    """
    cache = DynamicCache(config=config)
    cache.layers = [
        GrowingLayer(capacity, store_dtype) if type(layer) is DynamicLayer else layer
        for layer in cache.layers
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
