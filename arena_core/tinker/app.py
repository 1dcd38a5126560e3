"""The Tinker HTTP API (SDK 0.38) over FastAPI: auth, sessions, futures, and one worker thread.

How the SDK talks (read from its source): every call is `POST /api/v1/<name>` with JSON, except
`forward_backward` (protobuf in) and a few `GET`s; the key travels as `X-API-Key` and must start
with `tml-`. Work is asynchronous: a training or sampling call returns a future
(`{"request_id": ...}`; a sampling future also carries one `sample_sequence_ids` entry per
sample) and the SDK polls `retrieve_future` until it gets the result, which for forward/backward
and sampling must be protobuf (`wire.py`). Here that poll is held open for up to `POLL_S`
seconds, then answered 408 `{"type": "try_again", "queue_state": "active"}` (the SDK polls again
at once, without the warning a 200 try_again logs). A failed request resolves to `{"error": message, "category": "user"|"server"}`, which the SDK raises as
`RequestFailedError`; bad input that can be seen at submission (an unknown model or loss,
mismatched tensor lengths) is a 400 right away, which the SDK raises as `BadRequestError`.

Every request that touches torch runs on one worker thread in arrival order (`service.py`; the
SDK waits for each submission, so that is its order; `batching.py` merges twin samples). HTTP
errors have FastAPI's shape, `{"detail": message}`, which the SDK puts in its exception.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from tinker import types

from arena_core.errors import ArenaError
from arena_core.tinker.batching import SampleBatcher
from arena_core.tinker.capacity import CapacityError
from arena_core.tinker.losses import check_request
from arena_core.tinker.runs import checkpoint_record, run_record
from arena_core.tinker.service import (
    TinkerError,
    TinkerService,
    available_models,
    check_token_ids,
)
from arena_core.tinker.store import CheckpointError
from arena_core.tinker.wire import PROTO, decode_forward_backward

POLL_S = 35.0  # how long retrieve_future waits for a result (the SDK gives up on a poll at 45 s)
FUTURES_KEPT = 4096  # finished futures kept for a retried retrieve
UNAUTHORIZED = "`arena tinker serve` printed: ServiceClient(api_key=...) or TINKER_API_KEY"


class HTTPError(Exception):
    """An error answered at once with a status and `{"detail": message}`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def run_id(session_id: str, model_seq_id: int) -> str:
    """A training client's id, in the SDK's own format (create_training_client_from_state
    builds it itself)."""
    return f"{session_id}:train:{model_seq_id}"


def _parse(model: type, body: Any, what: str) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise HTTPError(400, f"{what}: the request does not fit the Tinker API: {exc}") from None


def _dump(obj: Any) -> dict[str, Any]:
    return obj.model_dump(mode="json", exclude_none=True)


class TinkerServer:
    """The routes' state: sessions, futures, the service and its worker thread."""

    def __init__(self, service: TinkerService, api_key: str) -> None:
        self.service = service
        self.api_key = api_key
        self.worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="arena-tinker")
        self.samples = SampleBatcher(service, self.worker)
        self.sessions: dict[str, dict[str, Any]] = {}
        self.futures: OrderedDict[str, concurrent.futures.Future] = OrderedDict()
        self._ids = itertools.count(1)
        self.started = time.time()

    def submit(self, fn: Callable[[], Any], **extra: Any) -> dict[str, Any]:
        """Queue `fn` on the worker; the SDK's future (`UntypedAPIFuture`) for it."""
        return self.register(self.worker.submit(fn), **extra)

    def register(self, future: concurrent.futures.Future, **extra: Any) -> dict[str, Any]:
        """A request id for `future`, which `retrieve_future` then answers."""
        request_id = f"req-{next(self._ids)}"
        self.futures[request_id] = future
        while len(self.futures) > FUTURES_KEPT:
            oldest, fut = next(iter(self.futures.items()))
            if not fut.done():
                break
            del self.futures[oldest]
        return {"request_id": request_id, **extra}

    async def run(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the worker (after what is queued) and wait for it: for calls the SDK
        makes synchronously (creating a sampling session)."""
        try:
            return await asyncio.wrap_future(self.worker.submit(fn))
        except (TinkerError, CheckpointError) as exc:
            raise HTTPError(400, str(exc)) from None

    async def retrieve(self, request_id: str) -> Response:
        fut = self.futures.get(request_id)
        if fut is None:
            raise HTTPError(
                404, f"no future '{request_id}' on this server (was it restarted since?)"
            )
        try:
            if not fut.done():
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), POLL_S)
        except TimeoutError:
            # 408 + queue_state is the SDK's quiet "poll again" (a 200 try_again logs a warning)
            return JSONResponse(
                {"type": "try_again", "request_id": request_id, "queue_state": "active"},
                status_code=408,
            )
        except Exception:
            pass  # the outcome is read below
        if fut.cancelled():
            return JSONResponse({"error": f"{request_id} was cancelled", "category": "user"})
        exc = fut.exception()
        if exc is not None:
            user = isinstance(exc, (ArenaError, ValueError))
            message = str(exc) if user else f"{type(exc).__name__}: {exc}"
            return JSONResponse({"error": message, "category": "user" if user else "server"})
        result = fut.result()
        if isinstance(result, bytes):
            return Response(result, media_type=PROTO)
        return JSONResponse(result)


def create_app(server: TinkerServer) -> FastAPI:
    """The FastAPI app of `arena tinker serve`."""
    app = FastAPI(title="arena tinker serve", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def auth_and_errors(request: Request, call_next: Any) -> Response:
        if request.url.path.startswith("/api/v1/") and request.url.path != "/api/v1/healthz":
            key = request.headers.get("x-api-key")
            if key != server.api_key:
                why = "no X-API-Key header" if key is None else "a wrong X-API-Key"
                detail = f"unauthorized: the request carries {why}. Pass the key {UNAUTHORIZED}"
                return JSONResponse({"detail": detail}, status_code=401)
        return await call_next(request)

    @app.exception_handler(HTTPError)
    async def http_error(request: Request, exc: HTTPError) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    _service_routes(app, server)
    _session_routes(app, server)
    _training_routes(app, server)
    _weights_routes(app, server)
    _sampling_routes(app, server)
    _future_routes(app, server)
    _rest_routes(app, server)

    @app.api_route("/api/v1/{rest:path}", methods=["GET", "POST", "PUT", "DELETE"])
    async def not_served(rest: str) -> Response:
        raise HTTPError(
            404,
            f"/api/v1/{rest} is not implemented by arena tinker serve (see docs/tinker.md for "
            "what is)",
        )

    return app


async def _body(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        raise HTTPError(400, f"{request.url.path}: the body is not JSON") from None


def _known_client(service: TinkerService, model_id: str) -> None:
    try:
        service.client(model_id)
    except TinkerError as exc:
        raise HTTPError(400, str(exc)) from None


def _service_routes(app: FastAPI, server: TinkerServer) -> None:
    """The SDK's own plumbing: health, client config, telemetry, capabilities."""
    service = server.service

    @app.get("/api/v1/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.post("/api/v1/client/config")
    async def client_config() -> dict:
        # plain httpx (no pyqwest), API keys only, results uncompressed: the simplest transport
        return _dump(
            types.ClientConfigResponse(pjwt_auth_enabled=False, use_pyqwest_transport=False)
        )

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config() -> dict:
        return _dump(types.ClientDynamicConfigResponse())

    @app.post("/api/v1/telemetry")
    async def telemetry() -> dict:
        return {"status": "accepted"}  # the SDK's events stay on this machine: not kept

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities() -> dict:
        names = list(dict.fromkeys([*service.hosts, *available_models()]))
        models = [
            types.SupportedModel(
                model_name=n,
                trainable=True,
                sampleable=True,
                max_context_length=service.hosts[n].max_context if n in service.hosts else None,
            )
            for n in names
        ]
        return _dump(types.GetServerCapabilitiesResponse(supported_models=models))


def _session_routes(app: FastAPI, server: TinkerServer) -> None:
    """Sessions: created, kept alive by heartbeats, finished by close()."""
    service = server.service

    @app.post("/api/v1/create_session")
    async def create_session(request: Request) -> dict:
        req = _parse(types.CreateSessionRequest, await _body(request), "create_session")
        session_id = f"session-{uuid.uuid4().hex[:12]}"
        server.sessions[session_id] = {
            "created": time.time(),
            "heartbeat": time.time(),
            "finished": None,
            "user_metadata": req.user_metadata,
        }
        return _dump(types.CreateSessionResponse(session_id=session_id))

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request) -> Response:
        session_id = str((await _body(request)).get("session_id"))
        session = server.sessions.get(session_id)
        if session is None:
            raise HTTPError(404, f"no session '{session_id}' on this server")
        if session["finished"]:
            raise HTTPError(410, f"session {session_id} has finished")
        session["heartbeat"] = time.time()
        return JSONResponse(_dump(types.SessionHeartbeatResponse()))

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish(session_id: str, request: Request) -> Response:
        payload = await _body(request)
        session = server.sessions.get(session_id)
        if session is not None and not session["finished"]:
            session["finished"] = payload.get("reason", {}).get("type", "success")
            # waited for, so the clients' memory is free once close() returns
            await server.run(lambda: service.finish_session(session_id))
        return Response(status_code=200)


def _training_routes(app: FastAPI, server: TinkerServer) -> None:
    """Training clients: create, get_info, forward(_backward), optim_step."""
    service = server.service

    @app.post("/api/v1/create_model")
    async def create_model(request: Request) -> dict:
        req = _parse(types.CreateModelRequest, await _body(request), "create_model")
        if req.optimizer_config.type != "adamw":
            raise HTTPError(400, f"optimizer '{req.optimizer_config.type}': only adamw is served")
        model_id = run_id(req.session_id, req.model_seq_id)
        lora = (req.lora_config or types.LoraConfig(rank=32)).model_dump()
        try:  # a client beyond what fits: a 400 at once
            service.check_capacity(req.base_model, lora)
        except (CapacityError, TinkerError) as exc:
            raise HTTPError(400, str(exc)) from None

        def create() -> dict:
            service.create_client(model_id, req.session_id, req.base_model, lora, req.user_metadata)
            return _dump(types.CreateModelResponse(model_id=model_id))

        return server.submit(create, model_id=model_id)

    @app.post("/api/v1/get_info")
    async def get_info(request: Request) -> dict:
        req = _parse(types.GetInfoRequest, await _body(request), "get_info")
        client = service.clients.get(req.model_id)
        if client is None:
            raise HTTPError(404, f"no training client '{req.model_id}' on this server")
        arch = type(client.host.model.get_base_model()).__name__
        return _dump(
            types.GetInfoResponse(
                type="get_info",
                model_id=req.model_id,
                model_data=types.ModelData(
                    arch=arch, model_name=client.host.name, tokenizer_id=client.host.tokenizer_dir
                ),
                is_lora=True,
                lora_rank=int(client.lora["rank"]),
                model_name=client.host.name,
            )
        )

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> dict:
        raw = await request.body()
        if request.headers.get("content-encoding") == "zstd":
            import zstandard

            raw = zstandard.ZstdDecompressor().decompress(raw, max_output_size=1 << 31)
        try:
            req = decode_forward_backward(raw)
            spec = check_request(req.loss_fn, req.loss_fn_config, req.data)
            host = service.client(req.model_id).host
            for i, datum in enumerate(req.data):
                check_token_ids(datum.tokens, host, f"data[{i}].model_input")
                targets = datum.inputs.get("target_tokens")
                if targets is not None:
                    check_token_ids(targets, host, f"data[{i}].loss_fn_inputs['target_tokens']")
        except ArenaError as exc:
            raise HTTPError(400, str(exc)) from None
        return server.submit(
            lambda: service.forward_backward(req.model_id, req, spec), model_id=req.model_id
        )

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request) -> dict:
        req = _parse(types.OptimStepRequest, await _body(request), "optim_step")
        if not isinstance(req.optim_params, types.AdamParams):
            raise HTTPError(400, "optim_step: this server runs AdamW only (AdamParams)")
        problem = adam_problem(req.optim_params)
        if problem is not None:
            raise HTTPError(400, f"optim_step: {problem}")
        _known_client(service, req.model_id)

        def step() -> dict:
            return {"metrics": service.optim_step(req.model_id, req.optim_params)}

        return server.submit(step, model_id=req.model_id)


def _weights_routes(app: FastAPI, server: TinkerServer) -> None:
    """Save_state, save_weights_for_sampler, load_state and creating from a state."""
    service = server.service

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request) -> dict:
        req = _parse(types.SaveWeightsRequest, await _body(request), "save_weights")
        _known_client(service, req.model_id)
        name = req.path or f"step-{service.clients[req.model_id].steps}"

        def save() -> dict:
            path = service.save_state(req.model_id, name, overwrite=req.overwrite)
            return {"path": path, "type": "save_weights"}

        return server.submit(save, model_id=req.model_id)

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_for_sampler(request: Request) -> dict:
        req = _parse(types.SaveWeightsForSamplerRequest, await _body(request), "save_for_sampler")
        _known_client(service, req.model_id)

        def save() -> dict:
            path, sampler_id = service.save_for_sampler(req.model_id, req.path)
            out = {"type": "save_weights_for_sampler"}
            return {**out, "path": path} if path else {**out, "sampling_session_id": sampler_id}

        return server.submit(save, model_id=req.model_id)

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request) -> dict:
        req = _parse(types.LoadWeightsRequest, await _body(request), "load_weights")
        if req.model_id is not None:
            _known_client(service, req.model_id)
            model_id = req.model_id

            def load() -> dict:
                service.load_into(model_id, req.path, optimizer=req.optimizer)
                return {"path": req.path, "model_id": model_id, "type": "load_weights"}

        else:
            if req.session_id is None or req.model_seq_id is None:
                raise HTTPError(400, "load_weights needs model_id, or session_id and model_seq_id")
            model_id = run_id(req.session_id, req.model_seq_id)

            def load() -> dict:
                service.create_from_state(
                    model_id,
                    req.session_id,
                    req.path,
                    optimizer=req.optimizer,
                    base_model=req.base_model,
                    user_metadata=req.user_metadata,
                )
                return {"path": req.path, "model_id": model_id, "type": "load_weights"}

        return server.submit(load, model_id=model_id)


def _sampling_routes(app: FastAPI, server: TinkerServer) -> None:
    """Sampling sessions and samples (results are protobuf)."""
    service = server.service

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request) -> dict:
        req = _parse(types.CreateSamplingSessionRequest, await _body(request), "sampling session")
        sampler_id = f"{req.session_id}:sampler:{req.sampling_session_seq_id}"
        await server.run(
            lambda: service.create_sampler(
                sampler_id, base_model=req.base_model, model_path=req.model_path
            )
        )
        return _dump(types.CreateSamplingSessionResponse(sampling_session_id=sampler_id))

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str) -> dict:
        sampler = service.samplers.get(sampler_id)
        if sampler is None:
            raise HTTPError(404, f"no sampler '{sampler_id}' on this server")
        return _dump(
            types.GetSamplerResponse(
                sampler_id=sampler_id, base_model=sampler.host.name, model_path=sampler.model_path
            )
        )

    @app.post("/api/v1/asample")
    async def asample(request: Request) -> dict:
        req = _parse(types.SampleRequest, await _body(request), "asample")
        if not req.sampling_session_id:
            raise HTTPError(400, "asample needs a sampling_session_id (use a SamplingClient)")
        _check_prompt_scoring(req)
        try:
            service.sampler(req.sampling_session_id)
            service.prompt_questions(req)  # target ids read and checked now: a 400, not a future
        except TinkerError as exc:
            raise HTTPError(400, str(exc)) from None

        future = server.register(server.samples.submit(req))  # merged with its twins
        ids = [f"{future['request_id']}:{i}" for i in range(req.num_samples)]
        return {**future, "sample_sequence_ids": ids}


MAX_TOPK_LOGPROBS = 20  # alternatives per prompt position or sampled token (vLLM's bound too)


def _check_prompt_scoring(req: Any) -> None:
    """A 400 for what a sample request asks about its prompt or its tokens out of range."""
    for name, k, per in (
        ("topk_prompt_logprobs", req.topk_prompt_logprobs, "prompt position"),
        ("prompt_alt_tokens_k", req.prompt_alt_tokens_k, "prompt position"),
        ("topk_sample_logprobs", req.topk_sample_logprobs, "sampled token"),
    ):
        if not 0 <= k <= MAX_TOPK_LOGPROBS:
            raise HTTPError(400, f"{name}={k}: give 0 to {MAX_TOPK_LOGPROBS} tokens per {per}")
    last_n = req.prompt_logprobs_last_n
    if last_n is not None:
        scored = req.prompt.length - 1  # position 0 has nothing before it
        if not req.prompt_logprobs:
            raise HTTPError(400, "prompt_logprobs_last_n needs include_prompt_logprobs")
        if not 1 <= last_n <= scored:
            raise HTTPError(
                400,
                f"prompt_logprobs_last_n={last_n}: give 1 to {scored} (the prompt's "
                f"{req.prompt.length} tokens less the first)",
            )


def _future_routes(app: FastAPI, server: TinkerServer) -> None:
    """Retrieving (long poll) and cancelling futures."""

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request) -> Response:
        req = _parse(types.FutureRetrieveRequest, await _body(request), "retrieve_future")
        return await server.retrieve(req.request_id)

    @app.post("/api/v1/cancel_future")
    async def cancel_future(request: Request) -> Response:
        fut = server.futures.get(str((await _body(request)).get("request_id")))
        if fut is not None:
            fut.cancel()  # only a request still queued can be cancelled
        return Response(status_code=200)


def _rest_routes(app: FastAPI, server: TinkerServer) -> None:
    """RestClient's listing of training runs and checkpoints (`runs.py`)."""
    service = server.service

    def training_run(run_id: str) -> types.TrainingRun:
        run = run_record(service, run_id)
        if run is None:
            raise HTTPError(404, f"no training run '{run_id}' on this server")
        return run

    @app.get("/api/v1/training_runs")
    async def list_runs(limit: int = 20, offset: int = 0) -> dict:
        ids = sorted(set(service.store.runs()) | set(service.clients))
        page = [training_run(i) for i in ids[offset : offset + limit]]
        cursor = types.Cursor(offset=offset, limit=limit, total_count=len(ids))
        return _dump(types.TrainingRunsResponse(training_runs=page, cursor=cursor))

    @app.get("/api/v1/training_runs/{run_id}")
    async def get_run(run_id: str) -> dict:
        return _dump(training_run(run_id))

    @app.get("/api/v1/training_runs/{run_id}/checkpoints")
    async def run_checkpoints(run_id: str) -> dict:
        found = [checkpoint_record(m) for m in service.store.checkpoints(run_id)]
        return _dump(types.CheckpointsListResponse(checkpoints=found))

    @app.get("/api/v1/checkpoints")
    async def all_checkpoints(limit: int = 100, offset: int = 0) -> dict:
        found = [
            checkpoint_record(m) for r in service.store.runs() for m in service.store.checkpoints(r)
        ]
        cursor = types.Cursor(offset=offset, limit=limit, total_count=len(found))
        page = found[offset : offset + limit]
        return _dump(types.CheckpointsListResponse(checkpoints=page, cursor=cursor))


def adam_problem(adam: Any) -> str | None:
    """Why AdamW cannot take these AdamParams (torch checks them only when an optimizer is
    built, and the client's lives across steps), None when it can. Every comparison is written
    so that nan fails it too."""
    checks = [
        (
            "learning_rate",
            adam.learning_rate,
            adam.learning_rate >= 0,
            ">= 0 (a negative step ascends the loss)",
        ),
        ("beta1", adam.beta1, 0 <= adam.beta1 < 1, "in [0, 1)"),
        ("beta2", adam.beta2, 0 <= adam.beta2 < 1, "in [0, 1)"),
        ("eps", adam.eps, adam.eps > 0, "> 0 (it keeps the update finite where a moment is 0)"),
        ("weight_decay", adam.weight_decay, adam.weight_decay >= 0, ">= 0"),
        ("grad_clip_norm", adam.grad_clip_norm, adam.grad_clip_norm >= 0, ">= 0 (0: no clip)"),
    ]
    for name, value, ok, rule in checks:
        if not ok:
            return f"{name} must be {rule}, got {value}"
    return None
