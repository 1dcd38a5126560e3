"""Reference policy-loss pieces shared by the algorithm plugins.

Every function works on flat per-token tensors (one entry per completion token of the step), so
the learner can pack sequences freely: a loss never needs to know which row or micro-batch a
token came from. Aggregation is expressed as per-token weights computed once for the whole step,
which is what makes gradient accumulation over micro-batches exactly equal to one big batch.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def group_advantages(rewards: Tensor, *, divide_by_std: bool = True, eps: float = 1e-4) -> Tensor:
    """GRPO advantages: `(r - mean_group) / (std_group + eps)`, or Dr.GRPO's `r - mean_group`.

    `rewards` is [n_groups, group_size]. The std is the sample std (Bessel-corrected, as TRL
    computes it), so a group of two rewards {0, 1} gets advantages of about +-0.707.
    """
    if rewards.dim() != 2:
        raise ValueError(
            f"rewards must be [n_groups, group_size], got shape {tuple(rewards.shape)}"
        )
    rewards = rewards.to(torch.float32)
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not divide_by_std:
        return centred
    std = rewards.std(dim=1, keepdim=True) if rewards.shape[1] > 1 else torch.zeros_like(centred)
    return centred / (std + eps)


def token_weights(lengths: list[int], mode: str, *, norm_len: int | None = None) -> Tensor:
    """Per-token weights `w` such that `sum(w * per_token_loss)` is the aggregated step loss:
    token-mean `1 / total_tokens`; seq-mean-token-mean (the mean of each sequence's token mean)
    `1 / (n_seqs * len_i)`; seq-mean-token-sum-norm (Dr.GRPO: token sums over a constant length,
    usually max_new_tokens, so no length bias toward short or long answers)
    `1 / (n_seqs * norm_len)`. Sequences of length 0 contribute nothing."""
    lens = torch.tensor([int(n) for n in lengths], dtype=torch.float32)
    n_seqs = int((lens > 0).sum())
    if n_seqs == 0:
        return torch.zeros(0)
    if mode == "token-mean":
        per_seq = torch.full_like(lens, 1.0 / float(lens.sum()))
    elif mode == "seq-mean-token-mean":
        per_seq = 1.0 / (n_seqs * lens.clamp(min=1))  # empty sequences are repeated 0 times
    elif mode == "seq-mean-token-sum-norm":
        if not norm_len or norm_len <= 0:
            raise ValueError("seq-mean-token-sum-norm needs a positive norm_len (max_new_tokens)")
        per_seq = torch.full_like(lens, 1.0 / (n_seqs * float(norm_len)))
    else:
        raise ValueError(f"unknown loss aggregation {mode!r}; choose one of {', '.join(AGG_MODES)}")
    return torch.repeat_interleave(per_seq, lens.to(torch.long))


def aggregate(
    per_token: Tensor, lengths: list[int], mode: str, *, norm_len: int | None = None
) -> Tensor:
    """The aggregated loss of a whole step's flat per-token losses (the unsplit reference)."""
    weights = token_weights(lengths, mode, norm_len=norm_len).to(per_token)
    return (weights * per_token).sum()


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token KL(pi || ref) estimate `exp(ref - logp) - (ref - logp) - 1` (Schulman's k3):
    non-negative, unbiased and low-variance for nearby policies, the estimator GRPO uses."""
    d = ref_logp - logp
    return torch.expm1(d) - d


def grpo_token_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float
) -> tuple[Tensor, Tensor]:
    """PPO-clip surrogate per token `-min(r A, clip(r, 1-eps_low, 1+eps_high) A)`, with
    `r = exp(logp - old_logp)` and asymmetric eps (DAPO's clip-higher), and the mask of tokens
    whose gradient the clip removed (r above 1+eps_high with A > 0, or below 1-eps_low with
    A < 0) for the clip-fraction metric."""
    _check_same_shape(logp, old_logp, advantages)
    ratio = torch.exp(logp - old_logp)
    clipped_obj = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    loss = -torch.minimum(ratio * advantages, clipped_obj)
    high = (ratio > 1.0 + eps_high) & (advantages > 0)  # comparisons carry no gradient
    return loss, high | ((ratio < 1.0 - eps_low) & (advantages < 0))


def cispo_token_loss(
    logp: Tensor, behaviour_logp: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float
) -> tuple[Tensor, Tensor]:
    """CISPO (MiniMax-M1) per token: `-sg(clip(r, 1-eps_low, 1+eps_high)) * A * log pi`.

    The importance weight is clipped and detached, so every token keeps a gradient (PPO's clip
    zeroes the gradient of clipped tokens instead). Returns (loss, clipped mask: the tokens
    whose weight was truncated).
    """
    _check_same_shape(logp, behaviour_logp, advantages)
    with torch.no_grad():
        ratio = torch.exp(logp - behaviour_logp)
        weight = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
        clipped = (ratio < 1.0 - eps_low) | (ratio > 1.0 + eps_high)
    return -(weight * advantages * logp), clipped


def _check_same_shape(logp: Tensor, old_logp: Tensor, advantages: Tensor) -> None:
    """Broadcasting would silently pair the wrong tokens: one shape, or a clear error."""
    if not logp.shape == old_logp.shape == advantages.shape:
        raise ValueError(
            f"per-token tensors must have one shape, got logp {tuple(logp.shape)}, old/behaviour "
            f"logp {tuple(old_logp.shape)}, advantages {tuple(advantages.shape)}; expand "
            "per-sequence advantages to tokens first (advantages[seq_ids])"
        )


def gspo_token_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    seq_ids: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    ratio_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GSPO-token (Zheng et al. 2025) per token: `-min(s_t A, clip(s_t, 1-eps_low, 1+eps_high) A)`
    with `s_t = sg[s] * pi / sg[pi]`, `s` the sequence's geometric-mean ratio.

    `s` is the mean log-ratio over each sequence's tokens (`seq_ids` labels them), or over only
    those `ratio_mask` marks (Tinker's `sequence_ratio_mask`; a sequence with none marked has
    `s = 1`). It is fed to the PPO-clip kernel as a shifted logprob: with
    `logp' = logp + sg(seq_log_ratio - log_ratio)`, `exp(logp' - old)` has the value `s` and the
    gradient `s * grad logp`. Returns (loss, clipped mask)."""
    log_ratio = (logp - old_logp).detach()
    if ratio_mask is None:
        seq_log_ratio = sequence_mean(log_ratio, seq_ids)
    else:
        mask = (ratio_mask != 0).to(log_ratio.dtype)
        summed = sequence_mean(log_ratio * mask, seq_ids)
        share = sequence_mean(mask, seq_ids)  # the fraction of marked tokens, same sequence
        seq_log_ratio = torch.where(share > 0, summed / share.clamp_min(1e-30), 0.0)
    shifted = logp + (seq_log_ratio - log_ratio)
    return grpo_token_loss(shifted, old_logp, advantages, eps_low=eps_low, eps_high=eps_high)


def sequence_mean(values: Tensor, seq_ids: Tensor) -> Tensor:
    """Each token's sequence mean of `values` (per-token [N] -> per-token [N]); `seq_ids` may be
    any integer labels (global over a step, not contiguous)."""
    _, inverse = torch.unique(seq_ids, return_inverse=True)
    n = int(inverse.max()) + 1 if inverse.numel() else 0
    sums = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, inverse, values)
    counts = torch.bincount(inverse, minlength=n).to(values.dtype)
    return (sums / counts)[inverse]
