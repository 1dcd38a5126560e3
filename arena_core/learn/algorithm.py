"""The contract between the learner and an algorithm plugin.

The learner packs sequences, runs the model and accumulates gradients; the algorithm says how
rewards become advantages and how per-token quantities become a per-token loss. Keeping that
split means the learner has no branch on algorithm names: GRPO, CISPO or a third party's
algorithm plug in through the same two methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # the contract is read where no tensor is made (an environment's validation)
    from torch import Tensor


@dataclass
class TokenBatch:
    """Flat per-token tensors for the completion tokens of one micro-batch (all shape [N]).

    logp: the learner's logprobs (carry the gradient).
    old_logp: the proximal policy's logprobs (learner logprobs before this step's first update,
        detached): the PPO ratio is taken against it.
    behaviour_logp: what the generation backend reported when it sampled the token.
    is_weight: truncated importance weight old vs behaviour (1 when the correction is off).
    advantages: the sequence's advantage broadcast to its tokens.
    ref_logp: the reference policy's logprobs, or None when the algorithm's beta is 0.
    seq_ids: which sequence of the step each token belongs to (0..n_seqs-1, global over the
        step's micro-batches), for sequence-level quantities (GSPO's ratio, sequence masking).
    teacher_logp: a teacher model's logprobs of the sampled tokens (on-policy distillation), or
        None when the algorithm has no teacher.
    """

    logp: Tensor
    old_logp: Tensor
    behaviour_logp: Tensor
    is_weight: Tensor
    advantages: Tensor
    ref_logp: Tensor | None = None
    seq_ids: Tensor | None = None
    teacher_logp: Tensor | None = None


@runtime_checkable
class Algorithm(Protocol):
    """What the learner and the runtime call on an algorithm instance.

    Built from the validated `algo` config section: `AlgorithmClass(config)`.

    Optional members are the protocols below the class: an algorithm implements those it needs
    and the call sites ask `isinstance(algorithm, ShapesRewards)` (and so on), so each member has
    one typed signature and one documented meaning.
    """

    group_size: int
    lr: float
    max_grad_norm: float | None
    weight_decay: float
    loss_agg_mode: str
    beta: float  # > 0 makes the learner compute reference logprobs
    num_iterations: int  # optimizer passes over each step's batch

    def advantages(self, rewards: Tensor) -> Tensor:
        """[n_groups, group_size] rewards -> advantages of the same shape."""
        ...

    def token_loss(self, batch: TokenBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """Per-token loss [N] (not aggregated) and per-token diagnostics ([N] tensors such as
        `clipped` or `kl`) that the learner averages with the same weights as the loss."""
        ...


@runtime_checkable
class ShapesRewards(Protocol):
    """Reshapes one group's rewards before `advantages` (DAPO's overlong penalty); the collector
    logs `parts` ({name: [1, g]}) as `reward/<name>` components."""

    def shape_rewards(
        self, rewards: Tensor, lengths: Tensor, max_new_tokens: int
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """rewards [1, g], sampled lengths [g] -> (shaped rewards [1, g], parts)."""
        ...


@runtime_checkable
class MasksTruncated(Protocol):
    """`mask_truncated = True`: completions cut at max_new_tokens count in their group's
    statistics but get no loss (counted in `samples/masked_truncated`)."""

    mask_truncated: bool


@runtime_checkable
class KeepsFlatGroups(Protocol):
    """`keeps_flat_groups = True`: a group whose advantages are all zero is kept, not dropped
    (on-policy distillation: the teacher grades every token anyway)."""

    keeps_flat_groups: bool


@runtime_checkable
class ScalesBatchAdvantages(Protocol):
    """Rescales the step's advantages once its groups are assembled (`scale_rewards=batch`)."""

    def batch_advantages(self, advantages: Tensor, rewards: Tensor) -> Tensor:
        """advantages of the n samples [n], (shaped) rewards of their groups [m] -> [n]."""
        ...


@runtime_checkable
class TokenAdvantages(Protocol):
    """The learner's per-token advantages, computed once before the first pass (REINFORCE++'s
    KL-in-reward returns and global normalisation)."""

    def token_advantages(
        self,
        advantages: Tensor,
        lengths: list[int],
        behaviour_logp: Tensor,
        ref_logp: Tensor | None,
    ) -> Tensor:
        """broadcast sequence advantages [N] -> per-token advantages [N] (flat token order)."""
        ...


@runtime_checkable
class HasTeacher(Protocol):
    """`teacher`: a model reference (`RUN[:STEP|best]` or a model name) loaded once, frozen;
    its logprobs of the sampled tokens reach `TokenBatch.teacher_logp`."""

    teacher: str | None


def keeps_flat_groups(algorithm: object) -> bool:
    """Whether the algorithm trains on groups whose advantages are all zero."""
    return isinstance(algorithm, KeepsFlatGroups) and bool(algorithm.keeps_flat_groups)
