"""What an MCP episode costs, side by side: episode_state shared / reset / fresh, for the embedded
stdlib key-value server and the example plugin's SDK-written to-do server.

Each configuration runs EPISODES sequential episodes of CALLS tool calls (open the session, the
calls, close). Prints one JSON line: seconds per episode and per call for each, and the ratios
fresh/shared and sdk/stdlib. Run: `python bench/mcp_sessions.py` (needs the `mcp` extra).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from arena_core.tools.mcp_client import ServerSpec
from arena_core.tools.mcp_session import MCPServers

EPISODES, CALLS = 12, 4
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


def main() -> None:
    out: dict[str, object] = {"episodes": EPISODES, "calls_per_episode": CALLS}
    for kind in SERVERS:
        for mode in ("shared", "reset", "fresh"):
            out[f"{kind}_{mode}"] = run(kind, mode)
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
