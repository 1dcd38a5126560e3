"""Packing a step's sequences into micro-batches by a token budget.

Each micro-batch is one row: several (prompt + completion) sequences concatenated, with
position ids restarting at 0 for each. The learner passes an explicit block-diagonal causal mask
(`block_causal_mask`) with every packed row, so packed sequences never attend to each other on
any transformers version: only some versions derive that mask from restarting position ids, and
older ones silently let a token attend to the previous sequences of its row (tests/learn check a
packed sequence's logprobs against the same sequence run alone). No padding token is ever
computed, and only positions that predict completion tokens are gathered for the loss: prompt
tokens are context, never targets.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Sample:
    """One sampled completion ready for the learner."""

    prompt_ids: list[int]
    completion_ids: list[int]
    behaviour_logp: list[float]
    advantage: float
    # multi-turn episodes: 1 where the policy sampled the token, 0 for tool/template tokens, which
    # are context only (no loss, no importance ratio, no logprob computed); None = all sampled
    loss_mask: list[int] | None = None

    @property
    def n_input(self) -> int:
        """Tokens the model reads: the last completion token is never an input."""
        return len(self.prompt_ids) + len(self.completion_ids) - 1

    def input_ids(self) -> list[int]:
        """The `n_input` tokens the model reads: the prompt, then the completion but its last."""
        return list(self.prompt_ids) + list(self.completion_ids[:-1])

    def target_index(self) -> list[int]:
        """Positions in `completion_ids` that carry loss (all of them without a mask)."""
        if self.loss_mask is None:
            return list(range(len(self.completion_ids)))
        if len(self.loss_mask) != len(self.completion_ids):
            raise ValueError("loss_mask must have one entry per completion token")
        return [j for j, m in enumerate(self.loss_mask) if m]

    @property
    def n_targets(self) -> int:
        """Completion tokens that carry loss."""
        return (
            len(self.completion_ids) if self.loss_mask is None else sum(map(bool, self.loss_mask))
        )

    def target_logp(self) -> list[float]:
        """Behaviour logprobs of the loss-carrying tokens, in order."""
        if self.loss_mask is None:
            return list(self.behaviour_logp)
        return [self.behaviour_logp[j] for j in self.target_index()]


@dataclass
class MicroBatch:
    """Rows of sequences and where their completion tokens sit in the step's flat token order.

    Packed: one row [1, T] with position ids restarting per sequence. Padded: [B, L] rows, one
    sequence each, right-padded, `position_ids` None: with causal attention a real token never
    sees the padding after it, so no attention mask is needed and torch's fast causal kernel
    runs.
    """

    input_ids: Tensor  # [B, L]
    position_ids: Tensor | None  # [B, L] for packed rows, None for right-padded rows
    target_pos: Tensor  # [N] positions in the flattened [B * L] rows that predict a target
    targets: Tensor  # [N] the completion tokens
    flat_index: Tensor  # [N] index of each target in the step's flat completion-token order
    real_tokens: int = 0  # tokens that are not padding

    @property
    def n_tokens(self) -> int:
        """Real (non-padding) tokens the model reads."""
        return self.real_tokens or int(self.input_ids.numel())


def _longest_first(samples: list[Sample]) -> list[int]:
    """Indices of the samples that carry loss (non-empty completions), longest input first."""
    return sorted(
        (i for i, s in enumerate(samples) if s.n_targets),
        key=lambda i: samples[i].n_input,
        reverse=True,
    )


def flat_offsets(samples: list[Sample]) -> list[int]:
    """Start of each sample's completion tokens in the flat order (samples in given order)."""
    return list(itertools.accumulate((s.n_targets for s in samples), initial=0))[:-1]


# what one more micro-batch costs beyond its tokens (the weights read again, every layer's ops):
# 1/32 of the token budget, and at least 64 tokens' worth (a tiny budget never splits for a
# few tokens of padding); padded_cuts weighs it against the padding a cut saves
MICRO_BATCH_COST = 1 / 32
MICRO_BATCH_MIN_COST = 64
MAX_ROWS = 1024  # rows a micro-batch of padded rows may hold (only tiny sequences reach it)


def padded_cuts(lengths: list[int], token_budget: int) -> list[int]:
    """The boundaries [0, ..., len] that cut `lengths` (sorted longest first) into micro-batches
    of padded rows, each within the budget (a longer sequence alone), at the least tokens
    computed (rows x the first row's length) plus `MICRO_BATCH_COST` per micro-batch. Filling each
    micro-batch in order computed 9.2% padding on a GRPO batch of SmolLM2 completions
    (8 x 8 x 256) at a 4096-token budget; cut where the lengths drop, it is ~3%."""
    n = len(lengths)
    fixed = max(MICRO_BATCH_COST * token_budget, MICRO_BATCH_MIN_COST)
    best = [0.0] + [math.inf] * n  # best[i]: the cost of the first i sequences
    cut = [0] * (n + 1)
    for i in range(1, n + 1):
        for j in range(i - 1, max(-1, i - 1 - MAX_ROWS), -1):  # the last group: j .. i-1
            area = (i - j) * lengths[j]
            if area > token_budget and j < i - 1:
                break  # longer groups only grow (lengths[j] rises as j falls)
            if best[j] + area + fixed < best[i]:
                best[i], cut[i] = best[j] + area + fixed, j
    bounds = [n]
    while bounds[-1] > 0:
        bounds.append(cut[bounds[-1]])
    return bounds[::-1]


def pad_batches(samples: list[Sample], token_budget: int, *, pad_id: int = 0) -> list[MicroBatch]:
    """Right-padded micro-batches of length-sorted sequences, at most `token_budget` tokens
    (rows x longest) each, cut where the padding is least (`padded_cuts`); a sequence longer
    than the budget gets a micro-batch of its own. Empty completions are skipped."""
    if token_budget < 1:
        raise ValueError("token_budget must be >= 1")
    offsets = flat_offsets(samples)
    order = _longest_first(samples)
    cuts = padded_cuts([samples[i].n_input for i in order], token_budget)
    out = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        members = order[a:b]
        width = samples[members[0]].n_input
        ids = torch.full((len(members), width), pad_id, dtype=torch.long)
        for row, i in enumerate(members):
            seq = samples[i].input_ids()
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        starts = range(0, ids.numel(), width)  # row k starts at k * width in the flat rows
        real = sum(samples[i].n_input for i in members)
        out.append(MicroBatch(ids, None, *_targets(samples, members, starts, offsets), real))
    return out


def pack(samples: list[Sample], token_budget: int) -> list[MicroBatch]:
    """First-fit-decreasing packing of samples into rows of at most `token_budget` tokens.

    A sequence longer than the budget gets a row of its own (it is never truncated: a dropped
    completion token would silently change the loss). Samples with empty completions carry no
    loss and are skipped.
    """
    if token_budget < 1:
        raise ValueError("token_budget must be >= 1")
    offsets = flat_offsets(samples)
    order = _longest_first(samples)
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        n = samples[i].n_input
        for b, free in enumerate(room):
            if n <= free:
                bins[b].append(i)
                room[b] -= n
                break
        else:
            bins.append([i])
            room.append(token_budget - n)
    return [_build(samples, members, offsets) for members in bins]


def _build(samples: list[Sample], members: list[int], offsets: list[int]) -> MicroBatch:
    ids: list[int] = []
    pos: list[int] = []
    starts: list[int] = []
    for i in members:
        seq = samples[i].input_ids()
        starts.append(len(ids))
        ids.extend(seq)
        pos.extend(range(len(seq)))
    rows = torch.tensor([ids], dtype=torch.long), torch.tensor([pos], dtype=torch.long)
    return MicroBatch(*rows, *_targets(samples, members, starts, offsets), len(ids))


def _targets(
    samples: list[Sample], members: list[int], starts: Sequence[int], offsets: list[int]
) -> tuple[Tensor, Tensor, Tensor]:
    """(target_pos, targets, flat_index) of a micro-batch whose sequence `members[k]` starts at
    flat position `starts[k]`: only loss-carrying completion tokens are targets (the tool tokens
    of a multi-turn episode are context), each at its place in the step's flat order."""
    target_pos, targets, flat = [], [], []
    for i, start in zip(members, starts, strict=True):
        s = samples[i]
        first = start + len(s.prompt_ids) - 1  # this position predicts completion token 0
        index = s.target_index()
        target_pos.extend(first + j for j in index)
        targets.extend(s.completion_ids[j] for j in index)
        flat.extend(range(offsets[i], offsets[i] + len(index)))
    return tuple(torch.tensor(xs, dtype=torch.long) for xs in (target_pos, targets, flat))


def block_causal_mask(position_ids: Tensor, dtype: torch.dtype) -> Tensor:
    """Additive [B, 1, T, T] mask for packed rows: 0 where a query may attend, dtype-min elsewhere.

    A new sequence starts wherever the position id is 0; a token attends to itself and to the
    earlier tokens of its own sequence only. Additive (not boolean) so that eager and SDPA
    attention read it alike; transformers uses a 4-D mask as given.
    """
    seq = (position_ids == 0).cumsum(-1)  # [B, T] sequence number of each token
    same = seq[:, :, None] == seq[:, None, :]
    n = position_ids.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=position_ids.device).tril()
    allowed = same & causal
    mask = torch.zeros(allowed.shape, dtype=dtype, device=position_ids.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]
