"""Sampling for the torch engine: the token drawn and the logprob of the distribution drawn from.

Top-k / top-p filtering is `arena_core.kernels.filtering.filter_logits`, the rule the learner's
logprob applies too, so behaviour and learner logprobs describe one distribution.
"""

from __future__ import annotations

import math

import torch

from arena_core.engines.base import Penalties, SamplingParams
from arena_core.kernels.filtering import filter_logits


def sample_next(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids, behaviour logprobs) for a [batch, vocab] float32 logits tensor.

    Sampling: the logprob is that of the distribution actually sampled from,
    log_softmax(filter(logits / temperature)). With top_k=0 and top_p=1 (the defaults) this is
    exactly the learner's log_softmax(logits / temperature). Greedy (temperature 0): the argmax,
    with logprob log_softmax(logits), i.e. temperature 1 and no filtering.

    The full log_softmax is never built: the sampler needs exp(x - max) (unnormalised
    probabilities) and their row sums, and the chosen token's logprob is x - max - log(sum).
    """
    if params.temperature <= 0:
        tokens = logits.argmax(dim=-1)
        logp = torch.log_softmax(logits, dim=-1)
        return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
    scaled = logits if params.temperature == 1.0 else logits / params.temperature
    scaled = filter_logits(scaled, params.top_k, params.top_p)
    top = scaled.amax(dim=-1, keepdim=True)
    weights = (scaled - top).exp_()
    tokens, total = draw(weights, generator)
    chosen = scaled.gather(-1, tokens[:, None]) - top
    return tokens, (chosen.double() - total.log()).squeeze(-1).float()


def sampled_distribution(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The [batch, vocab] log-probabilities `sample_next` samples from (and whose entry for the
    chosen token it returns): log_softmax(logits) when greedy, else
    log_softmax(filter(logits / temperature)). A server's `top_logprobs` come from here, so the
    sampled token's logprob is always one of them."""
    if params.temperature <= 0:
        return torch.log_softmax(logits.float(), dim=-1)
    scaled = logits if params.temperature == 1.0 else logits / params.temperature
    return torch.log_softmax(filter_logits(scaled, params.top_k, params.top_p).float(), dim=-1)


def apply_penalties(
    logits: torch.Tensor,
    prompts: list[list[int]],
    answers: list[list[int]],
    penalties: list[Penalties],
    temperatures: list[float],
) -> torch.Tensor:
    """`logits` [rows, vocab] with each row's `Penalties` applied in place (and returned), in
    vLLM's order and by its definitions, so a served answer does not depend on the backend:
    the logit bias; the repetition penalty (a token in the row's prompt or answer so far: a
    positive logit divided by it, a negative one multiplied); the frequency penalty per
    occurrence and the presence penalty once, over the answer so far; then, for a row that
    samples (temperature > 0), min_p: a token whose probability at that temperature is below
    min_p times the likeliest one's is dropped. min_p is applied to the unscaled logits as
    `logit - max < temperature * ln(min_p)`, the same set, so the sampler's temperature still
    applies once. A token masked out before (-inf, a grammar) stays out."""
    rows, vocab = logits.shape
    device, dtype = logits.device, logits.dtype
    bias = [(row, token, value) for row, p in enumerate(penalties) for token, value in p.logit_bias]
    if bias:
        at, tokens, values = zip(*bias, strict=True)
        index = (torch.tensor(at, device=device), torch.tensor(tokens, device=device))
        logits.index_put_(index, torch.tensor(values, device=device, dtype=dtype), accumulate=True)
    counts = _token_counts(answers, vocab, device, dtype)
    seen = counts > 0
    repetition = torch.tensor([p.repetition for p in penalties], device=device, dtype=dtype)
    if bool((repetition != 1).any()):
        where = seen | (_token_counts(prompts, vocab, device, dtype) > 0)
        factor = torch.where(where, repetition[:, None], torch.ones_like(logits))
        logits *= torch.where(logits > 0, 1.0 / factor, factor)
    frequency = torch.tensor([p.frequency for p in penalties], device=device, dtype=dtype)
    presence = torch.tensor([p.presence for p in penalties], device=device, dtype=dtype)
    logits -= frequency[:, None] * counts + presence[:, None] * seen
    for row, (p, temperature) in enumerate(zip(penalties, temperatures, strict=True)):
        if p.min_p > 0 and temperature > 0:
            line = logits[row]
            floor = line.max() + temperature * math.log(p.min_p)
            line.masked_fill_(line < floor, float("-inf"))
    return logits


def _token_counts(
    seqs: list[list[int]], vocab: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """[len(seqs), vocab]: how often each token occurs in each sequence."""
    counts = torch.zeros((len(seqs), vocab + 1), device=device, dtype=dtype)
    width = max(map(len, seqs), default=0)
    if width:
        ids = torch.full((len(seqs), width), vocab, dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        counts.scatter_add_(1, ids.to(device), torch.ones_like(ids, device=device, dtype=dtype))
    return counts[:, :vocab]


BLOCK = 256  # vocabulary entries per block of the two-level inverse CDF (see `draw`)


def draw(
    weights: torch.Tensor, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row with probability proportional to `weights` [batch, vocab] (>= 0, not
    normalised), by inverse CDF; also each row's total weight [batch, 1] (float64).

    Why not `torch.multinomial`: on the CPU it draws an exponential per vocabulary entry (49k per
    row for SmolLM2), ~10% of a decode step. A cumsum over the whole vocabulary is sequential
    and was ~20 ms per step for 64 rows on its own, so the CDF is two-level: block sums (one
    vectorised pass), a float64 cumsum over the blocks to find the block, then one over the chosen
    block's entries only. One uniform per row; u is in (0, total], and the residual inside the
    block is clamped to the block's own mass, so a token of weight 0 (filtered) is never chosen.
    Non-finite weights raise the same error multinomial does, which the loops turn into a clear
    non-finite-weights message.
    """
    rows, vocab = weights.shape
    pad = -vocab % BLOCK
    padded = torch.nn.functional.pad(weights, (0, pad)) if pad else weights
    blocks = padded.view(rows, -1, BLOCK)
    block_mass = blocks.sum(dim=-1).double()  # [rows, n_blocks]
    cdf = block_mass.cumsum(dim=-1)
    total = cdf[:, -1:]
    if not bool(torch.isfinite(total).all()):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    u = (1.0 - torch.rand((rows, 1), generator=generator, dtype=torch.float64)).to(cdf.device)
    u = u * total
    block = torch.searchsorted(cdf, u).clamp_(max=cdf.shape[-1] - 1)  # first block reaching u
    before = cdf.gather(-1, block) - block_mass.gather(-1, block)
    inner = blocks.gather(1, block[:, :, None].expand(rows, 1, BLOCK)).squeeze(1)
    inner_cdf = inner.double().cumsum(dim=-1)
    mass = inner_cdf[:, -1:]
    residual = torch.minimum((u - before).clamp(min=torch.finfo(torch.float64).tiny), mass)
    at = torch.searchsorted(inner_cdf, residual).clamp_(max=BLOCK - 1)
    tokens = (block * BLOCK + at).squeeze(-1)
    return tokens.clamp_(max=vocab - 1), total
