"""The contract between the learner and an algorithm plugin.

The learner packs sequences, runs the model and accumulates gradients; the algorithm says how
rewards become advantages and how per-token quantities become a per-token loss. Keeping that
split means the learner has no branch on algorithm names: GRPO, CISPO or a third party's
algorithm plug in through the same two methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

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

    Optional members, called only when present (so they are not part of this Protocol's required
    set; arena_core.learn.advantages has the call sites, arena_core.pipeline.groups the
    collector side):

    - `shape_rewards(rewards [1, g], lengths [g], max_new_tokens) -> (rewards, parts)`: the
      collector reshapes one group's rewards before `advantages` (DAPO's overlong penalty);
      `parts` ({name: [1, g]}) are logged as `reward/<name>` components.
    - `mask_truncated: bool`: completions with finish_reason "length" count in their group's
      statistics but are left out of the samples (counted in `samples/masked_truncated`).
    - `batch_advantages(advantages [n], rewards [m]) -> [n]`: once per step after all groups are
      assembled: the advantages of the n samples the learner will train on and the m (shaped)
      rewards of their groups, masked completions included (`scale_rewards=batch`).
    - `token_advantages(advantages [N], lengths, behaviour_logp [N], ref_logp [N] | None) -> [N]`:
      the learner's per-token advantages, computed once before the first pass from the broadcast
      sequence advantages, the sampler's logprobs and the reference's (present when beta > 0),
      all in the step's flat token order (REINFORCE++'s KL-in-reward returns and global
      normalisation).
    - `keeps_flat_groups: bool`: the collector keeps a group whose advantages are all zero
      instead of dropping it (on-policy distillation: the teacher grades every token anyway).
    - `teacher: str`: a model reference (`RUN[:STEP|best]` or a model name) that the runtime
      loads once, frozen, and whose logprobs of the sampled tokens the learner puts in
      `TokenBatch.teacher_logp` (arena_core.pipeline.build.build_learner).
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
