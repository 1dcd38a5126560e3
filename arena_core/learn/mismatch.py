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
        """The detached per-token weight [N] of this correction."""
        return correction_weight(old_logp, behaviour_logp, seq_ids, self)


def sequence_mean(values: Tensor, seq_ids: Tensor) -> Tensor:
    """Each token's sequence mean of `values` (per-token [N] -> per-token [N]); `seq_ids` may be
    any integer labels (global over a step, not contiguous)."""
    _, inverse = torch.unique(seq_ids, return_inverse=True)
    n = int(inverse.max()) + 1 if inverse.numel() else 0
    sums = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, inverse, values)
    counts = torch.bincount(inverse, minlength=n).to(values.dtype)
    return (sums / counts)[inverse]


def correction_weight(
    old_logp: Tensor, behaviour_logp: Tensor, seq_ids: Tensor | None, corr: Correction
) -> Tensor:
    """Per-token weights of `corr` (the torch reference of the module docstring's formulas)."""
    log_r = (old_logp - behaviour_logp).detach().float()
    if corr.mode == "none" or (corr.mode == "token_tis" and corr.tis_cap is None):
        return torch.ones_like(log_r)
    if corr.mode == "token_tis":
        return torch.exp(log_r).clamp(max=corr.tis_cap)
    if corr.mode == "icepop":
        r = torch.exp(log_r)
        inside = (r >= corr.band_low) & (r <= corr.band_high)
        return torch.where(inside, r, torch.zeros_like(r))
    if seq_ids is None:
        raise ValueError("seq_mask needs each token's sequence id (TokenBatch.seq_ids)")
    g = torch.exp(sequence_mean(log_r, seq_ids))
    inside = (g >= 1.0 / corr.seq_cap) & (g <= corr.seq_cap)
    return torch.where(inside, g, torch.zeros_like(g))


def cut_tokens(
    old_logp: Tensor, behaviour_logp: Tensor, weight: Tensor, corr: Correction
) -> Tensor:
    """Which tokens the correction cut: masked to weight 0 (seq_mask, icepop), or truncated at
    the cap (token_tis: `r > tis_cap`)."""
    if corr.mode == "token_tis" and corr.tis_cap is not None:
        return torch.exp((old_logp - behaviour_logp).detach().float()) > corr.tis_cap
    if corr.mode in ("seq_mask", "icepop"):
        return weight <= 0
    return torch.zeros_like(weight, dtype=torch.bool)


def mismatch_sums(
    old_logp: Tensor, behaviour_logp: Tensor, weight: Tensor, corr: Correction
) -> dict[str, float]:
    """Additive pieces of the step's mismatch metrics over some of its tokens: the k3 sum, the
    number of tokens the correction cut and the largest ratio."""
    if old_logp.numel() == 0:
        return {"kl_sum": 0.0, "cut": 0.0, "max_ratio": 0.0}
    log_r = (old_logp - behaviour_logp).detach().float()
    k3 = torch.expm1(log_r) - log_r  # r - log r - 1 >= 0: KL(sampler || learner) per token
    cut = cut_tokens(old_logp, behaviour_logp, weight, corr)
    return {
        "kl_sum": float(k3.sum()),
        "cut": float(cut.sum()),
        "max_ratio": float(torch.exp(log_r.max())),
    }


def mismatch_metrics(
    old_logp: Tensor,
    behaviour_logp: Tensor,
    weight: Tensor,
    corr: Correction,
    n_tokens: int | None = None,
) -> dict[str, float]:
    """`mismatch/kl` (token mean of k3), `mismatch/masked_frac` and `mismatch/max_ratio`.

    Tokens whose weight is NaN are left out (a trainer rank's learner sees only its share of the
    step); `n_tokens` (default: the tokens left) is the divisor, so that the shares of one
    step's tokens add up to the step's means."""
    keep = ~torch.isnan(weight)
    old_logp, behaviour_logp, weight = old_logp[keep], behaviour_logp[keep], weight[keep]
    s = mismatch_sums(old_logp, behaviour_logp, weight, corr)
    n = max(1, n_tokens if n_tokens is not None else old_logp.numel())
    return {
        "mismatch/kl": s["kl_sum"] / n,
        "mismatch/masked_frac": s["cut"] / n,
        "mismatch/max_ratio": s["max_ratio"],
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
