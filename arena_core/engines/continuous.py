"""Continuous batching on the torch engine: sequences join and leave one running decode batch
between decode steps, instead of waiting for the whole batch to end.

Why: a server's requests arrive one by one. Decoding them in fixed batches makes a request that
arrives mid-batch wait for the batch's longest row, and leaves the batch's finished rows idle; here
a new request is prefilled and merged into the running batch before the next step, and a finished
or abandoned row leaves at once, so every decode step serves every live request.

How the batch is kept (the CPU layout of `TorchBackend._generate_dynamic`): one KV cache of
`GrowingLayer`s, left-padded to a common width, with a 2-D attention mask and per-row positions.
- Join: the new prompts are prefilled together (one forward, left-padded) into their own cache,
  then both caches are left-padded to the wider of the two and stacked on the batch dimension.
- Leave: the rows that go on are selected (`batch_select_indices`), then leading columns that no live row
  attends to are cut off, so the width tracks the longest live row, not the batch's history.
- Sampling: rows with the same rule (temperature, top_p, generator) are sampled together with
  `sample_next`, the training sampler, so a served token follows the same distribution.

`ContinuousBatch` is driven by its owner (the server's engine thread): `join`, then `sample` and
`advance` once per decode step.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from arena_core.engines.base import SamplingParams
from arena_core.engines.decode_cache import (
    GrowingLayer,
    decode_attention,
    growing_cache,
)
from arena_core.engines.sampling import sample_next, sampled_distribution

HEADROOM = 64  # cache positions allocated past the current width (grown geometrically past it)


def supports_continuous(backend: Any) -> bool:
    """Whether `backend` can decode a `ContinuousBatch`: Arena's torch backend over a model whose
    KV cache layers are all plain (full-attention) layers, which can be padded and stacked."""
    from arena_core.engines.torch_backend import TorchBackend

    if not isinstance(backend, TorchBackend):
        return False
    config = getattr(backend.model, "config", None)
    try:
        cache = growing_cache(config, 1)
    except Exception:  # noqa: BLE001 - a config transformers cannot build a cache for
        return False
    return bool(cache.layers) and all(type(layer) is GrowingLayer for layer in cache.layers)


class ContinuousBatch:
    """The running batch of one model: rows are opaque owner objects (see the module doc)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.model = backend.model
        self.owners: list[Any] = []  # the owner of each batch position
        self._rules: list[tuple[Hashable, SamplingParams, torch.Generator | None]] = []
        self._cache: Any = None
        self._mask: torch.Tensor | None = None
        self._pos: torch.Tensor | None = None  # the position of each row's next token
        self._logits: torch.Tensor | None = None  # each row's distribution of its next token
        self._tokens: torch.Tensor | None = None
        self.logprobs: list[float] = []  # the last `sample`'s logprob of each row's token
        self.prefills = 0  # prefill forwards so far (one per join)

    def __len__(self) -> int:
        return len(self.owners)

    @property
    def width(self) -> int:
        """Positions in the cache (the longest live row, plus left padding of the others)."""
        return 0 if self._mask is None else int(self._mask.shape[1])

    @torch.no_grad()
    def join(
        self,
        prompts: list[list[int]],
        owners: list[Any],
        params: SamplingParams | Sequence[SamplingParams],
        generator: torch.Generator | None | Sequence[torch.Generator | None] = None,
    ) -> None:
        """Prefill `prompts` (one forward, whatever their rules) and add them as rows sampled
        with `params` (one for all, or one per row; `generator` likewise).

        Why one forward: every model call pays a fixed cost (on a small model, as much as its
        arithmetic), so requests admitted together are prefilled together, not one call each."""
        if not prompts:
            return
        n = len(prompts)
        row_params = list(params) if isinstance(params, Sequence) else [params] * n
        gens = list(generator) if isinstance(generator, Sequence) else [generator] * n
        b = self.backend
        ids, mask, pos = b._left_padded(prompts)
        cache = growing_cache(getattr(self.model, "config", None), ids.shape[1] + HEADROOM)
        with decode_attention(self.model):
            logits = b._forward(ids, mask, pos, cache, 1)
        self.prefills += 1
        for p, g in zip(row_params, gens, strict=True):
            self._rules.append(((p.temperature, p.top_p, p.top_k, id(g)), p, g))
        self.owners += list(owners)
        if self._mask is None:
            self._cache, self._mask, self._pos, self._logits = cache, mask, pos[:, -1] + 1, logits
            return
        self._stack(cache, mask)
        self._pos = torch.cat([self._pos, pos[:, -1] + 1])
        self._logits = torch.cat([self._logits, logits])

    def _stack(self, cache: Any, mask: torch.Tensor) -> None:
        """Left-pad the running cache and the new one to one width and stack their rows."""
        assert self._mask is not None
        old, new = self._mask.shape[1], mask.shape[1]
        width = max(old, new)
        rows = self._mask.shape[0] + mask.shape[0]
        for mine, theirs in zip(self._cache.layers, cache.layers, strict=True):
            heads, size = mine.keys.shape[1], width + HEADROOM
            k = mine.keys.new_zeros((rows, heads, size, mine.keys.shape[3]))
            v = mine.values.new_zeros((rows, heads, size, mine.values.shape[3]))
            n = mine.keys.shape[0]
            k[:n, :, width - old : width] = mine.keys
            v[:n, :, width - old : width] = mine.values
            k[n:, :, width - new : width] = theirs.keys
            v[n:, :, width - new : width] = theirs.values
            mine.set_buffers(k, v, width)
        pad = width - old
        self._mask = torch.cat(
            [
                torch.nn.functional.pad(self._mask, (pad, 0)),
                torch.nn.functional.pad(mask, (width - new, 0)),
            ]
        )

    def sample(self) -> list[int]:
        """One token per row, from its distribution, each rule's rows sampled together; the
        tokens' logprobs (those `sample_next` reports, the learner's behaviour logprobs) are
        left in `logprobs`."""
        assert self._logits is not None
        tokens = torch.empty(len(self.owners), dtype=torch.long, device=self._logits.device)
        logprobs = torch.empty(len(self.owners), dtype=torch.float32, device=self._logits.device)
        for rows, params, generator in self._groups():
            if len(rows) == len(self.owners):
                tokens, logprobs = sample_next(self._logits, params, generator)
            else:
                index = torch.tensor(rows, device=self._logits.device)
                tokens[index], logprobs[index] = sample_next(self._logits[index], params, generator)
        self._tokens = tokens
        self.logprobs = logprobs.tolist()
        return tokens.tolist()

    def _groups(self) -> list[tuple[list[int], SamplingParams, torch.Generator | None]]:
        groups: dict[Hashable, list[int]] = {}
        for row, (rule, _, _) in enumerate(self._rules):
            groups.setdefault(rule, []).append(row)
        return [(rows, *self._rules[rows[0]][1:]) for rows in groups.values()]

    def restrict(self, rows: list[int], bias: torch.Tensor) -> None:
        """Add `bias` ([len(rows), >= vocab] float: 0 for a token that may come next, -inf for
        one that may not) to the next-token logits of `rows` (constrained decoding); the next
        `sample` and `top_logprobs` see the masked logits."""
        assert self._logits is not None
        logits = self._logits
        bias = bias[:, : logits.shape[1]].to(device=logits.device, dtype=logits.dtype)
        if len(rows) == len(self.owners):
            logits.add_(bias)
        else:
            logits.index_add_(0, torch.tensor(rows, device=logits.device), bias)

    def transform_logits(
        self, rows: list[int], change: Callable[[torch.Tensor], torch.Tensor]
    ) -> None:
        """Replace the next-token logits of `rows` by `change(their logits)` ([len(rows), vocab]
        in, same shape out; a served request's penalties); the next `sample` and
        `top_logprobs` see the result, as with `restrict`."""
        assert self._logits is not None
        if len(rows) == len(self.owners):
            self._logits = change(self._logits)
            return
        index = torch.tensor(rows, device=self._logits.device)
        self._logits[index] = change(self._logits[index])

    def top_logprobs(self, rows: list[int], k: int) -> list[list[tuple[int, float]]]:
        """The `k` likeliest tokens of each row in `rows` and their logprobs, under the
        distribution its last token was sampled from (`sampled_distribution`)."""
        assert self._logits is not None
        out: dict[int, list[tuple[int, float]]] = {}
        wanted = set(rows)
        for group, params, _ in self._groups():
            mine = [r for r in group if r in wanted]
            if not mine:
                continue
            index = torch.tensor(mine, device=self._logits.device)
            values, ids = sampled_distribution(self._logits[index], params).topk(k, dim=-1)
            for r, vs, ts in zip(mine, values.tolist(), ids.tolist(), strict=True):
                out[r] = [(t, v) for t, v in zip(ts, vs, strict=True) if v > float("-inf")]
        return [out[r] for r in rows]

    @torch.no_grad()
    def advance(self, keep: list[int]) -> None:
        """Rows `keep` (positions, ascending) go on with the tokens just sampled: the others
        leave the batch now, and one decode step computes the kept rows' next distribution."""
        assert self._mask is not None and self._tokens is not None
        if len(keep) != len(self.owners):
            if not keep:
                self.clear()
                return
            index = torch.tensor(keep, device=self._mask.device)
            self._cache.batch_select_indices(index)
            self._mask, self._pos = self._mask[index], self._pos[index]
            self._tokens = self._tokens[index]
            self.owners = [self.owners[i] for i in keep]
            self._rules = [self._rules[i] for i in keep]
            self._trim()
        mask = torch.cat([self._mask, self._mask.new_ones((len(keep), 1))], dim=-1)
        with decode_attention(self.model):
            self._logits = self.backend._decode_step(
                self._tokens.to(mask.device), mask, self._pos, self._cache
            )
        self._mask, self._pos = mask, self._pos + 1

    def _trim(self) -> None:
        """Cut the leading columns no live row attends to (the padding of rows that left)."""
        assert self._mask is not None
        used = torch.nonzero(self._mask.any(dim=0))
        cut = int(used[0]) if len(used) else 0
        if cut == 0:
            return
        self._mask = self._mask[:, cut:]
        for layer in self._cache.layers:
            layer.drop_front(cut)

    def clear(self) -> None:
        """Drop every row (the cache is freed)."""
        self.owners, self._rules = [], []
        self._cache = self._mask = self._pos = self._logits = self._tokens = None
