"""MCP servers shipped with Arena, each started with `python -m arena_core.tools.servers.<name>`.

- `calculator`: add, sub, mul, div (stateless; the embedded tool task's server);
- `kv_store`: a key-value store over SQLite (stateful: one database per episode, whose path is
  the episode's final state).

They speak MCP over stdio through `_stdio` (standard library only), not the `mcp` SDK: a server is
started per episode for stateful tasks, and importing the SDK alone costs about a second on this
machine, while these start in a few tens of milliseconds. Clients still use the official SDK.
"""
