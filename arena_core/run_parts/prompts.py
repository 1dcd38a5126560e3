"""Prompts as token ids: a task's examples through the tokenizer's chat template, cached (the same
prompts recur in every evaluation), for every LLM path (RL, populations, SFT/DPO evaluation)."""

from __future__ import annotations

from typing import Any

from arena_core.models.chat_template import require_chat_template
from arena_core.tasks import Example, TextTask

MAX_CACHED = (
    100_000  # prompts kept per cache: a long run's stream of distinct prompts stays bounded
)


def chat_prompt(
    tokenizer: Any, messages: list[dict[str, str]], cache: dict[str, list[int]]
) -> list[int]:
    """The ids of chat `messages` with the assistant turn opened, cached in `cache`."""
    key = repr(messages)
    if (ids := cache.get(key)) is None:
        require_chat_template(tokenizer, str(getattr(tokenizer, "name_or_path", "") or "?"))
        out = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        ids = list(out["input_ids"] if isinstance(out, dict) else out)
        if len(cache) < MAX_CACHED:
            cache[key] = ids
    return ids


class PromptEncoder:
    """Chat-template encoding of a task's examples, cached (the same prompts recur in eval)."""

    def __init__(self, task: TextTask, tokenizer: Any) -> None:
        self.task, self.tokenizer = task, tokenizer
        self._cache: dict[str, list[int]] = {}

    def __call__(self, example: Example) -> list[int]:
        return chat_prompt(self.tokenizer, self.task.messages(example), self._cache)
