"""`arena.deploy`: the `arena deploy` server, started in this process, with a client attached."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from arena_core.serve.client import HttpClient, Messages
from arena_core.serve.protocol import Limits
from arena_core.serve.server import ServeOptions, Server


@runtime_checkable
class Servable(Protocol):
    """What `deploy` takes besides a `RUN[:STEP|best]` string: a `Checkpoint`, or a `Run`."""

    def serving_ref(self) -> str:
        """The `RUN:STEP` ref `arena deploy` serves for this object."""
        ...


class Deployment:
    """A running OpenAI-compatible server (`url`, `api_key`) and a client of it.

    `generate(prompts)` sends a list of prompts as one request (decoded as one batch);
    `stream(prompt)` yields text as it is decoded. Any OpenAI client works too:
    `OpenAI(base_url=dep.url + "/v1", api_key=dep.api_key or "none")`.
    """

    def __init__(self, server: Server, model: str | None = None) -> None:
        self.server = server
        self.api_key = server.api_key
        self.url = server.url
        self.models = [m.name for m in server.models]
        self.model = model or self.models[0]  # the first checkpoint named
        self._client = HttpClient(self.url, api_key=self.api_key, model=self.model)

    def generate(self, prompts: str | list[str], **params: Any) -> list[str]:
        """Completions of `prompts`, in order (max_tokens, temperature=0, top_p, stop, seed)."""
        return self._client.generate(prompts, **params)

    def stream(self, prompt: str, **params: Any) -> Iterator[str]:
        return self._client.stream(prompt, **params)

    def chat(self, messages: Messages, **params: Any) -> str:
        return self._client.chat(messages, **params)

    def chat_stream(self, messages: Messages, **params: Any) -> Iterator[str]:
        return self._client.chat_stream(messages, **params)

    def act(self, observation: Any, *, agent: str | None = None) -> Any:
        """The action a deployed PPO/IPPO policy takes for `observation` (`POST /v1/act`): an
        int for a Discrete action space, a list otherwise; `agent` names an IPPO agent."""
        return self._client.act(observation, agent=agent)

    def close(self) -> None:
        self._client.close()
        self.server.close()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Deployment({self.url}, models={self.models})"


def deploy(
    target: Any,
    *,
    models: dict[str, Any] | None = None,
    port: int = 0,
    host: str = "127.0.0.1",
    api_key: str | None = None,
    runs: str | Path = "./runs",
    limits: Limits | None = None,
    backend: str = "torch",
) -> Deployment:
    """Serve `target` (a Checkpoint, a Run (its best checkpoint), or `RUN[:STEP|best]`) and any
    `models={name: target}` besides, on `host:port` (0: a free port). Close it when done.
    `backend="vllm"` generates with vLLM (its engine core is a spawned process: call this under
    `if __name__ == "__main__":` in a script)."""
    refs = [_ref(target)] if target is not None else []
    refs += [f"{name}={_ref(t)}" for name, t in (models or {}).items()]
    options = ServeOptions(
        host=host,
        port=port,
        api_key=api_key,
        runs=runs,
        limits=limits or Limits(),
        backend=backend,
    )
    return Deployment(Server(refs, options).start())


def _ref(target: Any) -> str:
    return target.serving_ref() if isinstance(target, Servable) else str(target)
