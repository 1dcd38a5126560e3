"""The OpenAI-compatible HTTP app: `/v1/models`, `/v1/chat/completions`, `/v1/completions`,
`/health`, with SSE streaming, bearer-token auth and request limits.

Every error leaves as the OpenAI error JSON (`{"error": {message, type, param, code}}`) with the
matching status (400 bad request, 401 key, 404 model or route, 429 queue full with Retry-After,
500 generation failed); a traceback goes to the server log, never to the client.

Models of another algorithm kind (a classic-RL policy) add their own routes: a plugin calls
`register_kind_routes("ppo", add_routes)` and `add_routes(app, models)` runs for the served
models of that kind when the app is built.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from arena_core import __version__
from arena_core.serve.chunks import ChunkTemplate
from arena_core.serve.engine import Engine, QueueFull
from arena_core.serve.engine import Request as GenRequest
from arena_core.serve.models import ServedModel
from arena_core.serve.protocol import (
    ChatRequest,
    CompletionRequest,
    Limits,
    chat_choice,
    chat_delta,
    error_body,
    new_id,
    now,
    text_choice,
    usage,
)

KindRoutes = Callable[[FastAPI, list[ServedModel]], None]
_KIND_ROUTES: dict[str, KindRoutes] = {}


def register_kind_routes(kind: str, add_routes: KindRoutes) -> None:
    """Let an algorithm kind other than "llm" serve its own routes (e.g. `/v1/act`)."""
    _KIND_ROUTES[kind] = add_routes


class ApiError(Exception):
    """An error the client caused or must wait out; becomes the OpenAI error JSON."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code = status, message, type_, code
        self.param, self.headers = param, headers

    def response(self) -> JSONResponse:
        body = error_body(self.message, self.type, self.code, self.param)
        return JSONResponse(body, status_code=self.status, headers=self.headers)


class _Guard:
    """ASGI middleware: the API key (constant-time compare) on every route but /health, and the
    request size, checked from Content-Length before the body is read and again while reading."""

    def __init__(self, app: Any, api_key: str | None, max_bytes: int) -> None:
        self.app, self.key, self.max_bytes = app, api_key, max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if self.key and scope.get("path") != "/health":
            auth = headers.get(b"authorization", b"").decode("latin-1")
            token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(token.encode("utf-8"), self.key.encode("utf-8")):
                err = ApiError(
                    401,
                    "invalid API key: send `Authorization: Bearer <key>` with the key the "
                    "server was started with (--api-key or ARENA_API_KEY)",
                    code="invalid_api_key",
                )
                return await err.response()(scope, receive, send)
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await self._too_large()(scope, receive, send)
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise ApiError(400, self._too_large_text(), code="request_too_large")
            return message

        return await self.app(scope, counted, send)

    def _too_large_text(self) -> str:
        return (
            f"request body larger than the server's limit of {self.max_bytes} bytes "
            "(--max-request-bytes); send fewer or shorter prompts"
        )

    def _too_large(self) -> JSONResponse:
        return ApiError(400, self._too_large_text(), code="request_too_large").response()


def install_error_handlers(app: FastAPI, who: str, log_name: str) -> None:
    """Every error leaves `app` in the OpenAI error shape, never as a traceback: the deploy
    server and the dashboard share these so neither can leak one the other would not."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else None
        return ApiError(exc.status_code, str(exc.detail), code=code).response()

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        print(f"{who}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ApiError(
            500, f"internal server error (details in {log_name})", "server_error"
        ).response()


def create_app(
    engine: Engine, *, api_key: str | None = None, limits: Limits | None = None
) -> FastAPI:
    """The app over `engine`'s models (see the module docstring)."""
    limits = limits or Limits()
    models = list(engine.models.values())
    app = FastAPI(title="Arena", version=__version__, docs_url=None, redoc_url=None)
    app.state.engine = engine
    app.add_middleware(_Guard, api_key=api_key, max_bytes=limits.max_request_bytes)

    install_error_handlers(app, "arena serve", "the server log")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        # no key needed, so nothing about what is served: only how busy the engine is
        return {"status": "ok", **engine.stats()}

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        data = [
            {
                "id": m.name,
                "object": "model",
                "created": now(),
                "owned_by": "arena",
                "root": m.source.get("checkpoint") or m.source.get("base") or m.name,
                "parent": m.parent,
                "kind": m.kind,
            }
            for m in models
        ]
        return {"object": "list", "data": data}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        req = await parse_body(request, ChatRequest)
        model = _pick(engine, req.model, request)
        messages = [{"role": m.role, "content": m.text()} for m in req.messages]
        try:
            prompt = model.backend.encode_chat(messages)
        except Exception as exc:  # a template that rejects the roles given
            raise ApiError(
                400, f"cannot apply the chat template: {exc}", param="messages"
            ) from None
        max_tokens = req.max_completion_tokens or req.max_tokens or limits.max_tokens
        return await _answer(engine, model, req, [prompt], max_tokens, limits, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        req = await parse_body(request, CompletionRequest)
        model = _pick(engine, req.model, request)
        texts = req.prompts()
        if not texts or len(texts) > limits.max_prompts:
            raise ApiError(400, f"send 1 to {limits.max_prompts} prompts", param="prompt")
        prompts = [model.tokenizer.encode(t, add_special_tokens=False) for t in texts]
        if any(not p for p in prompts):
            raise ApiError(400, "a prompt is empty (no tokens)", param="prompt")
        max_tokens = req.max_tokens or 16  # the OpenAI default for completions
        return await _answer(engine, model, req, prompts, max_tokens, limits, chat=False)

    openai_paths = _paths(app)
    for kind in sorted({m.kind for m in models} - {"llm"}):
        if kind in _KIND_ROUTES:
            _KIND_ROUTES[kind](app, [m for m in models if m.kind == kind])
    app.state.kind_paths = sorted(_paths(app) - openai_paths)  # e.g. ["/v1/act"]
    return app


def _paths(app: FastAPI) -> set[str]:
    return {str(getattr(route, "path", "")) for route in app.routes}


async def parse_body(request: Request, schema: type[BaseModel]) -> Any:
    """The JSON body as `schema`, or a 400 naming the first bad field (kind routes use it)."""
    body = await request.body()
    try:
        data = json.loads(body or b"null")
    except ValueError as exc:
        raise ApiError(400, f"the request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ApiError(400, f"{where}: {first['msg']}", param=where) from None


def _pick(engine: Engine, name: str | None, request: Request) -> ServedModel:
    llms = [m for m in engine.models.values() if m.kind == "llm"]
    if name is None and len(llms) == 1:
        return llms[0]
    model = engine.models.get(name or "")
    others = [m for m in engine.models.values() if m.kind != "llm"]
    if (model is not None and model.kind != "llm") or (name is None and not llms and others):
        raise _not_a_language_model(model or others[0], request)
    if model is None:
        served = ", ".join(m.name for m in engine.models.values())
        raise ApiError(
            404,
            f"model '{name}' is not served here; served models: {served}",
            code="model_not_found",
            param="model",
        )
    return model


def _not_a_language_model(model: ServedModel, request: Request) -> ApiError:
    """A chat or completion request for a policy (PPO...): name the route that answers it."""
    paths = list(getattr(request.app.state, "kind_paths", []))
    where = " or ".join(f"POST {p}" for p in paths) or "its own routes"
    example = (
        f' with {{"model": "{model.name}", "observation": [...]}}' if "/v1/act" in paths else ""
    )
    return ApiError(
        400,
        f"model '{model.name}' is a '{model.kind}' policy, not a language model: it does not "
        f"answer {request.url.path}; send it to {where}{example}",
        code="wrong_endpoint",
        param="model",
    )


class _Waker:
    """Wakes one event loop once per burst of engine events, for every request at once: a decode
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
    """Carries engine events from the worker thread into this request's event loop.

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
    engine: Engine,
    model: ServedModel,
    req: Any,
    prompts: list[list[int]],
    max_tokens: int,
    limits: Limits,
    *,
    chat: bool,
) -> Any:
    _check_limits(model, req, prompts, max_tokens, limits)
    rows = [p for p in prompts for _ in range(req.n)]
    gen = GenRequest(
        rows=rows,
        indexes=list(range(len(rows))),
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        stop=req.stops(),
        seed=req.seed,
        ignore_eos=req.ignore_eos,
    )
    pipe = _Pipe()
    try:
        job = engine.submit(model.name, gen, pipe)
    except QueueFull as exc:
        raise ApiError(
            429,
            f"server busy: {exc} (limit {limits.max_pending}); retry shortly",
            "rate_limit_error",
            code="rate_limit_exceeded",
            headers={"Retry-After": "1"},
        ) from None
    meta = {
        "id": new_id("chatcmpl" if chat else "cmpl"),
        "created": now(),
        "model": model.name,
        "prompt_tokens": sum(len(p) for p in prompts),
    }
    if req.stream:
        stream = _stream(job, pipe, meta, len(rows), chat=chat, with_usage=req.include_usage())
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    texts, finish = await _collect(job, pipe, len(rows))
    choice = chat_choice if chat else text_choice
    return {
        "id": meta["id"],
        "object": "chat.completion" if chat else "text_completion",
        "created": meta["created"],
        "model": meta["model"],
        "choices": [choice(i, texts[i], finish[i]) for i in range(len(rows))],
        "usage": usage(meta["prompt_tokens"], job.completion_tokens),
    }


async def _events(pipe: _Pipe) -> AsyncIterator[list[tuple]]:
    """Bursts of engine events until "done"; an "error" event becomes a 500."""
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
    job: Any, pipe: _Pipe, meta: dict[str, Any], n_rows: int, *, chat: bool, with_usage: bool
) -> AsyncIterator[str]:
    """SSE: `data: <chunk>` events, each naming its choice `index`; the usage chunk (choices
    empty) only when asked for; `data: [DONE]` last. Leaving early cancels the job's rows."""
    obj = "chat.completion.chunk" if chat else "text_completion"

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
                yield chunk([chat_delta(i, {"role": "assistant", "content": ""})])
        piece = ChunkTemplate(chunk([{}]), chat)
        try:
            async for burst in _events(pipe):
                out = []
                for kind, index, *rest in _merged(burst):
                    if kind == "delta":
                        out.append(piece.delta(index, rest[0]))
                    elif kind == "finish":
                        out.append(piece.finish(index, rest[0]))
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


def _merged(burst: list[tuple]) -> list[tuple]:
    """The burst with each run of one choice's consecutive deltas joined into one: a client that
    reads slower than the engine decodes gets fewer, larger chunks (less work on both sides)."""
    out: list[tuple] = []
    for event in burst:
        last = out[-1] if out else None
        if event[0] == "delta" and last is not None and last[0] == "delta" and last[1] == event[1]:
            out[-1] = ("delta", event[1], last[2] + event[2])
        else:
            out.append(event)
    return out
