"""Starting the dashboard with the deploy server's safety rules: loopback unless told otherwise,
an API key required on any other address, the port bound before anything else is done."""

from __future__ import annotations

from pathlib import Path

from arena_core.extras import require_extra
from arena_core.serve.server import UvicornHost, _is_loopback, resolve_api_key

DEFAULT_PORT = 8265


class DashboardServer(UvicornHost):
    """A running dashboard: `url`, `port`; `serve_forever()` (Ctrl-C) or `start()`/`close()`."""

    what = "the dashboard"

    def __init__(
        self,
        runs: str | Path = "./runs",
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        api_key: str | None = None,
        log_level: str = "warning",
    ) -> None:
        require_extra("serve", "the dashboard (`arena dashboard`)")
        from arena_core.serve.dashboard.app import create_dashboard_app

        self.runs = Path(runs)
        self.api_key = resolve_api_key(host, api_key)
        self._bind(host, port)
        self.app = create_dashboard_app(
            self.runs, api_key=self.api_key, loopback=_is_loopback(host)
        )
        self._serve_app(self.app, log_level, graceful_s=1)
