"""The request batcher: requests from many clients decoded together on one generation backend.

One worker thread owns the models. On Arena's torch engine it runs continuous batching
(`arena_core.serve.running`): requests join the running batch between decode steps, up to
`max_batch_rows` rows, and leave it the step they end (their `max_tokens`, a stop string, EOS, or a
client that left), so a request never waits for another one's long answer and every step decodes
every live request. Sampling rules may differ between the rows of a batch; a seeded request
decodes alone (its samples must not depend on other traffic), and requests for another model wait
until the running batch drains (first come, first served).

Other backends (vLLM, a plugin's) get whole batches: the oldest waiting request and every waiting
request that can share its batch (same model and sampling rule) go to one `generate` call, and
per-row limits are applied as tokens arrive through its `on_token` hook.

Requests are bounded: at most `max_pending` are admitted (waiting or running); past that `submit`
raises QueueFull, which the server turns into 429 with Retry-After. `stats()` says what runs now
(the server's /health shows it).

A request in flight (what was asked, each choice's state, the events its client receives) is
`arena_core.serve.jobs`.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable

from arena_core.engines.base import SamplingParams
from arena_core.serve.jobs import Choice, Event, Job, Request, advance_choice
from arena_core.serve.models import ServedModel
from arena_core.serve.running import RunningBatch


class QueueFull(Exception):
    """More requests than `max_pending` are waiting or running."""


class RequestBatcher:
    """Admits, batches and decodes requests for a set of served models (see module docstring)."""

    def __init__(
        self,
        models: list[ServedModel],
        *,
        max_batch_rows: int = 32,
        max_pending: int = 64,
    ) -> None:
        from arena_core.engines.continuous import supports_continuous

        self.models = {m.name: m for m in models}
        self.max_batch_rows = max(1, int(max_batch_rows))
        self.max_pending = max(1, int(max_pending))
        self.continuous = {m.name: supports_continuous(m.backend) for m in models}
        self._waiting: deque[Job] = deque()
        self._pending = 0
        self._cond = threading.Condition()
        self._closed = False
        self._running: RunningBatch | None = None
        self.batches = 0  # batches started: whole ones, or a running batch starting from empty
        self.steps = 0  # decode steps of running batches
        self.prefills = 0  # prefill forwards of running batches (one per join, all joiners in it)
        self.max_rows_seen = 0
        self.join_every = 4  # decode steps between joins of a busy running batch
        self._thread = threading.Thread(target=self._work, name="arena-serve-batcher", daemon=True)
        self._thread.start()

    # -- admission -------------------------------------------------------------------------------
    def submit(self, model: str, request: Request, sink: Callable[[Event], None]) -> Job:
        """Queue `request` for `model`; events go to `sink`. Raises QueueFull or KeyError."""
        served = self.models[model]
        job = Job(served, request, sink)
        with self._cond:
            if self._closed:
                raise QueueFull("the server is shutting down")
            if self._pending >= self.max_pending:
                raise QueueFull(f"{self._pending} requests already waiting or running")
            self._pending += 1
            self._waiting.append(job)
            self._cond.notify()
        return job

    @property
    def pending(self) -> int:
        return self._pending

    def stats(self) -> dict[str, int]:
        """What runs now: rows decoding, requests waiting and admitted; steps and batches so far."""
        running = self._running
        return {
            "running_rows": running.rows if running is not None else 0,
            "waiting": len(self._waiting),
            "pending": self._pending,
            "max_pending": self.max_pending,
            "decode_steps": self.steps,
            "prefills": self.prefills,
            "max_rows_seen": self.max_rows_seen,
        }

    def close(self, *, release_backends: bool = True) -> None:
        """Stop: requests still waiting or running are ended (their streams get "done"); the
        backends are closed too unless they belong to someone else (`serve_policy`)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=30)
        if not release_backends:
            return
        backends = {id(m.backend): m.backend for m in self.models.values()}
        for backend in backends.values():  # a vLLM engine's processes end here
            close = getattr(backend, "close", None)
            if close is not None:
                close()

    # -- the worker ------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and self._running is None and not self._closed:
                    self._cond.wait()
                if self._closed:
                    left = list(self._waiting)
                    self._waiting.clear()
                    break
                jobs = self._take()
            jobs = [job for job in jobs if not self._dropped(job)]
            if self._running is None and jobs and not self.continuous[jobs[0].model.name]:
                self._run_whole(jobs)
            elif jobs or self._running is not None:
                self._step(jobs)
        running = self._running.abandon() if self._running is not None else []
        for job in running + left:
            job.cancel()
            self._end(job)

    def _take(self) -> list[Job]:
        """The waiting jobs to start now (under the lock): a whole batch for a backend without
        continuous batching; else those that fit the running batch, in arrival order."""
        running = self._running
        if running is None:
            if not self._waiting:
                return []
            if not self.continuous[self._waiting[0].model.name]:
                return self._take_batch()
            model, rows = self._waiting[0].model, 0
        elif running.alone or self._join_later(running):
            return []
        else:
            model, rows = running.model, running.rows
        taken: list[Job] = []
        while self._waiting:
            job = self._waiting[0]
            if job.model is not model:  # first come, first served: this batch drains first
                break
            seeded = job.request.seed is not None
            if (seeded or rows + len(job.choices) > self.max_batch_rows) and (rows or taken):
                break
            taken.append(self._waiting.popleft())
            rows += len(job.choices)
            if seeded:
                break
        return taken

    def _join_later(self, running: RunningBatch) -> bool:
        """Whether waiting requests wait a few more steps: a join costs a prefill forward, as
        much as a decode step on a small model, so a busy batch takes newcomers in groups (every
        `join_every` steps); a batch at most a quarter full takes them at once, and so does one
        whose free rows the waiting requests fill (waiting longer would only leave rows idle)."""
        busy = 4 * running.rows > self.max_batch_rows
        if not busy or self.steps - running.joined_at >= self.join_every:
            return False
        free, waiting = self.max_batch_rows - running.rows, 0
        for job in self._waiting:
            if job.model is not running.model or job.request.seed is not None:
                break
            waiting += len(job.choices)
            if waiting >= free:
                return False
        return True

    def _dropped(self, job: Job) -> bool:
        """A job whose client left while it waited ends without decoding."""
        if job.cancelled:
            self._end(job)
        return job.cancelled

    def _end(self, job: Job) -> None:
        # counted out before the client hears "done": a client that then asks for the stats (or
        # sends its next request at the limit) finds its request gone
        with self._cond:
            self._pending -= 1
        try:
            job.sink(("done",))
        except Exception:  # noqa: BLE001 - a dead listener must not kill the batcher
            pass

    def _fail(self, jobs: list[Job], exc: Exception) -> None:
        traceback.print_exc(file=sys.stderr)
        for job in jobs:
            with self._cond:
                self._pending -= 1
            try:
                job.sink(("error", f"generation failed: {type(exc).__name__}: {exc}"))
            except Exception:  # noqa: BLE001 - a dead listener must not kill the batcher
                pass

    def _step(self, jobs: list[Job]) -> None:
        """Admit `jobs` into the running batch, then one decode step for every live row."""
        if self._running is None:
            self._running = RunningBatch(jobs[0].model)
            self.batches += 1
        running = self._running
        try:
            if jobs:
                self.prefills += running.join(jobs)
                running.joined_at = self.steps
            jobs = []
            self.max_rows_seen = max(self.max_rows_seen, running.rows)
            ended = running.step()
        except Exception as exc:  # a failed step fails its requests, never the server
            self._running = None
            self._fail(list(dict.fromkeys(running.abandon() + jobs)), exc)
            return
        self.steps += 1
        if not running.rows:
            self._running = None
        for job in ended:
            self._end(job)

    def _take_batch(self) -> list[Job]:
        first = self._waiting.popleft()
        batch, rows = [first], len(first.choices)
        key = first.batch_key()
        for job in list(self._waiting):
            if rows >= self.max_batch_rows:
                break
            if job.batch_key() == key and rows + len(job.choices) <= self.max_batch_rows:
                self._waiting.remove(job)
                batch.append(job)
                rows += len(job.choices)
        return batch

    def _run_whole(self, batch: list[Job]) -> None:
        """One `generate` call for the whole batch (backends without continuous batching)."""
        try:
            self._generate(batch)
        except Exception as exc:  # a failed batch fails its requests, never the server
            self._fail(batch, exc)
            return
        for job in batch:
            self._end(job)

    def _generate(self, batch: list[Job]) -> None:
        first = batch[0]
        model, req = first.model, first.request
        prompts: list[list[int]] = []
        owners: list[tuple[Job, Choice]] = []
        for job in batch:
            for prompt, choice in zip(job.request.rows, job.choices, strict=True):
                prompts.append(prompt)
                owners.append((job, choice))
        # no stop strings for the backend: advance_choice applies each request's own, so the
        # backend's `finished` flag means EOS only
        params = SamplingParams(
            max_new_tokens=max(j.request.max_tokens for j in batch),
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            seed=req.seed,
            ignore_eos=req.ignore_eos,
            grammar=req.grammar.lark if req.grammar is not None else None,
            penalties=req.penalties,
            top_logprobs=max(j.request.logprobs or 0 for j in batch),
            prompt_logprobs=max(
                (j.request.prompt_logprobs for j in batch if j.request.prompt_logprobs is not None),
                default=None,
            ),
        )
        self.batches += 1
        self.max_rows_seen = max(self.max_rows_seen, len(prompts))
        tokenizer = model.tokenizer
        eos_id = tokenizer.eos_token_id

        def on_token(
            row: int,
            token: int,
            eos: bool,
            logprob: float | None = None,
            top: list[tuple[int, float]] | None = None,
        ) -> bool:
            job, choice = owners[row]
            if choice.finished:
                return True
            if eos:
                choice.eos = True
                if eos_id is not None:
                    choice.ids.append(int(eos_id))
            else:
                choice.tokens.append(token)
                choice.ids.append(token)
            if logprob is not None and len(choice.logprobs) < len(choice.ids):
                choice.logprobs.append(float(logprob))
                if job.request.logprobs:  # the request's own k of the batch's alternatives
                    choice.top.append(list(top or [])[: job.request.logprobs])
            advance_choice(job, choice, tokenizer, eos)
            return choice.finished

        with model.active():
            done = model.backend.generate(prompts, params, on_token=on_token)
        for (job, choice), comp in zip(owners, done, strict=False):  # an echo's prompt scores
            k = job.request.prompt_logprobs
            if k is not None and comp.prompt_scores is not None:
                choice.prompt_scores = [(lp, r, top[:k]) for lp, r, top in comp.prompt_scores]
        for job, choice in owners:  # rows the backend ended itself (its max_new_tokens)
            if not choice.finished:
                advance_choice(job, choice, tokenizer, True, reason="length")
