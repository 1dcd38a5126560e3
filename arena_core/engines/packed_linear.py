"""bf16 decode products through weights packed once for oneDNN, not re-laid-out every call.

Why: a CPU GEMM first copies its weight into the kernel's blocked layout. At decode shapes (tens
of rows against a 576 x 49152 LM head) that copy is a large share of the product, and `F.linear`
repeats it on every call, 31 products a SmolLM2 step. oneDNN can keep the weight in its layout
(`torch.ops.mkldnn._reorder_linear_weight`, the packing torch's own inductor uses for CPU
linears) and multiply by it directly (`_linear_pointwise`). On an Intel Xeon with AMX, two
threads, SmolLM2's shapes: the bf16 products ran 1.1-2.4x faster at 1-64 rows, and the torch
engine's bf16 decode 1.15-1.2x faster end to end (`bench/real_model.py`). The product is the
same bf16 matmul; only the kernel's blocking (so the summation order) can differ.

Where: only in Arena's decode step (`llama_decode`), only for bf16 products, only where oneDNN
has bf16 kernels on this CPU (`AVAILABLE`); anything else multiplies as before. The packed
weight is derived from the step's own bf16 weight (the cast or LoRA-merged copy) and rebuilt
when that weight is replaced or changed in place, so an optimizer step is decoded at once.
Memory: one more bf16 copy of the linears (SmolLM2: ~270 MB), which the planner counts
(`Workload.engine_copy_bytes`).
"""

from __future__ import annotations

import torch
from torch import nn

ROWS_HINT = 64  # the batch the layout is tuned for; any row count multiplies correctly


def _available() -> bool:
    try:
        ops = torch.ops.mkldnn
        return bool(
            torch.backends.mkldnn.is_available()
            and ops._is_mkldnn_bf16_supported()
            and hasattr(ops, "_reorder_linear_weight")
            and hasattr(ops, "_linear_pointwise")
        )
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return False


AVAILABLE = _available()


def packed_copy(owner: nn.Module, weight: torch.Tensor) -> torch.Tensor | None:
    """`weight` (bf16, [out, in], contiguous) packed for oneDNN, cached on `owner` until
    `weight` is another tensor or changed in place; None where packing is not available.

    The cache holds `weight` itself, so a stale entry is told by identity, never by an address
    that the allocator may have handed to a new tensor."""
    if (
        not AVAILABLE
        or not torch.backends.mkldnn.enabled
        or weight.dtype is not torch.bfloat16
        or weight.device.type != "cpu"
        or weight.dim() != 2
        or not weight.is_contiguous()
    ):
        return None
    cached = owner.__dict__.get("_arena_packed")
    if cached is not None and cached[0] is weight and cached[1] == weight._version:
        return cached[2]
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, ROWS_HINT)
    except RuntimeError:  # a layout oneDNN will not pack: the plain product
        return None
    owner.__dict__["_arena_packed"] = (weight, weight._version, packed)
    return packed


def linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`x @ W^T + b` in bf16 with `packed` = `packed_copy(owner, W)`; `x` bf16 [rows, in]."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
