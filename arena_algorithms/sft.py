"""Supervised fine-tuning as an Arena algorithm: next-token cross-entropy on demonstrations.

The per-token loss is `-log pi(token)` and goes through the same learner as GRPO (token-budget
micro-batches, the fused logprob head, exact gradient accumulation): an SFT sample is a
`Sample` whose completion tokens are the tokens that carry loss. Completion-only loss (the
default, TRL's for prompt/completion data) makes the prompt the sample's context; a multi-turn
chat (`messages`) is one sample whose loss mask keeps every assistant turn; with
`completion_only=false` every token after the first carries loss. The SFT/DPO loop
(the `offline` recipe, named in `recipe`) feeds it rows of an `sft` dataset
(`+env=dataset env.category=sft`) or the demonstrations of a text task (`gold_completion`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # torch is imported when an algorithm runs, not when plugins load
    from torch import Tensor

    from arena_core.learn.algorithm import TokenBatch


class SFTConfig(BaseModel):
    """The `algo` section for SFT (TRL's SFTTrainer defaults; see arena_algorithms/conf/algo/sft.yaml)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "sft"
    lr: float = Field(2e-5, gt=0, description="AdamW learning rate (TRL: 2e-5).")
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float | None = Field(1.0, gt=0, description="Global grad-norm clip.")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warm-up steps.")
    adam_betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (
        Field((0.9, 0.999), description="AdamW betas, each in [0, 1).")
    )
    batch_size: int = Field(8, ge=1, description="Sequences per optimizer step.")
    max_length: int = Field(1024, ge=2, description="Longer sequences are cut on the right.")
    completion_only: bool = Field(
        True, description="Loss on the completion only (false: on every token after the first)."
    )
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean"] = Field(
        "token-mean", description="How token losses average into the step loss."
    )


class SFT:
    """Cross-entropy per token; the learner aggregates it with `loss_agg_mode` weights."""

    config_class: ClassVar[type[BaseModel]] = SFTConfig
    recipe: ClassVar[str] = "offline"
    data_categories: ClassVar[tuple[str, ...]] = ("sft", "reasoning")  # reasoning: demos
    group_size = 1
    beta = 0.0  # no reference policy
    num_iterations = 1

    def __init__(self, config: BaseModel | dict[str, Any] | None = None) -> None:
        if not isinstance(config, SFTConfig):
            config = SFTConfig(**(config or {}))
        self.config: SFTConfig = config
        self.lr = config.lr
        self.weight_decay = config.weight_decay
        self.max_grad_norm = config.max_grad_norm
        self.loss_agg_mode = config.loss_agg_mode

    def advantages(self, rewards: Tensor) -> Tensor:
        """Unused by SFT (every demonstration token has weight 1); the Algorithm protocol."""
        return rewards

    def token_loss(self, batch: TokenBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """Negative log-likelihood of each target token."""
        return -batch.logp, {}
