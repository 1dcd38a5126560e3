"""A to-do list MCP server over SQLite, written with the official SDK's `MCPServer`.

`python -m arena_mcp_todo.server [--state-dir DIR] [--http PORT]`: the list lives in
`DIR/todo.sqlite` (DIR: --state-dir, else $ARENA_MCP_STATE_DIR, else the working directory).
`reset(state_dir)` switches to an empty list in another directory: Arena calls it between
episodes when the env's `episode_state` is `reset`.
"""

from __future__ import annotations

import argparse
import os
import sqlite3

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

DB_NAME = "todo.sqlite"
app = MCPServer("arena-todo", log_level="WARNING")
_db: dict[str, sqlite3.Connection] = {}


def open_list(state_dir: str) -> None:
    """Use `state_dir/todo.sqlite` from now on (created empty when missing)."""
    if "conn" in _db:
        _db.pop("conn").close()
    os.makedirs(state_dir, exist_ok=True)
    # tools may run on worker threads: one connection, used by one call at a time
    conn = sqlite3.connect(
        os.path.join(state_dir, DB_NAME), isolation_level=None, check_same_thread=False
    )
    conn.execute("PRAGMA synchronous=OFF")  # visible to readers on commit; no fsync needed
    conn.execute(
        "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, title TEXT NOT NULL, "
        "done INTEGER NOT NULL DEFAULT 0)"
    )
    _db["conn"] = conn


@app.tool()
def add_item(title: str) -> str:
    """Add an item to the to-do list; returns its id."""
    title = title.strip()
    if not title:
        raise ToolError("title must not be empty")
    cur = _db["conn"].execute("INSERT INTO items (title) VALUES (?)", (title,))
    return f"added item {cur.lastrowid}: {title}"


@app.tool()
def complete_item(item_id: int) -> str:
    """Mark the item with this id as done."""
    if _db["conn"].execute("UPDATE items SET done = 1 WHERE id = ?", (item_id,)).rowcount == 0:
        raise ToolError(f"no item {item_id}")
    return f"item {item_id} done"


@app.tool()
def list_items() -> str:
    """Every item: id, [x] when done, title."""
    rows = _db["conn"].execute("SELECT id, done, title FROM items ORDER BY id").fetchall()
    return "\n".join(f"{i} [{'x' if d else ' '}] {t}" for i, d, t in rows) or "(empty)"


@app.tool()
def reset(state_dir: str) -> str:
    """Start an empty list in `state_dir` (called by Arena between episodes)."""
    open_list(state_dir)
    return "reset"


def main() -> None:
    parser = argparse.ArgumentParser(description="The arena-mcp-todo MCP server")
    parser.add_argument("--state-dir", default=os.environ.get("ARENA_MCP_STATE_DIR") or os.getcwd())
    parser.add_argument("--http", type=int, help="serve streamable HTTP on this port (127.0.0.1)")
    args = parser.parse_args()
    open_list(args.state_dir)
    if args.http:
        app.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        app.run()


if __name__ == "__main__":
    main()
