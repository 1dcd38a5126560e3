"""`arena validate env --mcp-command | --mcp-url | NAME`: verdicts on good and hostile MCP servers.

The servers are real processes: the embedded key-value store, the example plugin's SDK-written
server over streamable HTTP, and small hostile servers written here, one misbehaviour each. The
CLI is the real argparse wiring (in process); every test checks that no server is left running.
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
from pathlib import Path

import pytest

from arena_core.cli import cmd_validate
from arena_core.errors import ArenaError

pytest.importorskip("mcp")

REPO = Path(__file__).resolve().parents[2]
KV = f"{sys.executable} -m arena_core.tools.servers.kv_store --state-dir {{state_dir}}"
TODO_SERVER = REPO / "plugins" / "arena-mcp-todo" / "arena_mcp_todo" / "server.py"

# One misbehaviour per mode (argv[1]); "good" behaves.
HOSTILE = textwrap.dedent(
    """
    import json, os, sys, time
    mode = sys.argv[1]
    if mode == "no_start":
        print("ImportError: no module named 'databse'", file=sys.stderr)
        sys.exit(1)
    def send(mid, result):
        print(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}), flush=True)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    if mode == "bad_schema":
        schema = {"type": "object", "properties": {"n": {"type": "integr"}}}
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("id") is None:
            continue
        if msg["method"] == "initialize":
            send(msg["id"], {"protocolVersion": msg["params"]["protocolVersion"],
                             "capabilities": {}, "serverInfo": {"name": mode, "version": "0"}})
        elif msg["method"] == "tools/list":
            send(msg["id"], {"tools": [{"name": "count", "description": "count to n",
                                        "inputSchema": schema,
                                        "annotations": {"readOnlyHint": True}}]})
        elif msg["method"] == "tools/call":
            args = msg["params"].get("arguments") or {}
            if mode == "hang":
                time.sleep(60)
            if mode == "exit":
                os._exit(2)
            if mode == "malformed":
                send(msg["id"], {"content": "7", "isError": "maybe"})
                continue
            wrong = msg["params"]["name"] != "count" or not isinstance(args.get("n"), int)
            if wrong and mode != "lenient":
                send(msg["id"], {"content": [{"type": "text", "text": "bad call"}], "isError": True})
            else:
                send(msg["id"], {"content": [{"type": "text", "text": "1 2 3"}], "isError": False})
    """
)


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="arena")
    cmd_validate.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["validate", *argv])
    return args.func(args)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("mcp") / "server.py"
    path.write_text(HOSTILE)
    return f"{sys.executable} {path}"


def _validate(capsys, *argv: str) -> tuple[int, dict]:
    code = run_cli("env", *argv, "--json")
    report = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in report["checks"]} | {"_report": report}


def test_embedded_kv_store_passes_every_check(capsys, no_leftover_children) -> None:
    code, checks = _validate(
        capsys, "--mcp-command", KV, "--episode-state", "fresh", "--call-tools", "all"
    )
    assert code == 0 and checks["_report"]["verdict"] == "PASS"
    names = ["start", "tools", "input_schemas", "calls", "wrong_calls", "episode", "latency"]
    assert all(checks[n]["status"] == "PASS" for n in names), checks
    info = checks["_report"]["info"]
    assert info["call_timeout_s"] == 30.0  # above server-everything's 10 s tool
    assert info["tools"] == ["set", "get", "delete", "list_keys", "reset"]
    assert set(info["latency_ms"]) >= {"set", "get"} and info["latency_ms"]["set"]["calls"] >= 1
    assert "random-policy episode (fresh state)" in checks["episode"]["detail"]


@pytest.mark.parametrize(
    ("mode", "check", "words"),
    [
        ("no_start", "start", "no module named 'databse'"),
        ("bad_schema", "input_schemas", "tool 'count': not valid JSON Schema at properties/n"),
        (
            "hang",
            "calls",
            "within 1 s; the server was stopped (raise the per-call limit with --timeout)",
        ),
        ("exit", "calls", "closed the connection during 'count' (it exited)"),
        ("malformed", "calls", "with a malformed result (ValidationError"),
    ],
)
def test_hostile_servers_get_a_clear_fail(
    capsys, hostile, mode, check, words, no_leftover_children
) -> None:
    started = time.monotonic()
    code, checks = _validate(capsys, "--mcp-command", f"{hostile} {mode}", "--timeout", "1")
    assert code == 1 and checks["_report"]["verdict"] == "FAIL"
    assert checks[check]["status"] == "FAIL" and words in checks[check]["detail"], checks[check]
    assert time.monotonic() - started < 15  # a hung server costs its timeouts, not a hang


def test_a_server_that_accepts_wrong_calls_is_a_warning(capsys, hostile) -> None:
    code, checks = _validate(capsys, "--mcp-command", f"{hostile} lenient")
    assert code == 0 and checks["_report"]["verdict"] == "WARN"
    assert checks["wrong_calls"]["status"] == "WARN"
    assert "'__arena_no_such_tool__' with an unknown tool" in checks["wrong_calls"]["detail"]
    assert "'count' with 'n' given a value that is not integer" in checks["wrong_calls"]["detail"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http_url(capsys, tmp_path, no_leftover_children) -> None:
    pytest.importorskip("mcp.server.mcpserver")  # the to-do server is written for mcp 2.x
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, str(TODO_SERVER), "--http", str(port), "--state-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        code, checks = _validate(capsys, "--mcp-url", url, "--episode-state", "reset")
        assert code == 0, checks
        assert checks["_report"]["info"]["transport"] == "http"
        assert checks["start"]["status"] == "PASS" and "arena-todo" in checks["start"]["detail"]
        assert checks["episode"]["status"] == "PASS"
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_registered_mcp_env_by_name(capsys, tmp_path, no_leftover_children) -> None:
    reward = tmp_path / "reward.py"
    reward.write_text("def reward(question, answer, completion, state):\n    return 0.0\n")
    command = f"env.command=[{sys.executable},-m,arena_core.tools.servers.kv_store]"
    code, checks = _validate(
        capsys,
        "mcp",
        command,
        "env.episode_state=reset",
        "env.isolate_server=true",  # the checks and the episode run it under bubblewrap
        f"env.reward={reward}",
    )
    assert code == 0, checks
    assert checks["_report"]["info"]["isolation"].startswith("bubblewrap")
    assert checks["_report"]["info"]["call_timeout_s"] == 30.0  # the env's tool_timeout_s
    assert checks["config"]["status"] == "PASS" and checks["construction"]["status"] == "PASS"
    assert "random-policy episode (reset state)" in checks["episode"]["detail"]
    assert "receives the episode's final state" in checks["reward"]["detail"]


def test_registered_mcp_env_whose_server_does_not_start(capsys, tmp_path, hostile) -> None:
    reward = tmp_path / "reward.py"
    reward.write_text("def reward(question, answer, completion, state):\n    return 0.0\n")
    argv = hostile.split() + ["no_start"]
    command = f"env.command=[{','.join(argv)}]"
    code, checks = _validate(capsys, "mcp", command, f"env.reward={reward}")
    assert code == 1 and checks["start"]["status"] == "FAIL"
    assert checks["episode"]["status"] == "SKIP"


def test_env_without_target_or_server_is_a_usage_error() -> None:
    with pytest.raises(ArenaError, match="--mcp-command/--mcp-url"):
        run_cli("env")


def test_a_url_without_http_is_said_before_any_connection(capsys, tmp_path) -> None:
    """`localhost:8000/mcp` (the scheme forgotten): a config error naming the key and the form,
    not 'server did not start ... run the command by hand' (there is no command)."""
    with pytest.raises(ArenaError, match="--mcp-url localhost:8000/mcp is not an http"):
        run_cli("env", "--mcp-url", "localhost:8000/mcp")
    reward = tmp_path / "reward.py"
    reward.write_text("def reward(question, answer, completion, state):\n    return 0.0\n")
    code, checks = _validate(capsys, "mcp", "env.url=localhost:8000/mcp", f"env.reward={reward}")
    assert code == 1 and checks["config"]["status"] == "FAIL"
    assert "env.url=localhost:8000/mcp is not an http(s) URL" in checks["config"]["detail"]
