"""Input checks for the kernels, with messages that name the shapes and the fix.

Kept apart from the math so the kernels read as math, and so every entry point (fused logprob,
token losses, fused policy loss) reports the same mistake the same way.
"""

from __future__ import annotations

import torch

from arena_core.device import triton_usable
from arena_core.errors import ArenaError

IMPLS = ("auto", "torch", "triton", "naive")


class KernelInputError(ArenaError, ValueError):
    """Tensors passed to a kernel do not fit together (shape, dtype, device or value range)."""


def check_linear_logprob_inputs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float
) -> None:
    """Raise KernelInputError unless hidden [..., h], weight [V, h] and targets [...] fit."""
    if weight.dim() != 2:
        raise KernelInputError(
            f"weight must be the LM head [V, h], got shape {tuple(weight.shape)}; "
            "pass lm_head.weight (not its transpose, not a bias)"
        )
    V, h = weight.shape
    if hidden.dim() < 1 or hidden.shape[-1] != h:
        raise KernelInputError(
            f"hidden {tuple(hidden.shape)} must end in the weight's hidden size h={h} "
            f"(weight is {tuple(weight.shape)} = [V, h]); pass the final hidden states, after "
            "the last norm"
        )
    if tuple(targets.shape) != tuple(hidden.shape[:-1]):
        raise KernelInputError(
            f"targets {tuple(targets.shape)} must match hidden's leading dims "
            f"{tuple(hidden.shape[:-1])}; shift targets by one token (targets[t] = input_ids[t+1])"
        )
    if targets.dtype not in (torch.int64, torch.int32):
        raise KernelInputError(f"targets must be int64 token ids, got {targets.dtype}")
    if hidden.dtype != weight.dtype:
        raise KernelInputError(
            f"hidden is {hidden.dtype} but weight is {weight.dtype}; cast one so they match"
        )
    if not hidden.dtype.is_floating_point:
        raise KernelInputError(f"hidden must be floating point, got {hidden.dtype}")
    if hidden.device != weight.device or targets.device != hidden.device:
        raise KernelInputError(
            f"hidden ({hidden.device}), weight ({weight.device}) and targets ({targets.device}) "
            "must be on one device"
        )
    if not temperature > 0:
        raise KernelInputError(f"temperature must be > 0, got {temperature}")
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= V):
        raise KernelInputError(
            f"targets hold ids in [{int(targets.min())}, {int(targets.max())}] but the "
            f"vocabulary has V={V} rows; mask padding before calling (no ignore index here)"
        )


def resolve_impl(impl: str, device: torch.device) -> str:
    """Turn ``impl`` into one of torch/triton/naive, or say why the request cannot be met."""
    if impl not in IMPLS:
        raise KernelInputError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "auto":
        return "triton" if device.type == "cuda" and triton_usable(device) else "torch"
    if impl == "triton" and not triton_usable(device):
        raise KernelInputError(
            f"impl='triton' needs Triton and a CUDA tensor (got {device}); use impl='torch' or "
            "'auto', or set TRITON_INTERPRET=1 before importing triton (tests only, ~1000x slower)"
        )
    return impl
