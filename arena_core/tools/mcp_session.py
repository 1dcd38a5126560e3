"""MCP servers as tool sessions: one `MCPToolSession` per episode, served by `MCPServers`.

How an episode gets its own state, `episode_state`:
- `auto` (the MCP envs' default): decided by the server itself at its first start: `reset` when
  it lists `reset_tool` (it knows how to empty its state: the key-value store, the to-do
  plugin), `shared` otherwise (the calculator). A stateful server without a reset tool must be
  declared `fresh`;
- `shared`: one server serves every episode, concurrently (stateless servers: a calculator);
- `fresh`: a new server per episode, started with the episode's state directory (in
  $ARENA_MCP_STATE_DIR and as `{state_dir}` in its arguments) and stopped when the episode ends;
- `reset`: servers are reused, one episode at a time each; at the start of an episode Arena calls
  the server's `reset_tool` with `{"state_dir": DIR}` (hidden from the model), the cheap way to
  isolate episodes of a server that is slow to start or reached by URL. Episodes run in lockstep,
  so a batch of 64 still needs 64 servers;
- `tagged`: one server serves every episode, and every call carries its episode's state
  directory in the request's `_meta` (`{"arena/state_dir": DIR}`, `STATE_META_KEY`): the server
  keeps one state per directory (the key-value store and the to-do plugin do). Stateful episodes
  at the cost of a stateless server: one process, started once.
`final_state()` is `{"state_dir": DIR, "calls": [...], "failed": bool, "error": str}`: the reward
receives it and can open what the server wrote there (AWM-style rewards query the database).
State directories live under one root per `MCPServers` and the newest `keep_states` survive the
episode (the reward runs after it); the root is removed at `close()`.

A server that does not start, exits, or hangs past the call timeout raises `ToolSessionError`
(the runtime scores the episode as failed) and is replaced for the next episode; its process
group is killed, so nothing leaks. A wrong call (unknown tool, bad arguments, a tool's own error)
is an error `ToolResult`, as the ToolSession contract says.
"""

from __future__ import annotations

import atexit
import collections
import os
import shlex
import shutil
import tempfile
import threading
import time
import weakref
from typing import Any, Literal

from arena_core.tools.mcp_client import MCPConnection, ServerGone, ServerSpec
from arena_core.tools.protocol import ToolResult, ToolSessionError, function_schema

EpisodeState = Literal["auto", "shared", "fresh", "reset", "tagged"]
EPISODE_STATES = ("auto", "shared", "fresh", "reset", "tagged")
STATE_META_KEY = "arena/state_dir"  # tagged: the `_meta` key naming a call's state directory
_LIVE: weakref.WeakSet[MCPServers] = weakref.WeakSet()
_BY_COMMAND: dict[tuple[Any, ...], MCPServers] = {}
_BY_COMMAND_LOCK = threading.Lock()


@atexit.register
def _close_all() -> None:
    """Interpreter exit: stop the servers and remove the state directories of every env."""
    for servers in list(_LIVE):
        servers.close()


def openai_tools(listing: list[dict[str, Any]], hide: set[str]) -> list[dict[str, Any]]:
    """MCP tool listings as OpenAI function schemas (what chat templates take as `tools=`)."""
    out = []
    for tool in listing:
        name = str(tool.get("name", ""))
        if name and name not in hide:
            schema = tool.get("inputSchema") or {"type": "object", "properties": {}}
            out.append(function_schema(name, str(tool.get("description") or name), schema))
    return out


class MCPServers:
    """Starts, lends, restarts and stops the servers of one MCP environment (thread-safe)."""

    def __init__(
        self,
        spec: ServerSpec,
        *,
        episode_state: EpisodeState = "shared",
        reset_tool: str = "reset",
        hide_tools: list[str] | None = None,
        start_timeout_s: float = 30.0,
        episode_timeout_s: float | None = None,
        keep_states: int = 4096,
    ) -> None:
        if episode_state not in EPISODE_STATES:
            raise ValueError(
                f"episode_state must be one of {EPISODE_STATES}, got {episode_state!r}"
            )
        if episode_state == "fresh" and spec.url:  # (auto never resolves to fresh)
            raise ValueError(
                "episode_state=fresh starts a server per episode, which a URL cannot do: use "
                "episode_state=reset (the server's reset tool) or shared"
            )
        self.spec = spec
        self.episode_state = episode_state
        self.reset_tool = reset_tool
        self.hide = set(hide_tools or []) | {reset_tool}  # Arena calls it, never the model
        self.start_timeout_s = float(start_timeout_s)
        self.episode_timeout_s = episode_timeout_s
        self.keep_states = max(1, int(keep_states))
        self.state_root = tempfile.mkdtemp(prefix="arena-mcp-state-")
        # removed at close(), or when this object is collected, or at exit, whichever is first
        self._remove_states = weakref.finalize(self, shutil.rmtree, self.state_root, True)
        self.stats: collections.Counter[str] = collections.Counter()
        self._lock = threading.RLock()  # _start may run under it (shared mode)
        self._shared: MCPConnection | None = None
        self._idle: list[MCPConnection] = []
        self._lent: set[MCPConnection] = set()
        self._states: collections.deque[str] = collections.deque()
        self._listing: list[dict[str, Any]] | None = None
        self._closed = False
        _LIVE.add(self)

    # -- servers -----------------------------------------------------------------------------
    def _start(self, state_dir: str | None) -> MCPConnection:
        if state_dir is None:  # a reused server's own directory, until a reset moves it on
            with self._lock:
                state_dir = os.path.join(self.state_root, f"server-{self.stats['servers']:04d}")
                self.stats["servers"] += 1
            os.makedirs(state_dir, exist_ok=True)
        try:
            conn = MCPConnection(self.spec, state_dir=state_dir, writable=[self.state_root])
            conn.start(self.start_timeout_s)
        except ServerGone as exc:
            self._count("start_failures")
            raise ToolSessionError(f"MCP server {self.spec.describe()}: {exc}") from None
        self._count("started")
        self._listing = conn.tools
        return conn

    def _count(self, key: str) -> None:
        with self._lock:  # sessions open, call and close on several threads
            self.stats[key] += 1

    def _resolve_auto(self) -> None:
        """`auto`: start the first server and let its tool listing decide (module docstring)."""
        with self._lock:
            if self.episode_state != "auto":
                return
            conn = self._start(None)
            names = {str(t.get("name")) for t in conn.tools}
            if self.reset_tool in names:
                self.episode_state = "reset"
                self._idle.append(conn)
            else:
                self.episode_state = "shared"
                self._shared = conn

    def _acquire(self, state_dir: str) -> MCPConnection:
        if self.episode_state == "auto":
            self._resolve_auto()
        if self.episode_state == "fresh":
            conn = self._start(state_dir)
            with self._lock:
                self._lent.add(conn)  # close() stops it even if its episode never ends
            return conn
        if self.episode_state in ("shared", "tagged"):
            with self._lock:
                if self._shared is None or not self._shared.alive:
                    if self._shared is not None:
                        self._count("restarts")
                        self._shared.close()
                    self._shared = self._start(None)
                return self._shared
        with self._lock:
            while self._idle and not self._idle[-1].alive:
                self._idle.pop().close()
                self._count("restarts")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._start(None)
        with self._lock:
            self._lent.add(conn)
        try:
            result = conn.call(self.reset_tool, {"state_dir": state_dir}, self.start_timeout_s)
        except ServerGone as exc:
            self._release(conn)
            raise ToolSessionError(f"MCP server reset failed: {exc}") from None
        if result.is_error:
            self._release(conn)
            raise ToolSessionError(
                f"MCP server {self.spec.describe()} refused `{self.reset_tool}"
                f'({{"state_dir": ...}})`: {result.text[:200]} (episode_state=reset needs that '
                "tool; use episode_state=fresh or shared otherwise)"
            )
        return conn

    def _release(self, conn: MCPConnection) -> None:
        if self.episode_state == "fresh":
            with self._lock:
                self._lent.discard(conn)
            conn.close()
        elif self.episode_state == "reset":
            with self._lock:
                self._lent.discard(conn)
                if conn.alive and not self._closed:
                    self._idle.append(conn)
                    return
            conn.close()
        # shared, tagged: the server stays; a dead one is replaced by the next _acquire

    def _new_state_dir(self) -> str:
        with self._lock:
            index = self.stats["episodes"]
            self.stats["episodes"] += 1
            path = os.path.join(self.state_root, f"episode-{index:08d}")
            os.makedirs(path)
            self._states.append(path)
            while len(self._states) > self.keep_states:
                shutil.rmtree(self._states.popleft(), ignore_errors=True)
        return path

    def tools(self) -> list[dict[str, Any]]:
        """The tools the model sees (starts a server once, to list them, if none ran yet)."""
        if self._listing is None:
            session = self.open_session()
            session.close()
        return openai_tools(self._listing or [], self.hide)

    def open_session(self) -> MCPToolSession:
        """A session for one episode; ToolSessionError when no server can serve it."""
        if self._closed:
            raise ToolSessionError("the MCP environment was closed")
        state_dir = self._new_state_dir()
        conn = self._acquire(state_dir)
        return MCPToolSession(self, conn, state_dir)

    def close(self) -> None:
        """Stop every server and remove the state directories (idempotent)."""
        with self._lock:
            self._closed = True
            conns = [*self._idle, *self._lent] + ([self._shared] if self._shared else [])
            self._idle, self._lent, self._shared = [], set(), None
        for conn in conns:
            conn.close()
        self._remove_states()

    def __enter__(self) -> MCPServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MCPToolSession:
    """One episode's view of an MCP server: the ToolSession contract (arena_core.tools.protocol)."""

    def __init__(self, servers: MCPServers, conn: MCPConnection, state_dir: str) -> None:
        self._servers = servers
        self._conn: MCPConnection | None = conn
        self.state_dir = state_dir
        self.calls: list[dict[str, Any]] = []
        self.failed = ""
        self._tools = openai_tools(conn.tools, servers.hide)
        self._names = {t["function"]["name"] for t in self._tools}
        timeout = servers.episode_timeout_s
        self._deadline = time.monotonic() + timeout if timeout else None
        tagged = servers.episode_state == "tagged"
        self._meta = {STATE_META_KEY: state_dir} if tagged else None

    @classmethod
    def stdio(
        cls,
        command: str | list[str],
        *,
        start_timeout_s: float = 30.0,
        episode_state: EpisodeState = "fresh",
        episode_timeout_s: float | None = None,
    ) -> MCPToolSession:
        """A session on a stdio server, for tasks that keep no MCPServers of their own: one
        process-wide MCPServers per (command, episode_state) serves them (stopped at exit).
        `episode_state="shared"` suits a stateless server (one process for every episode)."""
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        key = (tuple(argv), episode_state, float(start_timeout_s), episode_timeout_s)
        with _BY_COMMAND_LOCK:
            servers = _BY_COMMAND.get(key)
            if servers is None or servers._closed:
                servers = _BY_COMMAND[key] = MCPServers(
                    ServerSpec(command=argv),
                    episode_state=episode_state,
                    start_timeout_s=start_timeout_s,
                    episode_timeout_s=episode_timeout_s,
                )
        return servers.open_session()

    def tools(self) -> list[dict[str, Any]]:
        return [dict(t, function=dict(t["function"])) for t in self._tools]

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        """One call; an error ToolResult for a wrong one, ToolSessionError if the server died."""
        if self.failed:
            raise ToolSessionError(self.failed)
        if self._conn is None:
            raise ToolSessionError("the session is closed")
        if name not in self._names:
            known = ", ".join(sorted(self._names)) or "(none)"
            self.calls.append({"name": name, "is_error": True})
            return ToolResult(f"Error: unknown tool '{name}'. Available tools: {known}.", True)
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                self._fail(
                    f"the episode ran past episode_timeout_s={self._servers.episode_timeout_s:g}"
                )
            timeout_s = min(timeout_s, left)
        started = time.monotonic()
        try:
            result = self._conn.call(name, arguments, timeout_s, self._meta)
        except ServerGone as exc:
            self._fail(f"MCP server {self._servers.spec.describe()}: {exc}")
        self.calls.append(
            {
                "name": name,
                "is_error": result.is_error,
                "seconds": round(time.monotonic() - started, 4),
            }
        )
        return result

    def _fail(self, why: str) -> None:
        self.failed = why
        self._servers._count("failed_episodes")
        raise ToolSessionError(why)

    def final_state(self) -> dict[str, Any]:
        """What the reward receives: the state directory, the calls made and whether it failed."""
        return {
            "state_dir": self.state_dir,
            "calls": list(self.calls),
            "failed": bool(self.failed),
            "error": self.failed,
        }

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._servers._release(conn)
