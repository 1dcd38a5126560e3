"""PPO (Schulman et al. 2017) for Gymnasium environments, as an Arena algorithm plugin.

The defaults are CleanRL's ppo.py (clip 0.2 with value clipping, 64-64 tanh MLPs, Adam eps 1e-5,
annealed learning rate, gamma 0.99, GAE 0.95) with a larger rollout and update (256 steps per
env, 4 minibatches x 10 epochs), lr 1e-3 and no entropy bonus, as rl-zoo tunes CartPole: with
them `+algo=ppo +env=gym env.id=CartPole-v1` reaches a held-out return of 500 in the default 100
steps (CleanRL's own defaults ended at ~430-460 there). The `+experiment=cartpole` and
`lunarlander` presets use rl-zoo's tuned values instead. The class
holds only the loss: rollouts, GAE and the update schedule live in the on-policy loop
(arena_core/classic_rl/ppo.py), the `ppo` recipe the class names in `recipe`, so `arena-run`
knows which loop runs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # torch is imported when the algorithm runs, not when plugins load
    from torch import Tensor


class PPOConfig(BaseModel):
    """The `algo` section for PPO (see the module docstring and arena_algorithms/conf/algo/ppo.yaml)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "ppo"
    lr: float = Field(1e-3, gt=0, description="Adam learning rate.")
    anneal_lr: bool = Field(True, description="Decay the learning rate linearly to 0.")
    adam_eps: float = Field(1e-5, gt=0)
    num_steps: int = Field(256, ge=1, description="Steps per environment per rollout.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    num_minibatches: int = Field(4, ge=1, description="Minibatches per epoch.")
    update_epochs: int = Field(10, ge=1, description="Passes over each rollout.")
    norm_adv: bool = Field(True, description="Normalise advantages per minibatch.")
    clip_coef: float = Field(0.2, gt=0, description="Policy ratio clip.")
    clip_vloss: bool = Field(True, description="Clip the value loss like the policy's.")
    ent_coef: float = Field(0.0, ge=0, description="Entropy bonus coefficient.")
    vf_coef: float = Field(0.5, ge=0, description="Value loss coefficient.")
    max_grad_norm: float | None = Field(0.5, gt=0, description="Global grad-norm clip.")
    target_kl: float | None = Field(
        None, gt=0, description="Stop the epochs early when the approximate KL exceeds it."
    )
    network: Literal["auto", "mlp", "cnn"] = Field(
        "auto", description="auto: a CNN encoder for image observations, else an MLP."
    )
    hidden_sizes: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [64, 64],
        description="MLP layer widths (actor and critic); [] for a linear policy.",
    )
    activation: Literal["tanh", "relu"] = "tanh"
    norm_obs: bool = Field(False, description="Running mean/std observation normalisation.")
    norm_reward: bool = Field(False, description="Scale rewards by the return's running std.")
    clip_obs: float = Field(10.0, gt=0, description="Clip normalised observations to +-this.")
    clip_reward: float = Field(10.0, gt=0, description="Clip normalised rewards to +-this.")
    bootstrap_truncated: bool = Field(
        True, description="Add gamma*V(final obs) to the reward of a time-limit truncation."
    )
    threads: int = Field(1, ge=1, description="torch CPU threads: 1 is fastest for small MLPs.")


class PPO:
    """The clipped surrogate, the (optionally clipped) value loss and the entropy bonus."""

    config_class: ClassVar[type[BaseModel]] = PPOConfig
    recipe: ClassVar[str] = "ppo"  # the training loop, by its registered name

    def __init__(self, config: BaseModel | dict[str, Any] | None = None) -> None:
        if not isinstance(config, self.config_class):
            config = self.config_class(**(config or {}))
        self.config: Any = config

    def loss(
        self,
        new_logp: Tensor,
        entropy: Tensor,
        new_value: Tensor,
        old_logp: Tensor,
        old_value: Tensor,
        advantages: Tensor,
        returns: Tensor,
        diagnostics: bool = True,
    ) -> tuple[Tensor, dict[str, float]]:
        """PPO's loss on one minibatch (CleanRL's formulation) and, when `diagnostics`, its
        metrics (approx_kl, clip_frac...): the loop asks only on the minibatches it reports or
        checks target_kl on, which saves a fifth of the update's small ops."""
        import torch

        c = self.config
        log_ratio = new_logp - old_logp
        ratio = log_ratio.exp()
        if c.norm_adv and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        pg1 = -advantages * ratio
        pg2 = -advantages * ratio.clamp(1 - c.clip_coef, 1 + c.clip_coef)
        pg_loss = torch.max(pg1, pg2).mean()
        if c.clip_vloss:
            v_unclipped = (new_value - returns) ** 2
            v_clipped = old_value + (new_value - old_value).clamp(-c.clip_coef, c.clip_coef)
            v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - returns) ** 2).mean()
        else:
            v_loss = 0.5 * ((new_value - returns) ** 2).mean()
        loss = pg_loss + c.vf_coef * v_loss
        if c.ent_coef:  # no entropy graph to differentiate when the bonus is off
            loss = loss - c.ent_coef * entropy.mean()
        if not diagnostics:
            return loss, {}
        with torch.no_grad():
            stats = {
                "loss/policy": pg_loss.item(),
                "loss/value": v_loss.item(),
                "entropy": entropy.mean().item(),
                "approx_kl": ((ratio - 1) - log_ratio).mean().item(),
                "clip_frac": ((ratio - 1.0).abs() > c.clip_coef).float().mean().item(),
            }
        return loss, stats
