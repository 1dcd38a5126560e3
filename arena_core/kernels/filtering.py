"""Top-k / top-p filtering: the one definition the sampler and the learner's logprob share.

A sampler with `top_k > 0` or `top_p < 1` draws from the renormalised filtered distribution, and
reports that distribution's logprob as the behaviour logprob. If the learner scored the same
tokens under the unfiltered softmax, every ratio and importance weight would be biased (a
systematic ~1.3 % down-weighting per token at top_p=0.9 on the tiny test model). Both sides
therefore build their kept set with `keep_mask` on the temperature-scaled logits.
"""

from __future__ import annotations

import torch


def filtering(top_k: int, top_p: float) -> bool:
    """Whether these settings exclude any token at all."""
    return top_k > 0 or top_p < 1.0


def keep_mask(
    logits: torch.Tensor, top_k: int, top_p: float, targets: torch.Tensor | None = None
) -> torch.Tensor:
    """Boolean [..., V] mask of the tokens top-k and top-p keep (at least one per row).

    top-k keeps the k largest logits (ties with the k-th included); top-p then drops a token when
    the tokens ranked above it already reach `top_p` of the top-k-renormalised mass. `targets`,
    when given, are always kept: the learner scores a sampled token that its own (slightly newer)
    weights would have filtered out, instead of assigning it probability 0 (a -inf logprob would
    make the importance ratio NaN). For the weights that sampled it, the target is always kept.
    """
    keep = torch.ones_like(logits, dtype=torch.bool)
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        keep &= logits >= kth
    if top_p < 1.0:
        masked = logits.masked_fill(~keep, float("-inf"))
        sorted_logits, order = torch.sort(masked, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop_sorted[..., 0] = False
        keep &= ~torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    if targets is not None:
        keep.scatter_(-1, targets.long().unsqueeze(-1), True)
    return keep


def filter_logits(
    logits: torch.Tensor,
    top_k: int,
    top_p: float,
    targets: torch.Tensor | None = None,
    *,
    inplace: bool = False,
) -> torch.Tensor:
    """`logits` with the tokens top-k and top-p exclude set to -inf (`keep_mask`'s kept set);
    `inplace` writes into `logits` (the kernels' reused buffers) instead of a new tensor."""
    if not filtering(top_k, top_p):
        return logits
    fill = logits.masked_fill_ if inplace else logits.masked_fill
    return fill(~keep_mask(logits, top_k, top_p, targets), float("-inf"))
