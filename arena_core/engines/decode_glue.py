"""The elementwise glue of a bf16 CPU decode step, fused in C (`csrc/decode_glue.c`).

Why: between its products a bf16 decode step of a Llama-family model ran, per layer, two
RMSNorms (each ~6 torch ops: ~0.2 ms a call at 64 rows of SmolLM2 with two threads), two
residual adds, SiLU and a multiply, and eight casts between fp32 and bf16: ~0.9 ms a layer,
~20% of the step, for almost no math. Two loops do it in one pass each:
- `add_rms_norm`: the residual add of a product's bf16 output, the RMSNorm and the cast of its
  output to bf16 for the next product;
- `silu_mul`: SwiGLU's `silu(gate) * up` of the fused bf16 gate/up product, in fp32, to bf16;
- `rope_qkv`: the rotary of the fused bf16 q/k/v product's heads in fp32, the queries scaled
  (fp32, for the attention kernel), the keys and values in the bf16 cache's dtype: ~12 torch
  ops a layer (a cast, rotate-half, the rotary's products, the scale, transposes, copies).
They compute what the torch ops compute (fp32 math on the same bf16 values, round to nearest
even); only the order of the RMSNorm's sum of squares differs. None where they cannot run (no
compiler, a width that is not a multiple of 16): the caller keeps torch's ops.
"""

from __future__ import annotations

import ctypes

import torch

from arena_core.engines import cpu_kernels


def _load() -> ctypes.CDLL | None:
    lib = cpu_kernels.library("decode_glue")
    if lib is not None and not getattr(lib, "_arena_typed", False):
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        lib.arena_add_rms_norm.argtypes = [ptr] * 4 + [i64] * 5 + [ctypes.c_float, ctypes.c_int]
        lib.arena_silu_mul.argtypes = [ptr] * 2 + [i64] * 4 + [ctypes.c_int]
        lib.arena_rope_qkv.argtypes = [ptr] * 6 + [i64] * 6 + [ctypes.c_float, ctypes.c_int]
        lib.arena_add_rms_norm.restype = lib.arena_silu_mul.restype = ctypes.c_int
        lib.arena_rope_qkv.restype = ctypes.c_int
        lib._arena_typed = True
    return lib


def runs(*widths: int) -> bool:
    """Whether rows of these widths (hidden, MLP inner) go through the fused glue here."""
    return all(w > 0 and w % 16 == 0 for w in widths) and _load() is not None


def add_rms_norm(
    h: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> torch.Tensor | None:
    """`h += delta` in place (fp32 [rows, width] and a bf16 product's output, or None), then
    the RMSNorm of `h` times `weight`, as bf16 [rows, width]; None where it cannot run."""
    lib = _load()
    rows, width = h.shape
    if (
        lib is None
        or h.dtype != torch.float32
        or h.stride(-1) != 1
        or weight.dtype != torch.float32
        or not weight.is_contiguous()
        or (delta is not None and (delta.dtype != torch.bfloat16 or delta.stride(-1) != 1))
    ):
        return None
    out = torch.empty(rows, width, dtype=torch.bfloat16)
    failed = lib.arena_add_rms_norm(
        h.data_ptr(),
        None if delta is None else delta.data_ptr(),
        weight.data_ptr(),
        out.data_ptr(),
        rows,
        width,
        h.stride(0),
        0 if delta is None else delta.stride(0),
        out.stride(0),
        eps,
        torch.get_num_threads(),
    )
    return None if failed else out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor | None:
    """`silu(gate) * up` of a [rows, 2 * inner] bf16 [gate | up] product, as bf16 [rows, inner];
    None where it cannot run."""
    lib = _load()
    rows, both = gate_up.shape
    inner = both // 2
    if lib is None or gate_up.dtype != torch.bfloat16 or gate_up.stride(-1) != 1 or both % 2:
        return None
    out = torch.empty(rows, inner, dtype=torch.bfloat16)
    failed = lib.arena_silu_mul(
        gate_up.data_ptr(),
        out.data_ptr(),
        rows,
        inner,
        gate_up.stride(0),
        out.stride(0),
        torch.get_num_threads(),
    )
    return None if failed else out


def rope_qkv(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    heads: int,
    kv_heads: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The rotary of a bf16 [rows, (heads + 2 kv_heads) * dim] q/k/v product: (queries
    [rows, heads, 1, dim] fp32 times `scale`, keys and values [rows, kv_heads, 1, dim] bf16).
    `cos`/`sin` are the model's rotary for each row's position, fp32 [rows, dim] (any view
    whose rows are contiguous). None where it cannot run (the caller keeps torch's ops)."""
    lib = _load()
    rows, width = qkv.shape
    dim = width // (heads + 2 * kv_heads)
    if (
        lib is None
        or qkv.dtype != torch.bfloat16
        or qkv.stride(-1) != 1
        or dim * (heads + 2 * kv_heads) != width
        or dim % 32
        or cos.dtype != torch.float32
        or cos.shape != (rows, dim)
        or sin.shape != cos.shape
        or sin.dtype != cos.dtype
        or cos.stride() != sin.stride()
        or cos.stride(-1) != 1
    ):
        return None
    q = torch.empty(rows, heads, 1, dim, dtype=torch.float32)
    k = torch.empty(rows, kv_heads, 1, dim, dtype=torch.bfloat16)
    v = torch.empty(rows, kv_heads, 1, dim, dtype=torch.bfloat16)
    failed = lib.arena_rope_qkv(
        qkv.data_ptr(),
        cos.data_ptr(),
        sin.data_ptr(),
        q.data_ptr(),
        k.data_ptr(),
        v.data_ptr(),
        rows,
        heads,
        kv_heads,
        dim,
        qkv.stride(0),
        cos.stride(0),
        scale,
        torch.get_num_threads(),
    )
    return None if failed else (q, k, v)
