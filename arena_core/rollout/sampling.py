"""Sampling for the torch engine: the filtering rules and the logprob they imply, in one place.

The learner recomputes logprobs with the same rule (`arena_core.kernels.filtering.keep_mask`), so
behaviour and learner logprobs describe one distribution.
"""

from __future__ import annotations

import torch

from arena_core.kernels.filtering import filtering, keep_mask
from arena_core.rollout.base import SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (-inf) the tokens top-k and top-p exclude; at least one token always survives.

    The kept set is `arena_core.kernels.filtering.keep_mask`, the same rule the learner's
    logprob applies, so behaviour and learner logprobs describe one distribution.
    """
    if not filtering(top_k, top_p):
        return logits
    return logits.masked_fill(~keep_mask(logits, top_k, top_p), float("-inf"))


def sample_next(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids, behaviour logprobs) for a [batch, vocab] float32 logits tensor.

    Sampling: the logprob is that of the distribution actually sampled from,
    log_softmax(filter(logits / temperature)). With top_k=0 and top_p=1 (the defaults) this is
    exactly the learner's log_softmax(logits / temperature). Greedy (temperature 0): the argmax,
    with logprob log_softmax(logits), i.e. temperature 1 and no filtering.
    """
    if params.temperature <= 0:
        tokens = logits.argmax(dim=-1)
        logp = torch.log_softmax(logits, dim=-1)
    else:
        scaled = filter_logits(logits / params.temperature, params.top_k, params.top_p)
        logp = torch.log_softmax(scaled, dim=-1)
        tokens = draw(logp, generator)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def draw(logp: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from the categorical distribution exp(logp), by inverse CDF.

    Why not `torch.multinomial`: on the CPU it draws an exponential per vocabulary entry (49k per
    row for SmolLM2), ~10% of a decode step; this draws one uniform per row and does one cumsum.
    The cumsum is float64 so the last token's mass is not lost to rounding; u is in (0, total], so
    a token of probability 0 (filtered) is never chosen. Non-finite probabilities raise the same
    error multinomial does, which the loops turn into a clear non-finite-weights message.
    """
    probs = logp.exp()
    if not bool(torch.isfinite(probs).all()):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    cdf = probs.double().cumsum(dim=-1)
    u = 1.0 - torch.rand(
        (cdf.shape[0], 1), generator=generator, dtype=torch.float64, device=cdf.device
    )
    tokens = torch.searchsorted(cdf, u * cdf[:, -1:]).squeeze(-1)
    return tokens.clamp_(max=cdf.shape[-1] - 1)
