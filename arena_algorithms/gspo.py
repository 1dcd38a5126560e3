"""GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization", Qwen team) as an Arena
algorithm plugin.

GRPO weights each token by its own ratio, whose noise grows with length and which one odd token
can push out of the clip range; the unit of the reward is the sequence, so GSPO takes the
importance ratio and the clip per sequence:

    s_i(theta) = exp( (1/|y_i|) sum_t log( pi_theta(y_it) / pi_old(y_it) ) )   (geometric mean)
    J = E[ (1/G) sum_i min( s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i ) ]

implemented in the paper's token-level form (GSPO-token), which has the same value and gradient
when every token of a sequence shares A_i and also admits per-token advantages:

    s_it = sg[s_i] * pi_theta(y_it) / sg[pi_theta(y_it)]
    loss_it = -min( s_it A_it, clip(s_it, 1 - eps_low, 1 + eps_high) A_it )

so each token's term has the value s_i and the gradient s_i * grad log pi(y_it), and a sequence
whose s_i left the clip range loses the gradient of all its tokens at once. The per-token loss
is averaged per sequence and over sequences (`loss_agg_mode: seq-mean-token-mean`, the paper's
1/G sum_i 1/|y_i| sum_t). Sequence ratios sit far closer to 1 than token ratios, hence the
paper's tiny clip range (3e-4, 4e-4). With `num_iterations: 1` the ratio is exactly 1 on the
only pass, so the clip never acts and GSPO is the on-policy sequence-level policy gradient.
The learner's mismatch correction (`is_weight`, train.is_correction) multiplies the loss as in
GRPO.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from arena_algorithms.group_relative import GroupRelativeAlgorithm, GroupRelativeConfig

if TYPE_CHECKING:  # torch is imported when an algorithm runs, not when plugins load
    from torch import Tensor

    from arena_core.learn.algorithm import TokenBatch


class GSPOConfig(GroupRelativeConfig):
    """The `algo` section for GSPO: the paper's clip range and sequence-mean aggregation."""

    name: str = "gspo"
    eps_low: float = Field(
        3e-4, ge=0, description="Lower clip of the sequence ratio: s >= 1 - eps_low."
    )
    eps_high: float = Field(
        4e-4, ge=0, description="Upper clip of the sequence ratio: s <= 1 + eps_high."
    )
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = Field(
        "seq-mean-token-mean", description="How per-token losses become the step loss."
    )


class GSPO(GroupRelativeAlgorithm):
    """Group sequence policy optimisation (see module docstring)."""

    config_class = GSPOConfig

    def surrogate(self, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        # one implementation, shared with `arena tinker serve`'s "gspo" loss
        from arena_core.learn.losses import gspo_token_loss

        if batch.seq_ids is None:
            raise ValueError(
                "GSPO needs each token's sequence (TokenBatch.seq_ids): Arena's learner fills "
                "it; a custom caller must pass seq_ids"
            )
        loss, clipped = gspo_token_loss(
            batch.logp,
            batch.old_logp,
            batch.advantages,
            batch.seq_ids,
            eps_low=self.config.eps_low,
            eps_high=self.config.eps_high,
        )
        return loss * batch.is_weight, clipped  # the learner's mismatch correction
