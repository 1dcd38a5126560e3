"""What an MCP episode costs, side by side: episode_state shared / reset / tagged / fresh, for the
stdlib key-value server and the example plugin's SDK-written to-do server.

Each configuration runs EPISODES sequential episodes of CALLS tool calls (open the session, the
calls, close). Then a training step's worth of episodes (STEP_EPISODES, all open at once as the runtime's
lockstep episodes are, from cold) is opened, called and closed one after another
(`env.tool_concurrency=1`) and on the multi-turn runner's bounded pool (`env.tool_concurrency=8`,
the default), with `fresh` servers; and on that pool with `reset` (a server per concurrent
episode) against `tagged` (one server, each call naming its episode's state directory).
Prints one JSON line: seconds per episode and per call for each, and the ratios fresh/shared,
sdk/stdlib and serial/concurrent. Run: `python bench/mcp_sessions.py` (needs the `mcp` extra).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from arena_core.tools.concurrency import BoundedPool
from arena_core.tools.mcp_client import ServerSpec
from arena_core.tools.mcp_session import MCPServers
from arena_core.tools.protocol import DEFAULT_TOOL_CONCURRENCY

EPISODES, CALLS = 12, 4
STEP_EPISODES = 8
SERVERS = {
    "stdlib": ([sys.executable, "-m", "arena_core.tools.servers.kv_store"], "set", "key"),
    "sdk": (
        [
            sys.executable,
            str(Path(__file__).parents[1] / "plugins/arena-mcp-todo/arena_mcp_todo/server.py"),
        ],
        "add_item",
        "title",
    ),
}


def run(kind: str, mode: str) -> dict[str, float]:
    command, tool, arg = SERVERS[kind]
    extra = {"value": "v"} if tool == "set" else {}
    episodes, calls = [], []
    with MCPServers(ServerSpec(command=command), episode_state=mode) as servers:  # type: ignore[arg-type]
        for e in range(EPISODES):
            started = time.perf_counter()
            session = servers.open_session()
            for c in range(CALLS):
                t0 = time.perf_counter()
                result = session.call(tool, {arg: f"item{e}-{c}", **extra}, 10.0)
                calls.append(time.perf_counter() - t0)
                assert not result.is_error, result.text
            session.close()
            episodes.append(time.perf_counter() - started)
    # the first episode of shared/reset pays the server start: report it apart
    return {
        "first_episode_s": round(episodes[0], 4),
        "episode_s": round(statistics.median(episodes[1:]), 4),
        "call_ms": round(statistics.median(calls) * 1000, 3),
    }


def step(kind: str, concurrency: int, mode: str = "fresh") -> float:
    """Seconds for one step's episodes, from cold (no server yet): open, CALLS calls, close each
    (all open at once, as the runtime's lockstep episodes are)."""
    command, tool, arg = SERVERS[kind]
    extra = {"value": "v"} if tool == "set" else {}

    def calls(pair: tuple[int, object]) -> None:
        e, session = pair
        for c in range(CALLS):
            result = session.call(tool, {arg: f"item{e}-{c}", **extra}, 30.0)  # type: ignore[attr-defined]
            assert not result.is_error, result.text

    pool = BoundedPool(concurrency)
    with MCPServers(ServerSpec(command=command), episode_state=mode) as servers:  # type: ignore[arg-type]
        started = time.perf_counter()
        sessions = pool.map(lambda _: servers.open_session(), list(range(STEP_EPISODES)))
        pool.map(calls, list(enumerate(sessions)))
        pool.map(lambda session: session.close(), sessions)
        took = time.perf_counter() - started
    pool.close()
    return round(took, 3)


def main() -> None:
    out: dict[str, object] = {"episodes": EPISODES, "calls_per_episode": CALLS}
    for kind in SERVERS:
        for mode in ("shared", "reset", "tagged", "fresh"):
            out[f"{kind}_{mode}"] = run(kind, mode)
    out["step_episodes"], out["tool_concurrency"] = STEP_EPISODES, DEFAULT_TOOL_CONCURRENCY
    for kind in SERVERS:
        serial = step(kind, 1)
        concurrent = step(kind, DEFAULT_TOOL_CONCURRENCY)
        out[f"{kind}_step_serial_s"], out[f"{kind}_step_concurrent_s"] = serial, concurrent
        out[f"{kind}_serial_over_concurrent"] = round(serial / concurrent, 2)
        # a stateful server's step: reset needs a server per concurrent episode, tagged one
        reset = step(kind, DEFAULT_TOOL_CONCURRENCY, "reset")
        tagged = step(kind, DEFAULT_TOOL_CONCURRENCY, "tagged")
        out[f"{kind}_step_reset_s"], out[f"{kind}_step_tagged_s"] = reset, tagged
        out[f"{kind}_reset_over_tagged"] = round(reset / tagged, 2)
    for kind in SERVERS:
        fresh, shared = out[f"{kind}_fresh"], out[f"{kind}_shared"]
        out[f"{kind}_fresh_over_shared"] = round(fresh["episode_s"] / shared["episode_s"], 2)  # type: ignore[index]
    out["sdk_over_stdlib_fresh"] = round(
        out["sdk_fresh"]["episode_s"] / out["stdlib_fresh"]["episode_s"],
        2,  # type: ignore[index]
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
