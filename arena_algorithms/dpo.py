"""Direct Preference Optimisation (Rafailov et al. 2023) as an Arena algorithm.

The loss is on sequence log-probabilities of the chosen and rejected completions under the policy
and the reference: `h = (pi_c - pi_r) - (ref_c - ref_r)`; sigmoid: `-log sigmoid(beta h)` (TRL's
default), IPO: `(h - 1/(2 beta))^2` on length-averaged log-probabilities (Azar et al. 2023, as TRL
computes it). `nll_alpha > 0` adds the chosen response's token-mean negative log-likelihood
(AgileRL's DPO+NLL, TRL's `rpo_alpha`). The reference is the LoRA base with the adapter disabled,
or, for full fine-tuning, log-probabilities computed once before training: never a second model
in memory. The SFT/DPO loop (`arena_core/sft_dpo/recipe.py`) runs it on `preference` data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # torch is imported when an algorithm runs, not when plugins load
    from torch import Tensor


class DPOConfig(BaseModel):
    """The `algo` section for DPO (see arena_algorithms/conf/algo/dpo.yaml)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "dpo"
    lr: float = Field(5e-6, gt=0, description="AdamW learning rate (AgileRL 5e-6, TRL 1e-6).")
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float | None = Field(1.0, gt=0, description="Global grad-norm clip.")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warm-up steps.")
    adam_betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (
        Field((0.9, 0.999), description="AdamW betas, each in [0, 1).")
    )
    batch_size: int = Field(8, ge=1, description="Preference pairs per optimizer step.")
    max_length: int = Field(1024, ge=2, description="Longer sequences are cut on the right.")
    beta: float = Field(0.1, gt=0, description="Strength of the implicit KL to the reference.")
    loss_type: Literal["sigmoid", "ipo"] = Field("sigmoid", description="sigmoid (DPO) or ipo.")
    nll_alpha: float = Field(
        1.0, ge=0, description="Weight of the chosen response's NLL (AgileRL 1.0; 0 = plain DPO)."
    )


class DPO:
    """The pair loss; sequence log-probabilities come from the learner's fused head."""

    config_class: ClassVar[type[BaseModel]] = DPOConfig
    recipe: ClassVar[str] = "offline"
    data_categories: ClassVar[tuple[str, ...]] = ("preference",)
    group_size = 1
    num_iterations = 1
    loss_agg_mode = "token-mean"

    def __init__(self, config: BaseModel | dict[str, Any] | None = None) -> None:
        if not isinstance(config, DPOConfig):
            config = DPOConfig(**(config or {}))
        self.config: DPOConfig = config
        self.lr = config.lr
        self.weight_decay = config.weight_decay
        self.max_grad_norm = config.max_grad_norm
        # the learner must not build its own reference copy: the SFT/DPO loop supplies reference
        # log-probabilities (adapter disabled, or precomputed)
        self.beta = 0.0

    def pair_loss(
        self,
        policy_chosen: Tensor,
        policy_rejected: Tensor,
        ref_chosen: Tensor,
        ref_rejected: Tensor,
        len_chosen: Tensor,
        len_rejected: Tensor,
    ) -> tuple[Tensor, dict[str, float]]:
        """Mean loss over pairs ([B] summed log-probabilities and completion lengths) and the
        metrics TRL reports: implicit rewards (beta x log-ratio), their margin and accuracy."""
        import torch
        import torch.nn.functional as F

        c = self.config
        pc, pr, rc, rr = policy_chosen, policy_rejected, ref_chosen, ref_rejected
        if c.loss_type == "ipo":  # IPO compares length-averaged log-probabilities
            pc, rc = pc / len_chosen, rc / len_chosen
            pr, rr = pr / len_rejected, rr / len_rejected
        h = (pc - pr) - (rc - rr)
        if c.loss_type == "sigmoid":
            losses = -F.logsigmoid(c.beta * h)
        else:
            losses = (h - 1.0 / (2.0 * c.beta)) ** 2
        loss = losses.mean()
        nll = -(policy_chosen / len_chosen).mean()
        if c.nll_alpha:
            loss = loss + c.nll_alpha * nll
        with torch.no_grad():
            chosen_r = c.beta * (policy_chosen - ref_chosen).detach()
            rejected_r = c.beta * (policy_rejected - ref_rejected).detach()
            stats = {
                "loss/pref": float(losses.mean()),
                "loss/nll": float(nll),
                "rewards/chosen": float(chosen_r.mean()),
                "rewards/rejected": float(rejected_r.mean()),
                "rewards/margin": float((chosen_r - rejected_r).mean()),
                "rewards/accuracy": float((chosen_r > rejected_r).float().mean()),
            }
        return loss, stats
