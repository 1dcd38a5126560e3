"""The contract of text environments (LLM tasks): one definition for the trainer, `arena validate
env` and `arena_core.testing.EnvConformance`.

A text environment hands out prompts with reference answers and names the reward that scores them.
The runtime never needs to know where the rows come from (a Hugging Face dataset, a local file or a
generator), which keeps data-source branching out of the loops.

Required: `name`, `reward`, `train_examples(seed)`, `eval_examples(n)`, `messages(example)`.
Optional (looked up with getattr; defaults in brackets):
- `gold_completion(example) -> str`: a completion that earns the reward's maximum, used to check
  that the reward and the task agree [`example.answer`];
- `problem_key(example) -> str`: examples with one key are the same problem (`3 + 4` and `4 + 3`,
  or one sum phrased two ways); the held-out check compares keys [`example.question`].
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

REQUIRED = ("name", "reward", "train_examples", "eval_examples", "messages")


@dataclass(frozen=True)
class Example:
    """One prompt with its reference: `question` and `answer` are what the reward receives."""

    question: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TextTask(Protocol):
    """What an LLM run needs from an environment (see the module docstring for optional parts)."""

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


def contract_problems(obj: Any) -> list[str]:
    """What `obj` lacks to be a TextTask, as sentences (empty when it is one).

    Used by the trainer (build_task), `arena validate env` and EnvConformance, so all three accept
    and refuse the same objects with the same words.
    """
    problems = []
    for attr in ("name", "reward"):
        value = getattr(obj, attr, None)
        if not isinstance(value, str) or not value:
            problems.append(f"`{attr}` must be a non-empty str (got {value!r})")
    for method in ("train_examples", "eval_examples", "messages"):
        if not callable(getattr(obj, method, None)):
            problems.append(f"it has no method `{method}`")
    for method in ("gold_completion", "problem_key"):
        if hasattr(obj, method) and not callable(getattr(obj, method)):
            problems.append(f"optional `{method}` is set but is not a method")
    return problems


def gold_completion(task: Any, example: Example) -> str:
    """The task's maximum-reward completion for `example` (its answer when it defines none)."""
    fn = getattr(task, "gold_completion", None)
    return str(fn(example)) if callable(fn) else example.answer


def problem_key(task: Any, example: Example) -> str:
    """The task's identity of the problem in `example` (its question when it defines none)."""
    fn = getattr(task, "problem_key", None)
    return str(fn(example)) if callable(fn) else example.question


T = TypeVar("T")


def shuffled_epochs(rows: Sequence[T], rng: random.Random) -> Iterator[T]:
    """`rows` forever, reshuffled by `rng` at every epoch: a text task's `train_examples` stream.

    Deterministic for a given `rng`, so a resumed run that skips the first n items replays its
    data position exactly."""
    order = list(range(len(rows)))
    while True:
        rng.shuffle(order)
        for i in order:
            yield rows[i]
