"""The contract of text environments (LLM tasks).

A text environment hands out prompts with reference answers and names the reward that scores them.
The runtime never needs to know where the rows come from (a Hugging Face dataset, a local file or a
generator), which keeps data-source branching out of the loops.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Example:
    """One prompt with its reference: `question` and `answer` are what the reward receives."""

    question: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TextTask(Protocol):
    """What an LLM run needs from an environment."""

    name: str
    reward: str  # default reward: a registered reward name or a path to a reward file

    def train_examples(self, seed: int) -> Iterator[Example]:
        """An endless, seeded stream of training examples (reshuffled each epoch)."""
        ...

    def eval_examples(self, n: int) -> list[Example]:
        """`n` held-out examples that train_examples never yields (same list on every call)."""
        ...

    def messages(self, example: Example) -> list[dict[str, str]]:
        """The chat messages (system + user) that prompt the model for `example`."""
        ...
