"""On-policy distillation (OPD) as an Arena algorithm plugin: the student samples, a teacher grades
every sampled token.

The student pi_s samples `group_size` completions per prompt as in GRPO. A frozen teacher pi_T
(`algo.teacher`: a finished run's checkpoint `RUN[:STEP|best]`, full or LoRA, or any model Arena
loads; same tokenizer as the student) scores the sampled tokens with one forward pass, no
generation. The per-token reverse KL on the sampled token y_t,

    k_t = log pi_s(y_t | y_<t) - log pi_T(y_t | y_<t),

is a single-sample estimate of KL(pi_s || pi_T) at that position; its negative is the token's
advantage. Reverse KL is mode seeking: the student is pushed off the tokens the teacher finds
unlikely on the student's own trajectories, which is what makes distillation on-policy (Agarwal
et al. 2024, "On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes"
(GKD), with the reverse-KL divergence; Thinking Machines Lab 2025, "On-Policy Distillation":
per-token reverse KL as the advantage of an importance-sampled policy-gradient loss, discount 0).

The per-token advantage combines the distillation signal and, optionally, the task reward:

    A_t = reward_coef * A_group - kl_coef * sg(log pi_old(y_t) - log pi_T(y_t))

with A_group GRPO's group-relative reward advantage (`scale_rewards` as in GRPO) and pi_old the
learner's policy before this step's update (the student's logprob is stopped: k_t is a reward,
not a differentiable term). `reward_coef = 0` (the default) is pure distillation; `> 0` is
KL-regularised RL toward the teacher. The loss is GRPO's clipped surrogate on A_t,
`-min(r_t A_t, clip(r_t, 1-eps_low, 1+eps_high) A_t)` with `r_t = pi_s / pi_old` (times the
learner's truncated importance weight against the sampler): with `num_iterations = 1` r_t = 1 and
the gradient is exactly `kl_coef * E[k_t grad log pi_s(y_t)]` = the gradient of the reverse KL;
the clip only matters when several passes reuse a batch. We chose the clipped surrogate over the
plain `-A_t log pi_s` so OPD composes with the same off-policy machinery (staleness, TIS) as
GRPO.

Pure distillation does not need the reward to vary within a group: a group whose completions all
got the same reward still has a per-token teacher signal, so OPD sets `keeps_flat_groups` and the
collector keeps those groups instead of dropping them as zero-advantage. `opd/reverse_kl` (the
mean of k_t over the step's tokens) is logged every step; it falls as the student approaches the
teacher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from arena_algorithms.group_relative import GroupRelativeAlgorithm, GroupRelativeConfig

if TYPE_CHECKING:  # torch is imported when an algorithm runs, not when plugins load
    from torch import Tensor

    from arena_core.learn.algorithm import TokenBatch


class OPDConfig(GroupRelativeConfig):
    """The `algo` section for on-policy distillation (see the module docstring)."""

    name: str = "opd"
    teacher: str | None = Field(
        None,
        description="The teacher: RUN[:STEP|best|latest] (a finished run, full or LoRA) or a "
        "model path / name / hub id; it must share the student's tokenizer.",
    )
    kl_coef: float = Field(1.0, ge=0, description="Weight of the per-token reverse KL advantage.")
    reward_coef: float = Field(
        0.0, ge=0, description="Weight of the task reward's group advantage (0 = pure OPD)."
    )
    beta: float = Field(0.0, ge=0, description="KL-to-reference coefficient (k3 estimator).")
    eps_low: float = Field(0.2, ge=0, description="Lower clip: ratio >= 1 - eps_low.")
    eps_high: float = Field(0.2, ge=0, description="Upper clip: ratio <= 1 + eps_high.")


class OPD(GroupRelativeAlgorithm):
    """On-policy distillation: reverse KL to a teacher as a per-token advantage (module doc)."""

    config_class = OPDConfig
    keeps_flat_groups: ClassVar[bool] = True  # the teacher's signal does not need reward variance

    def __init__(self, config: OPDConfig | dict | None = None) -> None:
        super().__init__(config)
        if not self.config.teacher:
            from arena_core.errors import ConfigError

            raise ConfigError(
                "algo=opd needs a teacher: add algo.teacher=RUN:best (a finished run, see `arena "
                "runs list`) or algo.teacher=PATH_OR_MODEL (sharing the student's tokenizer)"
            )
        self.teacher: str = self.config.teacher  # the learner's builder loads it once

    def advantages(self, rewards: Tensor) -> Tensor:
        if self.config.reward_coef == 0:
            return rewards.new_zeros(rewards.shape)  # pure distillation: the reward is not used
        return self.config.reward_coef * super().advantages(rewards)

    def surrogate(self, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        from arena_core.learn.losses import grpo_token_loss

        adv = batch.advantages - self.config.kl_coef * self.reverse_kl(batch)
        loss, clipped = grpo_token_loss(
            batch.logp,
            batch.old_logp,
            adv,
            eps_low=self.config.eps_low,
            eps_high=self.config.eps_high,
        )
        return loss * batch.is_weight, clipped

    def token_loss(self, batch: TokenBatch) -> tuple[Tensor, dict[str, Tensor]]:
        loss, stats = super().token_loss(batch)
        stats["opd/reverse_kl"] = self.reverse_kl(batch)
        return loss, stats

    @staticmethod
    def reverse_kl(batch: TokenBatch) -> Tensor:
        """k_t = log pi_old(y_t) - log pi_T(y_t) per sampled token, without gradient."""
        if batch.teacher_logp is None:
            raise ValueError(
                "algo=opd got no teacher logprobs: this learner was built without the teacher "
                "(arena_core.run_parts.build.build_learner loads algo.teacher; sharded trainer "
                "ranks do not load one yet: run OPD with one trainer, hardware.count=1)"
            )
        return (batch.old_logp - batch.teacher_logp).detach()
