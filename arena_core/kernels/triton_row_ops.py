"""Triton versions of the vocabulary-wide row operations (see :class:`arena_core.kernels.fused_logprob.TorchRowOps`).

One program per token row walks the vocabulary in ``BLOCK_V`` blocks:

* ``_stats_kernel``: online logsumexp (running max ``m`` and rescaled running sum ``s``), the
  target logit gathered on the fly, and the entropy from a running ``sum(e * (z - m))`` that is
  rescaled with the max like ``s``; a second sweep writes ``z - lse`` back (the contract of
  ``TorchRowOps.stats``).
* ``_softmax_grad_kernel``: ``g * (onehot - p) - g_H * p * (logp + H)`` in one sweep.

The GEMMs around them stay with cuBLAS (torch), which is faster than a hand-written Triton GEMM on
every accelerator we target. Importing this module needs Triton; under ``TRITON_INTERPRET=1`` the
kernels also run on CPU tensors, which is how the tests check them without a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _stats_kernel(
    z_ptr,
    z_stride,
    targets_ptr,
    lse_ptr,
    target_logit_ptr,
    entropy_ptr,
    V,
    WITH_ENTROPY: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = z_ptr + row * z_stride
    target = tl.load(targets_ptr + row)
    # Python-float accumulators (the pattern Liger's kernels compile with); m starts at a finite
    # "minus infinity" so the first rescale (m - m_new) * s is 0 * big = 0, not NaN
    m = -1.0e30
    s = 0.0
    a = 0.0  # sum over the columns seen of exp(z - m) * (z - m)
    t_logit = 0.0
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        valid = cols < V
        x = tl.load(row_ptr + cols, mask=valid, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        scale = tl.exp(m - m_new)
        e = tl.exp(x - m_new)
        if WITH_ENTROPY:
            # re-centre the old sum on m_new: sum e'(z - m_new) = scale * (a + (m - m_new) * s)
            centred = tl.where(valid, x - m_new, 0.0)  # 0, not -inf, where masked: e is 0 there
            a = scale * (a + (m - m_new) * s) + tl.sum(e * centred, axis=0)
        s = s * scale + tl.sum(e, axis=0)
        t_logit += tl.sum(tl.where(cols == target, x, 0.0), axis=0)
        m = m_new
    log_s = tl.log(s)
    lse = m + log_s
    tl.store(lse_ptr + row, lse)
    tl.store(target_logit_ptr + row, t_logit)
    if WITH_ENTROPY:
        tl.store(entropy_ptr + row, log_s - a / s)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        valid = cols < V
        x = tl.load(row_ptr + cols, mask=valid, other=0.0)
        tl.store(row_ptr + cols, x - lse, mask=valid)


@triton.jit
def _softmax_grad_kernel(
    logp_ptr,
    logp_stride,
    out_ptr,
    out_stride,
    targets_ptr,
    entropy_ptr,
    g_logprob_ptr,
    g_entropy_ptr,
    V,
    WITH_ENTROPY: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(targets_ptr + row)
    g = tl.load(g_logprob_ptr + row).to(tl.float32)
    # without entropy the caller passes valid placeholder pointers: loaded, never used
    g_h = tl.load(g_entropy_ptr + row).to(tl.float32)
    ent = tl.load(entropy_ptr + row).to(tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        valid = cols < V
        logp = tl.load(logp_ptr + row * logp_stride + cols, mask=valid, other=0.0)
        p = tl.exp(logp)
        if WITH_ENTROPY:
            grad = -p * (g + g_h * (logp + ent))
        else:
            grad = -p * g
        grad += tl.where(cols == target, g, 0.0)
        tl.store(out_ptr + row * out_stride + cols, grad, mask=valid)


#: Widest vocabulary block: 4096 fp32 is wide vector loads per warp without spilling registers.
#: Tests lower it to run the online logsumexp across several (and partial) blocks on tiny V.
MAX_BLOCK_V = 4096


def _block_v(V: int) -> int:
    return min(MAX_BLOCK_V, triton.next_power_of_2(V))


class TritonRowOps:
    """Row operations as Triton kernels (CUDA, or CPU under ``TRITON_INTERPRET=1``)."""

    name = "triton"

    def stats(
        self, z: torch.Tensor, targets: torch.Tensor, with_entropy: bool, work: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        C, V = z.shape
        lse = torch.empty(C, dtype=torch.float32, device=z.device)
        target_logit = torch.empty_like(lse)
        entropy = torch.empty_like(lse) if with_entropy else lse  # placeholder pointer when off
        _stats_kernel[(C,)](
            z,
            z.stride(0),
            targets,
            lse,
            target_logit,
            entropy,
            V,
            WITH_ENTROPY=with_entropy,
            BLOCK_V=_block_v(V),
            num_warps=8,
        )
        return lse, target_logit, (entropy if with_entropy else None)

    def softmax_grad(
        self,
        logp: torch.Tensor,
        out: torch.Tensor,
        targets: torch.Tensor,
        entropy: torch.Tensor | None,
        g_logprob: torch.Tensor,
        g_entropy: torch.Tensor | None,
        work: torch.Tensor,
    ) -> None:
        C, V = logp.shape
        with_entropy = g_entropy is not None
        if with_entropy and entropy is None:
            raise ValueError("softmax_grad needs the entropy when g_entropy is given")
        _softmax_grad_kernel[(C,)](
            logp,
            logp.stride(0),
            out,
            out.stride(0),
            targets,
            entropy if with_entropy else g_logprob,
            g_logprob,
            g_entropy if with_entropy else g_logprob,
            V,
            WITH_ENTROPY=with_entropy,
            BLOCK_V=_block_v(V),
            num_warps=8,
        )
