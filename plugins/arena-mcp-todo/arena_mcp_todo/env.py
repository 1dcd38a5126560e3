"""The `todo` environment: put the requested items on a to-do list through MCP tools.

A third-party MCP env in a few lines: the config mixes Arena's `MCPServerFields` (which server,
how episodes keep their state, timeouts) into its own fields, and the task mixes `MCPTask`
(sessions on that server) into its examples and prompts. Requests are generated from a seed;
a fixed slice (by a hash of the item set) is held out and never trained on.
"""

from __future__ import annotations

import random
import sys
import zlib
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from arena_core.tasks import Example
from arena_core.tools.mcp_task import MCPServerFields, MCPTask

ITEMS = ("milk", "eggs", "bread", "apples", "coffee", "rice", "soap", "tea", "butter", "lemons")
SYSTEM_PROMPT = "You manage the user's to-do list with the tools. Add exactly what is asked."
SERVER = [sys.executable, "-m", "arena_mcp_todo.server"]


class TodoConfig(MCPServerFields):
    """The `env` section for todo (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "todo"
    max_items: int = Field(3, ge=1, le=5, description="Items per request: 1..max_items.")
    eval_fraction: float = Field(0.2, gt=0, lt=1, description="Share of item sets held out.")
    reward: str = Field("todo_items", description="Default reward: a name or a file path.")
    # one server for every episode, each call tagged with its episode's state directory
    episode_state: Literal["auto", "shared", "fresh", "reset", "tagged"] = "tagged"
    max_turns: int = Field(4, ge=1, description="Model turns per episode.")

    @model_validator(mode="before")
    @classmethod
    def _default_server(cls, data: Any) -> Any:
        """No command and no url: the plugin's own server, run by this Python."""
        if isinstance(data, dict) and not data.get("command") and not data.get("url"):
            data = {**data, "command": list(SERVER)}
        return data


class TodoTask(MCPTask):
    """TextTask (examples, prompts) + MCPTask (the to-do server's tools per episode)."""

    def __init__(self, config: TodoConfig | dict | None = None) -> None:
        if not isinstance(config, TodoConfig):
            config = TodoConfig.model_validate(dict(config or {}))
        self.config = config
        self.name = config.name
        self.reward = config.reward
        self.init_mcp(config)

    def _request(self, rng: random.Random) -> Example:
        items = rng.sample(ITEMS, rng.randint(1, self.config.max_items))
        listed = items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
        return Example(f"Add {listed} to my to-do list.", ",".join(items), {"items": items})

    def problem_key(self, example: Example) -> str:
        return ",".join(sorted(example.meta["items"]))

    def _held_out(self, example: Example) -> bool:
        bucket = zlib.crc32(self.problem_key(example).encode()) % 10_000
        return bucket < self.config.eval_fraction * 10_000

    def train_examples(self, seed: int) -> Iterator[Example]:
        rng = random.Random(seed)
        while True:
            example = self._request(rng)
            if not self._held_out(example):
                yield example

    def eval_examples(self, n: int) -> list[Example]:
        rng, out, seen = random.Random("todo-eval"), [], set()
        for _ in range(100 * n):
            example = self._request(rng)
            key = self.problem_key(example)
            if self._held_out(example) and key not in seen:
                seen.add(key)
                out.append(example)
                if len(out) == n:
                    break
        return out

    def messages(self, example: Example) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": example.question},
        ]

    def gold_completion(self, example: Example) -> str:
        """The final message of a perfect episode (the tool calls came before it)."""
        return f"Added {example.question[4:-18]} to your list."
