"""A key-value store over SQLite as an MCP server: `python -m arena_core.tools.servers.kv_store`.

Stateful: the database is `kv.sqlite` in the episode's state directory (`--state-dir DIR`, else
$ARENA_MCP_STATE_DIR, else the working directory), so the reward can open it after the episode
(`sqlite3.connect(state["state_dir"] + "/kv.sqlite")`). Every write is committed before the tool
answers. The hidden `reset` tool switches to a new state directory (an empty store): with
`episode_state: reset`, Arena calls it at the start of each episode instead of starting a server.
With `episode_state: tagged` one process serves every episode: each call names its episode's
state directory in `_meta` ("arena/state_dir") and runs on that directory's store.
"""

from __future__ import annotations

import argparse
import os
import sqlite3

from arena_core.tools.servers._stdio import StdioServer, ToolError

DB_NAME = "kv.sqlite"
STATE_META_KEY = "arena/state_dir"
server = StdioServer("arena-kv-store")
_db: dict[str, sqlite3.Connection] = {}
_tagged: dict[str, sqlite3.Connection] = {}  # episode_state=tagged: one store per directory
_MAX_TAGGED = 256  # open stores kept (oldest closed first; reopened on the next call)


def _select(meta: dict) -> None:
    """A tagged call: run it on its episode's store (opened once, kept while recent)."""
    state_dir = meta.get(STATE_META_KEY)
    if not isinstance(state_dir, str) or not state_dir:
        return
    conn = _tagged.pop(state_dir, None) or _connect(state_dir)
    _tagged[state_dir] = conn  # most recent last
    while len(_tagged) > _MAX_TAGGED:
        _tagged.pop(next(iter(_tagged))).close()
    _db["conn"] = conn


server.on_meta = _select


def open_store(state_dir: str) -> sqlite3.Connection:
    """(Re)open the store in `state_dir`, creating the table; the previous one is closed."""
    if "conn" in _db and _db["conn"] not in _tagged.values():
        _db.pop("conn").close()
    _db["conn"] = conn = _connect(state_dir)
    return conn


def _connect(state_dir: str) -> sqlite3.Connection:
    os.makedirs(state_dir, exist_ok=True)
    conn = sqlite3.connect(os.path.join(state_dir, DB_NAME), isolation_level=None)
    # committed rows are visible to the reward's reader at once; an episode's store needs no
    # fsync per write (that made each `set` cost ~25 ms on this machine)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    return conn


def _conn() -> sqlite3.Connection:
    return _db["conn"]


KEY = {"key": {"type": "string", "description": "the key"}}


@server.tool(
    "set",
    "Store `value` under `key` (replaces an old value).",
    {**KEY, "value": {"type": "string"}},
)
def set_(key: str, value: str) -> str:
    _conn().execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))
    return f"stored {key}"


@server.tool("get", "The value stored under `key`.", KEY)
def get(key: str) -> str:
    row = _conn().execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise ToolError(f"no key '{key}'")
    return str(row[0])


@server.tool("delete", "Remove `key` and its value.", KEY)
def delete(key: str) -> str:
    if _conn().execute("DELETE FROM kv WHERE key = ?", (key,)).rowcount == 0:
        raise ToolError(f"no key '{key}'")
    return f"deleted {key}"


@server.tool("list_keys", "All keys, sorted, one per line.", {})
def list_keys() -> str:
    return "\n".join(r[0] for r in _conn().execute("SELECT key FROM kv ORDER BY key")) or "(empty)"


@server.tool(
    "reset",
    "Start an empty store in `state_dir` (called by Arena between episodes).",
    {"state_dir": {"type": "string"}},
)
def reset(state_dir: str) -> str:
    open_store(state_dir)
    return "reset"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state-dir", default=os.environ.get("ARENA_MCP_STATE_DIR") or os.getcwd())
    open_store(parser.parse_args().state_dir)
    server.run()


if __name__ == "__main__":
    main()
