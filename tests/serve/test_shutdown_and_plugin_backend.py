"""SIGTERM drains `arena deploy` and exits 0; a plugin's generation backend serves.

The SIGTERM test runs `arena deploy` in a child process, as a supervisor (systemd, docker) would
stop it; traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import httpx
import pytest
from openai import OpenAI
from pydantic import BaseModel, ConfigDict

import arena
from arena_core import hookimpl
from arena_core.engines.base import Completion, SamplingParams
from arena_core.hookspecs import Register
from arena_core.plugin_loader import get_plugins
from bench._arena_child import start_deploy

CHAT = [{"role": "user", "content": "What is 12+30?"}]
GRACE_S = 1.0  # the long stream (900 tokens, ~2 s on a quiet machine) outlives it


def _start(ref: str) -> tuple[subprocess.Popen, str]:
    args = [ref, "--port", "0", "--grace-s", str(GRACE_S), "--max-tokens", "1000"]
    child = start_deploy(args, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=90)
    return child.proc, child.url


def _stream(url: str, max_tokens: int, out: dict, key: str, started: threading.Event) -> None:
    body = {"messages": CHAT, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    lines: list[str] = []
    try:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
            for line in filter(None, r.iter_lines()):
                lines.append(line)
                if len(lines) >= 3:
                    started.set()
    except httpx.HTTPError as exc:  # the cut stream: the server closed it
        lines.append(f"error: {type(exc).__name__}")
    out[key] = lines
    started.set()


@pytest.mark.slow  # a child `arena deploy`: ~10 s on an idle machine, more on a busy one
def test_sigterm_finishes_short_streams_cancels_long_ones_and_exits_0(quick_run) -> None:
    proc, url = _start(f"{quick_run.path}:best")
    try:
        out: dict[str, list[str]] = {}
        threads = []
        for key, max_tokens in (("short", 12), ("long", 900)):
            started = threading.Event()
            t = threading.Thread(target=_stream, args=(url, max_tokens, out, key, started))
            t.start()
            assert started.wait(timeout=60)
            threads.append(t)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=GRACE_S + 30)
        elapsed = time.monotonic() - t0
        for t in threads:
            t.join(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0
    assert elapsed < GRACE_S + 20  # the grace period, then release: not the long stream's end
    assert out["short"][-1] == "data: [DONE]"  # in flight: finished within the grace period
    assert '"finish_reason":"length"' in "".join(out["short"])
    assert "data: [DONE]" not in out["long"]  # past the grace period: cancelled
    with pytest.raises(httpx.HTTPError):  # nothing listens any more
        httpx.get(f"{url}/health", timeout=5)


class CannedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = "forty-two, from the canned backend"


class CannedBackend:
    """A third-party generation backend: answers every prompt with its configured text."""

    name = "canned"

    def __init__(self, policy, cfg: CannedConfig) -> None:
        self.tokenizer, self.text = policy.tokenizer, cfg.text
        self.calls = 0

    def generate(self, prompts: list[list[int]], params: SamplingParams, **_) -> list[Completion]:
        self.calls += 1
        ids = self.tokenizer.encode(self.text, add_special_tokens=False)[: params.max_new_tokens]
        text = self.tokenizer.decode(ids)
        logprobs = [-0.25 * (i + 1) for i in range(len(ids))]  # its own, to be reported
        return [Completion(list(p), list(ids), list(logprobs), text, "length") for p in prompts]


class _CannedPlugin:
    @hookimpl
    def register_backends(self, register: Register) -> None:
        register(
            "canned",
            CannedBackend,
            schema=CannedConfig,
            description="test backend: a canned answer",
        )


@pytest.fixture
def canned_backend():
    plugins = get_plugins()
    plugins.add(_CannedPlugin(), "test-canned-backend")
    try:
        yield "canned"
    finally:
        plugins.remove("test-canned-backend")


def test_a_plugin_generation_backend_serves(quick_run, canned_backend: str) -> None:
    from arena_core.serve.backends import serving_backend_names

    assert canned_backend in serving_backend_names()
    with arena.deploy(quick_run.best(), backend=canned_backend) as dep:
        client = OpenAI(base_url=f"{dep.url}/v1", api_key="none", max_retries=0, timeout=60)
        reply = client.chat.completions.create(model=dep.model, messages=CHAT, max_tokens=64)
        assert reply.choices[0].message.content == CannedConfig().text
        streamed = client.chat.completions.create(
            model=dep.model, messages=CHAT, max_tokens=64, stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in streamed) == CannedConfig().text
        scored = client.chat.completions.create(
            model=dep.model, messages=CHAT, max_tokens=64, logprobs=True
        )  # its rows are replayed whole, each token with the logprob the backend gave it
        got = [entry.logprob for entry in scored.choices[0].logprobs.content]
        assert got == [-0.25 * (i + 1) for i in range(len(got))] and got
        backend = dep.server.models[0].backend
        assert backend.name == "canned" and backend.backend.calls == 3
