"""A decode step's attention over a bf16 KV cache on the CPU, through a small C kernel.

Why: a decode step's attention reads the whole KV cache of every row, and on a real model that
is most of its bytes (SmolLM2, 64 rows at ~300 positions: ~0.7 GB of fp32 cache a step, more
than the bf16 weights). A bf16 cache halves them, but torch's CPU `bmm` is slower in bf16 than
in fp32 at these shapes (3 query heads against a few hundred positions), so through torch ops
the smaller cache gained nothing. `csrc/decode_attention.c` reads each key and value once per
KV head, widens bf16 to fp32 in registers and keeps scores, softmax and the weighted sum in
fp32: at 64 rows x 300 positions ~1.5x the fp32 `bmm` attention, 1.24-1.27x a whole bf16
decode of 256 new tokens (docs/real-models.md). Built and loaded by `cpu_kernels`; where it
cannot run, `available()` is False and the decode keeps its fp32 cache and torch's `bmm` path
(`decode_cache.decode_step_attention`), slower, never wrong.

Cascade: the rows of a GRPO group hold copies of one prompt's K/V (prefilled once, then
repeated). Given the groups (`KernelCacheLayer.prefix_groups`), the kernel scores all the group's
query heads against the first row's prompt positions block by block, so each block comes from
memory once per group rather than once per row, then each row's own positions as before; the
weighted sum over the row's positions continues the prompt's accumulators, so the output is
bit for bit the per-row one. At 8 rows a group and a ~120-token prompt: 1.06-1.12x a whole bf16
decode of 256 new tokens, the same tokens and logprobs.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from arena_core.engines import cpu_kernels
from arena_core.engines.decode_cache import GrowingLayer

_DTYPES = {torch.float32: 0, torch.bfloat16: 1}


STAGE = 32  # one-position keys staged before they move into the transposed buffer


class KernelCacheLayer(GrowingLayer):
    """The KV cache the kernel reads: a `GrowingLayer` in `store_dtype` (bf16 halves the bytes a
    decode step reads), its newest keys staged, and which rows share their prompt.

    Why a stage: a key appended to the transposed buffer writes one element into each of `dim`
    rows, `dim` cache lines per row and head (~0.3 ms a layer per step at 64 rows, ~7% of a bf16
    SmolLM2 decode). A one-position append goes to a small block in the keys' natural layout
    instead, moved into the transposed buffer `STAGE` positions at a time (whole cache lines);
    the kernel reads both (`decode_parts`).

    Prefix groups (the cascade): rows with equal `groups` ids hold equal first `shared`
    positions. The prefill's rows are distinct; `batch_select_indices` repeating a row (the
    engine's prefix sharing) makes copies, which `prefix_groups` hands the kernel.
    """

    def __init__(self, capacity: int, store_dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__(capacity)
        self.store_dtype = store_dtype
        self.base = 0  # positions written into _k; the rest (length - base) are staged
        self._stage: torch.Tensor | None = None  # [batch, heads, STAGE, dim]: newest keys
        self.groups: torch.Tensor | None = None
        self.shared = 0
        self._plan: tuple[torch.Tensor, torch.Tensor, int] | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append, and return every position's K and V in the states' dtype (the modules'
        attention reads them): the prefill (an empty cache) gets its own states back, later
        steps an upcast copy. Arena's step reads the buffers through `decode_parts` instead."""
        first = self.length == 0
        keys, values = super().update(key_states, value_states)
        if keys.dtype == key_states.dtype:
            return keys, values
        if first:
            return key_states, value_states
        return keys.to(key_states.dtype), values.to(value_states.dtype)

    def decode_parts(
        self, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Append one step's K/V and hand the kernel the cache as it lies: (K^T of the first
        `base` positions [batch, heads, dim, base], the staged keys of the rest
        [batch, heads, length - base, dim] or None, every position's values)."""
        self._write(key_states, value_states)
        assert self._k is not None and self._v is not None
        staged = None
        if self._stage is not None and self.length > self.base:
            staged = self._stage[:, :, : self.length - self.base]
        return self._k[..., : self.base], staged, self._v[:, :, : self.length]

    def prefix_groups(self) -> tuple[torch.Tensor, torch.Tensor, int] | None:
        """The rows that share their first positions, for the cascade (`attention(groups=)`):
        (rows ordered by group, each group's start in that order, the shared length), or None
        when no two rows share any."""
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

    def _put_keys(self, key_states: torch.Tensor, end: int) -> None:
        if self.length == 0:  # the prefill: every row its own group, its positions shared
            self._regroup(torch.arange(key_states.shape[0]), end)
        if end - self.length > 1:  # several positions: straight into the transposed buffer
            self._flush()
            super()._put_keys(key_states, end)
            self.base = end
            return
        if self._stage is None:  # dropped, with nothing staged, when the batch's rows change
            b, h, _, d = key_states.shape
            self._stage = self._k.new_empty((b, h, STAGE, d))  # type: ignore[union-attr]
        if self.length - self.base == STAGE:
            self._flush()
        self._stage[:, :, self.length - self.base].copy_(key_states[:, :, 0])

    def _flush(self) -> None:
        """Move the staged keys into the transposed buffer."""
        staged = self.length - self.base
        if staged and self._stage is not None and self._k is not None:
            self._k[..., self.base : self.length].copy_(
                self._stage[:, :, :staged].transpose(-1, -2)
            )
        self.base = self.length

    def _views(self) -> None:
        self._flush()
        super()._views()

    def _grow(
        self, k: torch.Tensor, v: torch.Tensor, needed: int, dtype: torch.dtype | None = None
    ) -> None:
        super()._grow(k, v, needed, self.store_dtype)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self._k is None:
            return
        self._flush()
        self._stage = None
        groups = None if self.groups is None else self.groups[indices.to(self.groups.device)]
        self._regroup(groups, self.shared)
        super().batch_select_indices(indices)

    def set_buffers(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        self.base, self._stage = length, None
        self._regroup(None, 0)  # rows joined from elsewhere: nothing known shared
        super().set_buffers(keys.to(self.store_dtype), values.to(self.store_dtype), length)

    def drop_front(self, cut: int) -> None:
        self._flush()
        self._regroup(self.groups, self.shared - cut)
        self.base -= cut
        super().drop_front(cut)

    def reset(self) -> None:
        self._stage = None
        self.base = 0
        self._regroup(None, 0)
        super().reset()


def _load() -> ctypes.CDLL | None:
    lib = cpu_kernels.library("decode_attention")
    if lib is not None and not getattr(lib, "_arena_typed", False):
        fn = lib.arena_decode_attention
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        fn.argtypes = [ptr] * 5 + [i64] * 12 + [ptr] + [i64] * 4 + [ptr] * 2 + [i64] * 3
        fn.argtypes += [ctypes.c_float, ctypes.c_int, ctypes.c_int]
        fn.restype = ctypes.c_int
        lib._arena_typed = True
    return lib


def available() -> bool:
    """Whether the kernel is built and loaded on this machine (builds it on first call)."""
    return _load() is not None


def runs(head_dim: int) -> bool:
    """Whether a model with heads of `head_dim` decodes through the kernel here (it works in
    blocks of 64 dimensions: SmolLM2, Qwen2, Llama and Mistral have 64 or 128)."""
    return head_dim > 0 and head_dim % 64 == 0 and available()


def attention(
    query: torch.Tensor,
    keys_t: torch.Tensor,
    values: torch.Tensor,
    bias: torch.Tensor | None,
    scale: float,
    staged: torch.Tensor | None = None,
    groups: tuple[torch.Tensor, torch.Tensor, int] | None = None,
) -> torch.Tensor | None:
    """Attention of one position per row: [rows, heads * dim] fp32, or None where the kernel
    cannot run this call (not built, a head size that is not a multiple of 64, another dtype,
    a tensor not on the CPU); the caller then takes torch's path.

    `query` [rows, heads, 1, dim] fp32; `keys_t` [rows, kv_heads, dim, n] (the cache's
    transposed keys of the first n positions), `staged` [rows, kv_heads, m, dim] (the next m
    positions' keys, not yet transposed; None: m = 0) and `values` [rows, kv_heads, n + m, dim],
    fp32 or bf16, any strides with the last dimension contiguous; `bias` additive,
    broadcastable as [rows, n + m] (0 attends, -inf does not) or None.

    `groups` (cascade): (order, starts, shared) where the rows `order[starts[i]:starts[i+1]]`
    hold the same first `shared` positions (keys, values and bias), e.g. a GRPO group's prompt
    (`KernelCacheLayer.prefix_groups`). The kernel then reads those positions once per group
    instead of once per row, with the same arithmetic: the output is identical.
    """
    lib = _load()
    rows, heads, _, dim = query.shape
    more = 0 if staged is None else staged.shape[2]
    length = keys_t.shape[-1] + more
    if lib is None or not _fits(query, keys_t, values, staged, length):
        return None
    q = query.reshape(rows, heads, dim).float().contiguous()
    flat = None
    if bias is not None:
        flat = bias.reshape(rows, -1).float()
        if flat.shape[1] < length or flat.stride(-1) != 1:
            return None
    cascade = _cascade(groups, rows, keys_t.shape[-1])
    if cascade is None:
        return None
    out = torch.empty(rows, heads * dim, dtype=torch.float32)
    kv = keys_t.shape[1]
    failed = lib.arena_decode_attention(
        q.data_ptr(),
        keys_t.data_ptr(),
        values.data_ptr(),
        None if flat is None else flat.data_ptr(),
        out.data_ptr(),
        rows,
        kv,
        heads // kv,
        dim,
        keys_t.shape[-1],
        *keys_t.stride()[:3],
        *values.stride()[:3],
        0 if flat is None else flat.stride(0),
        None if staged is None else staged.data_ptr(),
        more,
        *((0, 0, 0) if staged is None else staged.stride()[:3]),
        *cascade,
        # elements readable from keys_t on: the kernel reads a last block past T where they are
        keys_t.untyped_storage().nbytes() // keys_t.element_size() - keys_t.storage_offset(),
        scale,
        _DTYPES[keys_t.dtype],
        torch.get_num_threads(),
    )
    return None if failed else out


def _fits(
    query: torch.Tensor,
    keys_t: torch.Tensor,
    values: torch.Tensor,
    staged: torch.Tensor | None,
    length: int,
) -> bool:
    """Whether the kernel takes these tensors (dtypes, layouts, head shapes, device)."""
    dtype = keys_t.dtype
    return (
        dtype in _DTYPES
        and values.dtype == dtype
        and (staged is None or (staged.dtype == dtype and staged.stride(-1) == 1))
        and values.shape[2] == length
        and query.shape[-1] % 64 == 0
        and query.shape[1] % keys_t.shape[1] == 0
        and query.device.type == "cpu"
        and keys_t.stride(-1) == 1
        and values.stride(-1) == 1
    )


def _cascade(
    groups: tuple[torch.Tensor, torch.Tensor, int] | None, rows: int, main: int
) -> tuple[int | None, int | None, int, int] | None:
    """The kernel's (order, starts, group count, shared length) arguments: no groups without
    them, None for groups it cannot take (the C side also checks the partition)."""
    if groups is None:
        return None, None, 0, 0
    order, starts, shared = groups
    if (
        order.dtype != torch.int64
        or starts.dtype != torch.int64
        or order.numel() != rows
        or not order.is_contiguous()
        or not starts.is_contiguous()
        or not 0 <= shared <= main
    ):
        return None
    return order.data_ptr(), starts.data_ptr(), starts.numel() - 1, shared
