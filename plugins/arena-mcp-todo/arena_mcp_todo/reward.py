"""The todo reward: which of the requested items did the episode really put on the list?

`state` is the episode's final state from Arena's MCP session: `state_dir` holds the server's
`todo.sqlite`. The answer is the requested titles, comma-separated. Score: the share of them
found in the database, minus 0.25 per extra item (never below 0); 0 for a failed episode.
"""

from __future__ import annotations

import os
import sqlite3

MAX_REWARD = 1.0


def reward(question: str, answer: str, completion: str, state: dict | None = None) -> float:
    if not state or state.get("failed") or not state.get("state_dir"):
        return 0.0
    path = os.path.join(state["state_dir"], "todo.sqlite")
    if not os.path.exists(path):
        return 0.0
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        titles = [t.strip().lower() for (t,) in conn.execute("SELECT title FROM items")]
    finally:
        conn.close()
    wanted = [w.strip().lower() for w in answer.split(",") if w.strip()]
    if not wanted:
        return 0.0
    found = sum(1 for w in wanted if w in titles)
    extra = max(0, len(titles) - found)
    return max(0.0, found / len(wanted) - 0.25 * extra)
