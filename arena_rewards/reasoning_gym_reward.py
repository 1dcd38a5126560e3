"""reasoning-gym reward: the task's own `score_answer` on the answer in the `<answer>` block.

This file is a reward file like any user's: no Arena imports, so the sandbox runs it standalone;
it needs the reasoning-gym package (`pip install 'arena-rl[reasoning-gym]'`).

Contract
    reward(question, answer, completion) -> float          correctness + partial_credit + format
    components(question, answer, completion) -> dict       the three parts, logged apart

`answer` is the JSON object the reasoning_gym env writes for each row (arena_envs/reasoning_gym.py):
{"answer": reference, "task": name, "config": {...}, "format_reward": w, "metadata": {...}},
tuples tagged as {"__tuple__": [...]}. The entry given to the scorer is
{"question": question, "answer": reference, "metadata": metadata}, as reasoning-gym made it.

Rules
- extracted = reasoning_gym.utils.extract_answer(completion): the last `<answer>...</answer>`
  block, stripped; None when there is none.
- score = the task's `score_answer(extracted, entry)`, scored by the task built with the row's
  config (some scorers read it). A scorer that raises on a malformed answer scores it 0.0.
- correctness = 1.0 when score is 1.0 (the task's full marks), else 0.0: Arena's eval/accuracy.
  partial_credit = score - correctness (tasks such as gcd give 0.2 for a wrong number), so
  correctness + partial_credit is exactly the task's score.
- format = w when extracted is non-empty, else 0.0 (w = env.format_reward, 0 by default).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import reasoning_gym
from reasoning_gym.utils import extract_answer


def _decode(obj: dict[str, Any]) -> Any:
    return tuple(obj["__tuple__"]) if set(obj) == {"__tuple__"} else obj


@lru_cache(maxsize=64)
def _scorer(task: str, config_json: str) -> Any:
    """The task's dataset object, whose score_answer is the reward (built once per config)."""
    return reasoning_gym.create_dataset(task, **json.loads(config_json))


def extract(completion: str) -> str | None:
    """reasoning-gym's own extraction: the last <answer> block, stripped (None without one)."""
    return extract_answer(completion, tag_name="answer", strip=True)


def score(question: str, answer: str, completion: str) -> tuple[float, float]:
    """(the task's score of the extracted answer, the format credit)."""
    ref = json.loads(answer, object_hook=_decode)
    entry = {"question": question, "answer": ref["answer"], "metadata": ref["metadata"]}
    dataset = _scorer(ref["task"], json.dumps(ref.get("config") or {}, sort_keys=True))
    extracted = extract(completion)
    try:
        value = float(dataset.score_answer(extracted, entry))
    except Exception:  # noqa: BLE001 - a scorer that chokes on a malformed answer: it is wrong
        value = 0.0
    credit = float(ref.get("format_reward") or 0.0) if extracted else 0.0
    return value, credit


def components(question: str, answer: str, completion: str) -> dict[str, float]:
    """correctness (full marks), partial_credit (the rest of the task's score) and format."""
    value, credit = score(question, answer, completion)
    correct = 1.0 if value >= 1.0 else 0.0
    return {"correctness": correct, "partial_credit": value - correct, "format": credit}


def reward(question: str, answer: str, completion: str) -> float:
    """The task's score plus the format credit."""
    value, credit = score(question, answer, completion)
    return value + credit
