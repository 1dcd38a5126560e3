"""The Arena entry point of arena-mcp-todo (`[project.entry-points.arena]` in pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

from arena_core import hookimpl
from arena_core.hookspecs import Register
from arena_mcp_todo.env import TodoConfig, TodoTask

REWARD_FILE = Path(__file__).with_name("reward.py")


@hookimpl
def register_envs(register: Register) -> None:
    register(
        "todo",
        TodoTask,
        schema=TodoConfig,
        description="Put requested items on a to-do list through an MCP server (SQLite); "
        "the reward reads the episode's database.",
    )


@hookimpl
def register_rewards(register: Register) -> None:
    register(
        "todo_items",
        str(REWARD_FILE),
        description="Share of the requested items found in the episode's to-do database.",
    )


@hookimpl
def config_searchpath() -> list[str]:
    return ["pkg://arena_mcp_todo.conf"]
