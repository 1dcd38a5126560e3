"""Reward for reverse_words: 1.0 for the exact reversed list, partial credit for words in place.

A reward file in Arena's contract: `reward(question, answer, completion) -> float`. It imports
only the standard library, because Arena imports it in a sandboxed child process, exactly as it
would a user's `reward=path/to/file.py`.
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def reward(question: str, answer: str, completion: str) -> float:
    """1.0 when the (last) <answer> block, or the whole completion, is the reversed list.

    Otherwise half a point spread over the words that sit in the right position, so a nearly
    right answer beats a wrong one but never ties with an exact one.
    """
    tagged = _ANSWER.findall(completion)
    got = _words(tagged[-1] if tagged else completion)
    want = _words(answer)
    if not want:
        return 0.0
    if got == want:
        return 1.0
    in_place = sum(g == w for g, w in zip(got, want, strict=False))
    return 0.5 * in_place / max(len(want), len(got))
