"""Train/inference mismatch: how far the sampler's logprobs are from the learner's, and the
correction that keeps a gap from steering the update.

The generation backend (a vLLM engine in bf16, a torch engine a few versions stale in async
mode) reports the logprob `behaviour` of each token it sampled; the learner recomputes `old`
with its own weights before the step's first update. The token ratio `r = exp(old - behaviour)`
is 1 when both agree. Four corrections are offered (`train.is_correction`), each a detached
per-token weight the algorithm multiplies into its loss (`TokenBatch.is_weight`):

- token_tis: truncated IS, `w = min(r, tis_cap)` (Yao et al. 2025, "Your efficient RL framework
  secretly brings you off-policy RL training"): bounds one token's weight, keeps every token.
- seq_mask: sequence-level masked IS on the geometric mean of the sequence's ratios,
  `g_i = exp(mean_t log r_it)`; `w = g_i` when `1/c <= g_i <= c`, else 0 (the whole sequence
  is dropped). The geometric mean does not explode with length as the product of ratios does.
- icepop: token masking (IcePop, Ling team's Ring-1T report 2025): `w = r` inside the band
  `[a, b]`, 0 outside: a token the two engines disagree on gets no gradient at all.
- none: `w = 1`.

`mismatch_metrics` measures the gap every step: the k3 estimate of KL(sampler || learner)
(tokens are drawn from the sampler, so `r - log r - 1` averages to it), the fraction of loss
tokens the correction cut (masked; for token_tis: truncated at the cap) and the largest ratio.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

CORRECTIONS: tuple[str, ...] = ("token_tis", "seq_mask", "icepop", "none")
MISMATCH_KEYS: tuple[str, ...] = ("mismatch/kl", "mismatch/masked_frac", "mismatch/max_ratio")


@dataclass(frozen=True)
class Correction:
    """One run's mismatch correction and its bounds (see the module docstring)."""

    mode: str = "token_tis"
    tis_cap: float | None = 2.0  # token_tis: the cap (None: no correction)
    seq_cap: float = 1.5  # seq_mask: c, sequences with g outside [1/c, c] are dropped
    band_low: float = 0.5  # icepop: a
    band_high: float = 5.0  # icepop: b

    def __post_init__(self) -> None:
        if self.mode not in CORRECTIONS:
            raise ValueError(
                f"unknown mismatch correction {self.mode!r}; choose one of {', '.join(CORRECTIONS)}"
            )
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ValueError(f"tis_cap must be > 0 (or None), got {self.tis_cap}")
        if self.seq_cap <= 1:
            raise ValueError(f"the sequence-mask cap c must be > 1, got {self.seq_cap}")
        if not 0 < self.band_low <= 1 <= self.band_high:
            raise ValueError(
                f"the IcePop band must satisfy 0 < low <= 1 <= high, got [{self.band_low}, "
                f"{self.band_high}]"
            )

    def with_mode(self, mode: str) -> Correction:
        """The same bounds under another mode (what the mismatch guard switches)."""
        return dataclasses.replace(self, mode=mode)

    def weight(self, old_logp: Tensor, behaviour_logp: Tensor, seq_ids: Tensor | None) -> Tensor:
        """The detached per-token weight [N] of this correction (the module docstring's
        formulas)."""
        log_r = (old_logp - behaviour_logp).detach().float()
        if self.mode == "none" or (self.mode == "token_tis" and self.tis_cap is None):
            return torch.ones_like(log_r)
        if self.mode == "token_tis":
            return torch.exp(log_r).clamp(max=self.tis_cap)
        if self.mode == "icepop":
            r = torch.exp(log_r)
            inside = (r >= self.band_low) & (r <= self.band_high)
            return torch.where(inside, r, torch.zeros_like(r))
        if seq_ids is None:
            raise ValueError("seq_mask needs each token's sequence id (TokenBatch.seq_ids)")
        g = torch.exp(sequence_mean(log_r, seq_ids))
        inside = (g >= 1.0 / self.seq_cap) & (g <= self.seq_cap)
        return torch.where(inside, g, torch.zeros_like(g))


def sequence_mean(values: Tensor, seq_ids: Tensor) -> Tensor:
    """Each token's sequence mean of `values` (per-token [N] -> per-token [N]); `seq_ids` may be
    any integer labels (global over a step, not contiguous)."""
    _, inverse = torch.unique(seq_ids, return_inverse=True)
    n = int(inverse.max()) + 1 if inverse.numel() else 0
    sums = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, inverse, values)
    counts = torch.bincount(inverse, minlength=n).to(values.dtype)
    return (sums / counts)[inverse]


def mismatch_metrics(
    old_logp: Tensor,
    behaviour_logp: Tensor,
    weight: Tensor,
    corr: Correction,
    n_tokens: int | None = None,
) -> dict[str, float]:
    """`mismatch/kl` (token mean of k3), `mismatch/masked_frac` (the tokens the correction cut:
    masked to weight 0 by seq_mask or icepop, truncated at the cap by token_tis) and
    `mismatch/max_ratio`.

    Tokens whose weight is NaN are left out (a trainer rank's learner sees only its share of the
    step); `n_tokens` (default: the tokens left) is the divisor, so that the shares of one
    step's tokens add up to the step's means."""
    keep = ~torch.isnan(weight)
    log_r = (old_logp[keep] - behaviour_logp[keep]).detach().float()
    n = max(1, n_tokens if n_tokens is not None else log_r.numel())
    if log_r.numel() == 0:
        return {"mismatch/kl": 0.0, "mismatch/masked_frac": 0.0, "mismatch/max_ratio": 0.0}
    k3 = torch.expm1(log_r) - log_r  # r - log r - 1 >= 0: KL(sampler || learner) per token
    if corr.mode == "token_tis" and corr.tis_cap is not None:
        cut = torch.exp(log_r) > corr.tis_cap
    elif corr.mode in ("seq_mask", "icepop"):
        cut = weight[keep] <= 0
    else:
        cut = torch.zeros_like(log_r, dtype=torch.bool)
    return {
        "mismatch/kl": float(k3.sum()) / n,
        "mismatch/masked_frac": float(cut.sum()) / n,
        "mismatch/max_ratio": float(torch.exp(log_r.max())),
    }


def correction_from(train: Any) -> Correction:
    """The Correction a run's `train` section asks for (is_correction and its bounds)."""
    return Correction(
        mode=train.is_correction,
        tis_cap=train.tis_cap,
        seq_cap=train.seq_mask_cap,
        band_low=train.icepop_low,
        band_high=train.icepop_high,
    )
