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
"""

from __future__ import annotations

import ctypes

import torch

from arena_core.rollout import cpu_kernels

_DTYPES = {torch.float32: 0, torch.bfloat16: 1}


def _load() -> ctypes.CDLL | None:
    lib = cpu_kernels.library("decode_attention")
    if lib is not None and not getattr(lib, "_arena_typed", False):
        fn = lib.arena_decode_attention
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        fn.argtypes = [ptr] * 5 + [i64] * 12 + [ptr] + [i64] * 4
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
) -> torch.Tensor | None:
    """Attention of one position per row: [rows, heads * dim] fp32, or None where the kernel
    cannot run this call (not built, a head size that is not a multiple of 64, another dtype,
    a tensor not on the CPU); the caller then takes torch's path.

    `query` [rows, heads, 1, dim] fp32; `keys_t` [rows, kv_heads, dim, n] (the cache's
    transposed keys of the first n positions), `staged` [rows, kv_heads, m, dim] (the next m
    positions' keys, not yet transposed; None: m = 0) and `values` [rows, kv_heads, n + m, dim],
    fp32 or bf16, any strides with the last dimension contiguous; `bias` additive,
    broadcastable as [rows, n + m] (0 attends, -inf does not) or None.
    """
    lib = _load()
    code = _DTYPES.get(keys_t.dtype)
    rows, heads, _, dim = query.shape
    kv, main = keys_t.shape[1], keys_t.shape[-1]
    more = 0 if staged is None else staged.shape[2]
    length = main + more
    if (
        lib is None
        or code is None
        or values.dtype != keys_t.dtype
        or (staged is not None and (staged.dtype != keys_t.dtype or staged.stride(-1) != 1))
        or values.shape[2] != length
        or dim % 64
        or heads % kv
        or query.device.type != "cpu"
        or keys_t.stride(-1) != 1
        or values.stride(-1) != 1
    ):
        return None
    q = query.reshape(rows, heads, dim).float().contiguous()
    flat = None
    if bias is not None:
        flat = bias.reshape(rows, -1).float()
        if flat.shape[1] < length or flat.stride(-1) != 1:
            return None
    out = torch.empty(rows, heads * dim, dtype=torch.float32)
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
        main,
        keys_t.stride(0),
        keys_t.stride(1),
        keys_t.stride(2),
        values.stride(0),
        values.stride(1),
        values.stride(2),
        0 if flat is None else flat.stride(0),
        None if staged is None else staged.data_ptr(),
        more,
        0 if staged is None else staged.stride(0),
        0 if staged is None else staged.stride(1),
        0 if staged is None else staged.stride(2),
        scale,
        code,
        torch.get_num_threads(),
    )
    return None if failed else out
