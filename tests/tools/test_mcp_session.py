"""MCP tool sessions through the official SDK: the embedded servers, per-episode state, failures.

Real servers run as real processes (the embedded calculator and key-value store, and small
hostile servers written here); the reward that reads an episode's database runs in the real
sandboxed reward pool. Every test checks that no server process is left behind.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
import time
from pathlib import Path

import pytest

from arena_core.sandbox import RewardPool, check_reward_contract
from arena_core.tools.mcp_client import ServerSpec
from arena_core.tools.mcp_session import MCPServers, MCPToolSession
from arena_core.tools.protocol import ToolSessionError

pytest.importorskip("mcp")

CALC = [sys.executable, "-m", "arena_core.tools.servers.calculator"]
KV = [sys.executable, "-m", "arena_core.tools.servers.kv_store"]

# A server whose tools misbehave on demand: `crash` exits the process, `hang` never answers.
HOSTILE = textwrap.dedent(
    """
    import json, os, sys, time
    if "--no-start" in sys.argv:
        print("cannot open the database: /nonexistent", file=sys.stderr)
        sys.exit(3)
    TOOLS = [{"name": n, "description": n, "inputSchema": {"type": "object", "properties": {}}}
             for n in ("ok", "crash", "hang")]
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("id") is None:
            continue
        method, res = msg["method"], {}
        if method == "initialize":
            res = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {},
                   "serverInfo": {"name": "hostile", "version": "0"}}
        elif method == "tools/list":
            res = {"tools": TOOLS}
        elif method == "tools/call":
            name = msg["params"]["name"]
            if name == "crash":
                os._exit(1)
            if name == "hang":
                time.sleep(60)
            res = {"content": [{"type": "text", "text": "fine"}], "isError": False}
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": res}), flush=True)
    """
)

STATE_REWARD = textwrap.dedent(
    """
    import os, sqlite3

    def reward(question, answer, completion, state):
        if not state:
            return -1.0
        db = os.path.join(state["state_dir"], "kv.sqlite")
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        row = conn.execute("SELECT value FROM kv WHERE key = 'x'").fetchone()
        return 1.0 if row and row[0] == answer else 0.0
    """
)


# A server that tries to read and write where it was not invited.
PROBE = textwrap.dedent(
    """
    from arena_core.tools.servers._stdio import StdioServer

    server = StdioServer("probe")

    @server.tool("probe", "read one file, write another", {"read": {"type": "string"},
                                                          "write": {"type": "string"}})
    def probe(read, write):
        out = []
        for what, fn in (("read", lambda: open(read).read()),
                         ("write", lambda: open(write, "w").write("x"))):
            try:
                fn()
                out.append(f"{what}:ok")
            except OSError as exc:
                out.append(f"{what}:{type(exc).__name__}")
        return " ".join(out)

    server.run()
    """
)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> list[str]:
    path = tmp_path_factory.mktemp("mcp") / "hostile.py"
    path.write_text(HOSTILE)
    return [sys.executable, str(path)]


def test_calculator_shared_server_answers_and_refuses(no_leftover_children) -> None:
    with MCPServers(ServerSpec(command=CALC), episode_state="shared") as servers:
        first, second = servers.open_session(), servers.open_session()
        tools = first.tools()
        assert [t["function"]["name"] for t in tools] == ["add", "sub", "mul", "div"]
        params = tools[0]["function"]["parameters"]
        assert params["required"] == ["a", "b"] and params["properties"]["a"]["type"] == "number"
        assert first.call("add", {"a": 3, "b": 4}, 5.0).text == "7"
        assert second.call("div", {"a": 7, "b": 2}, 5.0).text == "3.5"
        zero = first.call("div", {"a": 1, "b": 0}, 5.0)
        assert zero.is_error and "division by zero" in zero.text
        wrong = first.call("add", {"a": "x"}, 5.0)
        assert wrong.is_error and "missing required argument 'b'" in wrong.text
        unknown = first.call("pow", {"a": 2, "b": 3}, 5.0)
        assert unknown.is_error and "Available tools: add, div, mul, sub" in unknown.text
        assert servers.stats["started"] == 1  # both episodes on one process
        first.close(), second.close()
        state = first.final_state()
        assert [c["name"] for c in state["calls"]] == ["add", "div", "add", "pow"]
        assert state["failed"] is False and json.dumps(state)


def test_fresh_state_per_episode_reaches_a_state_reward(tmp_path, no_leftover_children) -> None:
    reward = tmp_path / "reward.py"
    reward.write_text(STATE_REWARD)
    assert check_reward_contract(str(reward)).takes_state == "keyword"
    with MCPServers(ServerSpec(command=KV), episode_state="fresh") as servers:
        one = servers.open_session()
        assert "reset" not in [t["function"]["name"] for t in one.tools()]  # Arena's, hidden
        assert one.call("set", {"key": "x", "value": "42"}, 5.0).text == "stored x"
        one.close()
        two = servers.open_session()
        assert two.call("get", {"key": "x"}, 5.0).is_error  # a fresh store: nothing leaks
        two.close()
        s1, s2 = one.final_state(), two.final_state()
        assert s1["state_dir"] != s2["state_dir"] and servers.stats["started"] == 2
        with sqlite3.connect(Path(s1["state_dir"]) / "kv.sqlite") as conn:
            assert conn.execute("SELECT value FROM kv").fetchall() == [("42",)]
        # the sandboxed reward reads the database (the state root is mounted into the sandbox)
        with RewardPool(str(reward), workers=1, expose=[servers.state_root]) as pool:
            items = [("q", "42", "c", s1), ("q", "42", "c", s2), ("q", "41", "c", s1)]
            assert [o.value for o in pool.score(items)] == [1.0, 0.0, 0.0]
            assert pool.score([("q", "42", "c")])[0].value == -1.0  # no state: None


def test_three_argument_rewards_ignore_the_state(tmp_path) -> None:
    reward = tmp_path / "plain.py"
    reward.write_text(
        "def reward(question, answer, completion):\n    return float(answer in completion)\n"
    )
    keyword = tmp_path / "keyword.py"
    keyword.write_text("def reward(q, a, c, *, state=None):\n    return float(len(state or {}))\n")
    assert check_reward_contract(str(keyword)).takes_state == "keyword"
    fourth = tmp_path / "fourth.py"
    fourth.write_text("def reward(q, a, c, episode):\n    return float(len(episode))\n")
    assert check_reward_contract(str(fourth)).takes_state == "position"
    with RewardPool(str(reward), workers=1) as pool:
        out = pool.score([("q", "7", "it is 7", {"state_dir": "/x"}), ("q", "7", "no")])
        assert [o.value for o in out] == [1.0, 0.0]
    for path in (keyword, fourth):
        with RewardPool(str(path), workers=1) as pool:
            assert pool.score([("q", "7", "c", {"a": 1, "b": 2})])[0].value == 2.0


def test_reset_mode_reuses_one_server_with_an_empty_store(no_leftover_children) -> None:
    with MCPServers(ServerSpec(command=KV), episode_state="reset") as servers:
        dirs = []
        for value in ("a", "b", "c"):
            session = servers.open_session()
            assert session.call("list_keys", {}, 5.0).text == "(empty)"
            session.call("set", {"key": "x", "value": value}, 5.0)
            session.close()
            dirs.append(session.final_state()["state_dir"])
        assert servers.stats["started"] == 1 and len(set(dirs)) == 3
        with sqlite3.connect(Path(dirs[1]) / "kv.sqlite") as conn:
            assert conn.execute("SELECT value FROM kv").fetchall() == [("b",)]


def test_server_exit_fails_the_episode_and_is_replaced(hostile, no_leftover_children) -> None:
    with MCPServers(ServerSpec(command=hostile), episode_state="shared") as servers:
        session = servers.open_session()
        assert session.call("ok", {}, 5.0).text == "fine"
        with pytest.raises(ToolSessionError, match="closed the connection during 'crash'"):
            session.call("crash", {}, 5.0)
        with pytest.raises(ToolSessionError):  # the episode stays failed
            session.call("ok", {}, 5.0)
        session.close()
        assert session.final_state()["failed"] is True
        again = servers.open_session()  # a new server for the next episode
        assert again.call("ok", {}, 5.0).text == "fine"
        again.close()
        assert servers.stats["restarts"] == 1 and servers.stats["failed_episodes"] == 1


def test_a_hung_call_times_out_and_its_server_is_killed(hostile, no_leftover_children) -> None:
    with MCPServers(ServerSpec(command=hostile), episode_state="fresh") as servers:
        session = servers.open_session()
        started = time.monotonic()
        with pytest.raises(ToolSessionError, match="'hang' did not answer within 0.5 s"):
            session.call("hang", {}, 0.5)
        assert time.monotonic() - started < 5.0
        session.close()


def test_a_server_that_does_not_start_is_a_session_error(hostile, no_leftover_children) -> None:
    with MCPServers(ServerSpec(command=[*hostile, "--no-start"])) as servers:
        with pytest.raises(ToolSessionError, match="cannot open the database"):
            servers.open_session()
    with MCPServers(ServerSpec(command=["no-such-mcp-server-binary"])) as servers:
        with pytest.raises(ToolSessionError, match="command 'no-such-mcp-server-binary' not"):
            servers.open_session()


def test_stdio_convenience_shares_a_stateless_server(no_leftover_children) -> None:
    sessions = [MCPToolSession.stdio(CALC, episode_state="shared") for _ in range(2)]
    assert [s.call("mul", {"a": 6, "b": 7}, 5.0).text for s in sessions] == ["42", "42"]
    for s in sessions:
        s.close()
    assert sessions[0]._servers is sessions[1]._servers
    sessions[0]._servers.close()


def test_an_isolated_server_writes_only_its_state(tmp_path_factory, no_leftover_children) -> None:
    """env.isolate_server: the server runs under bubblewrap like a reward (its own state
    directory writable, nothing else; the host's /tmp hidden)."""
    code = tmp_path_factory.mktemp("probe") / "probe.py"
    code.write_text(PROBE)
    secret_dir = tmp_path_factory.mktemp("secret")
    (secret_dir / "token.txt").write_text("hunter2")
    args = {"read": str(secret_dir / "token.txt"), "write": str(secret_dir / "escape.txt")}
    seen = {}
    for isolate in (False, True):
        spec = ServerSpec(command=[sys.executable, str(code)], isolate=isolate)
        with MCPServers(spec, episode_state="fresh") as servers:
            session = servers.open_session()
            seen[isolate] = session.call("probe", args, 10.0).text
            inside = {"read": args["read"], "write": f"{session.state_dir}/mine.txt"}
            if isolate:
                assert session.call("probe", inside, 10.0).text.endswith("write:ok")
            session.close()
            (secret_dir / "escape.txt").unlink(missing_ok=True)
    assert seen[False] == "read:ok write:ok"
    assert seen[True] == "read:FileNotFoundError write:FileNotFoundError", seen[True]
