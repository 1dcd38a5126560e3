"""`reverse_words`: reverse a short list of words.

Examples are generated from a seed rather than read from a dataset, so the task works offline and
is endless. A fixed slice of all possible word lists (chosen by a hash of the list, not by the
seed) is held out: evaluation examples can never appear in any training stream, whatever its seed.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from arena_core.tasks import Example

WORDS: tuple[str, ...] = (
    "apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "green", "eagle", "ocean",
    "candle", "forest", "silver", "rocket", "garden", "winter", "button", "yellow", "market",
    "planet", "bridge", "coffee", "dragon", "pencil", "violet", "castle", "window", "spring",
    "needle", "orange", "shadow", "marble",
)  # fmt: skip

SYSTEM_PROMPT = (
    "You reverse lists of words. Reply with the same words in reverse order, separated by single "
    "spaces, inside <answer></answer>."
)
EVAL_SEED = 2_147_483_647  # the eval stream's own seed: the same held-out list on every call
_BUCKETS = 10_000


class ReverseWordsConfig(BaseModel):
    """The `env` section for reverse_words (every key documented; unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "reverse_words"
    min_words: int = Field(3, ge=1, le=12, description="Fewest words in a prompt.")
    max_words: int = Field(6, ge=1, le=12, description="Most words in a prompt.")
    eval_fraction: float = Field(
        0.1, gt=0, lt=1, description="Share of all word lists held out for evaluation."
    )
    reward: str = Field(
        "reverse_words_match", description="Default reward: a registered name or a file path."
    )

    @model_validator(mode="after")
    def _check_range(self) -> ReverseWordsConfig:
        if self.min_words > self.max_words:
            raise ValueError(
                f"min_words ({self.min_words}) is larger than max_words ({self.max_words}); "
                "lower min_words or raise max_words"
            )
        return self


class ReverseWordsTask:
    """A TextTask (arena_core.tasks): prompts are word lists, answers the same words reversed."""

    name = "reverse_words"

    def __init__(self, config: ReverseWordsConfig | Mapping[str, Any] | None = None) -> None:
        # Accepts the validated section as a model or as the plain dict the config layer produces.
        if not isinstance(config, ReverseWordsConfig):
            config = ReverseWordsConfig.model_validate(dict(config or {}))
        self.config = config
        self.reward = config.reward

    def _held_out(self, words: tuple[str, ...]) -> bool:
        bucket = zlib.crc32(" ".join(words).encode()) % _BUCKETS
        return bucket < self.config.eval_fraction * _BUCKETS

    def _draw(self, rng: random.Random) -> tuple[str, ...]:
        n = rng.randint(self.config.min_words, self.config.max_words)
        return tuple(rng.choice(WORDS) for _ in range(n))

    @staticmethod
    def _example(words: tuple[str, ...]) -> Example:
        return Example(
            question=f"Reverse the order of these words: {' '.join(words)}",
            answer=" ".join(reversed(words)),
            meta={"n_words": len(words)},
        )

    def train_examples(self, seed: int) -> Iterator[Example]:
        """Endless and seeded; word lists in the held-out slice are skipped."""
        rng = random.Random(seed)
        while True:
            words = self._draw(rng)
            if not self._held_out(words):
                yield self._example(words)

    def eval_examples(self, n: int) -> list[Example]:
        """The first `n` distinct held-out word lists of a fixed stream (same list every call)."""
        rng = random.Random(EVAL_SEED)
        seen: set[tuple[str, ...]] = set()
        out: list[Example] = []
        budget = max(1000, int(n / self.config.eval_fraction) * 50)
        for _ in range(budget):
            if len(out) >= n:
                break
            words = self._draw(rng)
            if words not in seen and self._held_out(words):
                seen.add(words)
                out.append(self._example(words))
        if len(out) < n:
            raise ValueError(
                f"reverse_words can hold out only {len(out)} distinct examples with these "
                f"settings, {n} were asked for: raise max_words or eval_fraction"
            )
        return out

    def messages(self, example: Example) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": example.question},
        ]
