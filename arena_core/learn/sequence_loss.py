"""Updates whose loss is a function of whole-sequence log-probabilities (DPO and kin).

A token-level loss (GRPO, SFT) accumulates exactly over micro-batches, which is what
`Learner.step` does. A preference loss compares the chosen and rejected sequences of a pair
through a non-linearity, so per-token weights cannot be fixed in advance. Here the step's
sequences are still run in the learner's token-budget micro-batches through the same fused
logprob head, their token log-probabilities are summed per sequence, and the algorithm's
`pair_loss` is taken on those sums with one backward pass: gradients are exact; activations of
the whole step are held until that backward (a step is `batch_size` pairs).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import Tensor, nn

from arena_core.learn.learner import (
    Learner,
    NonFiniteLossError,
    _nonfinite_message,
    check_weights,
)
from arena_core.learn.packing import Sample


def sequence_logprobs(learner: Learner, model: nn.Module, samples: list[Sample]) -> Tensor:
    """Summed completion log-probabilities [len(samples)] of `samples` under `model` (carrying
    the gradient when grad is enabled), computed in the learner's micro-batches."""
    lengths = torch.tensor([s.n_targets for s in samples], dtype=torch.long)  # loss tokens
    owner = torch.repeat_interleave(torch.arange(len(samples)), lengths)  # token -> sequence
    total = torch.zeros(len(samples), dtype=torch.float32)
    for mb in learner.micro_batches(samples):
        logp = learner._logprobs(model, mb).float()
        if logp.device != total.device:  # the model on an accelerator: sum there
            total, owner = total.to(logp.device), owner.to(logp.device)
        total = total.index_add(0, owner[mb.flat_index], logp)
    return total.cpu()  # differentiable: the pair loss of a few sums runs on the CPU


def reference_logprobs(learner: Learner, samples: list[Sample]) -> Tensor:
    """Summed log-probabilities under the LoRA reference without gradient: the base with the
    adapter disabled, or a continued adapter's starting tensors (`arena_core.models.reference`).

    Full fine-tuning has no base to fall back to: the offline loop precomputes its reference
    with `sequence_logprobs` before the first update instead of keeping a second model.
    """
    from arena_core.models.reference import reference_forward

    model = learner.model
    if not hasattr(model, "disable_adapter"):
        raise ValueError("reference_logprobs needs a LoRA model; precompute it for full weights")
    with reference_forward(model) as ref:
        return sequence_logprobs(learner, ref, samples)


def preference_step(
    learner: Learner,
    algorithm: Any,
    chosen: list[Sample],
    rejected: list[Sample],
    ref_chosen: Tensor,
    ref_rejected: Tensor,
) -> dict[str, float]:
    """One optimizer step on pairs (chosen[i], rejected[i]) with `algorithm.pair_loss`."""
    t0 = time.perf_counter()
    model = learner.model
    model.train()
    learner.optimizer.zero_grad(set_to_none=True)
    logps = sequence_logprobs(learner, model, chosen + rejected)
    n = len(chosen)
    loss, stats = algorithm.pair_loss(
        logps[:n], logps[n:], ref_chosen, ref_rejected, *_lengths(chosen, rejected)
    )
    loss.backward()
    grad_norm = learner._clip()
    value = float(loss.detach())
    if not (math.isfinite(value) and math.isfinite(grad_norm)):
        learner.optimizer.zero_grad(set_to_none=True)
        raise NonFiniteLossError(_nonfinite_message(value, grad_norm, 0, 1))
    learner.optimizer.step()
    # a finite loss can still blow the weights up (algo.lr=1e30)
    check_weights(learner.params, learner.optimizer.param_groups[0]["lr"])
    learner.optimizer.zero_grad(set_to_none=True)
    trained = sum(len(s.prompt_ids) + len(s.completion_ids) - 1 for s in chosen + rejected)
    return {
        "loss": value,
        "grad_norm": grad_norm,
        **stats,
        "tokens/trained": float(trained),
        "time/learn_s": time.perf_counter() - t0,
    }


def _lengths(chosen: list[Sample], rejected: list[Sample]) -> tuple[Tensor, Tensor]:
    """Completion lengths (at least 1, so length-normalised terms stay finite)."""

    def lens(xs: list[Sample]) -> Tensor:
        return torch.tensor([max(1, len(s.completion_ids)) for s in xs], dtype=torch.float32)

    return lens(chosen), lens(rejected)
