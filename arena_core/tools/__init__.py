"""Tools for agents: the session contract, Python-function and MCP sessions, tool-call parsing.

`protocol` is the contract (ToolResult, ToolSession, ToolTask); `python_session` serves plain
Python functions as tools; `mcp_session` serves an MCP server's tools (needs the `mcp` extra);
`parsing` turns model text into typed tool calls. The multi-turn episode loop that uses them is
`arena_core.engines.multi_turn`.
"""

from arena_core.tools.protocol import (
    DEFAULT_MAX_TOOL_RESPONSE_TOKENS,
    DEFAULT_MAX_TURNS,
    DEFAULT_TOOL_TIMEOUT_S,
    ToolResult,
    ToolSession,
    ToolSessionError,
    ToolTask,
    function_schema,
    is_tool_task,
    tool_names,
    tool_task_problems,
)

__all__ = [
    "DEFAULT_MAX_TOOL_RESPONSE_TOKENS",
    "DEFAULT_MAX_TURNS",
    "DEFAULT_TOOL_TIMEOUT_S",
    "ToolResult",
    "ToolSession",
    "ToolSessionError",
    "ToolTask",
    "function_schema",
    "is_tool_task",
    "tool_names",
    "tool_task_problems",
]
