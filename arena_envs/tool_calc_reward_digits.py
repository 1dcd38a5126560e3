"""Shaped reward of the `tool_calc` task (`env.partial_credit`): exact answers 1.0, near misses
partial credit by correct digits.

A reward file like any user's (standard library only). Success is unchanged: `correctness` (the
component the accuracy metric reads) is 1 only for the exact answer, as in tool_calc_reward.py.
The shaping only grades wrong answers: `PARTIAL` times the share of digit places (aligned from
the units) that match the reference, so an answer with one wrong digit beats a wild guess.
It says nothing about tools: a near miss from a miscopied operand and one from mental arithmetic
are graded alike, and the model still learns to call the calculator only because it makes the
answer right more often.
"""

from __future__ import annotations

import re

MAX_REWARD = 1.0
PARTIAL = 0.5

_ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")


def components(question: str, answer: str, completion: str) -> dict[str, float]:
    found = _ANSWER.findall(completion)
    reference = answer.rpartition("####")[2].strip()
    if not found:
        return {"correctness": 0.0, "digits": 0.0}
    got = found[-1]
    if got == reference:
        return {"correctness": 1.0, "digits": 1.0}
    width = max(len(got), len(reference))
    a, b = got.rjust(width), reference.rjust(width)
    return {"correctness": 0.0, "digits": sum(x == y for x, y in zip(a, b, strict=True)) / width}


def reward(question: str, answer: str, completion: str) -> float:
    parts = components(question, answer, completion)
    return 1.0 if parts["correctness"] else PARTIAL * parts["digits"]
