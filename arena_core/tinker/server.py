"""Starting `arena tinker serve`: the key, the state directory, then uvicorn (foreground or thread).

The SDK refuses a key that does not start with `tml-`, so the server's key has that form too:
`--api-key`, else `$TINKER_API_KEY` (what the SDK itself reads, so one variable serves both
sides), else a random one printed at start. Binding is the deploy server's (`serve/server.py`):
the port is taken before any model loads, and a taken port fails at once.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from arena_core.errors import ArenaError
from arena_core.extras import require_extra
from arena_core.serve.server import UvicornHost
from arena_core.tinker.store import DEFAULT_STATE_DIR

KEY_ENV = "TINKER_API_KEY"


def resolve_key(api_key: str | None) -> str:
    """--api-key, else $TINKER_API_KEY, else a fresh `tml-` key; the SDK needs the prefix."""
    key = api_key or os.environ.get(KEY_ENV) or f"tml-arena-{secrets.token_urlsafe(18)}"
    if not key.startswith("tml-"):
        raise ArenaError(
            f"the API key must start with 'tml-' (the Tinker SDK refuses any other before "
            f"sending it): pass --api-key tml-..., or set {KEY_ENV}=tml-..."
        )
    return key


class TinkerHost(UvicornHost):
    """A running Tinker server: `url`, `api_key`, `service`; `close()` stops it."""

    what = "arena tinker serve"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        api_key: str | None = None,
        state_dir: str | Path = DEFAULT_STATE_DIR,
        device: str = "cpu",
        max_clients: int | None = None,
        engine: str = "torch",
        log_level: str = "warning",
    ) -> None:
        require_extra("serve", "the Tinker server (`arena tinker serve`)")
        # the SDK's protobuf messages and types are the wire format
        require_extra("tinker", "the Tinker server (`arena tinker serve`)")
        from arena_core.tinker.app import TinkerServer, create_app
        from arena_core.tinker.service import TinkerService
        from arena_core.tinker.store import Store

        self.api_key = resolve_key(api_key)
        self._bind(host, port)
        self.service = TinkerService(
            Store(state_dir), device=device, max_clients=max_clients, engine=engine
        )
        self.server = TinkerServer(self.service, self.api_key)
        self._serve_app(create_app(self.server), log_level, graceful_s=5.0)

    def _release(self) -> None:
        self.server.worker.shutdown(wait=False, cancel_futures=True)
        self.service.close()  # a vLLM engine's processes end here
