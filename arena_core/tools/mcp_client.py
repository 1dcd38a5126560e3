"""One live MCP server connection, driven synchronously through the official `mcp` SDK.

The SDK is async, the rollout code is not: every connection runs on one private event-loop thread
(`_loop()`), and its owner waits on futures with timeouts. A connection is an asyncio task that
enters `stdio_client` (or `streamable_http_client`) and `ClientSession`, initializes, lists the
tools, then holds the contexts open until `close()`: the SDK's cancel scopes must be entered and
left by the same task. Calls are separate tasks on the same loop.

Failure model (what the session above turns into a failed episode): `ServerGone` when the server
did not start, exited, stopped answering within the call timeout, or broke the protocol. The
SDK's stdio transport starts the server in its own session and kills the whole process group on
close (stdin closed, then SIGTERM, then SIGKILL); a close during the start cancels the connection
through anyio, so that shutdown runs too (a native task.cancel() would skip it). The server also
carries a tag in its environment (arena_core.sandbox.reap): whatever still carries it after the
close, or sits in the server's session (a child that called setsid(), or one orphaned when the
server died), is stopped the same way. So a hung, stubborn or forking server leaves no process.
A server that answers a call with a JSON-RPC error or an `isError` result is alive and well: that
is a `ToolResult(is_error=True)`, the model's information.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import shlex
import shutil
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from arena_core.sandbox.reap import TAG_VARIABLE, new_tag, stop_tagged
from arena_core.tools.protocol import ToolResult

_LIVE: weakref.WeakSet[MCPConnection] = weakref.WeakSet()
_LOOP: dict[str, asyncio.AbstractEventLoop] = {}
_LOOP_LOCK = threading.Lock()


class ServerGone(Exception):
    """The server cannot answer any more (did not start, exited, hung or broke the protocol)."""


def _loop() -> asyncio.AbstractEventLoop:
    """The process-wide event loop thread every MCP connection runs on (started once)."""
    with _LOOP_LOCK:
        loop = _LOOP.get("loop")
        if loop is None or loop.is_closed():
            # the SDK logs a traceback per non-JSON-RPC line; the connection reports them itself
            logging.getLogger("mcp.client.stdio").setLevel(logging.CRITICAL)
            logging.getLogger("mcp.client.session").setLevel(logging.ERROR)  # unlisted-tool note
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="arena-mcp", daemon=True)
            thread.start()
            _LOOP["loop"] = loop
        return loop


@atexit.register
def _close_all() -> None:
    """Interpreter exit: stop every server still running (their process groups die with them)."""
    for conn in list(_LIVE):
        conn.close(wait_s=5.0)


@dataclass
class ServerSpec:
    """How to reach a server: a stdio `command` (argv list) or a streamable-HTTP `url`.

    `{state_dir}` in the command's arguments is replaced by the episode's state directory, which
    the server also finds in $ARENA_MCP_STATE_DIR.
    """

    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    isolate: bool = False  # stdio: run under bubblewrap (see `isolated_argv`)

    @classmethod
    def parse(cls, command: str | list[str] | None = None, url: str | None = None, **kw: Any):
        """From a shell-style string or an argv list (`"python server.py --x 1"`)."""
        if isinstance(command, str):
            command = shlex.split(command)
        if not command and not url:
            raise ValueError("an MCP server needs a command (stdio) or a url (streamable HTTP)")
        return cls(command=list(command) if command else None, url=url or None, **kw)

    def describe(self) -> str:
        return self.url if self.url else shlex.join(self.command or [])


class MCPConnection:
    """A started server: `tools` (MCP listing), `call(...)`, `close()`. See the module docstring."""

    def __init__(
        self, spec: ServerSpec, *, state_dir: str | None = None, writable: list[str] | None = None
    ) -> None:
        self.spec = spec
        self.state_dir = state_dir
        self.writable = list(writable or ([state_dir] if state_dir else []))
        self.tools: list[dict[str, Any]] = []
        self.server_info: dict[str, Any] = {}
        self.dead: str = ""  # why it cannot answer; "" while alive
        self.protocol_errors: list[str] = []  # lines the server wrote that are not JSON-RPC
        self._session: Any = None
        self._stop: asyncio.Event | None = None
        self._scope: Any = None  # the connection's anyio cancel scope (close during the start)
        self._closing = False
        self.tag = new_tag()  # in the server's environment: what to stop at the close
        self.server_pid: int | None = None
        self._task: concurrent.futures.Future | None = None
        self._ready: concurrent.futures.Future = concurrent.futures.Future()
        self._stderr = tempfile.TemporaryFile(mode="w+", prefix="arena-mcp-stderr-")
        self._stderr_text = ""
        self.start_s = 0.0

    # -- life cycle --------------------------------------------------------------------------
    def start(self, timeout_s: float) -> MCPConnection:
        """Spawn or connect, `initialize`, `list_tools`; ServerGone (server closed) on failure."""
        if self.spec.command and shutil.which(self.spec.command[0]) is None:
            self._closed_file()
            raise ServerGone(
                f"command '{self.spec.command[0]}' not found (PATH or working directory "
                f"{os.getcwd()}): check env.command / --mcp-command"
            )
        if self.spec.isolate and self.spec.command:
            from arena_core.errors import ArenaError

            try:
                isolated_argv(["true"], os.getcwd(), [])
            except ArenaError as exc:
                self._closed_file()
                raise ServerGone(f"env.isolate_server is set but {exc}") from None
        from arena_core.extras import MissingExtraError, require_extra

        try:  # the optional extra: say how to get it before anything starts
            require_extra("mcp", "an MCP server session")
            import arena_core.tools.mcp_api  # noqa: F401 - an mcp older than 1.24 says so here
        except (MissingExtraError, ImportError) as exc:
            self._closed_file()
            raise ServerGone(str(exc)) from None
        started = time.monotonic()
        _LIVE.add(self)
        self._task = asyncio.run_coroutine_threadsafe(self._main(), _loop())
        try:
            self._ready.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            why = f"did not finish starting (initialize + list_tools) within {timeout_s:g} s"
            self.close()
            raise ServerGone(f"server {why}{self.stderr_tail()}") from None
        except BaseException as exc:
            self.close()
            raise ServerGone(f"server did not start: {describe(exc)}{self.stderr_tail()}") from None
        self.start_s = time.monotonic() - started
        return self

    async def _main(self) -> None:
        import anyio

        from arena_core.tools.mcp_api import ClientSession, wire

        self._stop = asyncio.Event()
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self._closing:  # closed before the loop got to us
                    scope.cancel()
                async with contextlib.AsyncExitStack() as stack:
                    streams = await stack.enter_async_context(self._transport())
                    self.server_pid = self._own_child()
                    read, write = streams[0], streams[1]
                    session = await stack.enter_async_context(
                        ClientSession(read, write, message_handler=self._on_message)
                    )
                    init = await session.initialize()
                    listed = await _list_all_tools(session)
                    self.server_info = wire(init).get("serverInfo", {})
                    self.tools = listed
                    self._session = session
                    self._ready.set_result(True)
                    await self._stop.wait()
            if not self._ready.done():
                self._ready.set_exception(ServerGone("closed while starting"))
        except BaseException as exc:  # noqa: BLE001 - whatever ended the connection is the finding
            if not self._ready.done():
                self._ready.set_exception(exc)
            self.dead = self.dead or f"the connection ended: {describe(exc)}"
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise
        finally:
            self._session = None
            self.dead = self.dead or "closed"

    def _transport(self) -> Any:
        if self.spec.url:
            from arena_core.tools.mcp_api import streamable_http_client

            return streamable_http_client(self.spec.url)
        from arena_core.tools.mcp_api import StdioServerParameters, stdio_client

        argv = [a.replace("{state_dir}", self.state_dir or "") for a in self.spec.command or []]
        if self.spec.isolate:
            argv = isolated_argv(argv, self.spec.cwd or os.getcwd(), self.writable)
        env = {**self.spec.env, TAG_VARIABLE: self.tag}
        if self.state_dir:
            env["ARENA_MCP_STATE_DIR"] = self.state_dir
        params = StdioServerParameters(
            command=argv[0], args=argv[1:], env=env, cwd=self.spec.cwd or None
        )
        return stdio_client(params, errlog=self._stderr)

    def _own_child(self) -> int | None:
        """The pid of the server process just started (our child carrying the tag)."""
        import psutil

        for proc in psutil.Process().children():
            with contextlib.suppress(psutil.Error):
                if proc.environ().get(TAG_VARIABLE) == self.tag:
                    return proc.pid
        return None

    def _cancel_start(self) -> None:
        """On the loop: cancel a connection still starting (the SDK's shielded shutdown runs)."""
        self._closing = True
        if self._scope is not None:
            self._scope.cancel()

    async def _on_message(self, message: Any) -> None:
        """Exceptions the transport hands the session: lines that are not JSON-RPC."""
        if isinstance(message, Exception):
            self.protocol_errors.append(describe(message).splitlines()[0][:200])

    def close(self, wait_s: float = 10.0) -> None:
        """Stop the server and everything it started; idempotent.

        The SDK closes its stdin, waits, then SIGTERMs and SIGKILLs its process group; then every
        process still tagged as this server's, or in its session, is stopped the same way."""
        self.dead = self.dead or "closed"
        task = self._task
        if task is not None and not task.done():
            if self._ready.done() and self._stop is not None:
                _loop().call_soon_threadsafe(self._stop.set)  # stdin closes: a clean exit
            else:
                _loop().call_soon_threadsafe(self._cancel_start)
            with contextlib.suppress(BaseException):
                task.result(timeout=wait_s)
        if task is not None and self.spec.command:
            stop_tagged(self.tag, session=self.server_pid)
            self._task = None
        _LIVE.discard(self)
        self._stderr_text = self.stderr_tail()  # kept: messages quote it after the close
        self._closed_file()

    def _closed_file(self) -> None:
        with contextlib.suppress(Exception):
            self._stderr.close()

    def stderr_tail(self, limit: int = 400) -> str:
        """`; its stderr ended with: ...` (empty when the server wrote nothing)."""
        if self._stderr.closed:
            return self._stderr_text
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            text = self._stderr.read().strip()
        except (OSError, ValueError):
            return ""
        return f"; its stderr ended with: {text[-limit:]}" if text else ""

    @property
    def alive(self) -> bool:
        return not self.dead and self._session is not None

    # -- calls -------------------------------------------------------------------------------
    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        timeout_s: float,
        meta: dict[str, Any] | None = None,
    ) -> ToolResult:
        """One tool call (`meta`: the request's `_meta`). A JSON-RPC error or `isError` result
        is an error ToolResult; ServerGone when the server is gone or did not answer within
        `timeout_s` (it is then stopped)."""
        if not self.alive:
            raise ServerGone(self.dead or "not started")
        future = asyncio.run_coroutine_threadsafe(self._call(name, arguments, meta), _loop())
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            why = f"tool '{name}' did not answer within {timeout_s:g} s"
            if self.protocol_errors:
                why += f" (the server wrote lines that are not JSON-RPC: {self.protocol_errors[0]})"
            self.dead = f"{why}; the server was stopped"
            self.close(wait_s=10.0)
            raise ServerGone(self.dead) from None
        except ServerGone:
            self.close(wait_s=10.0)
            raise

    async def _call(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> ToolResult:
        from arena_core.tools.mcp_api import CONNECTION_CLOSED, MCPError

        session = self._session
        if session is None:
            raise ServerGone(self.dead or "the server closed the connection")
        try:
            if meta:
                result = await session.call_tool(name, arguments, meta=meta)  # type: ignore[arg-type]
            else:
                result = await session.call_tool(name, arguments)
        except MCPError as exc:
            error = exc.error  # type: ignore[attr-defined]
            closed = error.code == CONNECTION_CLOSED and error.message == "Connection closed"
            if closed or self._session is None or self.dead:  # the server exited under the call
                why = f"the server closed the connection during '{name}' (it exited)"
                self.dead = self.dead or why + self.stderr_tail()
                raise ServerGone(self.dead) from None
            return ToolResult(f"Error: {error.message}", True)
        except (RuntimeError, ValueError, TypeError) as exc:
            # the SDK refused the answer (not the schema it declared, not a CallToolResult)
            first = describe(exc).splitlines()[0][:200]
            self.protocol_errors.append(first)
            return ToolResult(f"Error: the server's answer was malformed: {first}", True)
        except Exception as exc:  # noqa: BLE001 - a closed stream or transport failure
            raise ServerGone(f"the connection failed during '{name}': {describe(exc)}") from None
        return to_tool_result(result)


def isolated_argv(argv: list[str], cwd: str, writable: list[str]) -> list[str]:
    """`argv` under bubblewrap, as the reward sandbox runs user code: its own user, PID and
    network namespaces, a read-only file system with a private /tmp, credentials in $HOME
    hidden; writable only `writable` (the state directories), started in `cwd`. Raises
    SandboxIsolationError (an ArenaError) where the kernel does not allow it."""
    from arena_core.sandbox.isolation import (
        SandboxPolicy,
        bwrap_binary,
        bwrap_command,
        check_isolation,
    )

    policy = SandboxPolicy(isolation="bwrap")
    check_isolation(policy)
    binary = bwrap_binary()
    assert binary is not None  # check_isolation raised otherwise
    # the program by its absolute path: found on PATH here, it may live where the sandbox's
    # private /tmp hides it (a virtualenv in /tmp), so it is mounted with what it runs on
    found = shutil.which(argv[0]) if os.sep not in argv[0] else argv[0]
    if found and os.path.exists(found):
        argv = [os.path.abspath(found), *argv[1:]]
    files = [a for a in argv if os.path.exists(a)]
    cmd = bwrap_command(binary, argv, policy, expose=[cwd, *files, *_runs_on(argv[0])])
    at = cmd.index("--")
    if "--chdir" in cmd[:at]:  # started in `cwd`, not the sandbox's scratch folder
        i = cmd.index("--chdir")
        cmd = cmd[:i] + cmd[i + 2 :]
        at -= 2
    extra = ["--chdir", cwd]
    for path in writable:
        extra += ["--bind", path, path]
    return cmd[:at] + extra + cmd[at:]


def _runs_on(program: str) -> list[str]:
    """What `program` needs to start besides itself: the interpreter of its `#!` line and the
    virtualenv either lives in (its root holds pyvenv.cfg), e.g. a console script of a
    virtualenv under /tmp."""
    paths = [program]
    try:
        with open(program, "rb") as handle:
            first = handle.readline(512)
    except OSError:
        first = b""
    if first.startswith(b"#!"):
        words = first[2:].decode(errors="replace").split()
        if words:
            paths.append(words[0])
    out = []
    for path in paths:
        if not os.path.isabs(path):
            continue
        out.append(path)
        root = os.path.dirname(os.path.dirname(path))  # venv/bin/python -> venv
        if os.path.isfile(os.path.join(root, "pyvenv.cfg")):
            out.append(root)
    return out


async def _list_all_tools(session: Any) -> list[dict[str, Any]]:
    """Every tool over all pages, as the MCP listing dicts (`name`, `inputSchema`, ...)."""
    from arena_core.tools.mcp_api import page_params, wire

    tools: list[dict[str, Any]] = []
    cursor = None
    for _ in range(100):  # a server that pages forever is cut off
        page = wire(await session.list_tools(params=page_params(cursor)))
        tools += page.get("tools", [])
        cursor = page.get("nextCursor")
        if not cursor:
            break
    return tools


def to_tool_result(result: Any) -> ToolResult:
    """A CallToolResult as text: text items joined, other items named, `isError` kept."""
    from arena_core.tools.mcp_api import wire

    answer = wire(result)
    parts = []
    for item in answer.get("content") or []:
        kind = item.get("type", "")
        resource = item.get("resource")
        if kind == "text":
            parts.append(str(item.get("text", "")))
        elif kind == "resource" and isinstance(resource, dict) and "text" in resource:
            parts.append(str(resource["text"]))
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    text = "\n".join(parts)
    structured = answer.get("structuredContent")
    if not text and structured is not None:
        import json

        text = json.dumps(structured)
    return ToolResult(text, bool(answer.get("isError", False)))


def describe(exc: BaseException) -> str:
    """`Type: message`, looking inside exception groups (anyio task groups raise them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
