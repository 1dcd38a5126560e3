"""What GRPO and CISPO share: group-relative advantages, the optimizer settings the learner reads,
and the optional KL penalty. Each algorithm supplies only its clipped per-token surrogate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # torch is imported when an algorithm runs, not when plugins load
    from torch import Tensor

    from arena_core.learn.algorithm import TokenBatch


class GroupRelativeConfig(BaseModel):
    """The `algo` fields every group-relative algorithm has; subclasses add their clip bounds
    and may change defaults."""

    model_config = ConfigDict(extra="forbid")

    name: str
    group_size: int = Field(8, ge=2, description="Completions sampled per prompt.")
    lr: float = Field(5e-6, gt=0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float | None = Field(0.1, gt=0, description="Global grad-norm clip; None = off.")
    beta: float = Field(0.0, ge=0, description="KL-to-reference coefficient (k3 estimator).")
    scale_rewards: Literal["std", "none"] = Field(
        "std", description="'std' divides by the group std (GRPO); 'none' is Dr.GRPO."
    )
    adv_eps: float = Field(1e-4, gt=0, description="Added to the group std before dividing.")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = Field(
        "token-mean", description="How per-token losses become the step loss."
    )
    num_iterations: int = Field(
        1, ge=1, description="Optimizer passes over each step's samples (PPO epochs)."
    )


class GroupRelativeAlgorithm:
    """Base of the built-in algorithms; subclasses set `config_class` and `surrogate`."""

    config_class: ClassVar[type[BaseModel]]

    def __init__(self, config: BaseModel | dict[str, Any] | None = None) -> None:
        if not isinstance(config, self.config_class):
            config = self.config_class(**(config or {}))
        self.config: Any = config
        self.group_size = config.group_size
        self.lr = config.lr
        self.weight_decay = config.weight_decay
        self.max_grad_norm = config.max_grad_norm
        self.beta = config.beta
        self.loss_agg_mode = config.loss_agg_mode
        self.num_iterations = config.num_iterations

    def advantages(self, rewards: Tensor) -> Tensor:
        from arena_core.learn.losses import group_advantages

        return group_advantages(rewards, scale=self.config.scale_rewards, eps=self.config.adv_eps)

    def surrogate(self, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        """Per-token policy loss and the per-token clip indicator."""
        raise NotImplementedError

    def token_loss(self, batch: TokenBatch) -> tuple[Tensor, dict[str, Tensor]]:
        from arena_core.learn.losses import k3_kl

        loss, clipped = self.surrogate(batch)
        stats = {"clip_frac": clipped.float()}
        if self.beta > 0 and batch.ref_logp is not None:
            kl = k3_kl(batch.logp, batch.ref_logp)
            loss = loss + self.beta * kl
            stats["kl"] = kl.detach()
        return loss, stats
