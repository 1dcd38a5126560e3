"""Starting the server: checks that keep it safe, then uvicorn in the foreground or a thread.

`arena deploy` and `arena.deploy()` both come here. Binding anywhere but a loopback address
requires an API key: a server reachable from the network must not answer strangers.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.extras import require_extra
from arena_core.serve.protocol import Limits

API_KEY_ENV = "ARENA_API_KEY"


@dataclass
class ServeOptions:
    """Everything `arena deploy` takes besides the models."""

    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    runs: str | Path = "./runs"
    metric: str | None = None  # what RUN:best ranks by; None: each run's own score
    device: str = "cpu"
    backend: str = "torch"  # a name in arena_core.serve.backends.SERVING_BACKENDS
    log_level: str = "warning"
    limits: Limits = field(default_factory=Limits)
    grace_s: float = 5.0  # on SIGTERM/Ctrl-C: how long in-flight streams may finish


def resolve_api_key(host: str, api_key: str | None) -> str | None:
    """The key to require: --api-key, else $ARENA_API_KEY; mandatory off loopback."""
    key = api_key or os.environ.get(API_KEY_ENV) or None
    if key is None and not _is_loopback(host):
        raise ArenaError(
            f"--host {host} makes the server reachable from other machines, so an API key is "
            f"required: pass --api-key KEY or set {API_KEY_ENV} (clients send "
            "`Authorization: Bearer KEY`), or bind --host 127.0.0.1."
        )
    return key


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """Bind before loading models, so a taken port fails in a second, not after the load."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP by name: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets that
    # say so, and with it on, a kept-alive connection's response waited ~40 ms for the client's
    # delayed ACK between its headers and its body (every openai and tinker SDK call)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            raise ArenaError(
                f"cannot listen on {host}:{port}: {exc.strerror}. --host takes an address of "
                "this machine: 127.0.0.1 (this machine only, the default) or 0.0.0.0 (every "
                "interface)."
            ) from None
        raise ArenaError(
            f"cannot listen on {host}:{port}: {exc.strerror}. Pick another --port "
            "(0 picks a free one)."
        ) from None
    sock.listen(2048)
    return sock


def _exit_on_signal(signum: int, frame: Any) -> None:
    # SIGTERM is how a supervisor (systemd, docker, k8s) asks for an orderly stop: once the
    # server has drained and released everything, that is a success, exit 0
    raise SystemExit(0 if signum == signal.SIGTERM else 128 + signum)


class UvicornHost:
    """A bound socket served by uvicorn, in the foreground or a thread: the one way the deploy
    server and the dashboard run, so both get the same start, stop and signal handling.

    Subclasses bind first (`_bind`), load what they serve, then call `_serve_app`; `_release`
    frees what they hold (a request batcher, its backends) when the host stops."""

    what = "the server"

    def _bind(self, host: str, port: int) -> None:
        self.host = host
        self.sock = bind(host, port)
        self.port = int(self.sock.getsockname()[1])
        self._thread: threading.Thread | None = None

    def _serve_app(self, app: Any, log_level: str, graceful_s: float) -> None:
        import uvicorn

        config = uvicorn.Config(
            app, log_level=log_level, timeout_graceful_shutdown=graceful_s, lifespan="off"
        )
        self._uvicorn = uvicorn.Server(config)

    def _release(self) -> None:
        """Free what the subclass holds; called once the server stopped."""

    @property
    def url(self) -> str:
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{f'[{shown}]' if ':' in shown else shown}:{self.port}"

    def serve_forever(self) -> None:
        """Serve in this thread until Ctrl-C or SIGTERM (uvicorn handles the signal).

        On SIGTERM uvicorn stops accepting connections, lets the requests in flight finish for
        up to the grace period (`graceful_s`) and cancels the rest (a cancelled stream frees its
        rows in the batch at the next decode step). It then re-raises the signal; SIGTERM's
        default action would kill the process before `finally`, leaving a vLLM engine's
        processes behind, so SIGTERM becomes SystemExit(0) here, after everything is released."""
        previous = signal.signal(signal.SIGTERM, _exit_on_signal)
        try:
            self._uvicorn.run(sockets=[self.sock])
        finally:
            signal.signal(signal.SIGTERM, previous)
            self._release()
            self.sock.close()

    def start(self, timeout_s: float = 30.0) -> Any:
        """Serve from a background thread; returns once it accepts connections."""
        self._thread = threading.Thread(
            target=self._uvicorn.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise ArenaError(f"{self.what} did not start on {self.url}")
            time.sleep(0.02)
        return self

    def close(self) -> None:
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._release()
        self.sock.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Server(UvicornHost):
    """A running server: `url`, `port`, `batcher`; `close()` stops it (a thread) or Ctrl-C."""

    def __init__(self, refs: list[str], options: ServeOptions) -> None:
        require_extra("serve", "serving checkpoints (`arena deploy`, `arena.deploy`)")
        from arena_core.serve.app import create_app
        from arena_core.serve.batching import RequestBatcher
        from arena_core.serve.models import load_models

        self.options = options
        self.api_key = resolve_api_key(options.host, options.api_key)
        self._bind(options.host, options.port)  # before loading: a taken port fails at once
        try:
            self.models = load_models(
                refs,
                options.runs,
                metric=options.metric,
                device=options.device,
                max_batch_size=options.limits.max_batch_rows,
                backend=options.backend,
            )
        except BaseException:
            self.sock.close()
            raise
        limits = options.limits
        self.batcher = RequestBatcher(
            self.models, max_batch_rows=limits.max_batch_rows, max_pending=limits.max_pending
        )
        self.app = create_app(self.batcher, api_key=self.api_key, limits=limits)
        self._serve_app(self.app, options.log_level, graceful_s=options.grace_s)

    def _release(self) -> None:
        self.batcher.close()


class PolicyServer(UvicornHost):
    """An OpenAI-compatible endpoint over a model already in this process (see `serve_policy`)."""

    what = "the policy server"

    def __init__(
        self,
        backend: Any,
        tokenizer: Any,
        *,
        name: str,
        host: str,
        port: int,
        api_key: str | None,
        limits: Limits,
    ) -> None:
        require_extra("serve", "serving a policy over HTTP (`serve_policy`)")
        from arena_core.serve.app import create_app
        from arena_core.serve.batching import RequestBatcher
        from arena_core.serve.models import ServedModel

        self.api_key = resolve_api_key(host, api_key)
        self._bind(host, port)
        self.models = [ServedModel(name, "llm", backend, tokenizer, source={"base": name})]
        self.batcher = RequestBatcher(
            self.models, max_batch_rows=limits.max_batch_rows, max_pending=limits.max_pending
        )
        self.app = create_app(self.batcher, api_key=self.api_key, limits=limits)
        self._serve_app(self.app, "warning", graceful_s=1.0)

    def _release(self) -> None:
        self.batcher.close(release_backends=False)  # the caller's model and backend stay


def serve_policy(
    policy: Any,
    *,
    name: str = "policy",
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    limits: Limits | None = None,
    device: str | None = None,
) -> PolicyServer:
    """Serve `policy` at an OpenAI-compatible endpoint on loopback and return the running server
    (`.url + "/v1"` is the base URL, `.close()` stops it; a context manager too).

    Why: an environment's own rollout code (verifiers, anything that drives an OpenAI client)
    can then sample from the policy being trained, with `return_token_ids` and `logprobs` giving
    it the token ids and behaviour logprobs a learner needs, without a second copy of the model.
    `policy` is the run's torch generation backend (a `TorchBackend`: the very engine the run
    samples with, weight updates included) or a loaded policy (anything with `.model` and
    `.tokenizer`, wrapped in a `TorchBackend` here). The server decodes on its own thread,
    between the caller's own uses of the model; closing it leaves the model and backend to the
    caller."""
    from arena_core.engines.torch_backend import TorchBackend

    limits = limits or Limits()
    if isinstance(policy, TorchBackend):
        backend = policy
    else:
        model = getattr(policy, "model", None)
        tokenizer = getattr(policy, "tokenizer", None)
        if model is None or tokenizer is None:
            raise ArenaError(
                f"serve_policy: {type(policy).__name__} is neither a TorchBackend nor a loaded "
                "policy with .model and .tokenizer (arena_core.models.load_policy gives one)"
            )
        where = device or str(next(model.parameters()).device)
        backend = TorchBackend(model, tokenizer, device=where, max_batch_size=limits.max_batch_rows)
    server = PolicyServer(
        backend,
        backend.tokenizer,
        name=name,
        host=host,
        port=port,
        api_key=api_key,
        limits=limits,
    )
    return server.start()
