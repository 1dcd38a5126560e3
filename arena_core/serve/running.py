"""The server's running batch on the torch engine: requests join between decode steps and leave
when done (continuous batching, `arena_core.engines.continuous`).

The batcher's worker thread calls `join` with the requests it admitted and `step` once per decode
step; each step samples one token for every live row, hands it to its request (text, stop
strings, `max_tokens`, a client that left: `jobs.advance_choice`), and drops the rows that ended
before the next forward. A request whose client disconnected therefore frees its rows within one step.
"""

from __future__ import annotations

from typing import Any

import torch

from arena_core.engines.base import SamplingParams
from arena_core.engines.continuous import ContinuousBatch
from arena_core.engines.sampling import apply_penalties
from arena_core.serve.echo import score_prompt
from arena_core.serve.jobs import Job, advance_choice
from arena_core.serve.models import ServedModel


class RunningBatch:
    """The live rows of one served model, each owned by a (job, choice) pair."""

    def __init__(self, model: ServedModel) -> None:
        self.model = model
        self.batch = ContinuousBatch(model.backend)
        self.jobs: list[Job] = []
        self.alone = False  # a seeded request runs alone: its samples depend on nothing else
        self.steps = 0
        self.joined_at = 0  # the batch's step count when requests last joined

    @property
    def rows(self) -> int:
        return len(self.batch)

    def join(self, jobs: list[Job]) -> int:
        """Prefill the jobs' prompts, all in one forward, and add their rows to the batch;
        returns the prefill forwards it took (1)."""
        before = self.batch.prefills
        prompts: list[list[int]] = []
        owners: list[tuple[Job, Any]] = []
        params: list[SamplingParams] = []
        generators: list[torch.Generator | None] = []
        for job in jobs:
            req = job.request
            generator = None
            if req.seed is not None and req.temperature > 0:
                device = self.batch.backend.device
                generator = torch.Generator(device=device).manual_seed(int(req.seed))
                self.alone = True
            rule = SamplingParams(
                max_new_tokens=req.max_tokens,
                temperature=req.temperature,
                top_p=req.top_p,
                top_k=max(0, req.top_k),
            )
            if req.grammar is not None:
                for choice in job.choices:
                    choice.matcher = req.grammar.matcher()
            prompts += req.rows
            owners += [(job, choice) for choice in job.choices]
            params += [rule] * len(req.rows)
            generators += [generator] * len(req.rows)
        with self.model.active():
            self._score_prompts(jobs)
            self.batch.join(prompts, owners, params, generators)
        self.jobs += jobs
        return self.batch.prefills - before

    def _score_prompts(self, jobs: list[Job]) -> None:
        """The prompt logprobs an echo asks for, once per distinct prompt of a job."""
        for job in jobs:
            k = job.request.prompt_logprobs
            if k is None:
                continue
            scored: dict[tuple[int, ...], Any] = {}
            for choice in job.choices:
                key = tuple(choice.prompt)
                if key not in scored:
                    scored[key] = score_prompt(self.batch.backend.model, choice.prompt, k)
                choice.prompt_scores = scored[key]

    def step(self) -> list[Job]:
        """One decode step for every live row; returns the jobs that ended in it."""
        tokenizer, eos_ids = self.model.tokenizer, self.batch.backend.eos_ids
        owners = self.batch.owners
        with self.model.active():
            constrained = [row for row, (_, c) in enumerate(owners) if c.matcher is not None]
            if constrained:
                from arena_core.serve.grammar import token_bias

                matchers = [owners[row][1].matcher for row in constrained]
                self.batch.restrict(constrained, token_bias(matchers, eos_ids))
            self._penalize(owners)
            tokens = self.batch.sample()
            logprobs = self.batch.logprobs
            tops = self._top_logprobs()
            keep: list[int] = []
            for row, ((job, choice), token) in enumerate(zip(owners, tokens, strict=True)):
                eos = token in eos_ids and not job.request.ignore_eos
                choice.ids.append(token)
                choice.logprobs.append(logprobs[row])
                if row in tops:
                    choice.top.append(tops[row])
                if eos:
                    choice.eos = True
                else:
                    choice.tokens.append(token)
                    if choice.matcher is not None:
                        choice.matcher.consume(token)
                advance_choice(job, choice, tokenizer, eos)
                if not choice.finished:
                    keep.append(row)
            self.batch.advance(keep)
        self.steps += 1
        ended = [job for job in self.jobs if all(c.finished for c in job.choices)]
        if ended:
            self.jobs = [job for job in self.jobs if job not in ended]
        if not self.jobs:
            self.alone = False
        return ended

    def _penalize(self, owners: list[tuple[Job, Any]]) -> None:
        """The logit bias, penalties and min_p of the rows whose request asked for them, after
        the grammar's mask (vLLM's order: the grammar, then these, then temperature)."""
        rows = [row for row, (job, _) in enumerate(owners) if job.request.penalties is not None]
        if not rows:
            return
        chosen = [owners[row] for row in rows]

        def change(logits: torch.Tensor) -> torch.Tensor:
            return apply_penalties(
                logits,
                [choice.prompt for _, choice in chosen],
                [choice.ids for _, choice in chosen],
                [job.request.penalties for job, _ in chosen],
                [job.request.temperature for job, _ in chosen],
            )

        self.batch.transform_logits(rows, change)

    def _top_logprobs(self) -> dict[int, list[tuple[int, float]]]:
        """Each row that asked for alternatives: its top-k tokens and logprobs this step."""
        wanted = [
            (row, job.request.logprobs)
            for row, (job, _) in enumerate(self.batch.owners)
            if job.request.logprobs
        ]
        if not wanted:
            return {}
        k = max(n for _, n in wanted)
        rows = [row for row, _ in wanted]
        found = self.batch.top_logprobs(rows, k)
        return {row: top[:n] for (row, n), top in zip(wanted, found, strict=True)}

    def abandon(self) -> list[Job]:
        """Drop every row (an error, or the server closing); returns the jobs it held."""
        jobs, self.jobs, self.alone = self.jobs, [], False
        self.batch.clear()
        return jobs
