"""Answering a completion request: its prompt and grammar, submitting it to the request batcher, and
the response or the stream of chunks that carries the answer back (`app.py` routes requests here).

Events come from the batcher's worker thread through a `_Pipe` per request, handed over once per
burst through the loop's `_Waker`; a non-streamed answer is collected whole, a streamed one goes
out as SSE chunks: plain text through prebuilt chunk text (`chunks.py`), an answer with logprobs,
token ids or tools through `_Extras`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import StreamingResponse

from arena_core.engines.base import Penalties
from arena_core.serve.answer_extras import (
    TokenText,
    ToolStream,
    Wants,
    chat_logprobs,
    finish_reason,
    message,
    text_completion_logprobs,
    tool_call_deltas,
)
from arena_core.serve.batching import QueueFull, RequestBatcher
from arena_core.serve.chat import chat_grammar, check_tools, read_tool_calls, render_chat, tool_def
from arena_core.serve.chunks import ChunkTemplate
from arena_core.serve.echo import echo_logprobs, vllm_prompt_logprobs
from arena_core.serve.jobs import Request as GenRequest
from arena_core.serve.models import ServedModel
from arena_core.serve.protocol import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    Limits,
    chat_choice,
    chat_delta,
    check_continue,
    error_body,
    new_id,
    now,
    text_choice,
    usage,
)


async def chat_completion(
    batcher: RequestBatcher,
    model: ServedModel,
    req: ChatRequest,
    limits: Limits,
    prompt_ids: list[int] | None = None,
) -> Any:
    """POST /v1/chat/completions for `model`: the prompt (tools through the template, unless
    `prompt_ids` gives it: `/v1/chat/completions/tokens`), the grammar when the answer is
    constrained, then the answer."""
    check_continue(req)
    tools = [t.function.model_dump(exclude_none=True) for t in req.tools or []]
    choice = req.tool_choice or ("auto" if tools else "none")
    offered = tools if choice != "none" else []
    grammar = None
    if tools or req.response_format is not None:
        # off the event loop: the first grammar of a model builds its token table (~1 s for a
        # 49k vocabulary), which would stall every other stream meanwhile
        grammar = await asyncio.to_thread(_constraints, batcher, model, req, tools, choice)
    prompt = prompt_ids if prompt_ids is not None else chat_prompt_ids(model, req)
    max_tokens = chat_max_tokens(req, limits)
    last = req.messages[-1]
    # vLLM's rule: without an opened assistant turn the reply continues the last message's role
    role = "assistant" if req.add_generation_prompt else last.role
    wants = Wants(
        chat=True,
        logprobs=req.top_k_logprobs(),
        token_ids=req.return_token_ids,
        tools=[tool_def(t) for t in offered] or None,
        prompts=[prompt],
        parallel_tool_calls=req.parallel_tool_calls,
        prompt_logprobs=req.prompt_logprobs,
        prefix=last.text() if req.echo and last.role == role else "",
        role=role,
    )
    return await _answer(batcher, model, req, wants, max_tokens, limits, grammar)


def chat_prompt_ids(model: ServedModel, req: ChatRequest) -> list[int]:
    """The prompt ids of `req`'s messages: through the template with the tools it offers (or
    the fallback, `chat.render_chat`), a plain conversation through the model's own encoder;
    a template that rejects them is a 400."""
    tools = [t.function.model_dump(exclude_none=True) for t in req.tools or []]
    offered = tools if (req.tool_choice or ("auto" if tools else "none")) != "none" else []
    try:
        if (
            offered
            or any(m.tool_calls or m.role == "tool" for m in req.messages)
            or not req.add_generation_prompt
        ):
            return render_chat(
                model.tokenizer,
                req.messages,
                [tool_def(t) for t in offered],
                model.tool_prompt,
                add_generation_prompt=req.add_generation_prompt,
                continue_final_message=req.continue_final_message,
            )
        messages = [
            {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
            for m in req.messages
        ]
        return model.encode_chat(messages)
    except Exception as exc:  # a template that rejects the roles given
        raise ApiError(400, f"cannot apply the chat template: {exc}", param="messages") from None


def chat_max_tokens(req: ChatRequest, limits: Limits) -> int:
    """The most tokens `req`'s answer may take: what it asks, else the server's default."""
    return req.max_completion_tokens or req.max_tokens or limits.max_tokens


def _constraints(
    batcher: RequestBatcher,
    model: ServedModel,
    req: ChatRequest,
    tools: list[dict[str, Any]],
    choice: Any,
) -> Any:
    """The request's tools checked and its grammar built; a server without the grammar
    library says so to the client (not a 500)."""
    from arena_core.extras import MissingExtraError

    try:
        if tools:
            check_tools(model, tools)
        return chat_grammar(batcher, model, req, tools, choice)
    except MissingExtraError as exc:
        param = "tools" if tools else "response_format"
        raise ApiError(400, f"this server cannot take {param}: {exc}", param=param) from None


async def text_completion(
    batcher: RequestBatcher, model: ServedModel, req: CompletionRequest, limits: Limits
) -> Any:
    """POST /v1/completions for `model`: prompts as text or token ids, then the answer."""
    given = req.prompts()
    if not given or len(given) > limits.max_prompts:
        raise ApiError(400, f"send 1 to {limits.max_prompts} prompts", param="prompt")
    prompts = [
        p if isinstance(p, list) else model.tokenizer.encode(p, add_special_tokens=False)
        for p in given
    ]
    if any(not p for p in prompts):
        raise ApiError(400, "a prompt is empty (no tokens)", param="prompt")
    for p in prompts:
        check_in_vocabulary(model, p, "prompt")
    if req.echo and req.stream:
        raise ApiError(
            400, "echo: an echoed prompt is answered whole; send stream: false", param="echo"
        )
    if req.max_tokens == 0 and not req.echo:
        raise ApiError(
            400,
            "max_tokens: 0 generates nothing; send echo: true to score the prompt, or ask for 1 "
            "or more tokens",
            param="max_tokens",
        )
    # max_tokens 0 (echo only): one token is decoded with the prompt's scoring and left out
    max_tokens = 16 if req.max_tokens is None else max(1, req.max_tokens)  # OpenAI's default 16
    wants = Wants(
        chat=False,
        logprobs=req.top_k_logprobs(),
        token_ids=req.return_token_ids,
        prompts=prompts,
        echo=[p if isinstance(p, str) else model.tokenizer.decode(p) for p in given]
        if req.echo
        else None,
        generate=req.max_tokens != 0,
        prompt_logprobs=req.prompt_logprobs,
    )
    return await _answer(batcher, model, req, wants, max_tokens, limits, None)


def check_in_vocabulary(model: ServedModel, ids: list[int], param: str) -> None:
    """A 400 naming `param` when a token id sent is outside the model's vocabulary."""
    module = model.module
    head = module.get_output_embeddings() if module is not None else None
    vocab = int(head.weight.shape[0]) if head is not None else len(model.tokenizer)
    if any(t < 0 or t >= vocab for t in ids):
        raise ApiError(
            400, f"a {param} token id is outside the model's vocabulary [0, {vocab})", param=param
        )


class _Waker:
    """Wakes one event loop once per burst of batcher events, for every request at once: a decode
    step of 32 rows then costs one wake-up of the loop, not 32."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._dirty: list[_Pipe] = []

    def mark(self, pipe: _Pipe) -> None:
        with self._lock:
            self._dirty.append(pipe)
            if len(self._dirty) > 1:
                return  # a wake-up is already on its way
        try:
            self.loop.call_soon_threadsafe(self._flush)
        except RuntimeError:  # the loop closed (server shutting down): nobody is listening
            pass

    def _flush(self) -> None:
        with self._lock:
            dirty, self._dirty = self._dirty, []
        for pipe in dirty:
            pipe.flush()


_WAKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Waker] = weakref.WeakKeyDictionary()


class _Pipe:
    """Carries batcher events from the worker thread into this request's event loop.

    Events are buffered and handed over once per burst (not once per token), through the loop's
    `_Waker`, so a decode step costs the server one wake-up, whatever the number of streams.
    """

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.waker = _WAKERS.get(loop) or _WAKERS.setdefault(loop, _Waker(loop))
        self.queue: asyncio.Queue = asyncio.Queue()
        self._lock = threading.Lock()
        self._buffer: list[tuple] = []

    def __call__(self, event: tuple) -> None:
        with self._lock:
            self._buffer.append(event)
            if len(self._buffer) > 1:
                return  # already marked for the next flush
        self.waker.mark(self)

    def flush(self) -> None:
        with self._lock:
            events, self._buffer = self._buffer, []
        if events:
            self.queue.put_nowait(events)


def _check_limits(
    model: ServedModel, req: Any, prompts: list[list[int]], max_tokens: int, limits: Limits
) -> None:
    """A 400 naming the parameter for a request past this server's limits or the context."""
    if req.n > limits.max_n:
        raise ApiError(400, f"n={req.n} is above this server's limit of {limits.max_n}", param="n")
    if max_tokens > limits.max_tokens:
        raise ApiError(
            400,
            f"max_tokens={max_tokens} is above this server's limit of {limits.max_tokens} "
            "(--max-tokens)",
            param="max_tokens",
        )
    longest = max(len(p) for p in prompts)
    if longest + max_tokens > model.context_length:
        raise ApiError(
            400,
            f"prompt ({longest} tokens) + max_tokens ({max_tokens}) exceeds the model's context "
            f"of {model.context_length} tokens",
            param="max_tokens",
        )


def _check_replayed_logprobs(model: ServedModel, wants: Wants) -> None:
    """A 400 unless this model's backend reports the logprobs asked for: a backend whose rows
    are replayed gives each sampled token's own logprob; vLLM's gives its alternatives too, and
    scores an echo's prompt."""
    if not getattr(model.backend, "reports_logprobs", False):
        raise ApiError(
            400,
            "logprobs need a backend that reports them (the torch engine's continuous "
            "batching, or vllm); this model's backend does not",
            param="logprobs",
        )
    if wants.logprobs and not getattr(model.backend, "reports_top_logprobs", False):
        param = "top_logprobs" if wants.chat else "logprobs"
        raise ApiError(
            400,
            f"{param}={wants.logprobs}: this backend reports each sampled token's own logprob, "
            "not its alternatives (the torch and vllm backends do); ask for 0",
            param=param,
        )
    if wants.echo and not getattr(model.backend, "scores_prompts", False):
        raise ApiError(
            400,
            "echo with logprobs scores the prompt, which needs the torch or vllm backend; "
            "leave logprobs out to get the prompt's text back",
            param="echo",
        )


def _penalties(
    batcher: RequestBatcher, model: ServedModel, req: Any, limits: Limits
) -> Penalties | None:
    """The request's logit bias, penalties and min_p (`Penalties`), or None; a 400 naming the
    first one set where it cannot be applied as asked."""
    asked = req.penalties()
    if asked is None:
        return None
    fields = ("presence_penalty", "frequency_penalty", "repetition_penalty", "min_p")
    neutral = (0.0, 0.0, 1.0, 0.0)
    named = [f for f, n in zip(fields, neutral, strict=True) if getattr(req, f) != n]
    param = named[0] if named else "logit_bias"
    if not limits.penalties:
        raise ApiError(
            400,
            f"{param}: this server samples the policy a run is training, and the learner scores "
            "each token under the policy's own distribution, so a logit bias, penalty or min_p "
            "would bias every update; leave them out",
            param=param,
        )
    if not batcher.continuous.get(model.name) and not getattr(
        model.backend, "takes_penalties", False
    ):
        raise ApiError(
            400,
            f"{param} needs the torch or vllm backend; this model is served by another backend",
            param=param,
        )
    check_in_vocabulary(model, [token for token, _ in asked.logit_bias], "logit_bias")
    return asked


async def _collect(job: Any, pipe: _Pipe, n_rows: int) -> tuple[list[str], list[str | None]]:
    """A non-streamed answer: every row's text and finish reason (the job is cancelled on the
    way out, so a client that went away frees its rows)."""
    texts = [""] * n_rows
    finish: list[str | None] = [None] * n_rows
    try:
        async for burst in _events(pipe):
            for event in burst:
                if event[0] == "delta":
                    texts[event[1]] += event[2]
                elif event[0] == "finish":
                    finish[event[1]] = event[2]
    finally:
        job.cancel()
    return texts, finish


async def _answer(
    batcher: RequestBatcher,
    model: ServedModel,
    req: Any,
    wants: Wants,
    max_tokens: int,
    limits: Limits,
    grammar: Any,
) -> Any:
    prompts = wants.prompts
    _check_limits(model, req, prompts, max_tokens, limits)
    if wants.prompt_logprobs is not None and req.stream:
        raise ApiError(
            400,
            "prompt_logprobs: a scored prompt is answered whole; send stream: false",
            param="prompt_logprobs",
        )
    if not batcher.continuous.get(model.name):
        if wants.logprobs is not None:
            _check_replayed_logprobs(model, wants)
        if wants.prompt_logprobs is not None and not getattr(
            model.backend, "scores_prompts", False
        ):
            raise ApiError(
                400,
                "prompt_logprobs scores the prompt, which needs the torch or vllm backend",
                param="prompt_logprobs",
            )
    penalties = _penalties(batcher, model, req, limits)
    rows = [p for p in prompts for _ in range(req.n)]
    gen = GenRequest(
        rows=rows,
        indexes=list(range(len(rows))),
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        stop=req.stops(),
        seed=req.seed,
        ignore_eos=req.ignore_eos,
        logprobs=wants.logprobs,
        grammar=grammar,
        penalties=penalties,
        prompt_logprobs=wants.prompt_scoring,
    )
    pipe = _Pipe()
    try:
        job = batcher.submit(model.name, gen, pipe)
    except QueueFull as exc:
        raise ApiError(
            429,
            f"server busy: {exc} (limit {limits.max_pending}); retry shortly",
            "rate_limit_error",
            code="rate_limit_exceeded",
            headers={"Retry-After": "1"},
        ) from None
    chat = wants.chat
    meta = {
        "id": new_id("chatcmpl" if chat else "cmpl"),
        "created": now(),
        "model": model.name,
        "prompt_tokens": sum(len(p) for p in prompts),
    }
    if req.stream:
        stream = _stream(job, pipe, meta, rows, wants, model, with_usage=req.include_usage())
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    texts, finish = await _collect(job, pipe, len(rows))
    body = {
        "id": meta["id"],
        "object": "chat.completion" if chat else "text_completion",
        "created": meta["created"],
        "model": meta["model"],
        "choices": [
            _choice(i, texts[i], finish[i], job, wants, model, rows) for i in range(len(rows))
        ],
        "usage": usage(meta["prompt_tokens"], job.completion_tokens if wants.generate else 0),
    }
    if wants.token_ids and chat:
        body["prompt_token_ids"] = prompts[0]
    if wants.prompt_logprobs is not None and chat:  # vLLM's place for them: the response's
        state = job.choices[0]
        body["prompt_logprobs"] = _prompt_logprobs(model, state, wants.prompt_logprobs)
    return body


def _prompt_logprobs(model: ServedModel, state: Any, k: int) -> list[dict[str, Any] | None]:
    """vLLM's `prompt_logprobs` of one choice's prompt, `k` alternatives per token."""
    scores = [(lp, rank, top[:k]) for lp, rank, top in state.prompt_scores]
    return vllm_prompt_logprobs(TokenText(model.tokenizer), state.prompt, scores)


def _choice(
    i: int,
    text: str,
    finish: str | None,
    job: Any,
    wants: Wants,
    model: ServedModel,
    rows: list[list[int]],
) -> dict[str, Any]:
    """One non-streamed choice with what the request asked for besides its text."""
    state = job.choices[i]
    words = TokenText(model.tokenizer)
    if wants.chat:
        reply = (
            read_tool_calls(text, wants.tools, parallel=wants.parallel_tool_calls)
            if wants.tools
            else None
        )
        out = chat_choice(i, text, finish_reason(finish, reply))
        out["message"] = {**message(text, reply), "role": wants.role}
        if wants.prefix:  # `echo`: the message it continues first
            out["message"]["content"] = wants.prefix + (out["message"]["content"] or "")
        if wants.logprobs is not None:
            out["logprobs"] = chat_logprobs(words, state, 0, len(state.ids))
    else:
        sampled = len(state.ids) if wants.generate else 0
        echo = wants.echo[i * len(wants.prompts) // len(rows)] if wants.echo else ""
        if not wants.generate:
            text, finish = "", "length"
        out = text_choice(i, echo + text, finish)
        if wants.logprobs is not None:
            answer = text_completion_logprobs(words, state, 0, sampled, len(echo))
            if wants.echo:
                k = wants.logprobs
                scores = [(lp, rank, top[:k]) for lp, rank, top in state.prompt_scores]
                before = echo_logprobs(words, rows[i], scores)
                answer = {key: before[key] + answer[key] for key in answer}
            out["logprobs"] = answer
        if wants.token_ids:
            out["prompt_token_ids"] = rows[i]
            out["token_ids"] = list(state.ids[:sampled])
        if wants.prompt_logprobs is not None:  # vLLM's place for them: each choice's
            out["prompt_logprobs"] = _prompt_logprobs(model, state, wants.prompt_logprobs)
        return out
    if wants.token_ids:
        out["token_ids"] = list(state.ids)
    return out


async def _events(pipe: _Pipe) -> AsyncIterator[list[tuple]]:
    """Bursts of batcher events until "done"; an "error" event becomes a 500."""
    while True:
        burst = await pipe.queue.get()
        for i, event in enumerate(burst):
            if event[0] == "done":
                if burst[:i]:
                    yield burst[:i]
                return
            if event[0] == "error":
                raise ApiError(500, event[1], "server_error")
        yield burst


async def _stream(
    job: Any,
    pipe: _Pipe,
    meta: dict[str, Any],
    rows: list[list[int]],
    wants: Wants,
    model: ServedModel,
    *,
    with_usage: bool,
) -> AsyncIterator[str]:
    """SSE: `data: <chunk>` events, each naming its choice `index`; the usage chunk (choices
    empty) only when asked for; `data: [DONE]` last. Leaving early cancels the job's rows."""
    chat = wants.chat
    obj = "chat.completion.chunk" if chat else "text_completion"
    n_rows = len(rows)

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        body = {"id": meta["id"], "object": obj, "created": meta["created"]}
        body.update({"model": meta["model"], "choices": choices})
        if with_usage:
            body["usage"] = None
        body.update(extra)
        return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"

    try:
        if chat:
            for i in range(n_rows):
                first: dict[str, Any] = {}
                if wants.token_ids and i == 0:
                    first["prompt_token_ids"] = rows[0]
                opening = {"role": wants.role, "content": wants.prefix}  # `echo`'s text first
                yield chunk([chat_delta(i, opening)], **first)
        if wants.plain:
            piece = ChunkTemplate(chunk([{}]), chat)

            def render(event: tuple) -> str:
                kind, index, text, *_ = event
                if kind == "finish":
                    return piece.finish(index, text)  # (its reason)
                return piece.delta(index, text) if text else ""  # no text: only token ranges
        else:
            render = _Extras(job, wants, model, rows, chunk).render
        try:
            async for burst in _events(pipe):
                out = [render(e) for e in _merged(burst) if e[0] in ("delta", "finish")]
                out = [text for text in out if text]
                if out:  # one write per burst
                    yield "".join(out)
        except ApiError as exc:  # headers are sent: report in-band, like vLLM
            yield f"data: {json.dumps(error_body(exc.message, exc.type, exc.code))}\n\n"
        else:
            if with_usage:
                yield chunk([], usage=usage(meta["prompt_tokens"], job.completion_tokens))
        yield "data: [DONE]\n\n"
    finally:
        job.cancel()


class _Extras:
    """Stream chunks of a request that asked for more than text: logprobs and token ids with
    each piece, tool calls held back and sent as `delta.tool_calls` when the choice ends."""

    def __init__(
        self, job: Any, wants: Wants, model: ServedModel, rows: list[list[int]], chunk: Callable
    ) -> None:
        self.job, self.wants, self.rows, self.chunk = job, wants, rows, chunk
        self.words = TokenText(model.tokenizer)
        self.tools = (
            {i: ToolStream(wants.tools, wants.parallel_tool_calls) for i in range(len(rows))}
            if wants.tools
            else {}
        )
        self.offsets = [0] * len(rows)
        self.called: set[int] = set()

    def render(self, event: tuple) -> str:
        kind, index, *rest = event
        if kind == "finish":
            return self._finish(index, rest[0])
        text, start, end = rest
        state = self.job.choices[index]
        if index in self.tools:
            text = self.tools[index].feed(text)
            if not text and self.wants.logprobs is None and not self.wants.token_ids:
                return ""  # held back: a tool call may be starting
        choice: dict[str, Any] = (
            chat_delta(index, {"content": text})
            if self.wants.chat
            else text_choice(index, text, None)
        )
        if self.wants.logprobs is not None:
            choice["logprobs"] = (
                chat_logprobs(self.words, state, start, end)
                if self.wants.chat
                else text_completion_logprobs(self.words, state, start, end, self.offsets[index])
            )
        self.offsets[index] += len(text)
        if self.wants.token_ids:
            choice["token_ids"] = state.ids[start:end]
            if not self.wants.chat and start == 0:
                choice["prompt_token_ids"] = self.rows[index]
        return self.chunk([choice])

    def _finish(self, index: int, reason: str) -> str:
        out = ""
        if index in self.tools:
            content, calls = self.tools[index].end()
            delta: dict[str, Any] = {}
            if content:
                delta["content"] = content
            if calls:
                delta["tool_calls"] = tool_call_deltas(calls)
                if reason == "stop":
                    reason = "tool_calls"
            if delta:
                out = self.chunk([chat_delta(index, delta)])
        done = chat_delta(index, {}, reason) if self.wants.chat else text_choice(index, "", reason)
        return out + self.chunk([done])


def _merged(burst: list[tuple]) -> list[tuple]:
    """The burst with each run of one choice's consecutive deltas joined into one: a client that
    reads slower than the model decodes gets fewer, larger chunks (less work on both sides)."""
    out: list[tuple] = []
    for event in burst:
        last = out[-1] if out else None
        if event[0] == "delta" and last is not None and last[0] == "delta" and last[1] == event[1]:
            out[-1] = ("delta", event[1], last[2] + event[2], last[3], event[4])
        else:
            out.append(event)
    return out
