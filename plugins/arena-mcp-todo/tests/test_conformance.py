"""arena-mcp-todo's own tests: Arena's MCP conformance suite, subclassed.

Run with `pytest plugins/arena-mcp-todo/tests` after `pip install -e plugins/arena-mcp-todo`: the
suite finds the env through the installed entry point, so this also proves the packaging.
"""

from __future__ import annotations

from arena_core.testing import MCPEnvConformance


class TestTodoEnv(MCPEnvConformance):
    env_name = "todo"
    overrides = ["env.max_items=2"]
