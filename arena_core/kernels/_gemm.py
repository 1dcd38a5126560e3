"""The GEMMs of the fused logprob, writing into preallocated fp32 buffers.

bf16/fp16 GEMMs accumulate in fp32 inside the BLAS; what differs by platform is whether the
result can be written in fp32 directly (CUDA's ``out_dtype``) or is rounded to the input dtype and
widened (CPU). Everything after the GEMM (softmax statistics, gradient rows, the weight-gradient
accumulator) is fp32 either way.
"""

from __future__ import annotations

import functools

import torch


@functools.cache
def _cuda_out_dtype_works() -> bool:
    try:
        a = torch.ones(16, 16, device="cuda", dtype=torch.bfloat16)
        torch.mm(a, a, out_dtype=torch.float32)
    except (TypeError, RuntimeError):
        return False
    return True


#: Rows of the weight widened to fp32 at a time on CPU (16 MiB at h=1024): small next to a chunk.
_CPU_WIDEN_ROWS = 4096


def _mm_fp32(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """out (fp32) = a @ b for a [n, h], b = weight.T [h, V] of one dtype."""
    if a.dtype == torch.float32:
        torch.mm(a, b, out=out)
    elif a.is_cuda and _cuda_out_dtype_works():
        out.copy_(torch.mm(a, b, out_dtype=torch.float32))
    elif a.is_cuda:
        out.copy_(torch.mm(a, b))  # old torch: logits rounded once to the input dtype
    else:
        # CPU bf16 GEMMs round their output to bf16 (~0.03 at logit 10, a 3 % error in p):
        # widen the weight a block of rows at a time instead and multiply in fp32.
        a32 = a.to(torch.float32)
        for v0 in range(0, b.shape[1], _CPU_WIDEN_ROWS):
            v1 = min(v0 + _CPU_WIDEN_ROWS, b.shape[1])
            out[:, v0:v1] = a32 @ b[:, v0:v1].to(torch.float32)


def logits_into(
    hidden_chunk: torch.Tensor, weight: torch.Tensor, inv_temperature: float, out: torch.Tensor
) -> None:
    """out [n, V] fp32 = hidden_chunk @ weight.T * inv_temperature."""
    if inv_temperature != 1.0 and hidden_chunk.dtype == torch.float32:
        _mm_fp32(hidden_chunk * inv_temperature, weight.t(), out)  # scale [n, h], not [n, V]
        return
    _mm_fp32(hidden_chunk, weight.t(), out)
    if inv_temperature != 1.0:
        out.mul_(inv_temperature)  # low precision: scale after the fp32 widening, not before


def rows_times_weight(rows: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
    """out [n, h] = rows [n, V] (fp32) @ weight [V, h], in out's dtype."""
    if weight.dtype == torch.float32 and out.dtype == torch.float32:
        torch.mm(rows, weight, out=out)
    elif weight.is_cuda:
        out.copy_(torch.mm(rows.to(weight.dtype), weight))  # tensor cores, fp32 accumulation
    else:  # CPU: fp32 accumulation over blocks of widened weight rows (see _mm_fp32)
        acc = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
        for v0 in range(0, weight.shape[0], _CPU_WIDEN_ROWS):
            v1 = min(v0 + _CPU_WIDEN_ROWS, weight.shape[0])
            acc.addmm_(rows[:, v0:v1], weight[v0:v1].to(torch.float32))
        out.copy_(acc)


def accumulate_weight_grad(
    grad_weight: torch.Tensor, rows: torch.Tensor, hidden_chunk: torch.Tensor
) -> None:
    """grad_weight [V, h] fp32 += rows.T [V, n] @ hidden_chunk [n, h], no [V, h] temporary."""
    grad_weight.addmm_(rows.t(), hidden_chunk.to(torch.float32))
