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
    """

    logp: Tensor
    old_logp: Tensor
    behaviour_logp: Tensor
    is_weight: Tensor
    advantages: Tensor
    ref_logp: Tensor | None = None


@runtime_checkable
class Algorithm(Protocol):
    """What the learner and the runtime call on an algorithm instance.

    Built from the validated `algo` config section: `AlgorithmClass(config)`.
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
