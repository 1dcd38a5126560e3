"""Per-episode state and concurrent sessions of MCP tool envs, counted in real processes.

Server processes are counted from the operating system (psutil: the children of this process
whose command line names the server), sampled while the episodes' sessions are open: the
stateful key-value store gets an empty store per episode (reset by default, a process per
episode with `fresh`, one process for all with `tagged`), and a step's sessions start
concurrently (`env.tool_concurrency`) instead of one after another. (The stateless calculator's
one process per run is counted in test_tool_run.py, through the real runtime.)
"""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from arena_core.engines.base import SamplingParams
from arena_core.tasks import Example
from arena_envs.mcp import make_mcp

from .conftest import ScriptedPolicy, text_ids

pytest.importorskip("mcp")

KV = f"{sys.executable} -m arena_core.tools.servers.kv_store"


def _server_pids(marker: str) -> set[int]:
    """PIDs of this process's descendants whose command line contains `marker`."""
    pids = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if any(marker in part for part in proc.cmdline()):
                pids.add(proc.pid)
        except psutil.Error:
            continue
    return pids


def _kv_script(tok):
    """Turn 1: list the keys, then store the question under `x`; turn 2: done."""

    def script(prompt: list[int], turn: int) -> list[int]:
        if turn:
            return text_ids(tok, "Done.")
        question = tok.decode(prompt).split("<|im_start|>user\n", 1)[1].split("<|im_end|>")[0]
        calls = [
            {"name": "list_keys", "arguments": {}},
            {"name": "set", "arguments": {"key": "x", "value": question}},
        ]
        return text_ids(tok, "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls))

    return script


@pytest.mark.parametrize(
    ("state", "resolved", "processes"),
    [("auto", "reset", 2), ("fresh", "fresh", 4), ("tagged", "tagged", 1)],
)
def test_a_stateful_server_gives_every_episode_an_empty_store(
    state: str, resolved: str, processes: int, tok, tmp_path: Path, no_leftover_children
) -> None:
    """The key-value store lists a `reset` tool, so `auto` resets a process per episode (two
    batches of two episodes: two processes, each reused); `fresh` starts one per episode;
    `tagged` serves all four from one process, each call naming its episode's directory. Either way each episode starts from an empty store
    and leaves its own database for the reward."""
    from arena_core.engines.multi_turn import EpisodeRunner

    task = make_mcp({"command": KV, "episode_state": state, "reward": str(tmp_path / "r.py")})
    pids: set[int] = set()
    script = _kv_script(tok)

    def counting(prompt: list[int], turn: int) -> list[int]:
        pids.update(_server_pids("arena_core.tools.servers.kv_store"))
        return script(prompt, turn)

    examples = [Example(f"v{i}", "") for i in range(4)]
    try:
        runner = EpisodeRunner(task, tok)
        params = SamplingParams(max_new_tokens=400)
        comps = runner.run(ScriptedPolicy(tok, counting), examples[:2], params)
        comps += runner.run(ScriptedPolicy(tok, counting), examples[2:], params)
        assert task.servers.episode_state == resolved
        assert len(pids) == processes and task.servers.stats["started"] == processes
        dirs = set()
        for ex, c in zip(examples, comps, strict=True):
            assert c.episode["end"] == "no_call" and c.episode["outcomes"] == {"ok": 2}
            assert "(empty)" in c.text  # nothing from an earlier episode
            state_dir = c.episode["final_state"]["state_dir"]
            dirs.add(state_dir)
            with sqlite3.connect(Path(state_dir) / "kv.sqlite") as conn:
                assert conn.execute("SELECT key, value FROM kv").fetchall() == [("x", ex.question)]
        assert len(dirs) == 4
    finally:
        task.close()


# A calculator that takes a second to start, noting when it began and when it was ready.
SLOW_START = textwrap.dedent(
    """
    import os, time
    began = time.time()
    time.sleep(1.0)
    with open(os.path.join(os.environ["ARENA_MCP_STATE_DIR"], "start.txt"), "w") as f:
        f.write(f"{began} {time.time()}")
    from arena_core.tools.servers.calculator import server
    server.run()
    """
)


@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_steps_sessions_start_concurrently(
    concurrency: int, tok, tmp_path: Path, no_leftover_children
) -> None:
    """env.tool_concurrency: with 3 the three servers of a batch all start before any is ready
    (their starts overlap); with 1 each starts after the previous one was ready."""
    from arena_core.engines.multi_turn import EpisodeRunner

    server = tmp_path / "slow.py"
    server.write_text(SLOW_START)
    task = make_mcp(
        {
            "command": [sys.executable, str(server)],
            "episode_state": "fresh",
            "tool_concurrency": concurrency,
            "reward": str(tmp_path / "r.py"),
        }
    )
    call = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
    policy = ScriptedPolicy(tok, lambda p, t: text_ids(tok, [call, "<answer>5</answer>"][t]))
    spans = []
    try:
        comps = EpisodeRunner(task, tok).run(
            policy, [Example(f"q{i}", "5") for i in range(3)], SamplingParams(max_new_tokens=200)
        )
        for c in comps:
            assert c.episode["end"] == "no_call" and c.text.endswith("<answer>5</answer>")
            state_dir = Path(c.episode["final_state"]["state_dir"])
            spans.append(tuple(map(float, (state_dir / "start.txt").read_text().split())))
    finally:
        task.close()
    spans.sort()
    if concurrency == 1:
        assert all(spans[i + 1][0] >= spans[i][1] for i in range(2)), spans
    else:
        assert max(s[0] for s in spans) < min(s[1] for s in spans), spans
