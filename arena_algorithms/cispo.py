"""CISPO (MiniMax-M1, 2025) as an Arena algorithm plugin.

J = (1 / sum_i |o_i|) sum_i sum_t sg(clip(r_it, 1 - eps_low, 1 + eps_high)) A_it log pi(o_it).
Unlike PPO/GRPO, which drop the gradient of tokens whose ratio is clipped, CISPO clips and
detaches the importance weight itself, so rare but important tokens ("reflection" tokens in the
paper) keep contributing. The ratio is taken against the behaviour policy that sampled the
token, so the clip *is* the off-policy correction (the learner's separate truncated-IS weight is
not applied on top).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from arena_algorithms.group_relative import GroupRelativeAlgorithm, GroupRelativeConfig

if TYPE_CHECKING:  # torch is imported when an algorithm runs, not when plugins load
    from torch import Tensor

    from arena_core.learn.algorithm import TokenBatch


class CISPOConfig(GroupRelativeConfig):
    """The `algo` section for CISPO. eps_low=1 turns the lower bound off (ratios are > 0);
    token-mean aggregation is the paper's normalisation by the total token count."""

    name: str = "cispo"
    eps_low: float = Field(1.0, ge=0, description="Lower IS-weight clip (1.0 = off).")
    eps_high: float = Field(2.0, ge=0, description="Upper IS-weight clip (anchors: 0.2 to 4).")


class CISPO(GroupRelativeAlgorithm):
    """Clipped IS-weight policy optimisation (see module docstring)."""

    config_class = CISPOConfig

    def surrogate(self, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        from arena_core.learn.losses import cispo_token_loss

        # The ratio is taken against the generator's logprobs directly: no extra IS weight.
        return cispo_token_loss(
            batch.logp,
            batch.behaviour_logp,
            batch.advantages,
            eps_low=self.config.eps_low,
            eps_high=self.config.eps_high,
        )
