"""GRPO (DeepSeekMath) and its Dr.GRPO variant as an Arena algorithm plugin.

Group-relative advantages replace a value network: each prompt is sampled `group_size` times and a
completion's advantage is its reward relative to its group. The loss is PPO's clipped surrogate
with an optional KL penalty to the reference policy (`beta`, 0 by default: recent work finds it
unnecessary for verifiable rewards and it costs a reference forward).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from arena_algorithms.group_relative import GroupRelativeAlgorithm, GroupRelativeConfig

if TYPE_CHECKING:  # torch is imported when an algorithm runs, not when plugins load
    from torch import Tensor

    from arena_core.learn.algorithm import TokenBatch


class GRPOConfig(GroupRelativeConfig):
    """The `algo` section for GRPO. Defaults are the AgileRL GSM8K tutorial's values."""

    name: str = "grpo"
    beta: float = Field(0.001, ge=0, description="KL-to-reference coefficient (k3 estimator).")
    eps_low: float = Field(0.2, ge=0, description="Lower clip: ratio >= 1 - eps_low.")
    eps_high: float = Field(0.2, ge=0, description="Upper clip: ratio <= 1 + eps_high.")


class GRPO(GroupRelativeAlgorithm):
    """Group-relative policy optimisation with PPO clipping (see module docstring)."""

    config_class = GRPOConfig

    def surrogate(self, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        from arena_core.learn.losses import grpo_token_loss

        cfg = self.config
        loss, clipped = grpo_token_loss(
            batch.logp, batch.old_logp, batch.advantages, eps_low=cfg.eps_low, eps_high=cfg.eps_high
        )
        return loss * batch.is_weight, clipped  # truncated IS against the generator
