"""`arena validate env --mcp-command CMD` leaves nothing running, whatever the server does.

Real servers, one misbehaviour each: it never answers `initialize`; it ignores SIGTERM and starts
a child that ignores it too; its child leaves the process group with setsid(); it answers the
start, then hangs in a tool call while ignoring SIGTERM. After the real CLI returns, psutil must
find no process of the server (each carries a token of the test in its command line), wherever
it was reparented to.
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from arena_core.cli import main as arena_cli

pytest.importorskip("mcp")

SERVER = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, time
    mode, token = sys.argv[1], sys.argv[2]
    CHILD = ("import os, signal, sys, time\\n"
             "if sys.argv[1] == 'escape': os.setsid()\\n"
             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
             "time.sleep(600)\\n")
    if mode != "silent":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen([sys.executable, "-c", CHILD, mode, token])
    def send(mid, result):
        print(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}), flush=True)
    for line in sys.stdin:
        msg = json.loads(line)
        if mode != "hang_call" or msg.get("id") is None:
            continue  # never answers
        if msg["method"] == "initialize":
            send(msg["id"], {"protocolVersion": msg["params"]["protocolVersion"],
                             "capabilities": {}, "serverInfo": {"name": "h", "version": "0"}})
        elif msg["method"] == "tools/list":
            send(msg["id"], {"tools": [{"name": "wait", "description": "waits",
                                        "inputSchema": {"type": "object"},
                                        "annotations": {"readOnlyHint": True}}]})
        elif msg["method"] == "tools/call":
            time.sleep(600)
    time.sleep(600)  # stdin closed: linger (SIGTERM ignored except in "silent")
    """
)


def _with_token(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if token in " ".join(proc.info["cmdline"] or []) and proc.status() != "zombie":
                found.append(proc)
        except psutil.Error:
            pass
    return found


@pytest.mark.parametrize(
    ("mode", "check"),
    [
        ("silent", "start"),  # reads stdin, never answers initialize
        ("stubborn", "start"),  # ignores SIGTERM, its child too
        ("escape", "start"),  # its child calls setsid(): not in the server's process group
        ("hang_call", "calls"),  # starts, then hangs in a call, ignoring SIGTERM, with a child
    ],
)
def test_no_server_process_survives_validation(tmp_path: Path, capsys, mode, check) -> None:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    token = f"arena-leftover-{uuid.uuid4().hex}"
    command = f"{sys.executable} {script} {mode} {token}"
    started = time.monotonic()
    code = arena_cli.main(
        [
            "validate",
            "env",
            "--mcp-command",
            command,
            "--start-timeout",
            "3",
            "--timeout",
            "2",
            "--json",
        ]  # fmt: skip
    )
    report = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in report["checks"]}
    assert code == 1 and checks[check]["status"] == "FAIL", checks
    left = _with_token(token)
    assert not left, f"left running after `arena validate env`: {[p.pid for p in left]}"
    assert time.monotonic() - started < 60  # each stop is bounded: TERM, a grace, then KILL
