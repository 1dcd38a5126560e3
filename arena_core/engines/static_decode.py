"""The torch engine's static-shape decode step, captured into a CUDA graph on CUDA.

Why: one decode step of a small model on a GPU is hundreds of tiny kernel launches (every layer's
norms, projections, attention, sampling inputs); the GPU waits on the CPU that issues them. A
CUDA graph records the step once and replays it with one launch. A graph fixes every tensor's
shape and address, so this decoder owns fixed buffers and the caller writes each step's inputs
into them in place:

- the batch is padded to a bucket (1, 2, 4, then multiples of 8, vLLM's capture sizes); padded
  rows repeat row 0 and their outputs are dropped, and only the real rows are sampled, so
  seeded sampling draws what the unpadded batch would;
- the StaticCache is sized to a bucketed length (multiples of 64), so prompts of nearby lengths
  reuse one graph; `cache_position` and the 2-D attention mask are buffers of that length
  (positions not written yet are masked);
- a step at a given position is idempotent (it writes the same key/values into the same slot),
  so the warm-up runs before capture leave nothing behind.

The same step function runs eagerly on the CPU (and on CUDA with `backend.cuda_graphs=off`): the
tests decode with it on the CPU and compare with the dynamic-cache path. Only CUDA captures.
Weight swaps between steps copy into the parameters in place, so a captured graph stays valid.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import StaticCache

from arena_core.errors import ConfigError

LENGTH_BUCKET = 64  # cache lengths are rounded up to a multiple of this
MAX_DECODERS = 4  # captured graphs (and their caches) kept per backend, newest first


def batch_bucket(n: int) -> int:
    """The padded batch size for n rows: 1, 2, 4, then the next multiple of 8."""
    if n <= 0:
        raise ValueError(f"a batch needs at least one row, got {n}")
    if n <= 4:
        return 1 << (n - 1).bit_length()
    return -(-n // 8) * 8


def length_bucket(n: int) -> int:
    """The StaticCache length for n positions (prompt + new tokens)."""
    return -(-n // LENGTH_BUCKET) * LENGTH_BUCKET


def resolve_cuda_graphs(setting: str, device: torch.device, kv_cache: str) -> bool:
    """Whether decode steps are captured: `auto` on CUDA with the static cache, `on` insists
    (a clear error elsewhere), `off` never."""
    if setting not in ("auto", "on", "off"):
        raise ConfigError(f"backend.cuda_graphs={setting!r}: use auto, on or off")
    if setting == "off":
        return False
    cuda = device.type == "cuda"
    if setting == "on":
        if not cuda:
            raise ConfigError(
                f"backend.cuda_graphs=on: CUDA graphs need the engine on a CUDA device, this one "
                f"decodes on {device}. Fix: backend.cuda_graphs=auto (captures only on CUDA) or "
                "off, or runtime.device=cuda on a machine with a GPU"
            )
        if kv_cache != "static":
            raise ConfigError(
                f"backend.cuda_graphs=on needs fixed shapes, but backend.kv_cache={kv_cache}. "
                "Fix: backend.kv_cache=static (the default on CUDA), or backend.cuda_graphs=auto"
            )
        return True
    return cuda and kv_cache == "static"


class StaticDecoder:
    """Fixed buffers + StaticCache for `batch` rows and `cache_len` positions (see the module
    docstring); `capture=True` records the decode step as a CUDA graph on its first call."""

    def __init__(
        self, model: nn.Module, batch: int, cache_len: int, device: torch.device, capture: bool
    ) -> None:
        self.model = model
        self.batch, self.cache_len, self.capture = batch, cache_len, capture
        self.cache = StaticCache(config=model.config, max_cache_len=cache_len)
        self.tokens = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.positions = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.cache_position = torch.zeros((1,), dtype=torch.long, device=device)
        self.mask = torch.zeros((batch, cache_len), dtype=torch.long, device=device)
        self.graph: Any = None  # torch.cuda.CUDAGraph once captured
        self.logits: torch.Tensor | None = None  # the graph's output buffer
        self.replays = 0

    def prefill(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """Run the (left-padded) prompts eagerly into the cache; logits of their last position
        for the real rows. Rows beyond `len(ids)` repeat row 0 (valid inputs, dropped outputs)."""
        n, width = ids.shape
        pad = self.batch - n
        if pad:
            ids = torch.cat([ids, ids[:1].expand(pad, -1)])
            mask = torch.cat([mask, mask[:1].expand(pad, -1)])
            positions = torch.cat([positions, positions[:1].expand(pad, -1)])
        self.cache.reset()
        self.mask.zero_()
        self.mask[:, :width] = mask
        self.tokens.copy_(ids[:, -1:])
        self.positions.copy_(positions[:, -1:])
        out = self.model(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=positions,
            past_key_values=self.cache,
            cache_position=torch.arange(width, device=ids.device),
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:n, -1, :].float()

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, slot: int) -> torch.Tensor:
        """Decode one token per row: `tokens`/`positions` of the real rows ([n]), written at
        cache slot `slot`. Returns the real rows' logits (a view of the graph's output on CUDA:
        read it before the next step)."""
        n = tokens.shape[0]
        if slot >= self.cache_len:
            raise ValueError(f"cache slot {slot} is past this decoder's {self.cache_len} positions")
        self.tokens[:n, 0] = tokens
        self.positions[:n, 0] = positions
        self.positions[n:, 0] += 1  # padded rows advance too (their outputs are dropped)
        self.cache_position.fill_(slot)
        self.mask[:, slot] = 1
        if self.graph is not None:
            self.graph.replay()
            self.replays += 1
        elif self.capture:
            self._capture()
        else:
            return self._step()[:n]
        assert self.logits is not None
        return self.logits[:n]

    def _step(self) -> torch.Tensor:
        """The function a graph records: every input is a buffer of this decoder."""
        out = self.model(
            input_ids=self.tokens,
            attention_mask=self.mask,
            position_ids=self.positions,
            past_key_values=self.cache,
            cache_position=self.cache_position,
            use_cache=True,
        )
        return out.logits[:, -1, :].float()

    def _capture(self) -> None:
        """Warm up on a side stream (lazy allocations, autotuning), record, then replay once:
        the step at this slot is idempotent, so the replay computes this step's logits."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.logits = self._step()
        self.graph = graph
        graph.replay()
        self.replays += 1


class DecoderCache:
    """The backend's StaticDecoders by (batch bucket, length bucket), at most MAX_DECODERS
    (each holds a KV cache and, on CUDA, a graph)."""

    def __init__(self, model: nn.Module, device: torch.device, capture: bool) -> None:
        self.model, self.device, self.capture = model, device, capture
        self._decoders: dict[tuple[int, int], StaticDecoder] = {}

    def get(self, rows: int, positions: int) -> StaticDecoder:
        key = (batch_bucket(rows), length_bucket(positions))
        decoder = self._decoders.pop(key, None)
        if decoder is None:
            if len(self._decoders) >= MAX_DECODERS:
                self._decoders.pop(next(iter(self._decoders)))  # the least recently used
            decoder = StaticDecoder(self.model, key[0], key[1], self.device, self.capture)
        self._decoders[key] = decoder  # most recently used last
        return decoder

    @property
    def captured(self) -> int:
        """How many decode steps are held as CUDA graphs."""
        return sum(d.graph is not None for d in self._decoders.values())
