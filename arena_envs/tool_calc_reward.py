"""Reward of the `tool_calc` task: 1.0 when the episode's last `<answer>N</answer>` is right.

A reward file like any user's (standard library only). The completion is the whole episode after
the prompt, tool answers included; only the last answer block counts, so reading the tool's
result and writing it down is exactly what earns the reward. How the answer was found (tool or
not) is not rewarded: the model learns to call the tool because it makes the answer right.
"""

from __future__ import annotations

import re

MAX_REWARD = 1.0

_ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")


def components(question: str, answer: str, completion: str) -> dict[str, float]:
    found = _ANSWER.findall(completion)
    reference = answer.rpartition("####")[2].strip()
    return {"correctness": float(bool(found) and found[-1] == reference)}


def reward(question: str, answer: str, completion: str) -> float:
    return components(question, answer, completion)["correctness"]
