"""Fused kernels: LM head -> per-token logprob (and entropy) without [T, V] tensors.

``fused_linear_logprob`` picks Triton on CUDA and chunked torch elsewhere; the RL losses on its
per-token output live with the learner (`arena_core.learn.losses`).
"""

from arena_core.kernels.fused_logprob import (
    KernelInputError,
    choose_chunk_size,
    fused_linear_logprob,
    naive_linear_logprob,
)

__all__ = [
    "KernelInputError",
    "choose_chunk_size",
    "fused_linear_logprob",
    "naive_linear_logprob",
]
