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
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group",
        description="After centring on the group mean, divide by: 'group' the group's std "
        "(GRPO), 'batch' the std of the step's rewards (group mean, batch std), 'none' nothing "
        "(Dr.GRPO).",
    )
    adv_eps: float = Field(1e-4, gt=0, description="Added to the std before dividing.")
    # DAPO (Yu et al. 2025): overlong reward shaping and truncated-completion masking, both off
    overlong_buffer: int = Field(
        0,
        ge=0,
        description="DAPO soft overlong punishment: the last L_cache tokens before "
        "generation.max_new_tokens in which the reward falls linearly to -overlong_penalty "
        "(0 = off).",
    )
    overlong_penalty: float = Field(
        1.0, ge=0, description="Scale of the overlong penalty (the reward lost at the limit)."
    )
    mask_truncated: bool = Field(
        False,
        description="DAPO overlong filtering: completions cut at max_new_tokens (finish_reason "
        "'length') count in their group's statistics but get no loss.",
    )
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
        self.mask_truncated = config.mask_truncated  # read by the collector (optional hook)

    def advantages(self, rewards: Tensor) -> Tensor:
        from arena_core.learn.losses import group_advantages

        by_std = self.config.scale_rewards == "group"  # batch: see batch_advantages
        return group_advantages(rewards, divide_by_std=by_std, eps=self.config.adv_eps)

    def batch_advantages(self, advantages: Tensor, rewards: Tensor) -> Tensor:
        """scale_rewards=batch: the step's group-centred advantages over the std of its rewards
        (optional hook, called by the collector once per step)."""
        if self.config.scale_rewards != "batch":
            return advantages
        from arena_core.learn.advantages import batch_std_scale

        return batch_std_scale(advantages, rewards, self.config.adv_eps)

    def shape_rewards(
        self, rewards: Tensor, lengths: Tensor, max_new_tokens: int
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """DAPO's overlong shaping when `overlong_buffer` > 0 (optional hook, called by the
        collector per group before advantages); the penalty is logged as `reward/overlong`."""
        if not self.config.overlong_buffer:
            return rewards, {}
        from arena_core.learn.advantages import overlong_penalty

        pen = overlong_penalty(
            lengths, max_new_tokens, self.config.overlong_buffer, self.config.overlong_penalty
        ).view_as(rewards)
        return rewards + pen, {"overlong": pen}

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
