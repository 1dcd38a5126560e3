"""Talking to a model: over HTTP to a running server, or in this process through the same batcher.

`HttpClient` and `LocalClient` have the same methods (`generate`, `stream`, `chat`, `chat_stream`),
so `arena generate`, `arena chat` and the SDK's `Deployment` work the same against a deploy
(`--url`) or directly on a checkpoint. Batches of prompts go out as one request, which the
server's request batcher decodes together.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from typing import Any

from arena_core.errors import ArenaError

Messages = list[dict[str, str]]


SAMPLING = ("max_tokens", "temperature", "top_p", "stop", "seed")


def _params(**params: Any) -> dict[str, Any]:
    """`_fields(**params)`, after naming a keyword that is not a sampling field (a TypeError
    would name only this private helper)."""
    from arena_core.errors import closest

    for name in params:
        if name not in SAMPLING:
            near = closest(name, SAMPLING)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise TypeError(
                f"unknown sampling parameter {name!r}{hint}; generate, stream, chat and "
                f"chat_stream take {', '.join(SAMPLING)}"
            )
    return _fields(**params)


def _fields(
    max_tokens: int = 64,
    temperature: float = 0.0,
    top_p: float = 1.0,
    stop: str | list[str] | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """The sampling fields of a request, checked as a server checks them (max_tokens >= 1,
    temperature 0-2, top_p in (0, 1]...), so in process and `--url` refuse the same values."""
    from pydantic import ValidationError

    from arena_core.serve.protocol import SamplingRequest, validation_message

    out: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p}
    if stop:
        out["stop"] = stop
    if seed is not None:
        out["seed"] = seed
    try:
        SamplingRequest.model_validate(out)
    except ValidationError as exc:
        raise ArenaError(validation_message(exc, SamplingRequest)[0]) from None
    return out


class HttpClient:
    """A client of an Arena (or any OpenAI-compatible) server at `url`."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 300,
    ) -> None:
        import httpx

        if not url.startswith(("http://", "https://")):
            raise ArenaError(f"--url {url} is not an http(s) URL: give http://host:port")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self.model = model
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def models(self) -> list[str]:
        return [m["id"] for m in self._check(self._send("GET", "/v1/models")).json()["data"]]

    def generate(self, prompts: str | list[str], **params: Any) -> list[str]:
        """One completion per prompt, in order; all prompts go in one request (one batch)."""
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        body = {"model": self._model(), "prompt": prompts, **_params(**params)}
        choices = self._check(self._send("POST", "/v1/completions", body)).json()["choices"]
        return [c["text"] for c in sorted(choices, key=lambda c: c["index"])]

    def stream(self, prompt: str, **params: Any) -> Iterator[str]:
        body = {"model": self._model(), "prompt": prompt, "stream": True, **_params(**params)}
        for chunk in self._sse("/v1/completions", body):
            for c in chunk.get("choices", []):
                if c.get("text"):
                    yield c["text"]

    def chat(self, messages: Messages, **params: Any) -> str:
        body = {"model": self._model(), "messages": messages, **_params(**params)}
        data = self._check(self._send("POST", "/v1/chat/completions", body)).json()
        return data["choices"][0]["message"]["content"]

    def chat_stream(self, messages: Messages, **params: Any) -> Iterator[str]:
        body = {"model": self._model(), "messages": messages, "stream": True, **_params(**params)}
        for chunk in self._sse("/v1/chat/completions", body):
            for c in chunk.get("choices", []):
                piece = (c.get("delta") or {}).get("content")
                if piece:
                    yield piece

    def act(self, observation: Any, *, agent: str | None = None) -> Any:
        """The action a served classic-RL policy (PPO, IPPO) takes for `observation` (`POST
        /v1/act`; a numpy array is sent as its list); `agent` picks a multi-agent policy's net."""
        if hasattr(observation, "tolist"):
            observation = observation.tolist()
        body: dict[str, Any] = {"model": self._model(), "observation": observation}
        if agent is not None:
            body["agent"] = agent
        resp = self._send("POST", "/v1/act", body)
        if resp.status_code == 404 and "model_not_found" not in resp.text:  # no such route
            raise ArenaError(
                f"{self.url} serves no classic-RL policy (it has no POST /v1/act): act() is for "
                "a deployed PPO or IPPO run; a language model answers generate() and chat()"
            )
        return self._check(resp).json()["action"]

    def close(self) -> None:
        self._http.close()

    # -- plumbing --------------------------------------------------------------------------------
    def _model(self) -> str | None:
        if self.model is None:
            self.model = self.models()[0]
        return self.model

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request; a server that cannot be reached is a message, not httpx's traceback."""
        import httpx

        try:
            return self._http.request(method, path, json=body)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: Exception) -> ArenaError:
        return ArenaError(
            f"cannot reach a server at {self.url} ({type(exc).__name__}: {exc}): start one "
            "(`arena deploy MODEL --port PORT`) or check --url"
        )

    def _sse(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        import httpx

        try:
            yield from self._sse_chunks(path, body)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def _sse_chunks(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        with self._http.stream("POST", path, json=body) as resp:
            if resp.status_code >= 400:
                resp.read()
                self._check(resp)
            for line in resp.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    return
                chunk = json.loads(data)
                if "error" in chunk:
                    raise ArenaError(f"{self.url}: {chunk['error'].get('message')}")
                yield chunk

    def _check(self, resp: Any) -> Any:
        if resp.status_code < 400:
            return resp
        try:
            message = resp.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = resp.text[:200]
        raise ArenaError(f"{self.url} answered {resp.status_code}: {message}")


class LocalClient:
    """The same calls on checkpoints loaded into this process (no server, no port)."""

    def __init__(self, refs: list[str], *, runs: str = "./runs", metric: str | None = None) -> None:
        from arena_core.serve.batching import RequestBatcher
        from arena_core.serve.models import load_models

        self.served = load_models(refs, runs, metric=metric)
        for model in self.served:
            if model.kind != "llm":  # a policy answers observations, not prompts
                raise ArenaError(
                    f"{model.name} is a '{model.kind}' policy, not a language model: it answers "
                    "observations, not prompts. Serve it with `arena deploy` and send them to its "
                    "route (POST /v1/act for PPO and IPPO; docs/serving.md)"
                )
        self.batcher = RequestBatcher(self.served)
        self.model = self.served[0].name

    def models(self) -> list[str]:
        return [m.name for m in self.served]

    def generate(self, prompts: str | list[str], **params: Any) -> list[str]:
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        tok = self.batcher.models[self.model].tokenizer
        rows = [tok.encode(p, add_special_tokens=False) for p in prompts]
        texts = [""] * len(rows)
        for index, piece in self._run(rows, params):
            texts[index] += piece
        return texts

    def stream(self, prompt: str, **params: Any) -> Iterator[str]:
        tok = self.batcher.models[self.model].tokenizer
        for _, piece in self._run([tok.encode(prompt, add_special_tokens=False)], params):
            yield piece

    def chat(self, messages: Messages, **params: Any) -> str:
        return "".join(self.chat_stream(messages, **params))

    def chat_stream(self, messages: Messages, **params: Any) -> Iterator[str]:
        try:
            prompt = self.batcher.models[self.model].encode_chat(messages)
        except Exception as exc:  # no template, or one that rejects these roles
            raise ArenaError(
                f"cannot apply {self.model}'s chat template: {exc} (`arena generate --raw` "
                "sends the prompt as plain text)"
            ) from None
        for _, piece in self._run([prompt], params):
            yield piece

    def close(self) -> None:
        self.batcher.close()

    def _run(self, rows: list[list[int]], params: dict[str, Any]) -> Iterator[tuple[int, str]]:
        from arena_core.serve.jobs import Request

        if any(not r for r in rows):
            raise ArenaError("a prompt is empty (no tokens)")
        p = _params(**params)
        stop = p.get("stop")
        request = Request(
            rows=rows,
            indexes=list(range(len(rows))),
            max_tokens=int(p["max_tokens"]),
            temperature=float(p["temperature"]),
            top_p=float(p["top_p"]),
            stop=[stop] if isinstance(stop, str) else list(stop or []),
            seed=p.get("seed"),
        )
        events: queue.Queue = queue.Queue()
        job = self.batcher.submit(self.model, request, events.put)
        try:
            while True:
                event = events.get()
                if event[0] == "done":
                    return
                if event[0] == "error":
                    raise ArenaError(event[1])
                if event[0] == "delta":
                    yield event[1], event[2]
        finally:
            job.cancel()
