"""A request in flight on the server: what was asked (`Request`), each choice's decoding state,
the `Job` the batcher's worker fills through the client's sink, and how a choice's text becomes
final (`advance_choice`).

Streaming text: each row's tokens are decoded as a whole and only the part that can no longer
change is emitted, holding back an incomplete UTF-8 character and any tail that could be the start
of a stop string; the stop string itself is never returned (the OpenAI behaviour).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from arena_core.engines.base import Penalties
from arena_core.serve.models import ServedModel

# Events a job's sink receives (from the worker thread):
#   ("delta", index, text, start, end)      new text of choice `index`, and its sampled tokens
#                                           `choice.ids[start:end]` (logprobs alike) sent with it
#   ("finish", index, reason, n_tokens)     choice `index` ended: "stop" or "length"
#   ("done",)                               every choice ended
#   ("error", message)                      generation failed; no more events follow
Event = tuple[Any, ...]


@dataclass
class Request:
    """What to sample for one request; `rows[i]` is the prompt of choice `indexes[i]`."""

    rows: list[list[int]]
    indexes: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    ignore_eos: bool = False  # decode to max_tokens past EOS (vLLM's option; the torch engine)
    top_k: int = 0
    logprobs: int | None = None  # None: none; k: each sampled token's logprob and k alternatives
    grammar: Any = None  # a compiled grammar (arena_core.serve.grammar): each row decodes under it
    penalties: Penalties | None = None  # logit bias, penalties, min_p; None: none asked for
    prompt_logprobs: int | None = None  # echo with logprobs: score each prompt (k alternatives)


class Choice:
    """One row's decoding state: tokens so far, text emitted so far, whether it ended."""

    def __init__(self, index: int, prompt: list[int]) -> None:
        self.index = index
        self.prompt = prompt  # the row's prompt ids (a repetition penalty counts them)
        self.tokens: list[int] = []  # the tokens of the text (EOS excluded)
        self.ids: list[int] = []  # every sampled token, EOS included (what token_ids returns)
        self.logprobs: list[float] = []  # the sampled tokens' logprobs, aligned with `ids`
        self.top: list[list[tuple[int, float]]] = []  # their alternatives, when asked for
        self.sent = 0  # `ids[:sent]` went out with a delta
        self.emitted = 0
        self.finished = False
        self.eos = False  # ended by the EOS token (not part of the text, but a generated token)
        self.matcher: Any = None  # the row's grammar state when the request is constrained
        self.prompt_scores: Any = None  # the prompt's `echo.PromptScores`, when asked for


class Job:
    """A submitted request: the worker fills it through `sink`; `cancel()` stops its rows."""

    _ids = itertools.count()

    def __init__(self, model: ServedModel, request: Request, sink: Callable[[Event], None]) -> None:
        self.id = next(Job._ids)
        self.model, self.request, self.sink = model, request, sink
        self.choices = [Choice(i, p) for i, p in zip(request.indexes, request.rows, strict=True)]
        self.cancelled = False
        self.completion_tokens = 0

    def cancel(self) -> None:
        self.cancelled = True

    def batch_key(self) -> tuple[Any, ...]:
        r = self.request
        # a seeded request decodes alone: its samples must not depend on who else was waiting;
        # so does a constrained one on a backend without continuous batching (its grammar goes
        # to the backend in the call's SamplingParams, shared by every row)
        alone = self.id if r.seed is not None or r.grammar is not None else None
        rule = (r.temperature if r.temperature > 0 else 0.0, r.top_p, r.top_k, r.penalties)
        rule += (r.ignore_eos,)
        return (self.model.name, *rule, alone)


def advance_choice(
    job: Job, choice: Choice, tokenizer: Any, end: bool, reason: str = "stop"
) -> None:
    """Emit what is final of `choice`'s text; finish it on a stop string, EOS, its limit, or a
    cancelled job (its client left)."""
    req = job.request
    text = tokenizer.decode(choice.tokens, skip_special_tokens=True)
    cut = _first_stop(text, req.stop)
    if cut is not None:
        text, end, reason = text[:cut], True, "stop"
    elif len(choice.tokens) >= req.max_tokens:
        end, reason = True, "length"
    elif job.cancelled:
        end, reason = True, "length"
    safe = len(text) if end else _safe_length(text, req.stop)
    if safe > choice.emitted or (end and len(choice.ids) > choice.sent):
        start, choice.sent = choice.sent, len(choice.ids)
        job.sink(("delta", choice.index, text[choice.emitted : safe], start, choice.sent))
        choice.emitted = max(safe, choice.emitted)
    if end:
        choice.finished = True
        n_tokens = len(choice.tokens) + int(choice.eos)
        job.completion_tokens += n_tokens
        job.sink(("finish", choice.index, reason, n_tokens))


def _first_stop(text: str, stops: list[str]) -> int | None:
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None


def _safe_length(text: str, stops: list[str]) -> int:
    """How much of `text` can be sent: not a partial UTF-8 character, nor a tail that a stop
    string could still start with."""
    end = len(text)
    while end and text[end - 1] == "\ufffd":
        end -= 1
    hold = 0
    for s in stops:
        for k in range(min(len(s) - 1, end), 0, -1):
            if text[end - k : end] == s[:k]:
                hold = max(hold, k)
                break
    return end - hold
