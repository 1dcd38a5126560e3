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
repeated). Given the groups (`GrowingLayer.prefix_groups`), the kernel scores all the group's
query heads against the first row's prompt positions block by block, so each block comes from
memory once per group rather than once per row, then each row's own positions as before; the
weighted sum over the row's positions continues the prompt's accumulators, so the output is
bit for bit the per-row one. At 8 rows a group and a ~120-token prompt: 1.06-1.12x a whole bf16
decode of 256 new tokens, the same tokens and logprobs.
"""

from __future__ import annotations

import ctypes

import torch

from arena_core.engines import cpu_kernels

_DTYPES = {torch.float32: 0, torch.bfloat16: 1}


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
    (`GrowingLayer.prefix_groups`). The kernel then reads those positions once per group
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
