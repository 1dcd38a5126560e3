"""The per-row outputs of one torch-engine decode batch, and the rules that end a row.

Kept apart from `torch_backend` so the decode loop there reads as the loop: each step records one
sampled token per live row here (tokens, logprobs, the policy version that produced it) and learns
which rows go on (EOS, a stop string, the caller's `on_token`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from arena_core.rollout.base import DecodeControl, SamplingParams

# on_token(row, token_id, finished) -> True to end the row now (see TorchBackend.generate)
TokenCallback = Callable[[int, int, bool], bool]


class BatchRows:
    """Per-row outputs of one batch (indexed by the row's position in the original prompt list)
    and the per-call settings that decide when a row ends."""

    def __init__(
        self,
        backend: Any,
        n: int,
        params: SamplingParams,
        on_token: TokenCallback | None,
        offset: int,
    ) -> None:
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.logprobs: list[list[float]] = [[] for _ in range(n)]
        self.versions: list[list[int]] = [[] for _ in range(n)]
        self.finish: list[str] = ["length"] * n
        self.backend, self.params, self.on_token, self.offset = backend, params, on_token, offset
        self.stop_window = max((len(s.encode()) for s in params.stop), default=0) + 2

    def record(
        self, tokens: list[int], logps: list[float], originals: list[int], version: int
    ) -> list[int]:
        """Append one sampled token to each live row; the indices (into `originals`) that go on."""
        keep: list[int] = []
        backend, stop, on_token = self.backend, self.params.stop, self.on_token
        for j, r in enumerate(originals):
            tok = tokens[j]
            self.tokens[r].append(tok)
            self.logprobs[r].append(logps[j])
            self.versions[r].append(version)
            done = tok in backend.eos_ids or backend._hit_stop(
                self.tokens[r], stop, self.stop_window
            )
            if done:
                self.finish[r] = "stop"
            if on_token is not None and on_token(self.offset + r, tok, done) and not done:
                done = True  # the caller ended this row (finish stays "length")
            if not done:
                keep.append(j)
        return keep

    def go_on(self, live: list[int], step: int, control: DecodeControl | None) -> bool:
        """Whether another decode step runs; the async runtime may swap weights in between."""
        last = step == self.params.max_new_tokens - 1
        if live and control is not None and not last:
            control.between_steps(self.backend)  # may load new weights: later tokens use them
        return bool(live) and not last
