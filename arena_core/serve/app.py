"""The OpenAI-compatible HTTP app: `/v1/models`, `/v1/chat/completions`, `/v1/completions`,
`/v1/responses` (and its stored responses), `/v1/conversations`, the token routes, `/health`,
with SSE streaming,
bearer-token auth and request limits.

Every error leaves as the OpenAI error JSON (`{"error": {message, type, param, code}}`) with the
matching status (400 bad request, 401 key, 404 model or route, 429 queue full with Retry-After,
500 generation failed); a traceback goes to the server log, never to the client.

Models of another algorithm kind (a classic-RL policy) add their own routes: the serving support
a plugin registers for that kind (`register_serving`) has `add_routes(app, models)`, run for the
served models of that kind when the app is built.
"""

from __future__ import annotations

import hmac
import sys
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from arena_core import __version__
from arena_core.serve.answers import chat_completion, check_in_vocabulary, text_completion
from arena_core.serve.batching import RequestBatcher
from arena_core.serve.conversations import add_conversation_routes
from arena_core.serve.models import ServedModel, kind_serving
from arena_core.serve.protocol import (
    ApiError,
    ChatRequest,
    ChatTokensRequest,
    CompletionRequest,
    DetokenizeRequest,
    Limits,
    TokenizeRequest,
    now,
    parse_body,
)
from arena_core.serve.response_store import (
    Conversation,
    LastUsed,
    ResponseStore,
    StoredResponse,
    items_page,
)
from arena_core.serve.responses_api import ResponsesRequest, respond
from arena_core.serve.tokens import detokenize, tokenize, tokenizer_info


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
    batcher: RequestBatcher, *, api_key: str | None = None, limits: Limits | None = None
) -> FastAPI:
    """The app over `batcher`'s models (see the module docstring)."""
    limits = limits or Limits()
    models = list(batcher.models.values())
    app = FastAPI(title="Arena", version=__version__, docs_url=None, redoc_url=None)
    app.state.batcher = batcher
    app.add_middleware(_Guard, api_key=api_key, max_bytes=limits.max_request_bytes)

    install_error_handlers(app, "arena serve", "the server log")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        # no key needed, so nothing about what is served: only how busy the batcher is
        return {"status": "ok", **batcher.stats()}

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
        return await chat_completion(batcher, _pick(batcher, req.model, request), req, limits)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        req = await parse_body(request, CompletionRequest)
        return await text_completion(batcher, _pick(batcher, req.model, request), req, limits)

    @app.post("/v1/chat/completions/tokens")
    async def chat_tokens(request: Request) -> Any:
        req = await parse_body(request, ChatTokensRequest)
        model = _pick(batcher, req.model, request)
        check_in_vocabulary(model, req.tokens, "tokens")
        return await chat_completion(batcher, model, req, limits, prompt_ids=req.tokens)

    @app.post("/tokenize")
    async def tokenize_route(request: Request) -> Any:
        req = await parse_body(request, TokenizeRequest)
        return tokenize(_pick(batcher, req.model, request), req)

    @app.get("/tokenizer_info")
    async def tokenizer_info_route(request: Request, model: str | None = None) -> Any:
        return tokenizer_info(_pick(batcher, model, request))

    @app.post("/detokenize")
    async def detokenize_route(request: Request) -> Any:
        req = await parse_body(request, DetokenizeRequest)
        return detokenize(_pick(batcher, req.model, request), req)

    stored = ResponseStore(limits.stored_responses)
    conversations: LastUsed[Conversation] = LastUsed(limits.conversations)

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:
        req = await parse_body(request, ResponsesRequest)
        model = _pick(batcher, req.model, request)
        return await respond(batcher, model, req, limits, stored, conversations)

    @app.get("/v1/responses/{response_id}")
    async def get_response(response_id: str) -> Any:
        return _stored(stored, response_id).response

    @app.get("/v1/responses/{response_id}/input_items")
    async def list_input_items(response_id: str, request: Request) -> Any:
        found = _stored(stored, response_id)
        return items_page(found.items, f"the input items of {response_id}", request.query_params)

    @app.delete("/v1/responses/{response_id}")
    async def delete_response(response_id: str) -> Any:
        _stored(stored, response_id)
        stored.delete(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    add_conversation_routes(app, conversations)

    openai_paths = _paths(app)
    for kind in sorted({m.kind for m in models} - {"llm"}):
        support = kind_serving(kind)
        if support is not None:
            support.add_routes(app, [m for m in models if m.kind == kind])
    app.state.kind_paths = sorted(_paths(app) - openai_paths)  # e.g. ["/v1/act"]
    return app


def _stored(store: ResponseStore, response_id: str) -> StoredResponse:
    found = store.get(response_id)
    if found is None:
        raise ApiError(
            404,
            f"no response '{response_id}' on this server (it keeps the last {store.capacity} "
            "stored responses in memory; a restart forgets them)",
            param="response_id",
            code="not_found",
        )
    return found


def _paths(app: FastAPI) -> set[str]:
    return {str(getattr(route, "path", "")) for route in app.routes}


def _pick(batcher: RequestBatcher, name: str | None, request: Request) -> ServedModel:
    llms = [m for m in batcher.models.values() if m.kind == "llm"]
    if name is None and len(llms) == 1:
        return llms[0]
    model = batcher.models.get(name or "")
    others = [m for m in batcher.models.values() if m.kind != "llm"]
    if (model is not None and model.kind != "llm") or (name is None and not llms and others):
        raise _not_a_language_model(model or others[0], request)
    if model is None:
        served = ", ".join(m.name for m in batcher.models.values())
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
