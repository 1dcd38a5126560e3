"""Starting the dashboard with the deploy server's safety rules: loopback unless told otherwise,
an API key required on any other address, the port bound before anything else is done."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.serve.server import _is_loopback, bind, resolve_api_key

DEFAULT_PORT = 8265


class DashboardServer:
    """A running dashboard: `url`, `port`; `serve_forever()` (Ctrl-C) or `start()`/`close()`."""

    def __init__(
        self,
        runs: str | Path = "./runs",
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        api_key: str | None = None,
        log_level: str = "warning",
    ) -> None:
        import uvicorn

        from arena_core.serve.dashboard.app import create_dashboard_app

        self.host, self.runs = host, Path(runs)
        self.api_key = resolve_api_key(host, api_key)
        self.sock = bind(host, port)
        self.port = int(self.sock.getsockname()[1])
        self.app = create_dashboard_app(
            self.runs, api_key=self.api_key, loopback=_is_loopback(host)
        )
        config = uvicorn.Config(
            self.app, log_level=log_level, timeout_graceful_shutdown=1, lifespan="off"
        )
        self._uvicorn = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{f'[{shown}]' if ':' in shown else shown}:{self.port}"

    def serve_forever(self) -> None:
        try:
            self._uvicorn.run(sockets=[self.sock])
        finally:
            self.sock.close()

    def start(self, timeout_s: float = 30.0) -> DashboardServer:
        """Serve from a background thread; returns once it accepts connections."""
        self._thread = threading.Thread(
            target=self._uvicorn.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise ArenaError(f"the dashboard did not start on {self.url}")
            time.sleep(0.02)
        return self

    def close(self) -> None:
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sock.close()

    def __enter__(self) -> DashboardServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
