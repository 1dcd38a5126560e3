"""GSM8K reward: correctness (1.0) + format (1.0), maximum 2.0.

This file is a reward file like any user's (`reward=path/to/file.py`): standard library only, no
Arena imports, so the sandbox can run it standalone.

Contract
    reward(question, answer, completion) -> float          required
    components(question, answer, completion) -> dict       optional; values sum to reward()
        Arena logs each component as its own metric (here `correctness` and `format`).
    MAX_REWARD = <number>                                  optional; the best possible reward
        (a literal: Arena reads it without running the file) is drawn on the reward curve.

Rules (the seed tutorial's semantics, with the edge cases decided here)
- Reference: the number after the last `####` in `answer` (GSM8K's format); an answer without
  `####` is read as a number whole. Commas and a leading `$` are ignored.
- correctness = 1.0 when the last number inside the last `<answer>...</answer>` block equals the
  reference, else 0.0. No closed answer block, no number in it, or an unreadable reference: 0.0.
- Numbers compare by value: `72.0`, `72.00` and `72` are equal, `1,000` is `1000`, `$5` is `5`,
  negatives count (`-3`). Fractions are not evaluated (`1/2` reads as its last number, `2`).
- format = 1.0 when the completion has a non-empty `<think>...</think>` followed (whitespace
  allowed between) by a non-empty `<answer>...</answer>`; text before or after does not matter.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

MAX_REWARD = 2.0

_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FORMAT = re.compile(r"<think>\s*\S.*?</think>\s*<answer>\s*\S.*?</answer>", re.DOTALL)


def parse_number(text: str) -> Decimal | None:
    """`-$1,234.50` -> Decimal('-1234.50'); None when `text` holds no number."""
    cleaned = text.strip().replace(",", "").replace("$", "")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def last_number(text: str) -> Decimal | None:
    """The last number written in `text` (commas and a leading `$` ignored)."""
    found = _NUMBER.findall(text)
    return parse_number(found[-1]) if found else None


def reference_number(answer: str) -> Decimal | None:
    """The number after the last `####` in a GSM8K answer, or the whole answer as a number."""
    if "####" in answer:
        return last_number(answer.rsplit("####", 1)[1])
    return parse_number(answer) if parse_number(answer) is not None else last_number(answer)


def extract_answer(completion: str) -> Decimal | None:
    """The last number inside the last closed `<answer>...</answer>` block."""
    blocks = _ANSWER_BLOCK.findall(completion)
    return last_number(blocks[-1]) if blocks else None


def components(question: str, answer: str, completion: str) -> dict[str, float]:
    """The two parts of the reward, for per-component metrics."""
    expected = reference_number(answer)
    got = extract_answer(completion)
    correct = expected is not None and got is not None and got == expected
    return {
        "correctness": 1.0 if correct else 0.0,
        "format": 1.0 if _FORMAT.search(completion) else 0.0,
    }


def reward(question: str, answer: str, completion: str) -> float:
    """correctness + format, in [0, 2]."""
    return float(sum(components(question, answer, completion).values()))
