"""Prompts as token ids: a task's examples through the tokenizer's chat template, cached (the same
prompts recur in every evaluation), for every LLM path (RL, populations, SFT/DPO evaluation)."""

from __future__ import annotations

from typing import Any

from arena_core.tasks import Example, TextTask


class PromptEncoder:
    """Chat-template encoding of a task's examples, cached (the same prompts recur in eval)."""

    def __init__(self, task: TextTask, tokenizer: Any) -> None:
        self.task, self.tokenizer = task, tokenizer
        self._cache: dict[tuple[str, str], list[int]] = {}

    def __call__(self, example: Example) -> list[int]:
        key = (example.question, example.answer)
        ids = self._cache.get(key)
        if ids is None:
            messages = self.task.messages(example)
            out = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
            ids = list(out["input_ids"] if isinstance(out, dict) else out)
            if len(self._cache) < 100_000:
                self._cache[key] = ids
        return ids
