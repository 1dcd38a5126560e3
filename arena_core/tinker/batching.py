"""Sampling requests that wait together are generated together.

RL code samples a group as many single-sample requests at once (tinker-cookbook sends one
`sample(num_samples=1)` per environment: 8 groups of 16 are 128 requests), and each group's
prompt differs. Run one by one, each request would prefill its prompt again and decode one row
at a time. Requests queued for the same sampler and sampling parameters (no seed, no prompt
logprobs) are merged instead: one worker job takes every such request that arrived before it
started and generates all their rows as one batch of Arena's engine (each distinct prompt
prefilled once, `TinkerService.sample`), then hands each request its own rows. A request with a
seed runs alone, so its samples stay reproducible.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

from arena_core.tinker.service import TinkerService
from arena_core.tinker.wire import encode_sample_response

Pending = list[tuple[Any, concurrent.futures.Future]]


class SampleBatcher:
    """Merges queued `asample` requests (see the module docstring) on the server's worker."""

    def __init__(self, service: TinkerService, worker: concurrent.futures.Executor) -> None:
        self.service = service
        self.worker = worker
        self._pending: dict[tuple, Pending] = {}
        self._lock = threading.Lock()

    def submit(self, req: Any) -> concurrent.futures.Future:
        """The future of this request's `SampleResponse` bytes."""
        key = _merge_key(req)
        if key is None:
            return self.worker.submit(self._alone, req)
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if key in self._pending:  # a job for this key is queued and has not started
                self._pending[key].append((req, future))
                return future
            self._pending[key] = [(req, future)]
        self.worker.submit(self._merged, key)
        return future

    def _alone(self, req: Any) -> bytes:
        sequences, scored = self.service.sample(req.sampling_session_id, [req])
        return encode_sample_response(sequences[0], scored)

    def _merged(self, key: tuple) -> None:
        with self._lock:
            batch = [(r, f) for r, f in self._pending.pop(key) if f.set_running_or_notify_cancel()]
        valid: Pending = []
        for req, future in batch:  # a request the service refuses fails alone
            try:
                self.service.check_sample(req)
            except Exception as exc:
                future.set_exception(exc)
            else:
                valid.append((req, future))
        batch = valid
        if not batch:
            return
        reqs = [r for r, _ in batch]
        _settle(batch, lambda: self.service.sample(reqs[0].sampling_session_id, reqs)[0])

    def pending(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._pending.values())


def _settle(batch: Pending, generate: Callable[[], list]) -> None:
    """Generate once, give each request its own rows (or everyone the error)."""
    try:
        per_request = generate()
    except Exception as exc:  # every waiting request fails the way a lone one would
        for _, future in batch:
            future.set_exception(exc)
        return
    for (_, future), sequences in zip(batch, per_request, strict=True):
        future.set_result(encode_sample_response(sequences))


def _merge_key(req: Any) -> tuple | None:
    """What requests must share to be generated together; None: this one runs alone."""
    params = req.sampling_params
    if (
        params.seed is not None
        or req.prompt_logprobs
        or req.topk_prompt_logprobs
        or req.target_prompt_logprobs is not None
        or req.prompt_alt_tokens_k
    ):
        return None
    return (
        req.sampling_session_id,
        params.model_dump_json(exclude={"seed"}),
        req.topk_sample_logprobs,
    )
