"""A to-do list MCP server over SQLite, written with the official SDK's `MCPServer`.

`python -m arena_mcp_todo.server [--state-dir DIR] [--http PORT]`: the list lives in
`DIR/todo.sqlite` (DIR: --state-dir, else $ARENA_MCP_STATE_DIR, else the working directory).
`reset(state_dir)` switches to an empty list in another directory: Arena calls it between
episodes when the env's `episode_state` is `reset`. With `episode_state: tagged` (this env's
default) one server process serves every episode: each call names its episode's state directory
in the request's `_meta` ("arena/state_dir") and runs on that directory's list. An SDK-written
server costs about a second of CPU to start (importing the SDK), so starting one per concurrent
episode (`reset`: 64 for a step of 8 prompts x 8 samples) was most of a training step's time.
"""

from __future__ import annotations

import argparse
import os
import sqlite3

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

DB_NAME = "todo.sqlite"
STATE_META_KEY = "arena/state_dir"
app = MCPServer("arena-todo", log_level="WARNING")
_db: dict[str, sqlite3.Connection] = {}
_tagged: dict[str, sqlite3.Connection] = {}  # episode_state=tagged: one list per directory


def open_list(state_dir: str) -> None:
    """Use `state_dir/todo.sqlite` from now on (created empty when missing)."""
    if "conn" in _db and _db["conn"] not in _tagged.values():
        _db.pop("conn").close()
    _db["conn"] = _connect(state_dir)


def _list(ctx: Context | None) -> sqlite3.Connection:
    """The list a call works on: its episode's (tagged call) or the current one."""
    meta = ctx.request_context.meta if ctx is not None else None
    state_dir = (meta or {}).get(STATE_META_KEY) if isinstance(meta, dict) else None
    if state_dir is None and meta is not None and not isinstance(meta, dict):
        state_dir = getattr(meta, "model_extra", {}).get(STATE_META_KEY)
    if not isinstance(state_dir, str) or not state_dir:
        return _db["conn"]
    conn = _tagged.pop(state_dir, None) or _connect(state_dir)
    _tagged[state_dir] = conn  # most recent last; the oldest are closed past 256
    while len(_tagged) > 256:
        _tagged.pop(next(iter(_tagged))).close()
    return conn


def _connect(state_dir: str) -> sqlite3.Connection:
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
    return conn


@app.tool()
def add_item(title: str, ctx: Context) -> str:
    """Add an item to the to-do list; returns its id."""
    title = title.strip()
    if not title:
        raise ToolError("title must not be empty")
    cur = _list(ctx).execute("INSERT INTO items (title) VALUES (?)", (title,))
    return f"added item {cur.lastrowid}: {title}"


@app.tool()
def complete_item(item_id: int, ctx: Context) -> str:
    """Mark the item with this id as done."""
    if _list(ctx).execute("UPDATE items SET done = 1 WHERE id = ?", (item_id,)).rowcount == 0:
        raise ToolError(f"no item {item_id}")
    return f"item {item_id} done"


@app.tool()
def list_items(ctx: Context) -> str:
    """Every item: id, [x] when done, title."""
    rows = _list(ctx).execute("SELECT id, done, title FROM items ORDER BY id").fetchall()
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
