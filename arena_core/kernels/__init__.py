"""Fused kernels: LM head -> per-token logprob/entropy without [T, V] tensors, and RL token losses.

``fused_linear_logprob`` picks Triton on CUDA and chunked torch elsewhere; ``policy_loss`` holds
the GRPO/CISPO per-token losses and their aggregation, which only ever see [T]-sized tensors.
"""

from arena_core.kernels._validate import KernelInputError
from arena_core.kernels.chunking import choose_chunk_size
from arena_core.kernels.fused_logprob import fused_linear_logprob, naive_linear_logprob
from arena_core.kernels.policy_loss import (
    AGGREGATION_MODES,
    CISPOTokenLoss,
    GRPOTokenLoss,
    aggregate_loss,
    cispo_token_loss,
    grpo_token_loss,
    k3_kl,
    token_weights,
)

__all__ = [
    "AGGREGATION_MODES",
    "CISPOTokenLoss",
    "GRPOTokenLoss",
    "KernelInputError",
    "aggregate_loss",
    "cispo_token_loss",
    "grpo_token_loss",
    "k3_kl",
    "token_weights",
    "choose_chunk_size",
    "fused_linear_logprob",
    "naive_linear_logprob",
]
