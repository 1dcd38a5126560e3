"""RLOO (REINFORCE Leave-One-Out; Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE
Style Optimization for Learning from Human Feedback in LLMs") as an Arena algorithm plugin.

Each prompt is sampled g = `group_size` times and a completion's baseline is the mean reward of
the *other* g - 1 completions of its group:

    A_i = r_i - 1/(g-1) sum_{j != i} r_j  =  g/(g-1) (r_i - mean_j r_j)

The baseline does not depend on the sample it is subtracted from, so the estimator is unbiased
(GRPO's mean includes r_i itself, which shrinks every advantage by (g-1)/g; its std division
re-weights prompts). No std scaling by default (`scale_rewards=none`); `group` or `batch` scale
as in GRPO. The loss is GRPO's PPO-clip surrogate with its truncated-IS weight, so `eps_low`,
`eps_high`, `beta` (k3 KL in the loss) and `num_iterations` mean what they mean there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from arena_algorithms.grpo import GRPO, GRPOConfig

if TYPE_CHECKING:  # torch is imported when an algorithm runs, not when plugins load
    from torch import Tensor


class RLOOConfig(GRPOConfig):
    """The `algo` section for RLOO: GRPO's fields, no KL and no std scaling by default."""

    name: str = "rloo"
    beta: float = Field(0.0, ge=0, description="KL-to-reference coefficient (k3, in the loss).")
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "none", description="Divide the leave-one-out advantages by: group std, batch std, none."
    )


class RLOO(GRPO):
    """Leave-one-out baseline advantages, PPO-clip surrogate (see module docstring)."""

    config_class = RLOOConfig

    def advantages(self, rewards: Tensor) -> Tensor:
        from arena_core.learn.advantages import rloo_advantages

        adv = rloo_advantages(rewards)
        if self.config.scale_rewards != "group":
            return adv  # batch: the collector's batch_advantages hook divides later
        std = rewards.float().std(dim=1, keepdim=True)
        return adv / (std + self.config.adv_eps)
