"""`countdown`: reach a target number with + - * over a few given numbers, each used once.

The shortest form of a text task (arena_core.tasks.TextTask): a config schema, a class with the
five required members, and `gold_completion` so `arena validate env countdown` can check that the
reward gives a correct expression the maximum. Problems are generated from a seed; a fixed slice
of them (by a hash of the numbers and the target) is held out and never trained on.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from arena_core.tasks import Example

SYSTEM_PROMPT = (
    "Combine the given numbers with + - * to reach the target, using each number at most once. "
    "Reply with the expression inside <answer></answer>, e.g. <answer>3 * 4 - 2</answer>."
)


class CountdownConfig(BaseModel):
    """The `env` section for countdown (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "countdown"
    numbers: int = Field(3, ge=2, le=5, description="How many numbers each problem gives.")
    max_number: int = Field(9, ge=2, le=99, description="Numbers are drawn from 1..max_number.")
    eval_fraction: float = Field(0.1, gt=0, lt=1, description="Share of problems held out.")
    reward: str = Field("countdown_match", description="Default reward: a name or a file path.")


class CountdownTask:
    """A TextTask: the question lists numbers and a target, the answer is one expression."""

    name = "countdown"

    def __init__(self, config: CountdownConfig | Mapping[str, Any] | None = None) -> None:
        if not isinstance(config, CountdownConfig):
            config = CountdownConfig.model_validate(dict(config or {}))
        self.config = config
        self.reward = config.reward

    def _problem(self, rng: random.Random) -> Example:
        nums = [rng.randint(1, self.config.max_number) for _ in range(self.config.numbers)]
        expr = str(nums[0])
        for n in nums[1:]:
            expr = f"{expr} {rng.choice('+-*')} {n}"
        target = eval(expr, {"__builtins__": {}})  # noqa: S307 - digits and + - * we wrote
        shown = sorted(nums)
        return Example(
            question=f"Numbers: {' '.join(map(str, shown))}. Target: {target}.",
            answer=expr,
            meta={"numbers": shown, "target": target},
        )

    def problem_key(self, example: Example) -> str:
        """One problem = its numbers and target, whatever expression the generator wrote."""
        return f"{example.meta['numbers']}={example.meta['target']}"

    def _held_out(self, example: Example) -> bool:
        bucket = zlib.crc32(self.problem_key(example).encode()) % 10_000
        return bucket < self.config.eval_fraction * 10_000

    def train_examples(self, seed: int) -> Iterator[Example]:
        rng = random.Random(seed)
        while True:
            example = self._problem(rng)
            if not self._held_out(example):
                yield example

    def eval_examples(self, n: int) -> list[Example]:
        rng, out, seen = random.Random("countdown-eval"), [], set()
        for _ in range(1000 * n):
            example = self._problem(rng)
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
        return f"<answer>{example.answer}</answer>"
