"""Arena's MCP client and its low-level server work on the installed `mcp`, 1.x (>= 1.24) or 2.x.

The main environment has the newest 2.x; `.ci/overlay_matrix.sh` runs this file (with the other MCP
tests) again under mcp 1.x, where the `mcp_types` package does not exist, and mcp 2.0.0 (what
verifiers 0.3 and 0.4 pin). The servers are real: one written with the installed SDK's own
high-level server (`FastMCP` in 1.x, `MCPServer` in 2.x), over stdio and streamable HTTP, and
one on `arena_core.tools.mcp_api.serve_stdio` (the low-level server AWM scenarios run on).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from arena_core.cli import cmd_validate
from arena_core.tools.mcp_client import MCPConnection, ServerSpec

pytest.importorskip("mcp")

# Written the way a user of the installed SDK writes a server (the class was renamed in 2.x).
SDK_SERVER = textwrap.dedent(
    """
    import sys
    from mcp.types import ToolAnnotations

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    try:
        from mcp.server.mcpserver import MCPServer  # mcp 2.x
        from mcp.server.mcpserver.exceptions import ToolError
        app = MCPServer("sdk-server", log_level="WARNING")
        run = lambda: app.run("streamable-http", host="127.0.0.1", port=port) if port else app.run()
    except ImportError:
        from mcp.server.fastmcp import FastMCP  # mcp 1.x
        from mcp.server.fastmcp.exceptions import ToolError
        app = FastMCP("sdk-server", log_level="WARNING", host="127.0.0.1", port=port or 8000)
        run = lambda: app.run("streamable-http" if port else "stdio")

    READ_ONLY = ToolAnnotations(readOnlyHint=True)

    @app.tool(annotations=READ_ONLY)
    def shout(text: str) -> str:
        \"\"\"The text in capitals.\"\"\"
        return text.upper()

    @app.tool(annotations=READ_ONLY)
    def divide(a: int, b: int) -> float:
        \"\"\"a / b.\"\"\"
        if b == 0:
            raise ToolError("cannot divide by zero")
        return a / b

    run()
    """
)

# The low-level server Arena's AWM scenarios use, echoing what each call brought.
LOW_LEVEL_SERVER = textwrap.dedent(
    """
    import asyncio, json
    from arena_core.tools.mcp_api import serve_stdio

    def listing():
        return [{"name": "echo", "description": "what the call brought",
                 "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}}}]

    async def call(name, arguments, meta):
        if name != "echo":
            return f"Error: unknown tool '{name}'", True
        return json.dumps({"arguments": arguments, "meta": meta}), False

    asyncio.run(serve_stdio("low-level", listing, call))
    """
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def sdk_server(tmp_path: Path) -> Path:
    path = tmp_path / "sdk_server.py"
    path.write_text(SDK_SERVER)
    return path


@pytest.fixture
def http_url(sdk_server: Path) -> Iterator[str]:
    """The SDK server on streamable HTTP (a loopback port); killed after the test."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, str(sdk_server), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        assert server.poll() is None, "the SDK server did not start"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_an_sdk_written_server_lists_answers_and_refuses(
    transport: str, request: pytest.FixtureRequest, no_leftover_children
) -> None:
    if transport == "http":
        spec = ServerSpec(url=request.getfixturevalue("http_url"))
    else:
        spec = ServerSpec(command=[sys.executable, str(request.getfixturevalue("sdk_server"))])
    conn = MCPConnection(spec).start(timeout_s=60)
    try:
        assert conn.server_info["name"] == "sdk-server"
        tools = {t["name"]: t for t in conn.tools}
        assert set(tools) == {"shout", "divide"}
        assert tools["shout"]["inputSchema"]["properties"]["text"]["type"] == "string"
        assert tools["divide"]["annotations"]["readOnlyHint"] is True
        assert conn.call("shout", {"text": "hi"}, timeout_s=30).text == "HI"
        assert conn.call("divide", {"a": 3, "b": 2}, timeout_s=30).text == "1.5"
        refused = conn.call("divide", {"a": 1, "b": 0}, timeout_s=30)
        assert refused.is_error and "cannot divide by zero" in refused.text
        assert conn.call("divide", {"a": 1, "b": 2}, timeout_s=30).is_error is False
    finally:
        conn.close()


def test_validate_env_passes_an_sdk_written_server(
    sdk_server: Path, capsys, no_leftover_children
) -> None:
    parser = argparse.ArgumentParser(prog="arena")
    cmd_validate.add_parser(parser.add_subparsers(dest="command"))
    argv = ["validate", "env", "--mcp-command", f"{sys.executable} {sdk_server}", "--json"]
    args = parser.parse_args(argv)
    code = args.func(args)
    report = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in report["checks"]}
    assert code == 0 and report["verdict"] == "PASS", checks
    assert "sdk-server" in checks["start"]["detail"]
    assert checks["calls"]["status"] == "PASS" and report["info"]["tools"] == ["shout", "divide"]


def test_the_low_level_server_gets_each_calls_arguments_and_meta(
    tmp_path: Path, no_leftover_children
) -> None:
    path = tmp_path / "low_level.py"
    path.write_text(LOW_LEVEL_SERVER)
    conn = MCPConnection(ServerSpec(command=[sys.executable, str(path)])).start(timeout_s=60)
    try:
        assert conn.server_info["name"] == "low-level"
        assert [t["name"] for t in conn.tools] == ["echo"]
        assert conn.tools[0]["inputSchema"]["properties"] == {"x": {"type": "integer"}}
        meta = {"arena/state_dir": str(tmp_path / "episode-1")}
        answer = conn.call("echo", {"x": 7}, timeout_s=30, meta=meta)
        assert not answer.is_error
        seen = json.loads(answer.text)
        assert seen["arguments"] == {"x": 7}
        assert seen["meta"]["arena/state_dir"] == meta["arena/state_dir"]
        assert json.loads(conn.call("echo", {}, timeout_s=30).text)["meta"] in (None, {})
        unknown = conn.call("nope", {}, timeout_s=30)  # not refused by the SDK: ours to answer
        assert unknown.is_error and unknown.text == "Error: unknown tool 'nope'"
    finally:
        conn.close()
