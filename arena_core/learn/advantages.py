"""Advantage estimators and reward shaping beyond GRPO's group statistics.

Pure tensor functions that the algorithm plugins (RLOO, REINFORCE++, the DAPO options of GRPO and
CISPO) compose; the optional algorithm hooks that use them (`arena_core.learn.algorithm`) are
called by the collector (`batch_advantages`) and the learner (`token_advantages`). Each function
says which paper it follows; tests/learn/test_advantages.py checks each against numbers worked
out by hand.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rloo_advantages(rewards: Tensor) -> Tensor:
    """RLOO (Ahmadian et al. 2024): `A_i = r_i - mean_{j != i} r_j` within each group.

    `rewards` is [n_groups, g] with g >= 2. Algebraically `A_i = g / (g - 1) * (r_i - mean_j r_j)`,
    which is what is computed: the leave-one-out baseline is unbiased because it does not depend
    on the sample it is subtracted from.
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(
            "RLOO needs [n_groups, group_size] rewards with group_size >= 2, got shape "
            f"{tuple(rewards.shape)}"
        )
    rewards = rewards.to(torch.float32)
    g = rewards.shape[1]
    return (rewards - rewards.mean(dim=1, keepdim=True)) * (g / (g - 1))


def batch_std_scale(advantages: Tensor, rewards: Tensor, eps: float) -> Tensor:
    """Group-centred advantages divided by the std of the step's rewards (one scalar for the
    whole batch): group-level mean, batch-level std ("Tricks or Traps?", Liu et al. 2025; TRL's
    `scale_rewards="batch"`). Unlike the group std, a group of nearly equal rewards is not blown
    up to unit scale. `rewards` are those the centring used: every reward of the groups the step
    trains on (a masked truncated completion's too), so the std is > 0 whenever a group is.
    The sample std (Bessel-corrected)."""
    if rewards.numel() < 2:
        return advantages
    return advantages / (rewards.to(torch.float32).std() + eps)


def overlong_penalty(lengths: Tensor, max_len: int, buffer: int, factor: float = 1.0) -> Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), times `factor`.

    With L_max = `max_len` (generation.max_new_tokens) and L_cache = `buffer`:
    0 for |y| <= L_max - L_cache, ((L_max - L_cache) - |y|) / L_cache inside the buffer (from 0
    down to -1), and -1 for |y| >= L_max. Added to the task reward before advantages, so a
    completion that runs into the limit is discouraged smoothly instead of all-or-nothing.
    """
    if not 0 < buffer < max_len:
        raise ValueError(
            f"algo.overlong_buffer={buffer} must be between 1 and generation.max_new_tokens - 1 "
            f"(= {max_len - 1}): the buffer is the last L_cache tokens before the length limit. "
            "Lower algo.overlong_buffer (a quarter of max_new_tokens is typical) or set it to 0 "
            "to turn the shaping off."
        )
    start = max_len - buffer
    lengths = lengths.to(torch.float32)
    pen = ((start - lengths) / buffer).clamp(min=-1.0, max=0.0)
    return pen * factor


def kl_returns(
    scalar: Tensor,
    lengths: list[int],
    behaviour_logp: Tensor,
    ref_logp: Tensor | None,
    beta: float,
    estimator: str = "k1",
) -> Tensor:
    """REINFORCE++ per-token returns (Hu et al. 2025): reward `r_t = -beta * KL_t`, plus the
    sequence's scalar reward at its last token, summed to go: `G_t = sum_{i >= t} r_i` (gamma 1).

    `scalar` is the sequence's scalar broadcast to its tokens ([N], the flat order of `lengths`).
    KL_t is taken between the policy that sampled the token (behaviour logprobs, the paper's
    pi_old) and the reference: k1 `log pi_old - log pi_ref` as in the paper, or Schulman's k3
    `exp(ref - old) - (ref - old) - 1` (non-negative). Without a reference (beta 0) every token of
    a sequence gets its scalar reward.
    """
    n = int(sum(lengths))
    if scalar.numel() != n or behaviour_logp.numel() != n:
        raise ValueError(f"expected {n} tokens, got {scalar.numel()} and {behaviour_logp.numel()}")
    reward = torch.zeros(n, dtype=torch.float32, device=scalar.device)
    if beta > 0 and ref_logp is not None:
        log_ratio = behaviour_logp.float() - ref_logp.float()
        if estimator == "k1":
            kl = log_ratio
        elif estimator == "k3":
            kl = torch.exp(-log_ratio) + log_ratio - 1.0
        else:
            raise ValueError(f"kl_estimator must be 'k1' or 'k3', got {estimator!r}")
        reward = reward - beta * kl
    lens = torch.tensor([int(x) for x in lengths], dtype=torch.long, device=scalar.device)
    ends = torch.cumsum(lens, 0)  # exclusive end of each sequence
    last = ends[lens > 0] - 1
    reward[last] += scalar.float()[last]
    # suffix sums of the whole flat vector, minus the part that belongs to later sequences
    suffix = torch.cat([reward.flip(0).cumsum(0).flip(0), reward.new_zeros(1)])
    seq_end = torch.repeat_interleave(ends, lens)
    return suffix[:n] - suffix[seq_end]


def token_normalise(values: Tensor, eps: float) -> Tensor:
    """`(x - mean) / (std + eps)` over every loss token of the step: REINFORCE++'s global batch
    normalisation (one mean and std for the whole batch, not per group or per sequence)."""
    if values.numel() < 2:
        return values - values.mean()
    return (values - values.mean()) / (values.std() + eps)
