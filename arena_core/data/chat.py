"""Chat rows: an sft dataset's `messages` column (a list of `{"role", "content"}` turns).

Multi-turn chats are sft data too: SFT takes the loss on every assistant turn. This module only
checks and normalises the column (a list of dicts as JSONL, parquet and Hugging Face datasets
store it, or the same list as a JSON string, as a CSV cell holds it), so a bad row is reported
with its file, row and column before any model loads.
"""

from __future__ import annotations

import json
from typing import Any

ROLES = ("system", "user", "assistant", "tool")
CHAT_COLUMN = "messages"


def parse_messages(value: Any, where: str, row: int, column: str) -> list[dict[str, str]]:
    """The turns of one row as `[{"role": ..., "content": ...}]`; raises ValueError naming the
    file, row and column (and the turn) when the value is not a chat with an assistant turn."""
    at = f"dataset {where}, row {row}, column '{column}'"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(
                f"{at}: not a list of turns (a string that is not JSON). Write it as "
                '[{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}].'
            ) from None
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{at}: expected a non-empty list of turns, got {type(value).__name__}")
    turns = []
    for i, turn in enumerate(value):
        if not isinstance(turn, dict) or "role" not in turn or "content" not in turn:
            raise ValueError(f"{at}, turn {i}: each turn needs 'role' and 'content' keys")
        role, content = turn["role"], turn["content"]
        if role not in ROLES:
            raise ValueError(f"{at}, turn {i}: unknown role {role!r}; roles: {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise ValueError(f"{at}, turn {i}: content must be text, got {type(content).__name__}")
        turns.append({"role": str(role), "content": content})
    if not any(t["role"] == "assistant" for t in turns):
        raise ValueError(f"{at}: no assistant turn, so nothing to learn from")
    return turns
