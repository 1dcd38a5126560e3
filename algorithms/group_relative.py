"""What GRPO and CISPO share: group-relative advantages, the optimizer settings the learner reads,
and the optional KL penalty. Each algorithm supplies only its clipped per-token surrogate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

if TYPE_CHECKING:  # torch is imported when an algorithm runs, not when plugins load
    from torch import Tensor

    from arena_core.learn.algorithm import TokenBatch


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
