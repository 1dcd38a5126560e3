"""GRPO and CISPO per-token losses and their aggregation, on [T]-sized tensors only.

The vocabulary is touched once, by :func:`fused_linear_logprob`; everything here works on
per-token logprobs, so the losses add no pass over V. Inputs are either padded [B, L] tensors with
a ``mask``, or packed 1-D [T] tensors with ``seq_ids`` (the learner packs without padding).

Every aggregation mode is a fixed weighted sum of per-token losses, ``loss = sum_t w_t * l_t``
(:func:`token_weights`): that is what lets the fused path stay per-token.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from arena_core.kernels._validate import KernelInputError

AGGREGATION_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


class GRPOTokenLoss(NamedTuple):
    """Per-token GRPO terms: ``loss`` to aggregate, ``clipped`` (1.0 where the clip zeroed the
    gradient) and ``kl`` (k3 estimator against the reference, None without one)."""

    loss: torch.Tensor
    clipped: torch.Tensor
    kl: torch.Tensor | None


class CISPOTokenLoss(NamedTuple):
    """Per-token CISPO terms: ``loss`` and ``clipped`` (1.0 where the IS weight was truncated)."""

    loss: torch.Tensor
    clipped: torch.Tensor


def _check_same_shape(**tensors: torch.Tensor | None) -> None:
    shapes = {k: tuple(v.shape) for k, v in tensors.items() if v is not None}
    if len(set(shapes.values())) > 1:
        raise KernelInputError(
            f"per-token tensors must have one shape, got {shapes}; expand per-sequence "
            "advantages to tokens first (advantages[seq_ids] packed, advantages[:, None] padded)"
        )


def _check_eps(eps_low: float, eps_high: float) -> None:
    if eps_low < 0 or eps_high < 0:
        raise KernelInputError(
            f"clip ranges must be >= 0, got eps_low={eps_low}, eps_high={eps_high}"
        )


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(d) - d - 1, d = ref - logp.

    Unbiased, always >= 0, and low variance for nearby policies (why GRPO uses it).
    """
    d = ref_logprobs - logprobs
    return torch.expm1(d) - d


def grpo_token_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.0,
) -> GRPOTokenLoss:
    """GRPO (PPO-clip) per-token loss, negated for minimisation.

    ``l_t = -min(r_t * A_t, clip(r_t, 1 - eps_low, 1 + eps_high) * A_t) + beta * k3_t`` with
    ``r_t = exp(logp_t - old_logp_t)``. Asymmetric eps (DAPO's clip-higher) is supported.
    ``clipped_t`` marks the tokens whose gradient the clip removed: r above 1+eps_high with A > 0,
    or below 1-eps_low with A < 0.
    """
    _check_same_shape(
        logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages, ref=ref_logprobs
    )
    _check_eps(eps_low, eps_high)
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped_obj = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    loss = -torch.minimum(unclipped, clipped_obj)
    with torch.no_grad():
        clipped = ((ratio > 1.0 + eps_high) & (advantages > 0)) | (
            (ratio < 1.0 - eps_low) & (advantages < 0)
        )
    kl = None
    if ref_logprobs is not None:
        kl = k3_kl(logprobs, ref_logprobs)
        if beta:
            loss = loss + beta * kl
    elif beta:
        raise KernelInputError(f"beta={beta} needs ref_logprobs (the reference model's logprobs)")
    return GRPOTokenLoss(loss, clipped.to(logprobs.dtype), kl)


def cispo_token_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float,
    eps_high: float,
) -> CISPOTokenLoss:
    """CISPO (MiniMax-M1) per-token loss: ``-sg(clip(r_t, 1-eps_low, 1+eps_high)) * A_t * logp_t``.

    Unlike PPO-clip, every token keeps a gradient (``-w_t * A_t``): the clip only bounds the
    importance weight, which is detached. Anchors use a large eps_low (lower bound off) and
    eps_high between 0.2 and 4. ``clipped_t`` marks tokens whose weight was truncated.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    _check_eps(eps_low, eps_high)
    with torch.no_grad():
        ratio = torch.exp(logprobs - old_logprobs)
        weight = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
        clipped = (ratio < 1.0 - eps_low) | (ratio > 1.0 + eps_high)
    return CISPOTokenLoss(-(weight * advantages * logprobs), clipped.to(logprobs.dtype))


def _per_sequence_sums(
    values: torch.Tensor, seq_ids: torch.Tensor, num_seqs: int | None
) -> torch.Tensor:
    n = int(seq_ids.max()) + 1 if num_seqs is None else num_seqs
    return torch.zeros(n, dtype=values.dtype, device=values.device).index_add_(0, seq_ids, values)


def token_weights(
    mask: torch.Tensor | None,
    mode: str,
    *,
    seq_ids: torch.Tensor | None = None,
    max_len: int | None = None,
    num_seqs: int | None = None,
    shape: torch.Size | None = None,
) -> torch.Tensor:
    """The weights w with ``aggregate_loss(l) == sum(w * l)`` for a mode (see aggregate_loss).

    Padded: ``mask`` [B, L] (1 = token in the loss), sequences are rows. Packed: ``seq_ids`` [T]
    (sequence index of each token) and an optional ``mask`` [T]. ``shape`` is needed only when
    there is neither mask nor seq_ids (every element is a token; rows are sequences).
    """
    if mode not in AGGREGATION_MODES:
        raise KernelInputError(f"aggregation mode must be one of {AGGREGATION_MODES}, got {mode!r}")
    if mask is not None:
        m = mask.to(torch.float32)
    elif seq_ids is not None:
        m = torch.ones(seq_ids.shape, dtype=torch.float32, device=seq_ids.device)
    elif shape is not None:
        m = torch.ones(shape, dtype=torch.float32)
    else:
        raise KernelInputError("token_weights needs a mask, seq_ids or a shape")
    if seq_ids is not None:
        if m.dim() != 1 or tuple(seq_ids.shape) != tuple(m.shape):
            raise KernelInputError(
                f"packed inputs need 1-D seq_ids and mask of one shape, got seq_ids "
                f"{tuple(seq_ids.shape)} and mask {tuple(m.shape)}"
            )
        seq_ids = seq_ids.long()
    elif m.dim() != 2 and mode != "token-mean":
        raise KernelInputError(
            f"mode {mode!r} needs sequences: pass a padded [B, L] mask or packed seq_ids "
            f"(got a mask of shape {tuple(m.shape)})"
        )
    if mode == "token-mean":
        return m / m.sum().clamp_min(1.0)
    if seq_ids is not None:
        lengths = _per_sequence_sums(m, seq_ids, num_seqs)
    else:
        lengths = m.sum(dim=1)
    n_seqs = (lengths > 0).sum().clamp_min(1).to(torch.float32)
    if mode == "seq-mean-token-mean":
        per_seq = 1.0 / (lengths.clamp_min(1.0) * n_seqs)
    else:
        if max_len is None or max_len < 1:
            raise KernelInputError(
                "mode 'seq-mean-token-sum-norm' divides each sequence's sum by a constant "
                f"max_len (Dr.GRPO); pass max_len >= 1, e.g. the max completion length (got "
                f"{max_len})"
            )
        per_seq = torch.full_like(lengths, 1.0 / max_len) / n_seqs
    return m * (per_seq[seq_ids] if seq_ids is not None else per_seq[:, None])


def aggregate_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor | None,
    mode: str = "token-mean",
    *,
    seq_ids: torch.Tensor | None = None,
    max_len: int | None = None,
    num_seqs: int | None = None,
) -> torch.Tensor:
    """Reduce per-token losses to a scalar. With m the mask, S the sequences with a token:

    * ``token-mean``: ``sum_t m_t l_t / sum_t m_t`` (every token weighs the same; long answers
      weigh more).
    * ``seq-mean-token-mean``: ``(1/|S|) sum_s (sum_{t in s} m_t l_t / sum_{t in s} m_t)`` (every
      sequence weighs the same; the original GRPO).
    * ``seq-mean-token-sum-norm``: ``(1/|S|) sum_s (sum_{t in s} m_t l_t) / max_len`` (Dr.GRPO: a
      constant normaliser removes the length bias of per-sequence means).

    Sequences without any masked-in token are left out of |S| (they carry no signal). Masked-out
    positions are ignored even when they hold inf or NaN (padding).
    """
    w = token_weights(
        mask, mode, seq_ids=seq_ids, max_len=max_len, num_seqs=num_seqs, shape=per_token.shape
    ).to(per_token.device)
    if tuple(w.shape) != tuple(per_token.shape):
        raise KernelInputError(
            f"per-token loss {tuple(per_token.shape)} and mask/seq_ids {tuple(w.shape)} must have "
            "one shape"
        )
    return torch.where(w != 0, per_token, 0.0).mul(w.to(per_token.dtype)).sum()
