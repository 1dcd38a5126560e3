"""Serving classic-RL policies: `POST /v1/act` (observation in, action out) on `arena deploy`.

The algorithms plugin registers `act_serving` for PPO and IPPO through the `register_serving`
hook; the server calls it the first time it meets a checkpoint of that kind, so a plain training
run never imports the web stack (this module imports fastapi). The route computes what
`load_gym_policy` computes: the deterministic action, in the environment's own format. It lives
with the server, which builds on the classic-RL policy, never the other way round.

Request:  `{"model": NAME (optional with one policy served), "observation": [...], "agent": NAME}`
Response: `{"model": NAME, "action": ACTION}`; a bad observation or agent is a 400 in the
OpenAI error JSON shape, an unknown model a 404, and the API key is checked as on every route.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from arena_core.classic_rl.policy import load_gym_policy
from arena_core.errors import ArenaError
from arena_core.serve.models import KindServing, ServedModel
from arena_core.serve.protocol import ApiError, parse_body


class ActRequest(BaseModel):
    """The body of `POST /v1/act`."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    observation: Any
    agent: str | None = None


def act_serving() -> KindServing:
    """Classic-RL checkpoints (PPO, IPPO) served: their loader and the `/v1/act` route."""
    return KindServing(load_act_model, add_act_routes)


def load_act_model(name: str, policy_dir: Path, kind: str, device: str) -> ServedModel:
    """The served model of one classic-RL policy (a checkpoint's or an export's): its `act`
    function stands as the backend (these networks are small: they run on the CPU whatever
    `device` says)."""
    act = load_gym_policy(policy_dir)
    spec = act.spec  # type: ignore[attr-defined]
    agents = sorted(spec.get("key_of") or {})
    return ServedModel(name, kind, act, None, source={"agents": agents} if agents else {})


def add_act_routes(app: FastAPI, models: list[ServedModel]) -> None:
    """Add `/v1/act` once per app; every classic-RL kind served shares it."""
    served: dict[str, ServedModel] | None = getattr(app.state, "act_models", None)
    if served is not None:
        served.update({m.name: m for m in models})
        return
    served = app.state.act_models = {m.name: m for m in models}

    @app.post("/v1/act")
    async def act_route(request: Request) -> dict[str, Any]:
        req: ActRequest = await parse_body(request, ActRequest)
        model = _pick(served, req.model)
        if req.observation is None:
            raise ApiError(400, "observation: required", param="observation")
        try:
            action = await run_in_threadpool(model.backend, req.observation, req.agent)
        except (ArenaError, ValueError, TypeError) as exc:
            param = "agent" if "agent" in str(exc) else "observation"
            raise ApiError(400, f"{param}: {exc}", param=param) from None
        return {"model": model.name, "action": action}


def _pick(served: dict[str, ServedModel], name: str | None) -> ServedModel:
    if name is None and len(served) == 1:
        return next(iter(served.values()))
    model = served.get(name or "")
    if model is None:
        raise ApiError(
            404,
            f"model '{name}' is not a classic-RL policy served here; served policies: "
            f"{', '.join(served)}",
            code="model_not_found",
            param="model",
        )
    return model
