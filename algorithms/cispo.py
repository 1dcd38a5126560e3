"""CISPO (MiniMax-M1, 2025) as an Arena algorithm plugin.

J = (1 / sum_i |o_i|) sum_i sum_t sg(clip(r_it, 1 - eps_low, 1 + eps_high)) A_it log pi(o_it).
Unlike PPO/GRPO, which drop the gradient of tokens whose ratio is clipped, CISPO clips and
detaches the importance weight itself, so rare but important tokens ("reflection" tokens in the
paper) keep contributing. The ratio is taken against the behaviour policy that sampled the
token, so the clip *is* the off-policy correction (the learner's separate truncated-IS weight is
not applied on top).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from arena_algorithms.group_relative import GroupRelativeAlgorithm
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # torch is imported when an algorithm runs, not when plugins load
    from torch import Tensor

    from arena_core.learn.algorithm import TokenBatch


class CISPOConfig(BaseModel):
    """The `algo` section for CISPO. eps_low=1 turns the lower bound off (ratios are > 0)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "cispo"
    group_size: int = Field(8, ge=2, description="Completions sampled per prompt.")
    lr: float = Field(5e-6, gt=0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float | None = Field(0.1, gt=0, description="Global grad-norm clip; None = off.")
    beta: float = Field(0.0, ge=0, description="KL-to-reference coefficient (k3 estimator).")
    eps_low: float = Field(1.0, ge=0, description="Lower IS-weight clip (1.0 = off).")
    eps_high: float = Field(2.0, ge=0, description="Upper IS-weight clip (anchors: 0.2 to 4).")
    scale_rewards: Literal["std", "none"] = "std"
    adv_eps: float = Field(1e-4, gt=0)
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = Field(
        "token-mean", description="The paper normalises by the total token count."
    )
    num_iterations: int = Field(1, ge=1, description="Optimizer passes over each step's samples.")


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
