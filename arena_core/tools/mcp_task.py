"""The base of MCP environments: a text task whose episodes call an MCP server's tools.

`MCPServerFields` are the `env` keys that say which server and how episodes keep their state;
`MCPTask` turns them into a ToolTask (`open_session`), leaving the examples and prompts to the
environment (the built-in `+env=mcp` reads them from a file, a plugin may generate them). Built-in
and third-party MCP envs share both, so they validate (`arena validate env NAME`) and train alike.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

from pydantic import Field, model_validator

from arena_core.tasks import Example
from arena_core.tools.config import ToolEnvFields, adopt_tool_settings
from arena_core.tools.mcp_client import ServerSpec
from arena_core.tools.mcp_session import MCPServers, MCPToolSession

_SERVERS_LOCK = threading.Lock()


class MCPServerFields(ToolEnvFields):
    """Mix into an MCP env's config schema (`class MyConfig(PromptConfig, MCPServerFields)`)."""

    command: str | list[str] | None = Field(
        None,
        description="Stdio server: a command line (`python my_server.py`) or an argv list; "
        "`{state_dir}` in it is replaced by the episode's state directory.",
    )
    url: str | None = Field(None, description="Streamable-HTTP server URL (instead of command).")
    tool_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Per tool call; a late answer is an error and stops the server. Above the "
        "reference servers' slowest tool (server-everything's takes 10 s by design).",
    )
    server_env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the server process."
    )
    cwd: str | None = Field(None, description="Working directory of the server process.")
    isolate_server: bool = Field(
        False,
        description="Run the stdio server under bubblewrap like rewards: read-only file system "
        "(its state directories writable), no network, private /tmp, own PID namespace.",
    )
    episode_state: Literal["auto", "shared", "fresh", "reset", "tagged"] = Field(
        "auto",
        description="auto: reset when the server lists `reset_tool`, else shared; shared: one "
        "server for all episodes (stateless tools); fresh: a server per episode; reset: reused "
        "servers, `reset_tool` called with {state_dir} per episode; tagged: one server, every "
        'call names its episode\'s state directory in `_meta` ("arena/state_dir").',
    )
    reset_tool: str = Field("reset", description="Tool Arena calls per episode (never shown).")
    hide_tools: list[str] = Field(
        default_factory=list, description="Server tools the model is not shown."
    )
    start_timeout_s: float = Field(
        30.0, gt=0, description="Server start + initialize + list_tools."
    )
    episode_timeout_s: float | None = Field(
        300.0, gt=0, description="Wall-clock budget of an episode's tool calls."
    )
    keep_states: int = Field(
        4096, ge=1, description="Newest episode state directories kept for the reward."
    )
    preflight_call_tools: Literal["read_only", "all", "none"] = Field(
        "read_only",
        description="Which server tools arena-run's pre-flight and `arena validate env NAME` "
        "call with generated arguments: read_only (only tools annotated readOnlyHint: true; the "
        "others, destructive or unannotated, are listed and their schemas checked), all (every "
        "tool, announced first; with episode_state fresh/reset/tagged against the check's own "
        "state directory), none.",
    )

    @model_validator(mode="after")
    def _one_server(self) -> MCPServerFields:
        if not self.command and not self.url:
            raise ValueError(
                "an MCP env needs a server: set env.command='python my_server.py' (stdio) or "
                "env.url=http://host:port/mcp (streamable HTTP)"
            )
        if self.command and self.url:
            raise ValueError("set env.command or env.url, not both")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(
                f"env.url={self.url} is not an http(s) URL: env.url=http://host:port/mcp (a "
                "streamable-HTTP server); a server run by command is env.command='...'"
            )
        return self


def servers_from(cfg: MCPServerFields) -> MCPServers:
    """The MCPServers for an MCP env's validated config."""
    spec = ServerSpec.parse(
        cfg.command, cfg.url, env=dict(cfg.server_env), cwd=cfg.cwd, isolate=cfg.isolate_server
    )
    return MCPServers(
        spec,
        episode_state=cfg.episode_state,
        reset_tool=cfg.reset_tool,
        hide_tools=list(cfg.hide_tools),
        start_timeout_s=cfg.start_timeout_s,
        episode_timeout_s=cfg.episode_timeout_s,
        keep_states=cfg.keep_states,
    )


class MCPTask:
    """ToolTask members for an MCP env; combine with a class that provides the TextTask part
    (`train_examples`, `eval_examples`, `messages`, `name`, `reward`)."""

    mcp: MCPServerFields

    def init_mcp(self, cfg: MCPServerFields) -> None:
        """Keep the config; servers start lazily, at the first episode (or validation). Without
        the `mcp` extra the env is refused here, when it is built (pre-flight, validation), with
        the install command, rather than failing every episode of a run."""
        from arena_core.extras import require_extra

        require_extra("mcp", "an MCP environment")
        self.mcp = cfg
        adopt_tool_settings(self, cfg)
        self._servers: MCPServers | None = None

    @property
    def servers(self) -> MCPServers:
        with _SERVERS_LOCK:  # episodes open their sessions on several threads
            if self._servers is None:
                self._servers = servers_from(self.mcp)
        return self._servers

    @property
    def reward_paths(self) -> list[str]:
        """Folders the reward reads (the episodes' state directories): the sandbox mounts them."""
        return [self.servers.state_root]

    def open_session(self, example: Example, seed: int) -> MCPToolSession:
        """ToolTask: a session on the env's server for one episode (see MCPServers)."""
        return self.servers.open_session()

    def close(self) -> None:
        """Stop the servers and remove the state directories."""
        if self._servers is not None:
            self._servers.close()


def is_mcp_schema(schema: Any) -> bool:
    """Whether a registered env's config schema is an MCP env's (validated as an MCP server)."""
    return isinstance(schema, type) and issubclass(schema, MCPServerFields)


__all__ = ["MCPServerFields", "MCPTask", "is_mcp_schema", "servers_from"]
