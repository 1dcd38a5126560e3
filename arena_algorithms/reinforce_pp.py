"""REINFORCE++ (Hu et al. 2025, "REINFORCE++: An Efficient RLHF Algorithm with Robustness to
Both Prompt and Reward Models") and its -baseline variant, as an Arena algorithm plugin.

No critic. The KL to the reference is a per-token reward, the task reward arrives at the last
token, and the advantage of token t is its return to go, normalised over the whole step:

    r_t = -beta * KL_t + [t = |y|] * s(x, y),    KL_t = log pi_old(y_t) - log pi_ref(y_t)   (k1)
    G_t = sum_{i >= t} r_i,                       A_t = (G_t - mean_batch G) / (std_batch G + eps)

where pi_old is the policy that sampled the token (the generator's logprobs), mean and std run
over every loss token of the step (global batch normalisation, not per group), and s(x, y) is:

- `baseline: none` (REINFORCE++): the reward r(x, y) itself;
- `baseline: group` (REINFORCE++-baseline, the default): r(x, y) minus its group's mean reward,
  which removes the prompt's difficulty before the global normalisation; the paper's variant for
  group sampling on reasoning tasks, and what Arena's groups make free.

`kl_estimator: k3` replaces KL_t by Schulman's non-negative k3. The loss is GRPO's PPO-clip
surrogate (with the truncated-IS weight); the KL is in the reward, so no KL term is added to the
loss (beta > 0 still makes the learner compute reference logprobs, and `kl` is logged).
Groups whose rewards are all equal are still dropped and refilled (dynamic sampling). Under FSDP
each rank sees only its micro-batches' reference logprobs: the other ranks' tokens enter the
normalisation with KL 0 (exact when beta = 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from arena_algorithms.grpo import GRPO, GRPOConfig

if TYPE_CHECKING:  # torch is imported when an algorithm runs, not when plugins load
    from torch import Tensor

    from arena_core.learn.algorithm import TokenBatch


class ReinforcePPConfig(GRPOConfig):
    """The `algo` section for REINFORCE++."""

    name: str = "reinforce_pp"
    baseline: Literal["group", "none"] = Field(
        "group", description="'group' subtracts the group mean first (-baseline); 'none' does not."
    )
    beta: float = Field(0.001, ge=0, description="KL coefficient of the per-token KL reward.")
    kl_estimator: Literal["k1", "k3"] = Field(
        "k1", description="KL_t in the reward: k1 log(pi_old/pi_ref) (the paper's) or k3."
    )
    scale_rewards: Literal["batch"] = Field(
        "batch", description="Always 'batch': returns are normalised over the step's loss tokens."
    )


class ReinforcePP(GRPO):
    """REINFORCE++ / REINFORCE++-baseline (see module docstring)."""

    config_class = ReinforcePPConfig

    def advantages(self, rewards: Tensor) -> Tensor:
        """The sequence scalar s(x, y): the reward, or the reward minus its group's mean."""
        rewards = rewards.float()
        if self.config.baseline == "group":
            return rewards - rewards.mean(dim=1, keepdim=True)
        return rewards

    def batch_advantages(self, advantages: Tensor, rewards: Tensor) -> Tensor:
        return advantages  # the normalisation is per token, in token_advantages

    def token_advantages(
        self,
        advantages: Tensor,
        lengths: list[int],
        behaviour_logp: Tensor,
        ref_logp: Tensor | None,
    ) -> Tensor:
        from arena_core.learn.advantages import kl_returns, token_normalise

        returns = kl_returns(
            advantages, lengths, behaviour_logp, ref_logp, self.beta, self.config.kl_estimator
        )
        return token_normalise(returns, self.config.adv_eps)

    def token_loss(self, batch: TokenBatch) -> tuple[Tensor, dict[str, Tensor]]:
        loss, clipped = self.surrogate(batch)
        stats = {"clip_frac": clipped.float()}
        if batch.ref_logp is not None:  # logged only: the KL is already in the advantages
            stats["kl"] = (batch.behaviour_logp - batch.ref_logp).detach().float()
        return loss, stats
